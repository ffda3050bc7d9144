/**
 * The coordinator's side of a fragment's life (gemini.ts, paper Figure 5.3): given which cache
 * instances hold their leases, it asks what it must of the instances and returns the layer to
 * publish. Before a fragment's primary comes back into use it asks the secondary whether the
 * dirty list is whole; before a secondary is published it starts the dirty list there with its
 * marker (so an append to a list evicted meanwhile makes one known to be partial).
 */
import { performance } from 'node:perf_hooks';
import type { ClusterConfig } from '../cluster/config.js';
import { NovaError } from '../common/errors.js';
import { joinInstance, newLayer, reconcile, recoveryStep, type CacheLayer, type DirtyFinding, type FragmentChange } from '../cluster/gemini.js';

/** What the keeper needs of an instance. */
export interface KeeperInstance {
  dirtyFetch(cfg: number, fragment: number, from: number, limit: number): Promise<{ state: string }>;
  dirtyInit(cfg: number, fragment: number): Promise<void>;
  /** Makes the instance refuse callers under configurations older than `cfg`. */
  fence(cfg: number): Promise<void>;
}

/**
 * The layer to publish under configuration `config.id + 1` (once every live instance is fenced
 * with it: fenceAll), and what changed; undefined if nothing does. `recovering`: also ask after
 * the dirty lists of recovering fragments (a list evicted or lost meanwhile discards them).
 */
export async function keepLayer(config: ClusterConfig, alive: ReadonlySet<number>, instance: (id: number) => KeeperInstance, recovering = true):
  Promise<{ layer: CacheLayer; changes: FragmentChange[] } | undefined> {
  const layer = config.cache;
  if (!layer) return undefined;
  const next = config.id + 1;
  const dirty = new Map<number, DirtyFinding>();
  if (layer.mode !== 'stale' && layer.mode !== 'volatile') {
    for (const f of layer.fragments) {
      const asked = f.mode === 'transient' || (recovering && f.mode === 'recovery' && !f.dirtyDone);
      if (!asked || f.secondary === undefined || !alive.has(f.primary) || !alive.has(f.secondary)) continue;
      // A secondary that does not answer is asked again next time (its lease says whether it is down).
      const page = await instance(f.secondary).dirtyFetch(config.id, f.id, 0, 0).catch(() => undefined);
      if (page) dirty.set(f.id, page.state === 'whole' || page.state === 'done' ? 'whole' : page.state === 'missing' ? 'missing' : 'partial');
    }
  }
  const r = reconcile(layer, { alive, dirty }, next);
  if (!r) return undefined;
  // Under the current id: a list started late (the secondary slow) is refused once a client under
  // the new one has appended to it, and stays without marker, so it is known to be partial. A
  // secondary that does not take its marker is published all the same, with the same effect.
  await Promise.all(r.layer.fragments.filter((f) => f.mode === 'transient' && f.secondary !== undefined && f.secondaryFloor === next)
    .map((f) => instance(f.secondary!).dirtyInit(config.id, f.id).catch(() => undefined)));
  return r;
}

/**
 * Tells every live instance the id `next` before a configuration of it is published, so no
 * client still routing by an older one is served by an instance that loses a fragment while
 * the one gaining it fills it. Answers those that did not take it (then it must not be published).
 */
export async function fenceAll(alive: ReadonlySet<number>, next: number, instance: (id: number) => KeeperInstance): Promise<number[]> {
  const unfenced: number[] = [];
  await Promise.all([...alive].map((id) => instance(id).fence(next).catch(() => {
    unfenced.push(id);
  })));
  return unfenced;
}

/** An instance's counters as its heartbeat reports them (cumulative since it started). */
interface Sample { at: number; gets: number; hits: number; secondaryGets: number; secondaryHits: number }

/** Heartbeats of counters kept per instance: enough for the windows below. */
const SAMPLES = 40;
/** The window hit ratios are measured over. */
const WINDOW_MS = 2_000;
/** How far below its hit ratio before the failure a primary may stay and still count as restored (the paper's "some degree of variation"). */
const HIT_SLACK = 0.02;
const MISS_SLACK = 0.05;
/** Lookups a window needs before its ratio decides anything. */
const MIN_LOOKUPS = 50;
/** How long a change deferred (an instance did not take its fence) waits before it is tried again. */
const DEFER_MS = 1_000;
/** How often the dirty lists of recovering fragments are asked after. */
const RECOVERY_CHECK_MS = 1_000;

export interface StewardHost {
  config(): ClusterConfig;
  publish(next: ClusterConfig, why: string): void;
  instance(id: number): KeeperInstance;
  /** Whether cache instance `id` holds its lease now (heard from within the lease). */
  alive(id: number, now: number): boolean;
  /** False while the coordinator cannot yet tell the dead from the unheard (just started, or paused). */
  knowsLiveness(now: number): boolean;
  onLog?: (line: string) => void;
}

