/**
 * The Gemini client protocol (paper §5.1.3, §5.2.1, Algorithms 1 and 2): a look-aside cache in
 * front of the LTCs. A read looks the key up in the instance its fragment routes to and, on a
 * miss, reads the LTCs and inserts what it read under an I lease; a write takes a Q lease,
 * updates the LTCs, then deletes the entry (write-around). By fragment mode:
 *
 * - normal: the primary.
 * - transient: the secondary; a write's Q lease also appends the key to the fragment's dirty list.
 *   With no secondary (no instance alive), no cache: reads and writes go to the LTCs alone.
 * - recovery: the primary, except that a key on the dirty list (fetched once per configuration
 *   from the secondary) is deleted from the primary at its first reference (Algorithm 1); with
 *   migration, a miss on the primary looks in the secondary before the LTCs. A write deletes
 *   the key in the secondary as well, migration or not: a recovery worker overwriting a dirty
 *   key from the secondary must not find a value a write has since replaced.
 *
 * A write is acknowledged only once its key is invalidated under some configuration: if the
 * delete after the LTC update fails (the instance died, the configuration moved on), the client
 * fetches the configuration until one routes the key to a live instance (or to none) and
 * invalidates there; in transient mode that puts the key on the dirty list, so a primary that
 * returns with the old entry deletes it. Until a secondary is published, a write waits; a read
 * goes to the LTCs.
 *
 * Concurrency: any number of calls at once; each holds its own leases.
 */
import { NovaError } from '../common/errors.js';
import type { ClusterConfig } from '../cluster/config.js';
import { routeOf, type Route } from '../cluster/gemini.js';

/** One instance as the client reaches it (RPC, or in-process in the model test). */
export interface InstanceApi {
  iqget(cfg: number, key: Buffer, floor: number): Promise<{ value?: Buffer; token?: number; backoff?: boolean }>;
  iset(cfg: number, key: Buffer): Promise<{ value?: Buffer; token?: number; backoff?: boolean }>;
  iqset(cfg: number, key: Buffer, value: Buffer, token: number, fragment: number): Promise<boolean>;
  idelete(cfg: number, key: Buffer, token: number): Promise<void>;
  qareg(cfg: number, key: Buffer, dirtyFragment?: number): Promise<number>;
  dar(cfg: number, key: Buffer, token: number): Promise<void>;
  delete(cfg: number, key: Buffer, dirtyFragment?: number): Promise<void>;
  get(cfg: number, key: Buffer, floor: number): Promise<Buffer | undefined>;
  dirtyFetch(cfg: number, fragment: number, from: number, limit: number): Promise<{ state: string; keys: Buffer[]; total: number }>;
  /** The coordinator: starts a fragment's dirty list with its marker; makes the instance refuse callers under configurations before `cfg`. */
  dirtyInit(cfg: number, fragment: number): Promise<void>;
  fence(cfg: number): Promise<void>;
  /** Recovery workers: a Redlease on a dirty list (undefined: another holds it), and the end of its processing. */
  redlease(cfg: number, fragment: number, renew?: number): Promise<number | undefined>;
  dirtyDone(cfg: number, fragment: number, token: number): Promise<boolean>;
}

/** What the client protocol needs of its owner. */
export interface GeminiHost {
  /** The configuration the client routes by now. */
  config(): ClusterConfig;
  /** Fetches the configuration with a request sent after this call (at least as new as `atLeast` if given, when the coordinator has it). */
  refresh(atLeast?: number): Promise<ClusterConfig>;
  instance(id: number): InstanceApi;
  /** Waits `ms` (the model test runs on its own clock). */
  sleep(ms: number): Promise<void>;
  /** The time, ms, for deadlines. */
  now(): number;
}

export interface GeminiClientOptions {
  /** How long one read or write may take, retries included. */
  timeoutMs: number;
  /** Looks a key up this many times while another reader fills it (I lease back-off), then reads the LTCs. */
  backoffTries?: number;
  backoffMs?: number;
}

/** What the client counts: lookups and hits per instance (as primary or transient secondary), and what the LTCs served. */
export interface GeminiCounters {
  gets: number;
  hits: number;
  /** Reads served by the LTCs because no instance could (down, no cache for the fragment, leases). */
  bypassed: number;
  /** Hits copied from a recovering fragment's secondary (migration). */
  migrated: number;
  byInstance: Map<number, { gets: number; hits: number }>;
}

export const DIRTY_PAGE = 4_096;
/** Least time between two configuration fetches that reads bypassing an unreachable instance start. */
const BYPASS_REFRESH_MS = 50;
/** After a write of unknown outcome, when its keys are deleted once more: past the instances' Q lease (LEASE_MS, cache-server.ts). */
const LATE_INVALIDATION_MS = 10_000;

