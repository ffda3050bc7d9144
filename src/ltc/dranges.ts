/**
 * Dranges and Tranges (DESIGN.md §4; paper §4.4.1), as pure functions. A range's key space is
 * cut into Tranges, each counting the writes it receives; runs of neighbouring Tranges are the
 * Dranges, each with its own active memtable. `bounds` below are split user keys, ascending:
 * interval i holds the keys k with bounds[i−1] <= k < bounds[i] (the first and last are
 * open-ended).
 *
 * The engine counts writes per Trange and, when a memtable retires, asks planReorganization
 * whether the Dranges still share the writes about evenly: a minor reorganization hands edge
 * Tranges of a hot Drange to a neighbour; a major one cuts Dranges and Tranges again from a
 * sample of recent writes (recut).
 */
import { compareBytes } from '../common/internal-key.js';

/** The interval of `key`: the number of bounds <= key. */
export function drangeOf(bounds: readonly Uint8Array[], key: Uint8Array): number {
  let lo = 0;
  let hi = bounds.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const b = bounds[mid];
    if (compareBytes(b, 0, b.length, key, 0, key.length) <= 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Up to `count − 1` split keys that cut `sorted` (ascending user keys, duplicates allowed)
 * into `count` runs of about equal length. Fewer when there are fewer distinct keys.
 */
export function boundsFromSample(sorted: readonly Uint8Array[], count: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 1; i < count; i++) {
    const k = sorted[Math.floor((i * sorted.length) / count)];
    if (!k) break;
    const last = out[out.length - 1];
    // A bound equal to the one before it (or to the smallest key) would make an empty Drange.
    if (last && compareBytes(last, 0, last.length, k, 0, k.length) >= 0) continue;
    if (compareBytes(sorted[0], 0, sorted[0].length, k, 0, k.length) >= 0) continue;
    out.push(Buffer.from(k));
  }
  return out;
}

/**
 * A range's write layout: its Tranges' split keys, and which of them are also Drange bounds
 * (indexes into `tranges`, ascending). Drange d holds Tranges first(d) .. first(d + 1) − 1.
 * `copies`: active memtables per Drange (absent: one each). A Drange of one key written more
 * than a Drange's share is duplicated: it has several, and its writes are spread over them.
 */
export interface Layout {
  tranges: Buffer[];
  dranges: number[];
  copies?: number[];
}

/** Active memtables per Drange of `layout`. */
export function copiesOf(layout: Layout): number[] {
  return layout.copies ?? new Array(layout.dranges.length + 1).fill(1);
}

/** The Drange bounds of a Drange holding `key` alone: [key, key + 0x00). */
export function pointAfter(key: Uint8Array): Buffer {
  return Buffer.concat([key, Buffer.alloc(1)]);
}

/** Writes per active memtable: each Drange's load spread evenly over its copies, a slot per copy. */
export function slotLoads(layout: Layout, writes: readonly number[]): number[] {
  const copies = copiesOf(layout);
  return drangeLoads(layout, writes).flatMap((l, d) => new Array(copies[d]).fill(l / copies[d]));
}

/** The Drange bounds of `layout`, as keys. */
export function drangeBounds(layout: Layout): Buffer[] {
  return layout.dranges.map((i) => layout.tranges[i]);
}

/** The first Trange of each Drange, and one past the last Trange. */
function firsts(layout: Layout): number[] {
  return [0, ...layout.dranges.map((i) => i + 1), layout.tranges.length + 1];
}

/** Writes per Drange, from writes per Trange. */
export function drangeLoads(layout: Layout, writes: readonly number[]): number[] {
  const f = firsts(layout);
  const out: number[] = [];
  for (let d = 0; d + 1 < f.length; d++) {
    let n = 0;
    for (let t = f[d]; t < f[d + 1]; t++) n += writes[t] ?? 0;
    out.push(n);
  }
  return out;
}

/**
 * The paper's load imbalance: the standard deviation of the shares of writes of `loads` (0:
 * even), one per Drange, or per slot (slotLoads) where Dranges are duplicated.
 */
export function imbalance(loads: readonly number[]): number {
  const total = loads.reduce((a, b) => a + b, 0);
  if (total === 0 || loads.length < 2) return 0;
  const mean = 1 / loads.length;
  return Math.sqrt(loads.reduce((s, l) => s + (l / total - mean) ** 2, 0) / loads.length);
}

export interface ReorgOptions {
  /** A Drange this far above its fair share (1/θ) of writes is hot: a minor reorganization. */
  hot: number;
  /** Dranges this far off their fair share, either way, are off... */
  off: number;
  /** ...and more than this fraction of them off makes a major reorganization. */
  offShare: number;
  /** Writes counted since the last reorganization before any is considered. */
  minWrites: number;
}

/** The paper's: minor at 20% above the fair share; major when over 30% of Dranges are 20% off. */
export const REORG: ReorgOptions = { hot: 0.2, off: 0.2, offShare: 0.3, minWrites: 10_000 };

export type Reorganization =
  | { kind: 'none' }
  /** New Drange bounds (indexes into the same Tranges), and how many Tranges moved. */
  | { kind: 'minor'; dranges: number[]; moved: number }
  | { kind: 'major' };

/**
 * Whether the Dranges of `layout` need reorganizing, given the writes per Trange since the
 * last reorganization. θ counts a duplicated Drange once per copy, and its load is spread over
 * its copies. Minor: while the hottest Drange is `hot` above its fair share, hand one of its
 * edge Tranges to the neighbour on that side if that lowers the larger of the two loads (each
 * Drange keeps one Trange at least; a duplicated Drange, one key, neither gives nor takes).
 * Major: too many Dranges are off (more than one, and more than offShare of them), or the hot
 * Drange cannot be cooled by moving Tranges (one Trange holds too much).
 */
export function planReorganization(layout: Layout, writes: readonly number[], o: ReorgOptions = REORG): Reorganization {
  const copies = copiesOf(layout);
  const slots = slotLoads(layout, writes);
  const theta = slots.length;
  const total = slots.reduce((a, b) => a + b, 0);
  if (theta < 2 || total < o.minWrites) return { kind: 'none' };
  const fair = total / theta;
  const off = slots.filter((l) => Math.abs(l - fair) > o.off * fair).length;
  const hotLimit = fair * (1 + o.hot);
  // A lone Drange off is the hot one (the others share its excess): minor first.
  if (off > Math.max(1, o.offShare * theta)) return { kind: 'major' };
  if (Math.max(...slots) <= hotLimit) return { kind: 'none' };
  const bounds = [...layout.dranges];
  const perCopy = (b: number[]): number[] => drangeLoads({ tranges: layout.tranges, dranges: b }, writes).map((l, d) => l / copies[d]);
  let moved = 0;
  for (let step = 0; step <= layout.tranges.length; step++) {
    const f = [0, ...bounds.map((i) => i + 1), layout.tranges.length + 1];
    const load = perCopy(bounds);
    const d = load.indexOf(Math.max(...load));
    if (load[d] <= hotLimit) break;
    if (f[d + 1] - f[d] < 2 || copies[d] > 1) break; // one Trange left: moving cannot cool it
    // To the left: the Drange's first Trange joins d − 1. To the right: its last joins d + 1.
    const left = d > 0 && copies[d - 1] === 1 ? Math.max(load[d - 1] + writes[f[d]], load[d] - writes[f[d]]) : Infinity;
    const right = d < load.length - 1 && copies[d + 1] === 1 ? Math.max(load[d + 1] + writes[f[d + 1] - 1], load[d] - writes[f[d + 1] - 1]) : Infinity;
    if (Math.min(left, right) >= load[d]) break;
    if (left <= right) bounds[d - 1]++;
    else bounds[d]--;
    moved++;
  }
  if (Math.max(...perCopy(bounds)) > hotLimit) return { kind: 'major' };
  return { kind: 'minor', dranges: bounds, moved };
}

/**
 * Dranges and Tranges cut again from `sample` (recent written user keys, ascending, repeats
 * kept: a key written often appears often): θ active memtables' worth of Dranges of about
 * equal shares of the sample, each cut into up to γ Tranges the same way. A key with a
 * Drange's share or more gets a Drange of its own, [key, key + 0x00), with a copy (an active
 * memtable) per Drange's share it has; the other Dranges share the rest. Fewer Dranges where
 * the sample has too few distinct keys.
 */
export function recut(sample: readonly Buffer[], theta: number, gamma: number): Layout {
  if (sample.length === 0) return { tranges: [], dranges: [] };
  // The hot keys: each with copies ≈ its share × θ, at least one.
  const hot = new Map<string, number>();
  for (let i = 0; i < sample.length;) {
    let end = i;
    while (end < sample.length && sample[end].equals(sample[i])) end++;
    const c = Math.round(((end - i) * theta) / sample.length);
    if ((end - i) * theta >= sample.length) hot.set(sample[i].toString('latin1'), Math.max(1, c));
    i = end;
  }
  const hotCopies = [...hot.values()].reduce((a, b) => a + b, 0);
  // The others' Dranges: the slots the hot keys leave, cut from the rest of the sample.
  const rest = sample.filter((k) => !hot.has(k.toString('latin1')));
  const dbounds: Buffer[] = rest.length > 0 ? boundsFromSample(rest, Math.max(1, theta - hotCopies)) : [];
  for (const h of hot.keys()) {
    const k = Buffer.from(h, 'latin1');
    dbounds.push(k, pointAfter(k));
  }
  dbounds.sort(Buffer.compare);
  // No Drange without a sampled key: a bound is kept when a key lies between it and the last kept.
  const bounds: Buffer[] = [];
  let at = 0;
  for (const b of dbounds) {
    let next = at;
    while (next < sample.length && Buffer.compare(sample[next], b) < 0) next++;
    if (next > at) bounds.push(b);
    at = next;
  }
  if (at === sample.length) bounds.pop(); // nor after the last
  // Each Drange's sampled keys [ends[d − 1], ends[d]), and its copies.
  const ends = [...bounds.map((b) => sample.findIndex((k) => Buffer.compare(k, b) >= 0)), sample.length];
  const copies = ends.map((to, d) => {
    const from = d === 0 ? 0 : ends[d - 1];
    return sample[from].equals(sample[to - 1]) ? hot.get(sample[from].toString('latin1')) ?? 1 : 1;
  });
  // Hot keys cut the others' Dranges in two: until θ memtables are active, join the two
  // neighbouring Dranges of one copy each that hold the fewest keys, else take a copy back.
  for (let total = copies.reduce((a, b) => a + b, 0); total > theta; total--) {
    let join = -1;
    for (let d = 0; d + 1 < copies.length; d++) {
      const keys = ends[d + 1] - (d === 0 ? 0 : ends[d - 1]);
      if (copies[d] === 1 && copies[d + 1] === 1 && (join < 0 || keys < ends[join + 1] - (join === 0 ? 0 : ends[join - 1]))) join = d;
    }
    if (join >= 0) {
      bounds.splice(join, 1);
      ends.splice(join, 1);
      copies.splice(join, 1);
    } else copies[copies.indexOf(Math.max(...copies))]--;
  }
  const tranges: Buffer[] = [];
  const dranges: number[] = [];
  for (let d = 0; d <= bounds.length; d++) {
    const from = d === 0 ? 0 : ends[d - 1];
    if (ends[d] > from) tranges.push(...boundsFromSample(sample.slice(from, ends[d]), gamma));
    if (bounds[d]) {
      tranges.push(bounds[d]);
      dranges.push(tranges.length - 1);
    }
  }
  return copies.some((c) => c > 1) ? { tranges, dranges, copies } : { tranges, dranges };
}

/** The layout of Drange bounds `bounds` with each Drange one Trange (a tree from before Tranges). */
export function layoutOf(bounds: Buffer[]): Layout {
  return { tranges: bounds, dranges: bounds.map((_, i) => i) };
}
