/** Peak resident memory per process around a run (bench/ycsb/peak-memory.ts) and its line in the run table. */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { overBudgetNotes, peaks, resetPeaks } from '../../bench/ycsb/peak-memory.js';
import { peakLine, peaksLine } from '../../bench/ycsb/report.js';

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
      const p = [{ pid: child.pid!, name: 'child', budget: 512 * MiB }];
      expect(peaks(p)![0]!.bytes).toBeGreaterThan(160 * MiB);
      expect(peaks(p)![0]!.budget).toBe(512 * MiB); // carried to the report
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

  it('sets each peak against its budget and names every process over it', () => {
    const run = { peakRss: [{ name: 'ltc-1', bytes: 600 * MiB, budget: 2048 * MiB }, { name: 'stoc-1', bytes: 300 * MiB, budget: 256 * MiB }, { name: 'coordinator', bytes: 80 * MiB }] };
    expect(peakLine(run)).toBe('600 of 2048 (ltc-1); 980 in all; over budget: stoc-1 300 of 256');
    expect(peaksLine(run)).toBe('ltc-1 600 of 2048, stoc-1 300 of 256 (over), coordinator 80');
    // The session says what over budget means, and how to bound a whole process, only when a run was.
    expect(overBudgetNotes([{}, run]).join(' ')).toMatch(/^Over budget: .*--cap ltc\.memory=SIZE/);
    expect(overBudgetNotes([{}, { peakRss: [run.peakRss[0], run.peakRss[2]] }])).toEqual([]);
  });
});
