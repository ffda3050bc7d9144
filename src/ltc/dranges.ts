/**
 * Dranges (DESIGN.md §4): a range's key space cut into intervals so that each has its own
 * active memtable. `bounds` are the α−1 split user keys in ascending order; Drange i holds
 * the keys k with bounds[i−1] <= k < bounds[i] (the first and last are open-ended).
 *
 * Pure functions. Boundaries come from a sample of the keys written first; they do not yet
 * follow the load (Tranges, minor and major moves).
 */
import { compareBytes } from '../common/internal-key.js';

/** The Drange of `key`: the number of bounds <= key. */
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
