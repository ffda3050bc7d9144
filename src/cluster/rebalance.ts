/**
 * Which ranges to move so that no LTC's load stands above the mean by more than a threshold
 * (`nova rebalance`; doc/decisions/rebalancing.md). Pure: the coordinator gives it each range's
 * LTC and load, and the live LTCs.
 *
 * A range weighs its load plus one, so idle ranges spread by count (a new LTC takes ranges
 * even before there is load to measure). Greedy: take the heaviest LTC above the mean by the
 * threshold that has a range whose move to the lightest LTC lowers the heavier of the two; move
 * the one that brings them closest; again, until none has. A range moves at most once per plan.
 */

export interface RangeLoadOf {
  range: number;
  ltc: number;
  /** Requests per second, plus bytes written per second over 1 KiB (a 1 KiB write counts twice). */
  load: number;
}

export interface PlannedMove {
  range: number;
  from: number;
  to: number;
}

/** A range's load from its rates: requests/s plus bytes written/s per KiB. */
export function loadOf(requestsPerSec: number, bytesWrittenPerSec: number): number {
  return requestsPerSec + bytesWrittenPerSec / 1024;
}

/**
 * Moves that bring every live LTC (`ltcs`) within `thresholdPct` percent above the mean load.
 * Ranges on LTCs not in `ltcs` stay where they are (failover's, not rebalancing's).
 */
export function planRebalance(ranges: readonly RangeLoadOf[], ltcs: readonly number[], thresholdPct: number): PlannedMove[] {
  if (ltcs.length < 2) return [];
  const live = new Set(ltcs);
  const mine = ranges.filter((r) => live.has(r.ltc)).map((r) => ({ ...r, weight: Math.max(0, r.load) + 1 }));
  const total = new Map(ltcs.map((l) => [l, 0]));
  for (const r of mine) total.set(r.ltc, total.get(r.ltc)! + r.weight);
  const mean = [...total.values()].reduce((a, b) => a + b, 0) / ltcs.length;
  const moved = new Set<number>();
  const plan: PlannedMove[] = [];
  for (let step = 0; step < mine.length; step++) {
    const order = [...total].sort((a, b) => b[1] - a[1] || a[0] - b[0]);
    const [lo, loLoad] = order[order.length - 1];
    let move: { r: (typeof mine)[number]; hi: number; hiLoad: number } | undefined;
    // The heaviest LTC above the threshold that has a range worth moving (a hot range alone may not be).
    for (const [hi, hiLoad] of order) {
      if (hiLoad <= mean * (1 + thresholdPct / 100) || move) break;
      for (const r of mine) {
        if (r.ltc !== hi || moved.has(r.range) || r.weight >= hiLoad - loLoad) continue;
        const gap = Math.abs(hiLoad - r.weight - (loLoad + r.weight));
        const bestGap = move ? Math.abs(hiLoad - move.r.weight - (loLoad + move.r.weight)) : Infinity;
        if (gap < bestGap || (gap === bestGap && r.range < move!.r.range)) move = { r, hi, hiLoad };
      }
    }
    if (!move) break;
    const { r, hi, hiLoad } = move;
    plan.push({ range: r.range, from: hi, to: lo });
    moved.add(r.range);
    r.ltc = lo;
    total.set(hi, hiLoad - r.weight);
    total.set(lo, loLoad + r.weight);
  }
  return plan;
}
