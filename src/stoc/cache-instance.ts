/**
 * One Gemini cache instance's protocol (paper §5.1.3, Table 5.2): IQ leases on entries,
 * Redleases on dirty lists, the configuration id it has seen, over a CacheStore that keeps the
 * entries and dirty lists (persistent or not). Its RPC face is cache-server.ts; the model test
 * drives it directly.
 *
 * Every operation names the configuration id the caller routes by. One older than the newest
 * this instance has seen is refused STALE_CONFIG (the caller fetches the configuration and
 * routes again); a newer one becomes the newest. So once any caller under a new configuration
 * has reached an instance, no caller under an older one changes it: a secondary that answered
 * a dirty-list fetch under the recovery's configuration takes no more appends from clients that
 * still think the fragment transient (they route again, to the primary).
 *
 * Leases, all in memory, each with a token and a deadline:
 * - I (inhibit), one per key, granted on a miss to one reader; its insert (iqset) lands only if
 *   the lease still holds. Another reader's miss backs off. A Q lease, a delete or a dar voids it.
 * - Q (quarantine), any number per key, taken by a writer before it updates the LTCs (qareg); the
 *   entry is deleted at once and again when the writer releases it (dar) or the lease times out,
 *   and no I lease is granted meanwhile, so no read fills the entry with the value being replaced.
 * - Red, one per dirty list, held by the recovery worker processing it.
 * A restart forgets leases; that only refuses inserts under them, which is safe.
 *
 * Invalidations (delete, qareg, dar, iset, dirty-list changes) are answered only once durable
 * (CacheStore.durable): a restarted instance must not serve what a write had invalidated.
 * Inserts need not be: losing one loses a cache entry, never consistency.
 */
import { performance } from 'node:perf_hooks';
import { NovaError } from '../common/errors.js';
import type { CacheStore } from './cache-store.js';
import type { CacheLayer } from '../cluster/gemini.js';

export interface CacheInstanceOptions {
  /** How long an I or Q lease lives (the LTC call it guards must fit in it). */
  leaseMs: number;
  /** How long a Redlease lives without renewal. */
  redleaseMs: number;
  /** Whether the instance's lease on its fragments holds (its heartbeats are answered); else it serves nothing. */
  serving?: () => boolean;
  now?: () => number;
}

/** What a lookup that takes leases answers: a hit, or a miss with an I lease, or a miss to back off from, or a miss without a lease (a write is under way). */
export interface LeasedLookup {
  value?: Buffer;
  /** Miss: the I lease's token; insert with iqset under it. */
  token?: number;
  /** Miss: another reader holds the I lease; look again shortly. */
  backoff?: boolean;
}

export type DirtyStateName = 'whole' | 'partial' | 'missing' | 'done';

export interface DirtyPage {
  state: DirtyStateName;
  keys: Buffer[];
  /** Keys in the list in all. */
  total: number;
}

export interface CacheCounters {
  /** Lookups by clients that route to this instance as a primary or transient secondary (iqget), and their hits. */
  gets: number;
  hits: number;
  /** Lookups in this instance as a recovering fragment's secondary (get, migration and recovery workers), and their hits. */
  secondaryGets: number;
  secondaryHits: number;
  /** Entries dropped because their configuration id was below their replica's floor. */
  discarded: number;
  inserts: number;
  invalidations: number;
  /** Inserts refused because their I lease was voided or expired. */
  refusedInserts: number;
}

interface ILease { token: number; until: number }
interface QLeases { tokens: Map<number, number> }

/** How far ahead of the newest configuration it knows a caller's may be. */
const MAX_AHEAD = 1_000_000;

/** Entries `collect` drops per call. */
const COLLECT_CHUNK = 10_000;

/** Keys leased at once at most (I and Q): past it, a miss gets no lease (the reader reads the LTCs, nothing is inserted). */
const MAX_LEASED_KEYS = 1_000_000;

export class CacheInstance {
  /** The newest configuration id seen (from the coordinator or a caller). */
  configId = 0;
  readonly counters: CacheCounters = { gets: 0, hits: 0, secondaryGets: 0, secondaryHits: 0, discarded: 0, inserts: 0, invalidations: 0, refusedInserts: 0 };
  private readonly iLeases = new Map<string, ILease>();
  private readonly qLeases = new Map<string, QLeases>();
  private readonly redleases = new Map<number, ILease>();
  private nextToken = 1;
  private readonly now: () => number;

  constructor(readonly store: CacheStore, private readonly o: CacheInstanceOptions) {
    this.now = o.now ?? (() => performance.now());
  }

  /** The coordinator's newest configuration id (registration, heartbeats, a fence before it publishes a change). */
  learn(id: number): void {
    if (id > this.configId) this.configId = id;
  }

