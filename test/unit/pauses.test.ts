/**
 * pauses.ts: a blocked event loop and garbage collections show in the process's figures.
 */
import { describe, expect, it } from 'vitest';
import { processPauses } from '../../src/common/pauses.js';

describe('processPauses', () => {
  it('counts a blocked event loop as its delay, and garbage collections', async () => {
    processPauses(); // starts watching
    await new Promise((r) => setTimeout(r, 1100));
    const until = Date.now() + 150;
    while (Date.now() < until) { /* the loop is blocked */ }
    let junk: unknown[] = [];
    for (let i = 0; i < 200_000; i++) junk.push({ i, s: `x${i}` });
    junk = [];
    await new Promise((r) => setTimeout(r, 1100));
    const p = processPauses();
    expect(p.loopDelayMaxMs).toBeGreaterThanOrEqual(100);
    expect(p.loopDelayP99Ms).toBeGreaterThan(0);
    expect(p.gcCount).toBeGreaterThan(0);
    expect(p.gcMs).toBeGreaterThan(0);
    expect(junk).toEqual([]);
  }, 10_000);
});
