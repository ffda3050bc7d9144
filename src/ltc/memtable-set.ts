/**
 * The memtables of one range (DESIGN.md §4): the active memtables of each Drange (one, or
 * several for a duplicated Drange; α in all) and the immutable ones waiting for their flush.
 * The engine creates memtables and their logs; this holds them, routes keys to them and
 * decides what a flush must take together.
 *
 * Invariants the engine's reads rely on:
 * - Every version of a key that is in a memtable is in a memtable of that key's Drange list,
 *   and each list is ordered newest first, so a get stops at the first hit, unless the list
 *   is `mixed` (below).
 * - Flushes take, for every Drange, a prefix (the oldest) of its list: an older version of a
 *   key is never left in a memtable after a newer one reached a table.
 * - Memtables that share a log record (a batch that spans Dranges lives in one memtable's
 *   log) are flushed in one step, so recovery never replays half of a batch whose other half
 *   is already in a table, and no entry is ever both replayed and in a table.
 * - A duplicated Drange's active memtables (its copies, twins of one generation) take writes
 *   of the same keys in turn, so a key's versions interleave across them: they retire
 *   together, flush together into one table (flushUnits), and a list holding twins is
 *   `mixed`: a get takes the newest version of all its memtables (read-path.ts). Nova-LSM-R is
 *   one Drange with α copies.
 * - A memtable merged instead of flushed (merge-job.ts) is parked: the oldest of its Drange,
 *   it waits to go with the Drange's next immutable memtable, and starts no flush itself
 *   (nextFlush), except when everything must be flushed.
 */
import { drangeOf } from './dranges.js';
import type { Memtable } from '../memtable/memtable.js';

const NONE: ReadonlySet<Memtable> = new Set();

export class MemtableSet {
  private bounds: Buffer[];
  /** Per Drange, newest first; the first `copies[d]` are its active memtables. */
  private lists: Memtable[][];
  private copies: number[];
  /** Per Drange, the copy the last write picked. */
  private picked: number[];
  /** In the order they stopped taking writes. */
  private immutables: Memtable[] = [];
  private readonly links = new Map<Memtable, Set<Memtable>>();
  private readonly parked = new Set<Memtable>();
  /** A duplicated Drange's copies, each to the others of its generation. */
  private readonly twins = new Map<Memtable, readonly Memtable[]>();
  /** Per Drange: its list holds twins. */
  private mixedLists: boolean[] = [];
  /**
   * Each memtable's age: a count taken when it began taking writes; a merged memtable takes
   * its oldest input's. Ids cannot order them: a merged memtable is newly numbered but holds
   * older writes than the memtables after it.
   */
  private readonly age = new Map<Memtable, number>();
  private clock = 0;

  /** `actives`: per Drange of `bounds`, its active memtables (several: a duplicated Drange). */
  constructor(bounds: Buffer[], actives: Memtable[][]) {
    if (actives.length !== bounds.length + 1 || actives.some((a) => a.length === 0)) throw new Error('MemtableSet: active memtables for every Drange');
    this.bounds = bounds;
    this.copies = actives.map((a) => a.length);
    this.picked = actives.map(() => 0);
    this.lists = actives.map((a) => this.generation(a));
    this.relisted();
  }

  /** `ms` begin taking writes, twins if several; newest first as a list's head. */
  private generation(ms: readonly Memtable[]): Memtable[] {
    this.clock++;
    for (const m of ms) this.age.set(m, this.clock);
    if (ms.length > 1) {
      for (const m of ms) this.twins.set(m, ms);
      for (const a of ms) for (const b of ms) this.link(a, b);
    }
    return [...ms];
  }

  private relisted(): void {
    this.mixedLists = this.lists.map((l) => l.some((m) => this.twins.has(m)));
  }

  /** Oldest first (twins, of one age, by id). */
  private byAge = (a: Memtable, b: Memtable): number => this.age.get(a)! - this.age.get(b)! || a.id - b.id;

  get drangeBounds(): readonly Buffer[] {
    return this.bounds;
  }

  get dranges(): number {
    return this.bounds.length + 1;
  }

  /** Active memtables per Drange. */
  get drangeCopies(): readonly number[] {
    return this.copies;
  }