  /** Checks the caller's configuration id and that this instance may serve. */
  private enter(cfg: number): void {
    if (this.o.serving && !this.o.serving()) throw new NovaError('UNAVAILABLE', 'this cache instance\'s lease has lapsed (no heartbeat answered): it serves nothing until it renews');
    if (cfg < this.configId) throw Object.assign(new NovaError('STALE_CONFIG', `configuration ${cfg} is older than ${this.configId}: fetch it again`), { detail: this.configId });
    // Configurations come one at a time: an id far ahead of any this instance heard of is bogus, and taking it would refuse every caller.
    if (this.configId > 0 && cfg > this.configId + MAX_AHEAD) throw new NovaError('BAD_ARGUMENT', `configuration ${cfg} is ${cfg - this.configId} ahead of the newest this instance knows (${this.configId}): not one the coordinator made`);
    this.configId = cfg;
  }

  /** The entry of `key` if valid for a replica whose floor is `floor`; an older one is discarded. */
  private valid(key: Buffer, floor: number, touch: boolean): Buffer | undefined {
    const e = touch ? this.store.get(key) : this.store.peek(key);
    if (!e) return undefined;
    if (e.configId < floor) {
      this.store.discard(key);
      this.counters.discarded++;
      return undefined;
    }
    return e.value;
  }

  private qHeld(k: string): boolean {
    const q = this.qLeases.get(k);
    if (!q) return false;
    const now = this.now();
    for (const [token, until] of q.tokens) {
      if (until <= now) q.tokens.delete(token);
    }
    if (q.tokens.size > 0) return true;
    this.qLeases.delete(k);
    return false;
  }

  private grantI(k: string): number | undefined {
    if (this.iLeases.size + this.qLeases.size >= MAX_LEASED_KEYS) this.sweep();
    if (this.iLeases.size + this.qLeases.size >= MAX_LEASED_KEYS) return undefined;
    const token = this.nextToken++;
    this.iLeases.set(k, { token, until: this.now() + this.o.leaseMs });
    return token;
  }

  /** Lookup with leases (a client's read in normal or transient mode, or of a key not dirty in recovery). */
  iqget(cfg: number, key: Buffer, floor: number): LeasedLookup {
    this.enter(cfg);
    this.counters.gets++;
    const value = this.valid(key, floor, true);
    if (value) {
      this.counters.hits++;
      return { value };
    }
    return this.missLease(key.toString('latin1'));
  }

  private missLease(k: string): LeasedLookup {
    if (this.qHeld(k)) return {};
    const i = this.iLeases.get(k);
    if (i && i.until > this.now()) return { backoff: true };
    const token = this.grantI(k);
    return token === undefined ? {} : { token };
  }

  /** Deletes `key` and takes an I lease on it (a dirty key's first reference in recovery, a recovery worker's overwrite). */
  async iset(cfg: number, key: Buffer): Promise<LeasedLookup> {
    this.enter(cfg);
    const k = key.toString('latin1');
    this.iLeases.delete(k);
    this.store.delete(key);
    this.counters.invalidations++;
    const r = this.missLease(k);
    await this.store.durable();
    return r;
  }

  /** Inserts under an I lease; false (and nothing inserted) if the lease was voided or expired. */
  iqset(cfg: number, key: Buffer, value: Buffer, token: number, fragment: number): boolean {
    this.enter(cfg);
    const k = key.toString('latin1');
    const i = this.iLeases.get(k);
    if (!i || i.token !== token || i.until <= this.now()) {
      this.counters.refusedInserts++;
      return false;
    }
    this.iLeases.delete(k);
    this.store.set(key, value, cfg, fragment);
    this.counters.inserts++;
    return true;
  }

  /** Releases an I lease without inserting. */
  idelete(cfg: number, key: Buffer, token: number): void {
    this.enter(cfg);
    const k = key.toString('latin1');
    if (this.iLeases.get(k)?.token === token) this.iLeases.delete(k);
  }

  /**
   * A writer's Q lease: voids the key's I lease, deletes the entry, and (transient mode, on the
   * secondary) appends the key to `dirtyFragment`'s dirty list. Answers the token for dar.
   */
  async qareg(cfg: number, key: Buffer, dirtyFragment?: number): Promise<number> {
    this.enter(cfg);
    const k = key.toString('latin1');
    this.iLeases.delete(k);
    let q = this.qLeases.get(k);
    if (!q) this.qLeases.set(k, q = { tokens: new Map() });
    const token = this.nextToken++;
    q.tokens.set(token, this.now() + this.o.leaseMs);
    this.store.delete(key);
    if (dirtyFragment !== undefined) this.store.dirtyAdd(dirtyFragment, key);
    this.counters.invalidations++;
    await this.store.durable();
    return token;
  }

