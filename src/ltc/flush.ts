/**
 * A flush's table: an immutable memtable's entries, in order, as one SSTable. Pure; the
 * engine runs it on the flush worker (merge-pool.ts) when there is one, else in its thread
 * in slices (flushSlices) that give the event loop turns.
 */
import { TableBuilder, type BuiltTable } from '../sstable/table-builder.js';
import type { Memtable } from './memtable.js';

/**
 * Bytes of entries added between turns given back to the event loop when a flush builds in
 * the engine's thread: a 16 MiB table built in one go held every write arriving meanwhile
 * (nova's p99 update latency was ~70 ms, bench/README.md).
 */
const SLICE_BYTES = 1 << 20;

/** Builds the table, pausing (yielding) after every SLICE_BYTES of entries; returns it. */
function* build(mem: Memtable, expectedSize: number): Generator<void, BuiltTable> {
  const builder = new TableBuilder({ expectedSize });
  const it = mem.iterator();
  let sinceYield = 0;
  for (it.first(); it.valid; it.next()) {
    builder.add(it.key, it.value);
    sinceYield += it.key.length + it.value.length;
    if (sinceYield >= SLICE_BYTES) {
      sinceYield = 0;
      yield; // the memtable is immutable: its iterator stays valid
    }
  }
  return builder.finish();
}

export function buildTable(mem: Memtable, expectedSize: number): BuiltTable {
  const steps = build(mem, expectedSize);
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/** buildTable, giving the event loop a turn between slices. */
export async function buildTableInSlices(mem: Memtable, expectedSize: number): Promise<BuiltTable> {
  const steps = build(mem, expectedSize);
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    await new Promise((resolve) => setImmediate(resolve));
  }
}