export interface CacheInstanceView { id: number; alive: boolean; hitRatio?: number; gets: number; hits: number; hitBefore?: number }

/**
 * Runs the layer for the coordinator: deals fragments when the first instances come, gives
 * fragments to instances that join, moves fragments through their modes as instances fail and
 * return (keepLayer), and ends a recovering fragment's migration once the primary's hit ratio is
 * back to what it was before the failure (within HIT_SLACK), or the secondary misses more often
 * than the primary used to hit (paper §5.2.2.2: h and m = 1 − h + ε). One step at a time.
 */
export class CacheSteward {
  private busy = false;
  private readonly samples = new Map<number, Sample[]>();
  /** Each instance's hit ratio over the window before it was last found down. */
  private readonly hitBefore = new Map<number, number>();
  /** Fragments discarded (their primary's entries voided) since the coordinator started. */
  discards = 0;
  private lastRecoveryCheck = -Infinity;
  /** Workers' reports not yet applied: fragment → the configuration id it was processed under. */
  private readonly reports = new Map<number, number>();
  /** After a deferred change, no step before this. */
  private quietUntil = -Infinity;

  constructor(private readonly h: StewardHost) {}

  sample(id: number, at: number, x: unknown): void {
    if (!Array.isArray(x) || x.length < 4 || !x.slice(0, 4).every((n) => typeof n === 'number' && Number.isFinite(n) && n >= 0)) return;
    const [gets, hits, secondaryGets, secondaryHits] = x as number[];
    let s = this.samples.get(id);
    if (!s) this.samples.set(id, s = []);
    const last = s[s.length - 1];
    if (last && gets < last.gets) s.length = 0; // the instance restarted: its counters did too
    s.push({ at, gets: gets!, hits: hits!, secondaryGets: secondaryGets!, secondaryHits: secondaryHits! });
    if (s.length > SAMPLES) s.shift();
  }

  /** Hit ratio of `id` over the last window, as a primary (or transient secondary), and as a recovering fragment's secondary. */
  private ratios(id: number, now: number): { hit?: number; secondaryHit?: number; gets: number; hits: number } {
    const s = this.samples.get(id) ?? [];
    const last = s[s.length - 1];
    const first = s.find((x) => x.at >= now - WINDOW_MS);
    if (!last || !first || first === last) return { gets: last?.gets ?? 0, hits: last?.hits ?? 0 };
    const gets = last.gets - first.gets;
    const sgets = last.secondaryGets - first.secondaryGets;
    return {
      gets: last.gets, hits: last.hits,
      ...(gets >= MIN_LOOKUPS ? { hit: (last.hits - first.hits) / gets } : {}),
      ...(sgets >= MIN_LOOKUPS ? { secondaryHit: (last.secondaryHits - first.secondaryHits) / sgets } : {}),
    };
  }

  instances(now: number): CacheInstanceView[] {
    return this.h.config().members.filter((m) => m.role === 'cache').map((m) => {
      const r = this.ratios(m.id, now);
      return { id: m.id, alive: this.h.alive(m.id, now), gets: r.gets, hits: r.hits, ...(r.hit !== undefined ? { hitRatio: r.hit } : {}),
        ...(this.hitBefore.has(m.id) ? { hitBefore: this.hitBefore.get(m.id) } : {}) };
    });
  }

  /** One step, unless one is under way. */
  tick(now: number): void {
    if (!this.busy) this.applyReports();
    if (this.busy || !this.h.knowsLiveness(now)) return;
    this.busy = true;
    void this.step(now).catch((err: Error) => this.h.onLog?.(`cache layer: ${err.message}`)).finally(() => {
      this.busy = false;
    });
  }

  private async step(now: number): Promise<void> {
    const config = this.h.config();
    const members = config.members.filter((m) => m.role === 'cache').map((m) => m.id);
    const alive = new Set(members.filter((id) => this.h.alive(id, now)));
    if (!config.cache) {
      if (alive.size === 0) return;
      const id = config.id + 1;
      this.h.publish({ ...config, id, cache: newLayer(config.settings.cacheMode, config.settings.cacheFragments, [...alive], id) },
        `cache layer: ${config.settings.cacheFragments} fragments over instance(s) ${[...alive].join(', ')} (${config.settings.cacheMode})`);
      return;
    }
    for (const f of config.cache.fragments) {
      // Remember how well an instance hit before it failed: its recovery is measured against it.
      if (f.mode === 'normal' && !alive.has(f.primary)) {
        const r = this.ratios(f.primary, now);
        if (r.hit !== undefined) this.hitBefore.set(f.primary, r.hit);
      }
    }
    if (now < this.quietUntil) return;
    const recovering = now - this.lastRecoveryCheck >= RECOVERY_CHECK_MS;
    if (recovering) this.lastRecoveryCheck = now;
    const kept = await keepLayer(config, alive, (id) => this.h.instance(id), recovering);
    if (kept) {
      await this.change(config, alive, members, now, kept.layer, `${kept.changes.map((c) => `fragment ${c.fragment} ${c.from} → ${c.to} (${c.why})`).join('; ')}`,
        kept.changes.filter((c) => c.discarded).length);
      return;
    }
    const hosting = new Set(config.cache.fragments.flatMap((f) => [f.primary, ...(f.secondary !== undefined ? [f.secondary] : [])]));
    const joining = [...alive].find((id) => !hosting.has(id));
    if (joining !== undefined && config.cache.fragments.every((f) => f.mode === 'normal' || alive.has(f.primary))) {
      const layer = joinInstance(config.cache, joining, config.id + 1);
      const moved = layer.fragments.filter((f, j) => f.primary !== config.cache!.fragments[j]!.primary).length;
      if (moved > 0) {
        await this.change(config, alive, members, now, layer, `instance ${joining} joined and takes ${moved} fragment(s)`, 0);
        return;
      }
    }
    this.endMigrations(config, now);
  }

