/**
 * A flush's table: what an immutable memtable holds that a reader may still see, in order,
 * as one SSTable — each key's newest version, plus the older versions live snapshots need
 * (the compaction rule, merge-rule.ts, with tombstones kept: older versions may lie below).
 * LevelDB writes every version and leaves the rest to compaction; RocksDB drops them here,
 * as we do: every byte not flushed is a byte no L0→L1 merge reads or writes
 * (doc/decisions/flush-drops-versions.md).
 *
 * Pure; the engine runs it on the flush worker (worker-pool.ts) when there is one, else in its
 * thread in slices (flushSlices) that give the event loop turns.
 */
import { TableBuilder, type BuiltTable } from '../sstable/table-builder.js';
import { compactionEntries } from './merge-rule.js';
import type { Memtable } from '../memtable/memtable.js';

/**
 * Bytes of entries added between turns given back to the event loop when a flush builds in
 * the engine's thread: a table built in one go holds every write arriving meanwhile.
 */
const SLICE_BYTES = 1 << 20;

/**
 * Builds the table, pausing (yielding) after every SLICE_BYTES of entries; returns it.
 * `smallestSnapshot`: the oldest sequence a reader may read at (merge-rule.ts MergeRule).
 */
function* build(mem: Memtable, expectedSize: number, smallestSnapshot: number): Generator<void, BuiltTable> {
  const builder = new TableBuilder({ expectedSize });
  let sinceYield = 0;
  // Not the bottom of the tree: a tombstone stays, it may hide a version in a table.
  for (const [k, v] of compactionEntries(mem.iterator(), { smallestSnapshot, isBottomFor: () => false })) {
    builder.add(k, v);
    sinceYield += k.length + v.length;
    if (sinceYield >= SLICE_BYTES) {
      sinceYield = 0;
      yield; // the memtable is immutable: its iterator stays valid
    }
  }
  return builder.finish();
}

export function buildTable(mem: Memtable, expectedSize: number, smallestSnapshot: number): BuiltTable {
  const steps = build(mem, expectedSize, smallestSnapshot);
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/** buildTable, giving the event loop a turn between slices. */
export async function buildTableInSlices(mem: Memtable, expectedSize: number, smallestSnapshot: number): Promise<BuiltTable> {
  const steps = build(mem, expectedSize, smallestSnapshot);
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    await new Promise((resolve) => setImmediate(resolve));
  }
}
