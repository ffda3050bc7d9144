/**
 * A compaction's merge as a pure function of bytes: input tables in, output tables out, cut at
 * the target size between user keys. The engine runs it on a worker thread (worker-pool.ts) so
 * that a merge never blocks the event loop that serves reads and writes; the same function
 * runs in-thread when no worker is available. A StoC running offloaded compactions would run
 * this same function.
 */
import { TRAILER_BYTES, ValueType, compareBytes, makeInternalKey } from '../common/internal-key.js';
import { MergingIterator, type InternalIterator } from '../sstable/merging-iterator.js';
import { TableBuilder } from '../sstable/table-builder.js';
import { TableReader } from '../sstable/table-reader.js';
import { compactionEntries } from './merge-rule.js';
import { overlapping } from './picker.js';
import type { TableMeta } from '../log/version-edit.js';

export interface MergeJob {
  /** Input tables' bytes (any order: the merge orders by internal key), and names for errors. */
  tables: Uint8Array[];
  names: string[];
  /** Versions above this sequence are kept as they are (merge-rule.ts MergeRule). */
  smallestSnapshot: number;
  /** Key ranges of the tables in levels deeper than the output: a tombstone may go only where none overlaps. */
  deeper: Array<{ smallest: Uint8Array; largest: Uint8Array }>;
  /** Cut an output once it reaches this many bytes, at the next user key. */
  targetBytes: number;
  /**
   * User keys, ascending, that no output may span: one starts at the first key >= each (the
   * range's Drange bounds, so an L1 table never joins two Dranges' compactions).
   */
  cuts?: Uint8Array[];
  /**
   * Memory to build outputs in (TableOptions.memory), one output each, taken from the front
   * as outputs start; those too small for an output are skipped. What is not used stays here.
   */
  spares?: ArrayBuffer[];
  /**
   * The inputs' memory is the merge's own: once the merge has read an input to its end,
   * a later output may be built in its ArrayBuffer (before any spare), and its entry in
   * `tables` is replaced by an empty view. Never for tables a reader may still use (the LTC's).
   */
  consumeInputs?: boolean;
}

export interface MergedTable {
  bytes: Buffer;
  entries: number;
  smallest: Buffer;
  largest: Buffer;
}

const asBuffer = (b: Uint8Array): Buffer => (Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength));

/** Yields each output table as soon as it is cut (so a caller can store it while the merge goes on). */
export function* mergeTables(job: MergeJob): Generator<MergedTable> {
  const readers = job.tables.map((t, i) => new TableReader(asBuffer(t), job.names[i]));
  const deeper = job.deeper.map((d) => ({ smallest: asBuffer(d.smallest), largest: asBuffer(d.largest) }) as TableMeta);
  const inputs = readers.map((r) => r.iterator());
  const memory = outputMemory(job, inputs);
  const entries = compactionEntries(new MergingIterator(inputs), {
    smallestSnapshot: job.smallestSnapshot,
    isBottomFor: (user) => {
      const k = makeInternalKey(user, 0, ValueType.Delete);
      return overlapping(deeper, k, k).length === 0;
    },
  });
  let builder: TableBuilder | undefined;
  // The last user key, copied into a reused buffer (a merge passes millions of keys).
  let lastUser = Buffer.allocUnsafe(256);
  let lastUserLen = -1;
  const cuts = job.cuts ?? [];
  let cut = 0; // cuts[cut] is the first cut above the current output's keys
  for (const [k, v] of entries) {
    const userLen = k.length - TRAILER_BYTES;
    const newUser = lastUserLen < 0 || compareBytes(lastUser, 0, lastUserLen, k, 0, userLen) !== 0;
    let crossed = false;
    while (newUser && cut < cuts.length && compareBytes(cuts[cut], 0, cuts[cut].length, k, 0, userLen) <= 0) {
      cut++;
      crossed = true;
    }
    if (builder && newUser && (crossed || builder.estimatedSize >= job.targetBytes)) {
      yield finish(builder);
      builder = undefined;
    }
    builder ??= new TableBuilder({ expectedSize: outputBytes(job.targetBytes), memory: memory() });
    builder.add(k, v);
    if (newUser) {
      if (userLen > lastUser.length) lastUser = Buffer.allocUnsafe(userLen * 2);
      k.copy(lastUser, 0, 0, userLen);
      lastUserLen = userLen;
    }
  }
  if (builder) yield finish(builder);
}

/**
 * Room for an output table cut at `target` bytes of blocks: its last entry, index and filter
 * come on top. Too little room makes every output grow by doubling and then be copied again
 * to shed the slack (doc/decisions/merge-output-size.md).
 */
export function outputBytes(target: number): number {
  return target + Math.ceil(target / 32) + 256 * 1024;
}

/**
 * Where the next output is built: an input read to its end (with consumeInputs), else a spare,
 * else new memory (undefined). An input read to its end is never read again, and nothing
 * keeps views of it: compactionEntries and mergeTables copy the keys they keep, and an
 * entry is added to the output before the merge moves on (the input it came from is the
 * current one, still valid).
 */
function outputMemory(job: MergeJob, inputs: InternalIterator[]): () => ArrayBuffer | undefined {
  const need = outputBytes(job.targetBytes);
  return () => {
    if (job.consumeInputs) {
      const i = inputs.findIndex((it, j) => !it.valid && job.tables[j].byteOffset === 0 && job.tables[j].buffer.byteLength >= need);
      if (i >= 0) {
        const memory = job.tables[i].buffer as ArrayBuffer;
        job.tables[i] = SPENT; // the output's now: not the input's to give back (leftovers)
        return memory;
      }
    }
    const i = job.spares?.findIndex((ab) => ab.byteLength >= need) ?? -1;
    return i < 0 ? undefined : job.spares!.splice(i, 1)[0];
  };
}

const SPENT = new Uint8Array(0);

/**
 * The memory a finished merge leaves that is not in an output: the inputs it did not build
 * outputs in, and the spares it did not use — each ArrayBuffer once. Only for a job whose
 * memory is its own (consumeInputs, or spares); call it once the merge is over.
 */
export function leftovers(job: MergeJob): ArrayBuffer[] {
  const all = new Set<ArrayBuffer>();
  for (const t of job.tables) if (t.buffer instanceof ArrayBuffer && t.byteLength > 0) all.add(t.buffer);
  for (const ab of job.spares ?? []) if (ab.byteLength > 0) all.add(ab);
  return [...all];
}

function finish(builder: TableBuilder): MergedTable {
  const built = builder.finish();
  return { bytes: built.bytes, entries: built.entries, smallest: built.smallest!, largest: built.largest! };
}
