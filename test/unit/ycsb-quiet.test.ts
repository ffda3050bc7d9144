/** bench/ycsb/quiet.ts: a run starts once the machine is idle, or at the cap. */
import { describe, expect, it } from 'vitest';
import { awaitQuiet, readProcStat, type CpuReader } from '../../bench/ycsb/quiet.js';

/** A reader whose successive samples are `busy` shares of 100 jiffies each. */
function fake(busy: number[]): { read: CpuReader; reads: () => number } {
  let n = 0;
  let total = 0;
  let used = 0;
  return {
    read: () => {
      if (n > 0) {
        const b = busy[Math.min(n - 1, busy.length - 1)];
        total += 100;
        used += b * 100;
      }
      n++;
      return { busy: used, total };
    },
    reads: () => n,
  };
}

describe('awaitQuiet', () => {
  it('returns once one sample is under the threshold, reporting the busy ones', async () => {
    const f = fake([0.9, 0.5, 0.05, 0.9]);
    const seen: number[] = [];
    const q = await awaitQuiet({ maxMs: 10_000, sampleMs: 1, read: f.read, onBusy: (b) => seen.push(b) });
    expect(q.quiet).toBe(true);
    expect(seen).toEqual([0.9, 0.5]);
    expect(f.reads()).toBe(4);
  });

  it('gives up at the cap on a machine that stays busy', async () => {
    const f = fake([1]);
    const q = await awaitQuiet({ maxMs: 30, sampleMs: 5, read: f.read });
    expect(q.quiet).toBe(false);
    expect(q.waitedMs).toBeGreaterThanOrEqual(30);
  });

  it('does not wait when told not to, or where CPU use cannot be read', async () => {
    const f = fake([1]);
    expect(await awaitQuiet({ maxMs: 0, read: f.read })).toEqual({ waitedMs: 0, quiet: false });
    expect(f.reads()).toBe(0);
    expect(await awaitQuiet({ maxMs: 1000, read: () => undefined })).toEqual({ waitedMs: 0, quiet: false });
  });

  it('reads this machine\'s /proc/stat', () => {
    const s = readProcStat();
    expect(s).toBeDefined(); // Linux is what the suite runs on
    expect(s!.total).toBeGreaterThan(s!.busy);
  });
});
