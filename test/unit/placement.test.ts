/**
 * Placement policies: which StoCs a table's fragments go to.
 */
import { describe, expect, it } from 'vitest';
import { leastLoaded, place, placeMany, sample } from '../../src/cluster/placement.js';
import { rng } from '../helpers/rng.js';

describe('placement', () => {
  it('power-of-d keeps the least loaded of 2ρ sampled StoCs', async () => {
    const loads: Record<number, number> = { 1: 5, 2: 0, 3: 9, 4: 1, 5: 7, 6: 3 };
    const r = rng(3);
    for (let i = 0; i < 50; i++) {
      const picked = await place('power-of-d', [1, 2, 3, 4, 5, 6], 2, { next: 0 }, async (id) => loads[id], r);
      expect(new Set(picked).size).toBe(2);
      // Both picks are among the least loaded of what was sampled: never the most loaded StoC
      // when the sample has four.
      expect(picked).not.toContain(3);
    }
    // A StoC whose load cannot be read is a last resort.
    const dead = await place('power-of-d', [1, 2], 1, { next: 0 }, async (id) => { if (id === 2) throw new Error('gone'); return 9; }, r);
    expect(dead).toEqual([1]);
  });

  it('round-robin cycles; too few StoCs is a clear error', async () => {
    const s = { next: 0 };
    const got = [];
    for (let i = 0; i < 4; i++) got.push(await place('round-robin', [1, 2, 3], 1, s, async () => 0));
    expect(got).toEqual([[1], [2], [3], [1]]);
    await expect(place('random', [1], 2, s, async () => 0)).rejects.toThrow(/needs 2 StoC/);
    expect(new Set(sample([1, 2, 3, 4], 4, rng(1))).size).toBe(4);
  });

  it('placeMany spreads a compaction\'s outputs by one reading of the queues; round-robin goes on where it was', () => {
    const depth = new Map([[1, 0], [2, 0], [3, 0], [4, 40]]);
    const placed = placeMany('power-of-d', [1, 2, 3, 4], 2, { width: 2, copies: 1 }, 30, { next: 0 }, depth, rng(5));
    const count = new Map<number, number>();
    for (const p of placed) {
      expect(new Set(p).size).toBe(2);
      for (const id of p) count.set(id, (count.get(id) ?? 0) + 1);
    }
    // 60 places: the three idle StoCs share them evenly (each place weighs the ones before it);
    // StoC 4, 40 requests deep, gets none.
    expect(count.get(4)).toBeUndefined();
    for (const id of [1, 2, 3]) expect(Math.abs(count.get(id)! - 20)).toBeLessThanOrEqual(2);
    const s = { next: 1 };
    expect(placeMany('round-robin', [1, 2, 3], 2, { width: 2, copies: 1 }, 2, s, depth)).toEqual([[2, 3], [1, 2]]);
    expect(s.next).toBe(2);
    expect(() => placeMany('random', [1], 2, { width: 2, copies: 1 }, 1, s, depth)).toThrow(/needs 2 StoC/);
    // ρ = 1 and a metadata StoC: the data fragments (the first of each) spread evenly; the
    // metadata ones do not count.
    const data = new Map<number, number>();
    for (const [d] of placeMany('power-of-d', [1, 2, 3], 1, { width: 2, copies: 1 }, 30, { next: 0 }, new Map([[1, 0], [2, 0], [3, 0]]), rng(9))) data.set(d, (data.get(d) ?? 0) + 1);
    expect([...data.values()]).toEqual([10, 10, 10]);
  });

  it('a compaction goes to the StoC with the fewest jobs, then the shortest queue, then the fewest pending bytes; ties take turns', () => {
    const l = (compactionsRunning: number, queueDepth: number, pending: number) => ({ compactionsRunning, queueDepth, pendingReadBytes: pending, pendingWriteBytes: 0 });
    expect(leastLoaded([1, 2, 3], new Map([[1, l(2, 0, 0)], [2, l(1, 9, 9)], [3, l(1, 9, 10)]]), 0)).toBe(2);
    expect(leastLoaded([1, 2, 3], new Map([[1, l(0, 3, 0)], [2, l(0, 2, 99)], [3, l(0, 2, 5)]]), 0)).toBe(3);
    const even = new Map([[1, l(0, 0, 0)], [2, l(0, 0, 0)], [3, l(0, 0, 0)]]);
    expect([0, 1, 2, 3].map((turn) => leastLoaded([1, 2, 3], even, turn))).toEqual([1, 2, 3, 1]);
    // A StoC that did not report is chosen only when none did.
    expect(leastLoaded([1, 2], new Map([[2, l(5, 5, 5)]]), 0)).toBe(2);
    expect(leastLoaded([1, 2], new Map(), 1)).toBe(2);
    expect(() => leastLoaded([], new Map(), 0)).toThrow(/no StoC is up/);
  });
});
