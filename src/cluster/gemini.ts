/**
 * The Gemini cache layer's part of the configuration (DESIGN.md §8, paper §5.1–5.2): the key
 * space hashed into F fragments, each with a primary cache instance, and each fragment's life
 * (Figure 5.3). Pure functions: the coordinator calls them with what it knows (which instances
 * are alive, what a secondary's dirty list holds) and publishes what they return.
 *
 *   normal    requests go to the primary; its entries are valid from `floor` on.
 *   transient the primary is down: requests go to `secondary`, whose entries are valid from
 *             `secondaryFloor` on and which keeps the fragment's dirty list (the keys written
 *             meanwhile), started with a marker (cache-store.ts). With no secondary (no instance
 *             left) the fragment is served by no cache at all, and the primary's entries were
 *             discarded (floor raised), since nothing records what is written meanwhile.
 *   recovery  the primary is back with its entries: clients use it at once, deleting a key on
 *             the dirty list at its first reference (Algorithm 1), copying the working set from
 *             the secondary while `migrate` holds; recovery workers empty the dirty list
 *             (Algorithm 3). Both done: normal again.
 *
 * Discarding (§5.2.2.4): an entry written under configuration id c is valid for its replica
 * only if c ≥ the replica's floor. Raising the floor to the newest id voids every entry the
 * replica had, in O(1), never served again. The primary's floor is kept through transient
 * mode so recovery can reuse its entries; it is raised when they cannot be recovered: the
 * dirty list is lost or partial, or the secondary failed.
 *
 * The two baselines the paper compares with: `volatile` instances come back empty (the floor is
 * raised), and `stale` ones are trusted as they are (normal at once, floor kept): the unsafe
 * strawman, which serves values written over while they were down.
 */
import { NovaError } from '../common/errors.js';
import { xxh32 } from '../common/xxh32.js';
import type { ClusterConfig } from './config.js';

/** Never renumber: stored in configurations. */
export const CACHE_MODES = ['gemini-i', 'gemini-o', 'gemini-i+w', 'gemini-o+w', 'volatile', 'stale'] as const;
export type CacheMode = (typeof CACHE_MODES)[number];
export type FragmentMode = 'normal' | 'transient' | 'recovery';

export interface CacheFragment {
  id: number;
  mode: FragmentMode;
  primary: number;
  /** Entries of the primary written under a lower configuration id are void. */
  floor: number;
  /** Transient and recovery: the instance that serves in the primary's stead and keeps the dirty list. */
  secondary?: number;
  secondaryFloor?: number;
  /** Recovery: clients copy entries they miss on the primary from the secondary (the +W variants). */
  migrate?: boolean;
  /** Recovery: a worker has emptied the dirty list (the fragment is normal once migration ends too). */
  dirtyDone?: boolean;
  /** Recovery: the configuration id it entered recovery under (a worker's report from an earlier recovery is ignored). */
  since?: number;
}

export interface CacheLayer {
  mode: CacheMode;
  fragments: CacheFragment[];
}

/** What a secondary holds of a fragment's dirty list, asked when the primary comes back. */
export type DirtyFinding = 'whole' | 'partial' | 'missing';

/** The variant's recovery: overwrite dirty keys from the secondary (O) or delete them (I); migrate (+W) or not. */
export function overwrites(mode: CacheMode): boolean {
  return mode === 'gemini-o' || mode === 'gemini-o+w';
}

export function migrates(mode: CacheMode): boolean {
  return mode === 'gemini-i+w' || mode === 'gemini-o+w';
}

/** Whether instances keep their entries across a restart. */
export function persists(mode: CacheMode): boolean {
  return mode !== 'volatile';
}

export function isCacheMode(x: unknown): x is CacheMode {
  return typeof x === 'string' && (CACHE_MODES as readonly string[]).includes(x);
}

/** A fragment served by its primary alone: no secondary, nothing of a recovery. */
function alone(f: CacheFragment): void {
  delete f.secondary;
  delete f.secondaryFloor;
  endRecovery(f);
}

/** Nothing of a recovery left on the fragment. */
function endRecovery(f: CacheFragment): void {
  delete f.migrate;
  delete f.dirtyDone;
  delete f.since;
}

