/**
 * The LTC's memory governor (src/ltc/memory-governor.ts): what its ranges get under a memory
 * limit, tick by tick, from the samples a process would give.
 */
import { describe, expect, it } from 'vitest';
import { GC_WAIT_TICKS, MemoryGovernor, RUNTIME_WINDOW, marginOf, type MemoryDecision, type MemorySample } from '../../src/ltc/memory-governor.js';

const MiB = 2 ** 20;
const GiB = 2 ** 30;
const HIGH = GiB - marginOf(GiB); // what the governor keeps the process under, at a 1 GiB limit
const sample = (s: Partial<MemorySample>): MemorySample => ({ budget: 2 * GiB, rss: 0, counted: 0, free: 0, majorGcs: 0, limit: GiB, ...s });

describe('the memory governor', () => {
  it('gives the budget without a limit, or with one the budget and runtime fit under', () => {
    const g = new MemoryGovernor();
    expect(g.tick(sample({ limit: undefined, rss: 3 * GiB }))).toEqual({ share: 2 * GiB, trim: false });
    expect(g.tick(sample({ limit: 4 * GiB, rss: 300 * MiB, counted: 100 * MiB })).share).toBe(2 * GiB);
    expect(g.share(2 * GiB)).toBe(2 * GiB);
  });

  it('gives the ranges, ahead of need, the limit less its margin and the runtime seen (the heap\'s free memory left out), and no less than nothing', () => {
    const cases: Array<{ limit: number; rss: number; counted: number; free: number; share: number }> = [
      { limit: GiB, rss: 400 * MiB, counted: 100 * MiB, free: 0, share: HIGH - 300 * MiB },
      { limit: GiB, rss: 400 * MiB, counted: 100 * MiB, free: 50 * MiB, share: HIGH - 250 * MiB },
      { limit: 256 * MiB, rss: 400 * MiB, counted: 0, free: 0, share: 0 },
    ];
    for (const c of cases) expect(new MemoryGovernor().tick(sample(c)).share, JSON.stringify(c)).toBe(c.share);
    expect(marginOf(GiB)).toBe(128 * MiB);
    expect(marginOf(256 * MiB)).toBe(128 * MiB);
  });

  it('after a shrink, waits for a major collection, then has the heap trimmed, then samples again', () => {
    const g = new MemoryGovernor();
    const first = g.tick(sample({ rss: 800 * MiB, counted: 500 * MiB, majorGcs: 4 })).share;
    expect(first).toBe(HIGH - 300 * MiB);
    // The cache let 100 MiB go, still resident until collected: no sample, so not 400 MiB of runtime.
    expect(g.tick(sample({ rss: 800 * MiB, counted: 400 * MiB, majorGcs: 4 }))).toEqual({ share: first, trim: false });
    expect(g.tick(sample({ rss: 800 * MiB, counted: 400 * MiB, free: 100 * MiB, majorGcs: 5 }))).toEqual({ share: first, trim: true });
    expect(g.tick(sample({ rss: 700 * MiB, counted: 400 * MiB, majorGcs: 5 }))).toEqual({ share: first, trim: false });
    expect(g.runtime).toBe(300 * MiB);
  });

  it('lowers the ranges while the process stays above the limit less its margin (waiting or not), and raises them again once it is well below', () => {
    const g = new MemoryGovernor();
    const excess = GiB - HIGH + Math.floor(GiB / 50); // over the mark by the margin, and a step
    // 100 MiB of runtime seen, but the process sits at the limit: freed memory it cannot hand back.
    let d = g.tick(sample({ rss: GiB, counted: 700 * MiB, free: 224 * MiB, majorGcs: 0 }));
    expect(d).toEqual({ share: 700 * MiB - excess, trim: false }); // what the ranges hold, less the excess
    // Still above while it waits for the collection: lower again; collected: trim.
    d = g.tick(sample({ rss: GiB, counted: 700 * MiB - excess, majorGcs: 1 }));
    expect(d).toEqual({ share: 700 * MiB - 2 * excess, trim: true });
    // The trim handed pages back: well below, so the ranges grow again, a quarter of the room at a time.
    d = g.tick(sample({ rss: 500 * MiB, counted: 700 * MiB - 2 * excess, majorGcs: 1 }));
    expect(d).toEqual({ share: 700 * MiB - 2 * excess + Math.floor((HIGH - 500 * MiB) / 4), trim: false });
  });

  it('stops waiting for a major collection after GC_WAIT_TICKS ticks, and trims then', () => {
    const g = new MemoryGovernor();
    g.tick(sample({ rss: 800 * MiB, counted: 500 * MiB, majorGcs: 7 })); // a shrink from the budget
    for (let t = 1; t < GC_WAIT_TICKS; t++) expect(g.tick(sample({ rss: 800 * MiB, counted: 400 * MiB, majorGcs: 7 })).trim, `tick ${t}`).toBe(false);
    expect(g.tick(sample({ rss: 800 * MiB, counted: 400 * MiB, majorGcs: 7 })).trim).toBe(true);
  });

  it('trims after a shrink is collected, then again only for memory freed since and at most once per major collection, and counts what it handed back as gone', () => {
    const g = new MemoryGovernor();
    const at = (rss: number, free: number, majorGcs: number): MemoryDecision => g.tick(sample({ rss, counted: 0, free, majorGcs, budget: 64 * MiB }));
    expect(at(950 * MiB, 200 * MiB, 3)).toEqual({ share: 0, trim: false }); // above the mark: the ranges give up all they have
    expect(at(950 * MiB, 200 * MiB, 4).trim).toBe(true); // collected
    // The trimmed pages are still in malloc's bins: the runtime is what is left beside them, not 750 − 200.
    expect(at(750 * MiB, 200 * MiB, 4).trim).toBe(false);
    expect(g.runtime).toBe(750 * MiB);
    expect(at(950 * MiB, 300 * MiB, 4).trim).toBe(false); // 100 MiB freed since, but no collection since the last trim
    expect(at(950 * MiB, 300 * MiB, 5).trim).toBe(true);
  });

  it('moves the ranges only by 1% of the limit or more, but always gives the budget back; a limit that appears takes effect at once', () => {
    const g = new MemoryGovernor();
    expect(g.tick(sample({ limit: undefined })).share).toBe(2 * GiB);
    expect(g.tick(sample({ rss: 300 * MiB, counted: 100 * MiB })).share).toBe(HIGH - 200 * MiB); // the limit appeared
    // 5 MiB more runtime: under 1% of the limit, no change.
    expect(g.tick(sample({ rss: 305 * MiB, counted: 100 * MiB, majorGcs: 1 })).share).toBe(HIGH - 200 * MiB);
    // A small budget fits: given whole, however little it moved.
    expect(g.tick(sample({ rss: 305 * MiB, counted: 100 * MiB, majorGcs: 2, budget: HIGH - 206 * MiB })).share).toBe(HIGH - 206 * MiB);
  });

  it('forgets a burst once it has passed out of its window, and gives the budget back when the limit goes', () => {
    const g = new MemoryGovernor();
    g.tick(sample({ rss: 700 * MiB, counted: 100 * MiB, majorGcs: 0 })); // a burst: 600 MiB of runtime
    expect(g.share(2 * GiB)).toBe(HIGH - 600 * MiB);
    let share = 0;
    for (let t = 1; t <= RUNTIME_WINDOW + 20; t++) share = g.tick(sample({ rss: 400 * MiB, counted: 100 * MiB, majorGcs: t })).share;
    expect(share).toBe(HIGH - 300 * MiB);
    expect(g.tick(sample({ limit: undefined })).share).toBe(2 * GiB);
  });
});
