/**
 * The memtables of one range (DESIGN.md §4): one active memtable per Drange (α in all) and
 * the immutable ones waiting for their flush. The engine creates memtables and their logs;
 * this holds them, routes keys to them and decides what a flush must take together.
 *
 * Invariants the engine's reads rely on:
 * - Every version of a key that is in a memtable is in a memtable of that key's Drange list,
 *   and each list is ordered newest first, so a get stops at the first hit.
 * - Flushes take, for every Drange, a prefix (the oldest) of its list: an older version of a
 *   key is never left in a memtable after a newer one reached a table.
 * - Memtables that share a log record (a batch that spans Dranges lives in one memtable's
 *   log) are flushed in one step, so recovery never replays half of a batch whose other half
 *   is already in a table, and no entry is ever both replayed and in a table.
 * - Nova-LSM-R (`random`): no Dranges; α active memtables, a write goes to any one. A key's
 *   versions may then be in any of them, so every list holds every memtable, a get takes the
 *   newest version of all (read-path.ts), the actives retire together (retireAll) and flush
 *   together, one generation after another.
 * - A memtable merged instead of flushed (merge-job.ts) is parked: the oldest of its Drange,
 *   it waits to go with the Drange's next immutable memtable, and starts no flush itself
 *   (nextFlush), except when everything must be flushed.
 */
import { drangeOf } from './dranges.js';
import type { Memtable } from '../memtable/memtable.js';

export class MemtableSet {
  private bounds: Buffer[];
  /** Per Drange, newest first; [0] is its active memtable. */
  private lists: Memtable[][];
  /** In the order they stopped taking writes. */
  private immutables: Memtable[] = [];
  private readonly links = new Map<Memtable, Set<Memtable>>();
  private readonly parked = new Set<Memtable>();
  /**
   * Each memtable's age: a count taken when it began taking writes; a merged memtable takes
   * its oldest input's. Ids cannot order them: a merged memtable is newly numbered but holds
   * older writes than the memtables after it.
   */
  private readonly age = new Map<Memtable, number>();
  private clock = 0;

  /** `actives`: one per Drange of `bounds`; or, `random`, any number and no bounds. */
  constructor(bounds: Buffer[], actives: Memtable[], readonly random = false) {
    if (random ? bounds.length > 0 : actives.length !== bounds.length + 1) throw new Error('MemtableSet: one memtable per Drange');
    this.bounds = bounds;
    this.lists = actives.map((m) => [this.born(m)]);
    if (random) this.linkAll(actives);
  }

  private linkAll(ms: readonly Memtable[]): void {
    for (const a of ms) for (const b of ms) this.link(a, b);
  }

  /** Random: every active memtable retires; `fresh` take their places, one generation newer. */
  retireAll(fresh: Memtable[]): void {
    const older = this.all().reverse(); // newest first
    for (const list of this.lists) this.immutables.push(list[0]);
    this.lists = fresh.map((m) => [this.born(m), ...older]);
    this.linkAll(fresh);
  }

  private born(m: Memtable): Memtable {
    this.age.set(m, ++this.clock);
    return m;
  }

  /** Oldest first. */
  private byAge = (a: Memtable, b: Memtable): number => this.age.get(a)! - this.age.get(b)!;

  get drangeBounds(): readonly Buffer[] {
    return this.bounds;
  }

  get dranges(): number {
    return this.bounds.length + 1;
  }

  /** Active memtables: one per Drange, or α when random. */
  get activeCount(): number {
    return this.lists.length;
  }

  get immutableCount(): number {
    return this.immutables.length;
  }

  /** Memtables not yet flushed, active and immutable, but for parked ones (small: they hold few keys). */
  get size(): number {
    return this.immutables.length - this.parked.size + this.lists.length;
  }

  get parkedCount(): number {
    return this.parked.size;
  }

  isParked(m: Memtable): boolean {
    return this.parked.has(m);
  }

  drangeOf(key: Uint8Array): number {
    return this.bounds.length === 0 ? 0 : drangeOf(this.bounds, key);
  }


  active(drange: number): Memtable {
    return this.lists[drange][0];
  }

  /** The memtables that may hold `key`, newest first (random: every one, in no order that matters). */
  forKey(key: Uint8Array): readonly Memtable[] {
    return this.random ? this.all() : this.lists[this.drangeOf(key)];
  }

  /** Every memtable not yet flushed, oldest first. */
  all(): Memtable[] {
    const seen = new Set<Memtable>(this.immutables);
    for (const list of this.lists) seen.add(list[0]);
    return [...seen].sort(this.byAge);
  }

  activeAll(): Memtable[] {
    return this.lists.map((l) => l[0]);
  }

  isActive(m: Memtable): boolean {
    return this.drangeOfActive(m) >= 0;
  }

  /** The Drange whose active memtable is `m`, or −1. */
  drangeOfActive(m: Memtable): number {
    return this.lists.findIndex((l) => l[0] === m);
  }

  /** A Drange whose active memtable has entries and holds at least `bytes`, or −1. */
  fullDrange(bytes: number): number {
    return this.lists.findIndex((l) => l[0].entries > 0 && l[0].approximateBytes >= bytes);
  }

  /** `fresh` becomes the active memtable of `drange`; the old one waits for its flush. */
  retire(drange: number, fresh: Memtable): void {
    this.immutables.push(this.lists[drange][0]);
    this.lists[drange].unshift(this.born(fresh));
  }