interface DirtyCopy { configId: number; keys: Set<string> | undefined; loading?: Promise<void> }

function code(err: unknown): string | undefined {
  return err instanceof NovaError ? err.code : (err as { code?: string } | undefined)?.code;
}

/** Errors that say the instance cannot serve now (down, its lease lapsed, unreachable). */
function unreachable(err: unknown): boolean {
  const c = code(err);
  return c === 'UNAVAILABLE' || c === 'CLOSED' || c === 'DEADLINE_EXCEEDED' || c === 'PEER_LOST';
}

/** A writer's Q lease on one key. */
interface Lease {
  /** Deletes the entry and releases the lease (dar). */
  release(): Promise<void>;
}

export class GeminiClient {
  readonly counters: GeminiCounters = { gets: 0, hits: 0, bypassed: 0, migrated: 0, byInstance: new Map() };
  private readonly dirty = new Map<number, DirtyCopy>();
  private lastBypassRefresh = -Infinity;

  constructor(private readonly host: GeminiHost, private readonly o: GeminiClientOptions) {}

  private count(instance: number, hit: boolean): void {
    this.counters.gets++;
    if (hit) this.counters.hits++;
    let c = this.counters.byInstance.get(instance);
    if (!c) this.counters.byInstance.set(instance, c = { gets: 0, hits: 0 });
    c.gets++;
    if (hit) c.hits++;
  }

  /**
   * Fetches the configuration after an instance said ours is older than one it has seen. The
   * coordinator may tell instances of a configuration a moment before it serves it: then wait a little.
   */
  private async newer(err: unknown, had: number): Promise<void> {
    const detail = Number((err as { detail?: unknown }).detail);
    const seen = Number.isSafeInteger(detail) ? detail : had + 1;
    const c = await this.host.refresh(seen);
    if (c.id < seen) await this.host.sleep(5);
  }

  /** The value of `key`: from the cache, or from `read` (the LTCs) and then inserted. */
  async get(key: Buffer, read: () => Promise<Buffer | undefined>): Promise<Buffer | undefined> {
    const deadline = this.host.now() + this.o.timeoutMs;
    for (;;) {
      const config = this.host.config();
      if (!config.cache) return read();
      const r = routeOf(config.cache, key);
      try {
        return await this.routedGet(config, r, key, read);
      } catch (err) {
        if (code(err) === 'STALE_CONFIG' && this.host.now() < deadline) {
          await this.newer(err, config.id);
          continue;
        }
        if (unreachable(err) || code(err) === 'STALE_CONFIG') {
          // The instance cannot answer: the LTCs can. The configuration may have moved on: one
          // fetch now and then, not one per read (a dead instance fails every read routed to it).
          this.counters.bypassed++;
          const now = this.host.now();
          if (now - this.lastBypassRefresh >= BYPASS_REFRESH_MS) {
            this.lastBypassRefresh = now;
            this.host.refresh().catch(() => undefined);
          }
          return read();
        }
        throw err;
      }
    }
  }

  private async routedGet(config: ClusterConfig, r: Route, key: Buffer, read: () => Promise<Buffer | undefined>): Promise<Buffer | undefined> {
    const cfg = config.id;
    if (r.mode !== 'recovery') {
      const at = r.mode === 'normal' ? r.primary : r.secondary;
      if (!at) {
        this.counters.bypassed++;
        return read();
      }
      return this.leasedGet(cfg, at.id, r.fragment, () => this.host.instance(at.id).iqget(cfg, key, at.floor), key, read, undefined);
    }
    // Algorithm 1.
    const p = r.primary!;
    const s = r.secondary!;
    const dirty = await this.dirtyKeys(cfg, r.fragment, s.id);
    if (!dirty) {
      // The dirty list cannot be read whole: neither replica can be trusted for this key.
      this.counters.bypassed++;
      return read();
    }
    const k = key.toString('latin1');
    const primary = this.host.instance(p.id);
    if (dirty.has(k)) {
      const res = await primary.iset(cfg, key);
      dirty.delete(k);
      return this.fill(cfg, p.id, r, key, res.token, read);
    }
    return this.leasedGet(cfg, p.id, r.fragment, () => primary.iqget(cfg, key, p.floor), key, read, r);
  }

