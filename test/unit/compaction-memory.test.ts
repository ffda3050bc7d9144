/**
 * A StoC's compaction jobs reusing memory (compaction-executor.ts, buffer-pool.ts): jobs run
 * side by side against a pool that poisons every buffer it keeps, as if the next job had
 * already written over it. Memory given back while still in use would then change what a job
 * stores; every stored output must still be the plain merge's bytes — on the merge worker and
 * in this thread.
 */
import { describe, expect, it, vi } from 'vitest';
import { BufferPool } from '../../src/common/buffer-pool.js';
import { NovaError } from '../../src/common/errors.js';
import { ValueType, makeInternalKey } from '../../src/common/internal-key.js';
import { mergeTables } from '../../src/compaction/merge.js';
import { mergeWorkerAvailable } from '../../src/compaction/worker-pool.js';
import { runCompaction, type CompactArgs, type ExecutorEnv } from '../../src/stoc/compaction-executor.js';
import { tableFileName } from '../../src/stoc/stoc-protocol.js';
import { TableBuilder } from '../../src/sstable/table-builder.js';
import { table } from '../fixtures/tables.js';

const flags = vi.hoisted(() => ({ worker: true }));
vi.mock('../../src/compaction/worker-pool.js', async (importOriginal) => {
  const orig = await importOriginal<typeof import('../../src/compaction/worker-pool.js')>();
  return { ...orig, mergeWorkerAvailable: () => flags.worker && orig.mergeWorkerAvailable() };
});

/** A pool that overwrites whatever it keeps. */
class PoisoningPool extends BufferPool {
  override give(ab: ArrayBufferLike): void {
    const before = this.bytes;
    super.give(ab);
    if (this.bytes > before) new Uint8Array(ab).fill(0xee);
  }
}

/** One StoC's files in memory; writes copy, as a disk would, and yield between jobs. */
function fakeStoc(memory: BufferPool): { env: ExecutorEnv; files: Map<string, Buffer> } {
  const files = new Map<string, Buffer>();
  const turn = () => new Promise((r) => setImmediate(r));
  return {
    files,
    env: {
      id: 1, memory, log: () => undefined,
      readLocal: async (name, into) => {
        await turn();
        const f = files.get(name);
        if (!f) throw new NovaError('CORRUPTION', `${name} does not exist`);
        f.copy(into, 0, 0, into.length);
      },
      sizeLocal: async (name) => files.get(name)?.length,
      createLocal: async (name, bytes) => {
        await turn();
        files.set(name, Buffer.from(bytes));
      },
      removeLocal: async (name) => { files.delete(name); },
      peer: () => Promise.reject(new NovaError('UNAVAILABLE', 'no other StoC here')),
    },
  };
}

function span(from: number, to: number, seq: number): Buffer {
  const b = new TableBuilder({});
  for (let i = from; i < to; i++) b.add(makeInternalKey(Buffer.from(`k${String(i).padStart(5, '0')}`), seq, ValueType.Put), Buffer.alloc(200, i));
  return b.finish().bytes;
}

describe('compaction jobs reusing memory', () => {
  for (const worker of [true, false]) {
    it(`store the merge's very bytes with their memory poisoned once given back (${worker ? 'on the merge worker' : 'in this thread'})`, async () => {
      flags.worker = worker;
      expect(mergeWorkerAvailable()).toBe(worker);
      const pool = new PoisoningPool(64 << 20, 64 * 1024);
      const { env, files } = fakeStoc(pool);
      // One input read to its end halfway (outputs are built in it), two that last to the end.
      const inputs = [span(0, 3000, 10), table(6000, 2, 20), table(6000, 3, 30, (i) => i % 2 === 0)];
      inputs.forEach((b, i) => files.set(tableFileName(1, i + 1), b));
      const targetBytes = 64 * 1024;
      const expected = [...mergeTables({ tables: inputs, names: ['1', '2', '3'], smallestSnapshot: 1000, deeper: [], targetBytes })]
        .map((t) => t.bytes);
      const job = (firstFile: number): CompactArgs => ({
        range: 1, stocs: [[1, Buffer.alloc(1)]], smallestSnapshot: 1000, deeper: [], targetBytes, firstFile, maxFiles: 100, scatter: 1,
        inputs: inputs.map((b, i) => ({ file: i + 1, fragments: [{ stoc: 1, offset: 0, size: b.length }] })),
      });
      for (let round = 0; round < 3; round++) {
        const firsts = [1000, 2000, 3000].map((f) => f + round * 10_000);
        const results = await Promise.all(firsts.map((f) => runCompaction(env, job(f), () => false)));
        for (const [j, outputs] of results.entries()) {
          expect(outputs.length).toBe(expected.length);
          outputs.forEach((o, i) => {
            expect(o.file).toBe(firsts[j] + i);
            expect(files.get(tableFileName(1, o.file))!.equals(expected[i])).toBe(true);
          });
        }
      }
      expect(pool.counters.reused).toBeGreaterThan(10);
    });
  }
});
