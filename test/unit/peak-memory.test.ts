/** Peak resident memory per process around a run (bench/ycsb/peak-memory.ts) and its line in the run table. */
import { describe, expect, it } from 'vitest';
import { peaks, resetPeaks } from '../../bench/ycsb/peak-memory.js';
import { peakLine } from '../../bench/ycsb/report.js';

describe('peak memory', () => {
  it('reads a process\'s peak resident memory, which a reset brings back to what it holds now', () => {
    const me = [{ pid: process.pid, name: 'this' }];
    const held: Buffer[] = [];
    for (let i = 0; i < 16; i++) held.push(Buffer.alloc(4 * 2 ** 20, 1)); // 64 MiB touched
    const high = peaks(me)![0]!.bytes;
    expect(high).toBeGreaterThan(64 * 2 ** 20);
    held.length = 0;
    expect(resetPeaks(me)).toBe(true);
    expect(peaks(me)![0]!.bytes).toBeLessThanOrEqual(high);
    expect(peaks([{ pid: 2 ** 22 + 7, name: 'gone' }])).toBeUndefined();
    expect(resetPeaks([{ pid: 2 ** 22 + 7, name: 'gone' }])).toBe(false);
  });

  it('names the largest process and sums them', () => {
    expect(peakLine({})).toBe('');
    expect(peakLine({ peakRss: [{ name: 'leveldb', bytes: 300 * 2 ** 20 }] })).toBe('300');
    expect(peakLine({ peakRss: [{ name: 'ltc-1', bytes: 600 * 2 ** 20 }, { name: 'stoc-1', bytes: 200 * 2 ** 20 }] })).toBe('600 (ltc-1); 800 in all');
  });
});