  /** A lookup under the I-lease rules: hit, fill under the lease, back off, or read the LTCs alone. */
  private async leasedGet(cfg: number, instance: number, fragment: number, look: () => Promise<{ value?: Buffer; token?: number; backoff?: boolean }>,
    key: Buffer, read: () => Promise<Buffer | undefined>, recovery: Route | undefined): Promise<Buffer | undefined> {
    const tries = this.o.backoffTries ?? 20;
    for (let i = 0; ; i++) {
      const res = await look();
      if (res.value) {
        this.count(instance, true);
        return res.value;
      }
      if (res.backoff && i + 1 < tries) {
        await this.host.sleep(this.o.backoffMs ?? 2);
        continue;
      }
      this.count(instance, false);
      if (res.token === undefined) {
        this.counters.bypassed++;
        return read();
      }
      return recovery ? this.fill(cfg, instance, recovery, key, res.token, read) : this.insert(cfg, instance, fragment, key, res.token, read);
    }
  }

  /** Recovery-mode miss under an I lease on the primary: the secondary first with migration, then the LTCs. */
  private async fill(cfg: number, primary: number, r: Route, key: Buffer, token: number | undefined, read: () => Promise<Buffer | undefined>): Promise<Buffer | undefined> {
    if (token === undefined) {
      this.counters.bypassed++;
      return read();
    }
    if (r.migrate && r.secondary) {
      const v = await this.host.instance(r.secondary.id).get(cfg, key, r.secondary.floor).catch(() => undefined);
      if (v) {
        this.counters.migrated++;
        await this.host.instance(primary).iqset(cfg, key, v, token, r.fragment).catch(() => false);
        return v;
      }
    }
    return this.insert(cfg, primary, r.fragment, key, token, read);
  }

  private async insert(cfg: number, instance: number, fragment: number, key: Buffer, token: number, read: () => Promise<Buffer | undefined>): Promise<Buffer | undefined> {
    const v = await read();
    const at = this.host.instance(instance);
    // A failed insert costs a later miss, nothing more: the value is the LTCs'.
    if (v !== undefined) await at.iqset(cfg, key, v, token, fragment).catch(() => false);
    else await at.idelete(cfg, key, token).catch(() => undefined);
    return v;
  }

  /** The keys on a recovering fragment's dirty list (shared by this client's calls, per configuration); undefined if not whole. */
  private async dirtyKeys(cfg: number, fragment: number, secondary: number): Promise<Set<string> | undefined> {
    let d = this.dirty.get(fragment);
    if (!d || d.configId !== cfg) {
      const copy: DirtyCopy = { configId: cfg, keys: undefined };
      copy.loading = (async () => {
        const keys = new Set<string>();
        const s = this.host.instance(secondary);
        for (let from = 0; ;) {
          const page = await s.dirtyFetch(cfg, fragment, from, DIRTY_PAGE);
          if (page.state === 'done') break; // a worker processed it all: nothing is dirty
          if (page.state !== 'whole') return;
          for (const k of page.keys) keys.add(k.toString('latin1'));
          from += page.keys.length;
          if (page.keys.length === 0 || from >= page.total) break;
        }
        copy.keys = keys;
      })();
      this.dirty.set(fragment, d = copy);
      try {
        await copy.loading;
      } catch (err) {
        if (this.dirty.get(fragment) === copy) this.dirty.delete(fragment);
        throw err;
      }
      copy.loading = undefined;
    } else if (d.loading) {
      await d.loading;
    }
    return d.keys;
  }

  /**
   * Applies a write with `apply` (the LTC update, called exactly once) and invalidates the
   * key's entries around it (Algorithm 2 in recovery mode). Resolves once both are done.
   */
  write(key: Buffer, apply: () => Promise<void>): Promise<void> {
    return this.writeMany([key], apply);
  }

  /**
   * A write of several keys (a batch): a Q lease on each key first, all at once; then `apply`,
   * once; then each entry deleted. An error of `apply` goes to the caller after the leases are
   * released; FAILED if no lease could be had (nothing applied), UNKNOWN_OUTCOME if a key could
   * not be invalidated after `apply`.
   */
  async writeMany(keys: Buffer[], apply: () => Promise<void>): Promise<void> {
    const deadline = this.host.now() + this.o.timeoutMs;
    const leases = await Promise.allSettled(keys.map((k) => this.lease(k, deadline)));
    const held = leases.flatMap((l) => (l.status === 'fulfilled' && l.value ? [l.value] : []));
    const failed = leases.find((l): l is PromiseRejectedResult => l.status === 'rejected');
    if (failed) {
      await Promise.all(held.map((h) => h.release().catch(() => undefined)));
      throw failed.reason;
    }
    try {
      await apply();
    } catch (err) {
      if (code(err) === 'UNKNOWN_OUTCOME') {
        // It may land later: the Q leases stay until they time out (deleting the entries then),
        // and the keys are deleted once more after that, when a landing is long past.
        void this.host.sleep(LATE_INVALIDATION_MS).then(() => Promise.all(keys.map((k) => this.invalidated(k, undefined, this.host.now() + this.o.timeoutMs)))).catch(() => undefined);
      } else {
        await Promise.all(held.map((h) => h.release().catch(() => undefined)));
      }
      throw err;
    }
    // A key no cache served when its lease was asked for may be served by one now (an instance
    // back, the layer made), whose reader may have filled it from before the update: a
    // configuration fetched after the update says where to delete it.
    if (held.length < keys.length) await this.host.refresh().catch(() => undefined);
    await Promise.all(keys.map((k, i) => {
      const l = leases[i] as PromiseFulfilledResult<Lease | undefined>;
      return this.invalidated(k, l.value, deadline);
    }));
  }