  /**
   * Publishes `layer` as configuration `config.id + 1` once every live instance is fenced with
   * it. If one did not take the fence, or an instance taken as down was heard from meanwhile (it
   * may have renewed its lease under the current configuration and serve by it), the change
   * waits DEFER_MS; the new id is published unchanged all the same, since the others were told of it.
   */
  private async change(config: ClusterConfig, alive: ReadonlySet<number>, members: number[], now: number, layer: CacheLayer, why: string, discards: number): Promise<void> {
    if (this.h.config() !== config) return; // the configuration changed meanwhile: look again next tick
    const unfenced = await fenceAll(alive, config.id + 1, (id) => this.h.instance(id));
    if (this.h.config() !== config) return;
    const later = performance.now();
    const heard = members.filter((id) => !alive.has(id) && this.h.alive(id, later));
    if (unfenced.length > 0 || heard.length > 0) {
      this.h.onLog?.(`cache layer: ${heard.length > 0 ? `instance(s) ${heard.join(', ')} heard from again` : `instance(s) ${unfenced.join(', ')} did not take configuration ${config.id + 1}`}; the change waits`);
      this.h.publish({ ...config, id: config.id + 1 }, 'cache layer: a change deferred');
      this.quietUntil = now + DEFER_MS;
      return;
    }
    this.discards += discards;
    this.h.publish({ ...config, id: config.id + 1, cache: layer }, `cache layer: ${why}`);
  }

  private endMigrations(config: ClusterConfig, now: number): void {
    let layer = config.cache!;
    const ended: number[] = [];
    for (const f of layer.fragments) {
      if (f.mode !== 'recovery' || !f.migrate || f.secondary === undefined) continue;
      const h = this.hitBefore.get(f.primary);
      const p = this.ratios(f.primary, now);
      const s = this.ratios(f.secondary, now);
      const restored = h !== undefined && p.hit !== undefined && p.hit >= h - HIT_SLACK;
      const useless = h !== undefined && s.secondaryHit !== undefined && 1 - s.secondaryHit >= 1 - h + MISS_SLACK;
      // No hit ratio from before the failure (the coordinator restarted since, or too few lookups): nothing to restore to.
      const blind = h === undefined && !!f.dirtyDone;
      if (!restored && !useless && !blind) continue;
      const next = recoveryStep(layer, f.id, 'migration');
      if (next) {
        layer = next;
        ended.push(f.id);
      }
    }
    if (ended.length > 0) this.h.publish({ ...config, id: config.id + 1, cache: layer }, `cache layer: migration ended for fragment(s) ${ended.join(', ')}`);
  }

  /** `cacheRecovered [fragment, config id]`: a worker emptied the fragment's dirty list. */
  recovered(args: unknown[]): number {
    const [j, cfg] = args;
    const config = this.h.config();
    if (!Number.isSafeInteger(j) || !Number.isSafeInteger(cfg) || !config.cache) throw new NovaError('BAD_ARGUMENT', 'cacheRecovered takes [fragment, configuration id]');
    const f = config.cache.fragments[j as number];
    if (f?.mode === 'recovery' && this.reports.size < config.cache.fragments.length) {
      this.reports.set(j as number, Math.max(cfg as number, this.reports.get(j as number) ?? 0));
    }
    return config.id;
  }

  /** The workers' reports since the last tick, in one configuration (each would otherwise send every client to fetch one). */
  private applyReports(): void {
    const config = this.h.config();
    if (this.reports.size === 0 || !config.cache) return;
    let layer = config.cache;
    const done: number[] = [];
    for (const [j, cfg] of this.reports) {
      const next = recoveryStep(layer, j, 'dirty', cfg);
      if (next) {
        layer = next;
        done.push(j);
      }
    }
    this.reports.clear();
    if (done.length > 0) this.h.publish({ ...config, id: config.id + 1, cache: layer }, `cache layer: dirty lists of fragment(s) ${done.join(', ')} processed`);
  }
}
