/** bench/ycsb/quiet.ts: a run starts once the machine's CPUs are idle, or at the cap. */
import { describe, expect, it } from 'vitest';
import { awaitQuiet, parseProcStat, readProcStat, type CpuReader } from '../../bench/ycsb/quiet.js';

/** A reader of a 2-CPU machine whose successive samples are `busy` shares of 100 jiffies each. */
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
      return { busy: used, total, cpus: 2 };
    },
    reads: () => n,
  };
}

describe('awaitQuiet', () => {
  it('returns once a sample is under a quarter of a CPU busy, reporting the busy ones in CPUs', async () => {
    const f = fake([0.9, 0.5, 0.1, 0.9]); // 1.8, 1.0, then 0.2 CPUs of 2
    const seen: number[] = [];
    const q = await awaitQuiet({ maxMs: 10_000, sampleMs: 1, read: f.read, onBusy: (c) => seen.push(c) });
    expect(q).toMatchObject({ quiet: true, measured: true });
    expect(seen).toEqual([1.8, 1.0]);
    expect(f.reads()).toBe(4);
  });

  it('gives up at the cap on a machine that stays busy, reporting the last busy sample too', async () => {
    const f = fake([1]);
    let last = 0;
    const q = await awaitQuiet({ maxMs: 30, sampleMs: 5, read: f.read, onBusy: (_c, ms) => { last = ms; } });
    expect(q).toMatchObject({ quiet: false, measured: true });
    expect(q.waitedMs).toBeGreaterThanOrEqual(30);
    expect(last).toBe(q.waitedMs);
  });

  it('does not wait when told not to, or where CPU use cannot be read, and says it did not measure', async () => {
    const f = fake([1]);
    expect(await awaitQuiet({ maxMs: 0, read: f.read })).toEqual({ waitedMs: 0, quiet: false, measured: false });
    expect(f.reads()).toBe(0);
    expect(await awaitQuiet({ maxMs: 1000, read: () => undefined })).toEqual({ waitedMs: 0, quiet: false, measured: false });
  });

  it('reads /proc/stat: busy is all but idle and steal; guest time is not counted twice; CPUs counted', () => {
    const text = [
      'cpu  100 20 30 1000 40 5 6 7 50 3', // user nice system idle iowait irq softirq steal guest guest_nice
      'cpu0 50 10 15 500 20 2 3 3 25 1',
      'cpu1 50 10 15 500 20 3 3 4 25 2',
      'intr 12345',
      'ctxt 678',
    ].join('\n');
    // total = 100+20+30+1000+40+5+6+7 = 1208; busy = total - idle (1000) - steal (7) = 201 (iowait 40 is busy).
    expect(parseProcStat(text)).toEqual({ busy: 201, total: 1208, cpus: 2 });
    expect(parseProcStat('intr 1\n')).toBeUndefined();
    expect(parseProcStat('cpu  1 2 x 4 5 6 7 8\n')).toBeUndefined();
    const here = readProcStat();
    expect(here).toBeDefined(); // Linux is what the suite runs on
    expect(here!.total).toBeGreaterThan(here!.busy);
    expect(here!.cpus).toBeGreaterThanOrEqual(1);
  });
});