  /**
   * New Drange boundaries. A new Drange whose interval is an old one's keeps that Drange's
   * memtables, its active one included, unless `fresh` gives it a new active memtable; any
   * other gets one from `fresh`. An old memtable joins the list of every new Drange whose
   * interval meets the interval of a Drange it was listed in (it may hold keys of any of
   * them), so a get still meets every version of its key newest first, and flushes still take
   * the older memtables first (a paper generation id's job). Old active memtables not kept
   * active become immutable.
   */
  reorganize(bounds: Buffer[], fresh: ReadonlyMap<number, Memtable>): void {
    const old = this.bounds;
    const same = this.unchanged(bounds);
    for (const m of fresh.values()) this.born(m);
    const lists: Memtable[][] = [];
    const keptActive = new Set<Memtable>();
    for (let j = 0; j <= bounds.length; j++) {
      const [lo, hi] = [bounds[j - 1], bounds[j]];
      const members = new Set<Memtable>();
      for (let i = 0; i <= old.length; i++) {
        if (below(lo, old[i]) && below(old[i - 1], hi)) for (const m of this.lists[i]) members.add(m);
      }
      const active = fresh.get(j) ?? (same[j] >= 0 ? this.lists[same[j]][0] : undefined);
      if (!active) throw new Error(`reorganize: new Drange ${j} needs a fresh memtable`);
      if (!fresh.has(j)) keptActive.add(active);
      members.delete(active);
      lists.push([active, ...[...members].sort(this.byAge).reverse()]);
    }
    for (const list of this.lists) if (!keptActive.has(list[0]) && !this.immutables.includes(list[0])) this.immutables.push(list[0]);
    this.bounds = bounds;
    this.lists = lists;
  }

  /** For each Drange of `bounds`, the Drange of today's whose interval is the same, or −1. */
  unchanged(bounds: readonly Buffer[]): number[] {
    const old = this.bounds;
    return Array.from({ length: bounds.length + 1 }, (_, j) => {
      for (let i = 0; i <= old.length; i++) if (equal(bounds[j - 1], old[i - 1]) && equal(bounds[j], old[i])) return i;
      return -1;
    });
  }

  /** Records that `a` and `b` hold entries of one log record. */
  link(a: Memtable, b: Memtable): void {
    if (a === b) return;
    let s = this.links.get(a);
    if (!s) this.links.set(a, (s = new Set()));
    s.add(b);
    let t = this.links.get(b);
    if (!t) this.links.set(b, (t = new Set()));
    t.add(a);
  }

  /**
   * What the next flush must take, oldest first: the oldest immutable memtable (not parked,
   * unless `withParked`), every memtable older than it in its Dranges, every memtable linked
   * to it, and so on. Some may still be active: the engine retires those before flushing.
   * Empty when nothing waits.
   */
  nextFlush(withParked = false): Memtable[] {
    const head = this.immutables.find((m) => withParked || !this.parked.has(m));
    if (!head) return [];
    const group = new Set<Memtable>([head]);
    const todo = [head];
    const add = (m: Memtable): void => {
      if (!group.has(m)) {
        group.add(m);
        todo.push(m);
      }
    };
    while (todo.length > 0) {
      const m = todo.pop()!;
      for (const list of this.lists) {
        const i = list.indexOf(m);
        if (i >= 0) for (let j = i + 1; j < list.length; j++) add(list[j]);
      }
      for (const l of this.links.get(m) ?? []) add(l);
    }
    return [...group].sort(this.byAge);
  }

  /** The Dranges whose lists hold `m`. */
  drangesOf(m: Memtable): number[] {
    const out: number[] = [];
    this.lists.forEach((l, d) => { if (l.includes(m)) out.push(d); });
    return out;
  }

  /** Whether `m` shares a log record with another memtable. */
  isLinked(m: Memtable): boolean {
    return (this.links.get(m)?.size ?? 0) > 0;
  }

  /**
   * `merged` takes the place of `group` (immutable memtables of Drange `drange` alone, the
   * oldest of its list: a nextFlush group) as that Drange's oldest memtable, parked.
   */
  replaceMerged(group: readonly Memtable[], drange: number, merged: Memtable): void {
    if (group.some((m) => this.drangesOf(m).join() !== String(drange))) throw new Error(`replaceMerged: the group is not Drange ${drange}'s alone`);
    this.age.set(merged, Math.min(...group.map((m) => this.age.get(m)!)));
    this.flushed(group);
    this.immutables.unshift(merged);
    this.lists[drange].push(merged);
    this.lists[drange].sort(this.byAge).reverse();
    this.parked.add(merged);
  }

  /** Forgets memtables whose contents are now in tables. REQUIRES: none is active. */
  flushed(group: readonly Memtable[]): void {
    const gone = new Set(group);
    for (const m of group) {
      this.parked.delete(m);
      this.age.delete(m);
    }
    this.immutables = this.immutables.filter((m) => !gone.has(m));
    this.lists = this.lists.map((l) => l.filter((m) => !gone.has(m)));
    for (const m of group) {
      for (const l of this.links.get(m) ?? []) this.links.get(l)?.delete(m);
      this.links.delete(m);
    }
  }
}

/** lo < hi for interval ends: undefined is −∞ as a low end, +∞ as a high end. */
function below(lo: Buffer | undefined, hi: Buffer | undefined): boolean {
  return lo === undefined || hi === undefined || Buffer.compare(lo, hi) < 0;
}

function equal(a: Buffer | undefined, b: Buffer | undefined): boolean {
  return a === undefined ? b === undefined : b !== undefined && a.equals(b);
}