  /** Deletes the entry, voids any I lease granted since, and releases the Q lease. */
  async dar(cfg: number, key: Buffer, token: number): Promise<void> {
    this.enter(cfg);
    const k = key.toString('latin1');
    this.iLeases.delete(k);
    const q = this.qLeases.get(k);
    if (q) {
      q.tokens.delete(token);
      if (q.tokens.size === 0) this.qLeases.delete(k);
    }
    this.store.delete(key);
    await this.store.durable();
  }

  /** Deletes the entry and voids its I lease; with `dirtyFragment`, appends the key to that dirty list. */
  async delete(cfg: number, key: Buffer, dirtyFragment?: number): Promise<void> {
    this.enter(cfg);
    this.iLeases.delete(key.toString('latin1'));
    this.store.delete(key);
    if (dirtyFragment !== undefined) this.store.dirtyAdd(dirtyFragment, key);
    this.counters.invalidations++;
    await this.store.durable();
  }

  /** A plain lookup in a recovering fragment's secondary (migration, recovery workers). */
  get(cfg: number, key: Buffer, floor: number): Buffer | undefined {
    this.enter(cfg);
    this.counters.secondaryGets++;
    const v = this.valid(key, floor, false);
    if (v) this.counters.secondaryHits++;
    return v;
  }

  /** The coordinator, before it publishes configuration `cfg`: callers under older ones are refused from now on. */
  fence(cfg: number): void {
    this.enter(cfg);
  }

  /** Starts `fragment`'s dirty list with its marker (the coordinator, before it publishes the transient mode). */
  async dirtyInit(cfg: number, fragment: number): Promise<void> {
    this.enter(cfg);
    this.store.dirtyInit(fragment, cfg);
    await this.store.durable();
  }

  /** A page of `fragment`'s dirty list and its state. */
  dirtyFetch(cfg: number, fragment: number, from: number, limit: number): DirtyPage {
    this.enter(cfg);
    const d = this.store.dirty(fragment);
    if (!d) return { state: 'missing', keys: [], total: 0 };
    const state: DirtyStateName = d.done ? 'done' : d.marker ? 'whole' : 'partial';
    return { state, keys: d.done ? [] : this.store.dirtyKeys(fragment, from, limit), total: d.keys };
  }

  /** A Redlease on `fragment`'s dirty list; undefined if another worker holds one (back off). */
  redlease(cfg: number, fragment: number, renew?: number): number | undefined {
    this.enter(cfg);
    const held = this.redleases.get(fragment);
    const now = this.now();
    if (held && held.until > now && held.token !== renew) return undefined;
    const token = held && held.token === renew ? renew : this.nextToken++;
    this.redleases.set(fragment, { token, until: now + this.o.redleaseMs });
    return token;
  }

  /** The worker processed the whole list: it becomes a done tombstone and the Redlease ends. */
  async dirtyDone(cfg: number, fragment: number, token: number): Promise<boolean> {
    this.enter(cfg);
    const held = this.redleases.get(fragment);
    if (!held || held.token !== token) return false;
    this.redleases.delete(fragment);
    this.store.dirtyDone(fragment);
    await this.store.durable();
    return true;
  }

  /**
   * Discards the entries no configuration will use again: of a fragment this instance is neither
   * primary nor secondary of in `layer`, or written under an id below its role's floor (a
   * fragment discarded, moved, or ended as secondary). Dropping a valid entry would only cost a
   * miss. Answers how many it dropped; `chunk` bounds the entries dropped per call (the rest wait
   * for the next, so a large cache does not block the event loop).
   */
  collect(layer: CacheLayer, self: number, chunk = COLLECT_CHUNK): { dropped: number; more: boolean } {
    const keys = this.store.keysWhere((e) => {
      const f = layer.fragments[e.fragment];
      if (!f) return true;
      if (f.primary === self && e.configId >= f.floor) return false;
      return !(f.secondary === self && e.configId >= (f.secondaryFloor ?? 0));
    });
    const dropped = keys.slice(0, chunk);
    for (const k of dropped) this.store.discard(k);
    this.counters.discarded += dropped.length;
    return { dropped: dropped.length, more: keys.length > chunk };
  }

  /** Drops expired leases; a timed-out Q lease deletes its entry (the writer may have died after the LTC update). */
  sweep(): void {
    const now = this.now();
    for (const [k, i] of this.iLeases) if (i.until <= now) this.iLeases.delete(k);
    for (const k of [...this.qLeases.keys()]) {
      if (!this.qHeld(k)) this.store.delete(Buffer.from(k, 'latin1'));
    }
    for (const [f, r] of this.redleases) if (r.until <= now) this.redleases.delete(f);
  }

  leases(): { i: number; q: number; red: number } {
    return { i: this.iLeases.size, q: this.qLeases.size, red: this.redleases.size };
  }
}
