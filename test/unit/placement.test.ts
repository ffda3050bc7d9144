/**
 * Placement policies: which StoCs a table's fragments go to.
 */
import { describe, expect, it } from 'vitest';
import { place, sample } from '../../src/cluster/placement.js';
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
});