/** The fragment a key belongs to. */
export function fragmentOf(key: Uint8Array, fragments: number): number {
  return xxh32(key, 0, key.length, 0x6e6f7661) % fragments;
}

/** Where a client sends a key's requests: the replicas and their floors; none when no cache serves it. */
export interface Route {
  fragment: number;
  mode: FragmentMode;
  /** The instance a transient fragment's requests go to is its secondary. */
  primary?: { id: number; floor: number };
  secondary?: { id: number; floor: number };
  migrate: boolean;
}

export function routeOf(layer: CacheLayer, key: Uint8Array): Route {
  const f = layer.fragments[fragmentOf(key, layer.fragments.length)]!;
  const secondary = f.secondary !== undefined ? { id: f.secondary, floor: f.secondaryFloor ?? 0 } : undefined;
  if (f.mode === 'transient') return { fragment: f.id, mode: f.mode, secondary, migrate: false };
  return { fragment: f.id, mode: f.mode, primary: { id: f.primary, floor: f.floor }, secondary, migrate: f.mode === 'recovery' && !!f.migrate };
}

/**
 * The layer of a cluster whose first cache instances registered: `fragments` fragments dealt
 * round-robin over `instances` (sorted), every floor the new configuration's id.
 */
export function newLayer(mode: CacheMode, fragments: number, instances: readonly number[], id: number): CacheLayer {
  if (instances.length === 0) throw new NovaError('BAD_ARGUMENT', 'a cache layer needs an instance');
  const ids = [...instances].sort((a, b) => a - b);
  return { mode, fragments: Array.from({ length: fragments }, (_, j) => ({ id: j, mode: 'normal' as const, primary: ids[j % ids.length]!, floor: id })) };
}

/**
 * A new instance joined: normal fragments move to it from the instances holding most until
 * the counts differ by one at most. A moved fragment starts empty there (its floor is `id`).
 */
export function joinInstance(layer: CacheLayer, instance: number, id: number): CacheLayer {
  const fragments = layer.fragments.map((f) => ({ ...f }));
  const held = (x: number): CacheFragment[] => fragments.filter((f) => f.primary === x);
  const hosts = [...new Set([...fragments.map((f) => f.primary), instance])];
  const target = Math.floor(fragments.length / hosts.length);
  while (held(instance).length < target) {
    // The host holding most that has a normal fragment to give (one in another mode stays).
    const from = hosts.filter((x) => x !== instance && held(x).length > target && held(x).some((f) => f.mode === 'normal'))
      .sort((a, b) => held(b).length - held(a).length || a - b)[0];
    if (from === undefined) break;
    const movable = held(from).filter((f) => f.mode === 'normal');
    const f = movable[movable.length - 1]!;
    f.primary = instance;
    f.floor = id;
  }
  return { ...layer, fragments };
}

/** What the coordinator knows when it reconciles the layer with the instances' liveness. */
export interface CacheView {
  /** Instances alive now (their lease held). */
  alive: ReadonlySet<number>;
  /** The dirty list of a transient fragment whose primary is alive again, or of a recovering one not yet processed, both replicas alive. */
  dirty: ReadonlyMap<number, DirtyFinding>;
}

/** One fragment's change, for the log and the bench's count of discards. */
export interface FragmentChange {
  fragment: number;
  from: FragmentMode;
  to: FragmentMode;
  why: string;
  /** The primary's entries were voided. */
  discarded: boolean;
}

/**
 * The layer after applying what `view` says, under the new configuration id `id`; undefined if
 * nothing changes. Idempotent: a fragment changes only if its replicas' liveness calls for it.
 * A transient fragment whose primary is back but whose dirty list is not in `view.dirty` waits
 * (the coordinator asks the secondary first). `secondaryFor` picks a live instance for a fragment
 * losing its primary (the least loaded), or undefined if none is alive.
 */
