/**
 * A StoC's admission of offloaded compactions by memory (compaction-service.ts): jobs run side
 * by side only while what they hold fits the StoC's compaction memory; a job alone always runs.
 * Jobs are held running by a `track` that does not start them, so no file is touched.
 */
import { describe, expect, it } from 'vitest';
import { BufferPool } from '../../src/common/buffer-pool.js';
import { outputBytes } from '../../src/compaction/merge.js';
import { CompactionService, jobMemory, type CompactionHost } from '../../src/stoc/compaction-service.js';
import type { CompactArgs } from '../../src/stoc/compaction-executor.js';
import type { Endpoint } from '../../src/transport/endpoint.js';

const MiB = 2 ** 20;
const TARGET = 2 * MiB;

/** A job over inputs of these sizes, each in two data fragments with a copy and a parity fragment that do not add to its size. */
function job(...sizes: number[]): CompactArgs {
  return {
    range: 1, stocs: [[1, Buffer.alloc(1)], [2, Buffer.alloc(1)]], smallestSnapshot: 0, deeper: [], targetBytes: TARGET, firstFile: 100, maxFiles: 10, scatter: 2,
    inputs: sizes.map((size, i) => ({
      file: i + 1,
      fragments: [
        { stoc: 1, offset: 0, size: size / 2 }, { stoc: 2, offset: size / 2, size: size / 2 },
        { stoc: 2, offset: 0, size: size / 2 }, { stoc: 1, offset: 0, size: size / 2, parity: true },
      ],
    })),
  };
}

function service(memoryBytes: number): CompactionService {
  const host = { id: 7, stopping: false } as unknown as CompactionHost; // the jobs never start: nothing else is touched
  const s = new CompactionService(host, () => undefined, new BufferPool(0));
  s.limit = 4;
  s.memoryBytes = memoryBytes;
  return s;
}

/** Starts `args` on `s`, held running until the returned release is called; the error if refused. */
function start(s: CompactionService, args: CompactArgs): { release: () => void; done: Promise<unknown> } | Error {
  let release = (): void => undefined;
  try {
    const done = s.compact(args, { isReady: true } as unknown as Endpoint, () => new Promise((resolve) => { release = () => resolve([]); }));
    return { release, done };
  } catch (err) {
    return err as Error;
  }
}

describe('compaction admission by memory', () => {
  it("counts a job's inputs by their data fragments' extent, once each, and two outputs", () => {
    expect(jobMemory(job(8 * MiB, 4 * MiB))).toBe(12 * MiB + 2 * outputBytes(TARGET));
  });

  it('runs jobs side by side while they fit, refuses one that does not with BUSY, and takes it once memory is freed', async () => {
    const each = jobMemory(job(16 * MiB));
    const s = service(2 * each + MiB);
    const a = start(s, job(16 * MiB));
    const b = start(s, job(16 * MiB));
    expect(a).not.toBeInstanceOf(Error);
    expect(b).not.toBeInstanceOf(Error);
    expect(s.heldBytes).toBe(2 * each);
    const c = start(s, job(16 * MiB));
    expect(c).toBeInstanceOf(Error);
    expect(c).toMatchObject({ code: 'BUSY', message: expect.stringContaining('--stoc-memory') });
    expect(s.counters.compactionsRefusedForMemory).toBe(1);
    if (a instanceof Error || b instanceof Error) return;
    a.release();
    await a.done;
    expect(s.heldBytes).toBe(each);
    const d = start(s, job(16 * MiB));
    expect(d).not.toBeInstanceOf(Error);
    b.release();
    if (!(d instanceof Error)) d.release();
    await Promise.all([b.done, d instanceof Error ? undefined : d.done]);
    expect(s.heldBytes).toBe(0);
    expect(s.running).toBe(0);
  });

  it('runs a job larger than the whole budget when it is alone, and nothing beside it', async () => {
    const s = service(8 * MiB);
    const big = start(s, job(64 * MiB));
    expect(big).not.toBeInstanceOf(Error);
    expect(start(s, job(MiB))).toMatchObject({ code: 'BUSY' });
    if (big instanceof Error) return;
    big.release();
    await big.done;
    expect(s.heldBytes).toBe(0);
  });

  it('frees what a failed job held', async () => {
    const s = service(64 * MiB);
    await expect(s.compact(job(16 * MiB), { isReady: true } as unknown as Endpoint, () => Promise.reject(new Error('disk gone')))).rejects.toThrow('disk gone');
    expect(s.heldBytes).toBe(0);
    expect(s.running).toBe(0);
  });
});
