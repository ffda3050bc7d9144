import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { diskWriteBytes, writtenBetween } from '../../bench/ycsb/disk-writes.js';
import { mergeRuns, type RunResult } from '../../bench/ycsb/runner.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-io-');

describe('storage writes of the bench (/proc/PID/io)', () => {
  it('counts the bytes this process writes to a file, and nothing for a process it cannot read', () => {
    const dir = tempDir();
    const before = diskWriteBytes([process.pid]);
    expect(before).toBeTypeOf('number');
    writeFileSync(join(dir, 'f'), Buffer.alloc(4 << 20, 7));
    const written = writtenBetween(before, diskWriteBytes([process.pid]));
    expect(written).toBeGreaterThanOrEqual(4 << 20);
    expect(diskWriteBytes([process.pid, 0x7ffffff0])).toBeUndefined(); // no such process
    expect(diskWriteBytes([])).toBeUndefined();
    expect(writtenBetween(undefined, 5)).toBeUndefined();
  });

  it('merges clients of one store by the widest window, not the sum', () => {
    const run = (ops: number, diskWriteBytes?: number): RunResult => ({
      engine: 'nova', workload: 'W100', mix: { read: 0, update: 1, insert: 0, scan: 0, rmw: 0 }, dist: 'uniform', records: 1, valueSize: 1,
      scanLength: 1, concurrency: 1, sync: false, ops, seconds: 1, opsPerSec: ops, latency: {}, timeline: [], timelineP99: [], timelineMs: 1000,
      histograms: {}, errors: 0, errorSamples: [], warmedBytes: 0, diskWriteBytes,
    });
    expect(mergeRuns([run(10, 100), run(10, 120)]).diskWriteBytes).toBe(120);
    expect(mergeRuns([run(10, 100), run(10)]).diskWriteBytes).toBeUndefined();
  });
});