export function reconcile(layer: CacheLayer, view: CacheView, id: number): { layer: CacheLayer; changes: FragmentChange[] } | undefined {
  const fragments = layer.fragments.map((f) => ({ ...f }));
  const changes: FragmentChange[] = [];
  const up = (x: number | undefined): boolean => x !== undefined && view.alive.has(x);
  const load = new Map<number, number>();
  for (const f of fragments) for (const x of [f.primary, f.secondary]) if (x !== undefined) load.set(x, (load.get(x) ?? 0) + 1);
  const pick = (not: number): number | undefined => {
    const live = [...view.alive].filter((x) => x !== not).sort((a, b) => (load.get(a) ?? 0) - (load.get(b) ?? 0) || a - b);
    const x = live[0];
    if (x !== undefined) load.set(x, (load.get(x) ?? 0) + 1);
    return x;
  };
  for (const f of fragments) {
    const was = f.mode;
    const note = (why: string, discarded: boolean): void => {
      changes.push({ fragment: f.id, from: was, to: f.mode, why, discarded });
    };
    const discardTo = (primary: number): void => {
      f.mode = 'normal';
      f.primary = primary;
      f.floor = id;
      alone(f);
    };
    if (f.mode === 'normal') {
      if (up(f.primary)) continue;
      const s = pick(f.primary);
      f.mode = 'transient';
      if (s === undefined) {
        // No instance left: nothing can keep a dirty list, so the primary's entries cannot be trusted again.
        f.floor = id;
        note(`instance ${f.primary} down and no other instance alive: the fragment is served by none`, true);
      } else {
        f.secondary = s;
        f.secondaryFloor = id;
        note(`instance ${f.primary} down: instance ${s} serves it and keeps its dirty list`, false);
      }
      continue;
    }
    if (f.mode === 'transient') {
      if (f.secondary === undefined) {
        // Served by none; the primary's entries were discarded.
        if (up(f.primary)) {
          discardTo(f.primary);
          note(`instance ${f.primary} back`, false);
        } else {
          const s = pick(f.primary);
          if (s !== undefined) {
            discardTo(s);
            note(`instance ${s} takes the fragment over, empty`, false);
          }
        }
        continue;
      }
      if (!up(f.secondary)) {
        // The dirty list is lost with the secondary.
        const p = up(f.primary) ? f.primary : pick(f.secondary);
        if (p === undefined) {
          const s = f.secondary;
          f.floor = id;
          alone(f);
          note(`secondary ${s} down too and no instance alive: discarded, served by none`, true);
        } else {
          const s = f.secondary;
          discardTo(p);
          note(`secondary ${s} down with the dirty list: discarded, instance ${p} serves it empty`, true);
        }
        continue;
      }
      if (!up(f.primary)) continue;
      if (layer.mode === 'stale') {
        f.mode = 'normal';
        alone(f);
        note(`instance ${f.primary} back: its entries trusted as they are (stale)`, false);
        continue;
      }
      if (layer.mode === 'volatile') {
        discardTo(f.primary);
        note(`instance ${f.primary} back, empty (volatile)`, true);
        continue;
      }
      const d = view.dirty.get(f.id);
      if (d === undefined) continue;
      if (d !== 'whole') {
        discardTo(f.primary);
        note(`instance ${f.primary} back but the dirty list is ${d}: discarded`, true);
        continue;
      }
      f.mode = 'recovery';
      f.migrate = migrates(layer.mode);
      f.dirtyDone = false;
      f.since = id;
      note(`instance ${f.primary} back: recovering from the dirty list on instance ${f.secondary}`, false);
      continue;
    }
    // recovery
    if (!up(f.primary) && up(f.secondary)) {
      f.mode = 'transient';
      // A list already processed (a done tombstone) takes no appends: the secondary starts a new
      // one with its marker, and is published as secondary anew (its floor too).
      if (f.dirtyDone) f.secondaryFloor = id;
      endRecovery(f);
      note(`instance ${f.primary} down again before its recovery ended`, false);
      continue;
    }
    if (!up(f.primary)) {
      const s = f.secondary;
      const p = pick(f.primary);
      if (p === undefined) {
        f.mode = 'transient';
        f.floor = id;
        alone(f);
        note(`instance ${f.primary} and secondary ${s ?? ''} down during the recovery, no instance alive: discarded, served by none`, true);
      } else {
        discardTo(p);
        note(`instance ${f.primary} and secondary ${s ?? ''} down during the recovery: discarded, instance ${p} serves it empty`, true);
      }
      continue;
    }
    if (!up(f.secondary)) {
      const s = f.secondary;
      const done = !!f.dirtyDone;
      if (done) {
        f.mode = 'normal';
        alone(f);
      } else {
        discardTo(f.primary);
      }
      note(done ? `secondary ${s ?? ''} down after the dirty list was emptied: migration ends` : `secondary ${s ?? ''} down during the recovery, with the dirty list: discarded`, !done);
      continue;
    }
    // Both up: a dirty list found partial or missing before it was processed cannot be trusted.
    const d = f.dirtyDone ? undefined : view.dirty.get(f.id);
    if (d !== undefined && d !== 'whole') {
      discardTo(f.primary);
      note(`instance ${f.primary} recovering but its dirty list on instance ${f.secondary ?? ''} is now ${d}: discarded`, true);
    }
  }
  return changes.length === 0 ? undefined : { layer: { ...layer, fragments }, changes };
}