  get immutableCount(): number {
    return this.immutables.length;
  }

  /** Memtables not yet flushed, active and immutable, but for parked ones (small: they hold few keys). */
  get size(): number {
    return this.immutables.length - this.parked.size + this.copies.reduce((a, b) => a + b, 0);
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

  /** The active memtables of `drange`. */
  actives(drange: number): Memtable[] {
    return this.lists[drange].slice(0, this.copies[drange]);
  }

  /** The active memtable of `drange` a write takes: its copies in turn. */
  pick(drange: number): Memtable {
    const c = this.copies[drange];
    if (c === 1) return this.lists[drange][0];
    this.picked[drange] = (this.picked[drange] + 1) % c;
    return this.lists[drange][this.picked[drange]];
  }

  /** The active memtable of `drange` the last write picked (the rest of its batch goes there too). */
  current(drange: number): Memtable {
    return this.lists[drange][this.picked[drange]];
  }

  /** The memtables that may hold `key`, newest first (but see mixed). */
  forKey(key: Uint8Array): readonly Memtable[] {
    return this.lists[this.drangeOf(key)];
  }

  /** The memtables of `drange`, newest first (but see mixed). */
  list(drange: number): readonly Memtable[] {
    return this.lists[drange];
  }

  /** Whether `drange`'s list holds twins, whose versions of a key interleave: a get reads them all. */
  mixed(drange: number): boolean {
    return this.mixedLists[drange];
  }

  /** Whether `m` is a duplicated Drange's copy (a key's newest version in it may not be the newest below a snapshot). */
  isTwin(m: Memtable): boolean {
    return this.twins.has(m);
  }

  /** Every memtable not yet flushed, oldest first. */
  all(): Memtable[] {
    const seen = new Set<Memtable>(this.immutables);
    for (const a of this.activeAll()) seen.add(a);
    return [...seen].sort(this.byAge);
  }

  activeAll(): Memtable[] {
    return this.lists.flatMap((l, d) => l.slice(0, this.copies[d]));
  }

  isActive(m: Memtable): boolean {
    return this.drangeOfActive(m) >= 0;
  }

  /** The Drange `m` is an active memtable of, or −1. */
  drangeOfActive(m: Memtable): number {
    return this.lists.findIndex((l, d) => l.indexOf(m) >= 0 && l.indexOf(m) < this.copies[d]);
  }

  /** A Drange with an active memtable that has entries and holds at least `bytes`, or −1. */
  fullDrange(bytes: number): number {
    return this.lists.findIndex((l, d) => l.slice(0, this.copies[d]).some((m) => m.entries > 0 && m.approximateBytes >= bytes));
  }

  /** `fresh` (as many as it has copies) become the active memtables of `drange`; the old ones wait for their flush. */
  retire(drange: number, fresh: readonly Memtable[]): void {
    if (fresh.length !== this.copies[drange]) throw new Error(`retire: Drange ${drange} has ${this.copies[drange]} active memtables, not ${fresh.length}`);
    this.immutables.push(...this.actives(drange));
    this.lists[drange].unshift(...this.generation(fresh));
    this.relisted();
  }

  /**
   * New Drange boundaries. A new Drange whose interval is an old one's keeps that Drange's
   * memtables, its active ones included, unless `fresh` gives it new active memtables (as many
   * as its copies); any other gets its from `fresh`. An old memtable joins the list of every
   * new Drange whose interval meets the interval of a Drange it was listed in (it may hold keys
   * of any of them), so a get still meets every version of its key newest first, and flushes
   * still take the older memtables first (a paper generation id's job). Old active memtables
   * not kept active become immutable.
   */
  reorganize(bounds: Buffer[], fresh: ReadonlyMap<number, readonly Memtable[]>): void {
    const old = this.bounds;
    const same = this.unchanged(bounds);
    const lists: Memtable[][] = [];
    const copies: number[] = [];
    const keptActive = new Set<Memtable>();
    for (let j = 0; j <= bounds.length; j++) {
      const [lo, hi] = [bounds[j - 1], bounds[j]];
      const members = new Set<Memtable>();
      for (let i = 0; i <= old.length; i++) {
        if (below(lo, old[i]) && below(old[i - 1], hi)) for (const m of this.lists[i]) members.add(m);
      }
      const given = fresh.get(j);
      const actives = given ? this.generation(given) : same[j] >= 0 ? this.actives(same[j]) : undefined;
      if (!actives || actives.length === 0) throw new Error(`reorganize: new Drange ${j} needs a fresh memtable`);
      if (!given) for (const a of actives) keptActive.add(a);
      for (const a of actives) members.delete(a);
      lists.push([...actives, ...[...members].sort(this.byAge).reverse()]);
      copies.push(actives.length);
    }
    for (const a of this.activeAll()) if (!keptActive.has(a) && !this.immutables.includes(a)) this.immutables.push(a);
    this.bounds = bounds;
    this.lists = lists;
    this.copies = copies;
    this.picked = copies.map(() => 0);
    this.relisted();
  }

  /**
   * For each Drange of `bounds` (with `copies` active memtables each, if given), the Drange of
   * today's whose interval and copies are the same, or −1.
   */
  unchanged(bounds: readonly Buffer[], copies?: readonly number[]): number[] {
    const old = this.bounds;
    return Array.from({ length: bounds.length + 1 }, (_, j) => {
      for (let i = 0; i <= old.length; i++) {
        if (equal(bounds[j - 1], old[i - 1]) && equal(bounds[j], old[i]) && (!copies || copies[j] === this.copies[i])) return i;
      }
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
   * Memtables in `flushing` (groups being flushed already) are left out: those groups are
   * installed first. Empty when nothing waits.
   */
  nextFlush(withParked = false, flushing: ReadonlySet<Memtable> = NONE): Memtable[] {
    const head = this.immutables.find((m) => (withParked || !this.parked.has(m)) && !flushing.has(m));
    if (!head) return [];
    const group = new Set<Memtable>([head]);
    const todo = [head];
    const add = (m: Memtable): void => {
      if (!group.has(m) && !flushing.has(m)) {
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

  /** Whether `m` shares a log record with a memtable not in `group`. */
  linkedOutside(m: Memtable, group: readonly Memtable[]): boolean {
    return [...(this.links.get(m) ?? [])].some((l) => !group.includes(l));
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
    const actives = this.actives(drange);
    this.lists[drange] = [...actives, ...[...this.lists[drange].slice(actives.length), merged].sort(this.byAge).reverse()];
    this.parked.add(merged);
    this.relisted();
  }

  /** Forgets memtables whose contents are now in tables. REQUIRES: none is active. */
  flushed(group: readonly Memtable[]): void {
    const gone = new Set(group);
    for (const m of group) {
      this.parked.delete(m);
      this.age.delete(m);
      this.twins.delete(m);
    }
    this.immutables = this.immutables.filter((m) => !gone.has(m));
    this.lists = this.lists.map((l) => l.filter((m) => !gone.has(m)));
    for (const m of group) {
      for (const l of this.links.get(m) ?? []) this.links.get(l)?.delete(m);
      this.links.delete(m);
    }
    this.relisted();
  }

  /**
   * `group` (a nextFlush group, oldest first) cut into what becomes one table each: a
   * generation of twins together (their versions interleave: as separate tables, an older
   * table could hold a newer version), any other memtable alone.
   */
  flushUnits(group: readonly Memtable[]): Memtable[][] {
    const units: Memtable[][] = [];
    const unitOf = new Map<readonly Memtable[], Memtable[]>();
    for (const m of group) {
      const t = this.twins.get(m);
      if (!t) units.push([m]);
      else if (unitOf.has(t)) unitOf.get(t)!.push(m);
      else {
        const u = [m];
        unitOf.set(t, u);
        units.push(u);
      }
    }
    return units;
  }
}

/** lo < hi for interval ends: undefined is −∞ as a low end, +∞ as a high end. */
function below(lo: Buffer | undefined, hi: Buffer | undefined): boolean {
  return lo === undefined || hi === undefined || Buffer.compare(lo, hi) < 0;
}

function equal(a: Buffer | undefined, b: Buffer | undefined): boolean {
  return a === undefined ? b === undefined : b !== undefined && a.equals(b);
}