  /**
   * A writer's Q lease on `key` where the configuration routes it: on the secondary in transient
   * mode (the key goes on the dirty list), else on the primary (in recovery mode the key is also
   * deleted in the secondary). Undefined when no cache serves the key. Waits, refreshing the
   * configuration, while the instance cannot answer: until a secondary is published.
   */
  private async lease(key: Buffer, deadline: number): Promise<Lease | undefined> {
    for (let wait = 5; ; wait = Math.min(wait * 2, 200)) {
      const config = this.host.config();
      if (!config.cache) return undefined;
      const cfg = config.id;
      const r = routeOf(config.cache, key);
      const at = r.mode === 'transient' ? r.secondary : r.primary;
      if (!at) return undefined;
      const instance = this.host.instance(at.id);
      let token: number | undefined;
      try {
        token = await instance.qareg(cfg, key, r.mode === 'transient' ? r.fragment : undefined);
        if (r.mode === 'recovery' && r.secondary) await this.host.instance(r.secondary.id).delete(cfg, key);
        const t = token;
        return { release: () => instance.dar(cfg, key, t) };
      } catch (err) {
        if (token !== undefined) await instance.dar(cfg, key, token).catch(() => undefined);
        await this.retryOrThrow(err, config.id, deadline, wait, () => new NovaError('FAILED',
          `write: not applied: no cache instance took the write's Q lease in ${this.o.timeoutMs} ms (${(err as Error).message})`, { reason: 'UNAVAILABLE' }));
      }
    }
  }

  /** After the LTC update: the lease released (deleting the entry), or else the key deleted wherever the configuration routes it now. */
  private async invalidated(key: Buffer, lease: Lease | undefined, deadline: number): Promise<void> {
    if (lease) {
      try {
        await lease.release();
        return;
      } catch (err) {
        if (!(code(err) === 'STALE_CONFIG' || unreachable(err))) throw err;
      }
    }
    for (let wait = 5; ; wait = Math.min(wait * 2, 200)) {
      const config = this.host.config();
      if (!config.cache) return;
      try {
        await this.invalidate(config.id, routeOf(config.cache, key), key);
        return;
      } catch (err) {
        // Applied but not invalidated: the caller must not take it as done (the entry may still be served).
        await this.retryOrThrow(err, config.id, deadline, wait, () => new NovaError('UNKNOWN_OUTCOME',
          `the write was applied, but its cache entry could not be invalidated in ${this.o.timeoutMs} ms (${(err as Error).message}); reads through the cache may see the old value`, { reason: 'UNAVAILABLE' }));
      }
    }
  }

  /** After a failed cache call: rethrows what a retry cannot mend, `late()` past the deadline; else waits for a newer configuration. */
  private async retryOrThrow(err: unknown, had: number, deadline: number, wait: number, late: () => NovaError): Promise<void> {
    if (!(code(err) === 'STALE_CONFIG' || unreachable(err))) throw err;
    if (this.host.now() >= deadline) throw late();
    if (code(err) === 'STALE_CONFIG') {
      await this.newer(err, had).catch(() => undefined);
    } else {
      // Wait for a configuration that routes the key to a live instance (a secondary).
      await this.host.sleep(wait);
      await this.host.refresh().catch(() => undefined);
    }
  }

  /** After the LTC update: deletes the key wherever the configuration routes it now (on the dirty list, in transient mode). */
  private async invalidate(cfg: number, r: Route, key: Buffer): Promise<void> {
    if (r.mode === 'transient') {
      if (r.secondary) await this.host.instance(r.secondary.id).delete(cfg, key, r.fragment);
      return;
    }
    await this.host.instance(r.primary!.id).delete(cfg, key);
    if (r.mode === 'recovery' && r.secondary) await this.host.instance(r.secondary.id).delete(cfg, key);
  }
}