/** A recovery worker emptied fragment `j`'s dirty list (or migration ended): normal once both are done. */
export function recoveryStep(layer: CacheLayer, j: number, what: 'dirty' | 'migration', configId?: number): CacheLayer | undefined {
  const f = layer.fragments[j];
  if (!f || f.mode !== 'recovery') return undefined;
  // A worker's report names the configuration it worked under: one from before this recovery began is about an earlier list.
  if (what === 'dirty' && configId !== undefined && configId < (f.since ?? 0)) return undefined;
  const g: CacheFragment = { ...f, ...(what === 'dirty' ? { dirtyDone: true } : { migrate: false }) };
  if (g.dirtyDone && !g.migrate) {
    g.mode = 'normal';
    alone(g);
  } else if (g.dirtyDone === f.dirtyDone && g.migrate === f.migrate) {
    return undefined;
  }
  return { ...layer, fragments: layer.fragments.map((x) => (x.id === j ? g : x)) };
}

/** The layer of a configuration read from a file or the wire; CORRUPTION if it is malformed. */
export function layerFrom(x: unknown, what: string): CacheLayer | undefined {
  if (x === undefined || x === null) return undefined;
  const l = x as CacheLayer;
  const bad = (why: string): never => {
    throw new NovaError('CORRUPTION', `${what}: cache layer: ${why}`);
  };
  if (!isCacheMode(l.mode) || !Array.isArray(l.fragments) || l.fragments.length === 0) bad('no mode or no fragments');
  const num = (v: unknown): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
  const fragments = l.fragments.map((f, j) => {
    if (!f || f.id !== j || !['normal', 'transient', 'recovery'].includes(f.mode) || !num(f.primary) || !num(f.floor)) bad(`fragment ${j} is malformed`);
    if (f.secondary !== undefined && f.secondary !== null && (!num(f.secondary) || !num(f.secondaryFloor))) bad(`fragment ${j}'s secondary is malformed`);
    const g: CacheFragment = { id: j, mode: f.mode, primary: f.primary, floor: f.floor };
    if (typeof f.secondary === 'number') {
      g.secondary = f.secondary;
      g.secondaryFloor = f.secondaryFloor;
    }
    if (f.mode === 'recovery') {
      g.migrate = !!f.migrate;
      g.dirtyDone = !!f.dirtyDone;
      if (num(f.since)) g.since = f.since;
    }
    return g;
  });
  return { mode: l.mode, fragments };
}

/** Counts by mode, for status. */
export function modeCounts(layer: CacheLayer): Record<FragmentMode, number> {
  const n: Record<FragmentMode, number> = { normal: 0, transient: 0, recovery: 0 };
  for (const f of layer.fragments) n[f.mode]++;
  return n;
}

/** The layer of `c`, or a NovaError telling the user to start cache instances. */
export function layerOf(c: ClusterConfig): CacheLayer {
  if (!c.cache) throw new NovaError('UNAVAILABLE', 'the cluster has no cache instances: start one with `nova cache --id N --mode MODE` (or `nova up --cache N`)');
  return c.cache;
}
