/** Peak resident memory per process around a run (bench/ycsb/peak-memory.ts) and its line in the run table. */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { peaks, resetPeaks } from '../../bench/ycsb/peak-memory.js';
import { peakLine } from '../../bench/ycsb/report.js';

const MiB = 2 ** 20;

/** A child that touches 160 MiB, then on "free" lets it go (large buffers are unmapped). */
const CHILD = `
const held = []; for (let i = 0; i < 40; i++) held.push(Buffer.alloc(4 << 20, 1));
process.stdout.write('held\\n');
process.stdin.once('data', () => { held.length = 0; global.gc(); setTimeout(() => process.stdout.write('freed\\n'), 100); });
`;

describe('peak memory', () => {
  it("reads a process's peak resident memory, and a reset brings it down to what the process holds now", async () => {
    const child = spawn(process.execPath, ['--expose-gc', '-e', CHILD], { stdio: ['pipe', 'pipe', 'inherit'] });
    try {
      const lines = child.stdout!.setEncoding('utf8');
      const next = async (): Promise<string> => String((await once(lines, 'data'))[0]).trim();
      expect(await next()).toBe('held');
      const p = [{ pid: child.pid!, name: 'child' }];
      expect(peaks(p)![0]!.bytes).toBeGreaterThan(160 * MiB);
      child.stdin!.write('free\n');
      expect(await next()).toBe('freed');
      expect(peaks(p)![0]!.bytes).toBeGreaterThan(160 * MiB); // still the peak
      expect(resetPeaks(p)).toBe(true);
      expect(peaks(p)![0]!.bytes).toBeLessThan(100 * MiB); // what it holds now
    } finally {
      child.kill();
    }
    expect(peaks([{ pid: 2 ** 22 + 7, name: 'gone' }])).toBeUndefined();
    expect(resetPeaks([{ pid: 2 ** 22 + 7, name: 'gone' }])).toBe(false);
  });

  it('names the largest process and sums them', () => {
    expect(peakLine({})).toBe('');
    expect(peakLine({ peakRss: [{ name: 'leveldb', bytes: 300 * MiB }] })).toBe('300');
    expect(peakLine({ peakRss: [{ name: 'ltc-1', bytes: 600 * MiB }, { name: 'stoc-1', bytes: 200 * MiB }] })).toBe('600 (ltc-1); 800 in all');
  });
});
