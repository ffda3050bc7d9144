/**
 * A flush: immutable memtables built into L0 tables (on the flush worker when there is one),
 * stored, and recorded with their logs released in one MANIFEST edit; only then are the logs
 * deleted. Functions over EngineState.
 */
import { NovaError } from '../common/errors.js';
import { TRAILER_BYTES, type ValueType, sequenceOf, typeOf } from '../common/internal-key.js';
import { buildTableInSlices } from '../compaction/flush.js';
import { buildOnWorker } from '../compaction/worker-pool.js';
import { emptyEdit, type TableMeta } from '../log/version-edit.js';
import { Memtable } from '../memtable/memtable.js';
import type { BuiltTable } from '../sstable/table-builder.js';
import { EngineState, type LiveTable } from './engine-state.js';
import { readerOf } from './read-path.js';
import { installTables } from './version-set.js';

/** A flush group's tables, built and stored but not yet in the tree. */
export interface WrittenGroup {
  added: LiveTable[];
  /** Each memtable's table (none: it held nothing). */
  tableOf: Map<Memtable, number>;
}

/**
 * Writes each memtable of `group` (oldest first) as an L0 table, then records the tables
 * and releases the memtables' logs in one MANIFEST edit; only then are the logs deleted.
 */
export async function flushGroup(db: EngineState, group: Memtable[]): Promise<void> {
  await installGroup(db, group, await writeGroup(db, group));
}

/** Builds and stores the tables of `group`; the tree does not change. */
export async function writeGroup(db: EngineState, group: Memtable[]): Promise<WrittenGroup> {
  const added: LiveTable[] = [];
  const tableOf = new Map<Memtable, number>();
  // Twins hold versions of the same keys in any order: they make one table.
  for (const unit of db.memtables.flushUnits(group)) {
    const m = unit.length === 1 ? unit[0] : combined(unit);
    if (m.entries > 0) {
      const t = await writeL0(db, m);
      added.push(t);
      for (const u of unit) tableOf.set(u, t.meta.file);
    }
  }
  return { added, tableOf };
}

/** Records the tables of `group` written by writeGroup and releases its memtables' logs (one edit); then deletes the logs. */
export async function installGroup(db: EngineState, group: Memtable[], { added, tableOf }: WrittenGroup): Promise<void> {
  const edit = emptyEdit();
  for (const m of group) edit.releasedLogs.push(m.id);
  // The released logs' records named client writes: the table keeps what they said.
  edit.sessions = db.sessions.encode();
  await installTables(db, edit, 0, added);
  db.memtables.flushed(group);
  for (const m of group) db.lookup?.flushed(m.id, tableOf.get(m));
  db.counts.flushes++;
  for (const m of group) await db.env.logs.remove(m.id);
}

/** On the flush worker; if the worker died or failed (not the data), here instead. */
export async function buildFlushTable(db: EngineState, mem: Memtable, size: number, smallestSnapshot: number): Promise<BuiltTable> {
  try {
    return await buildOnWorker(mem.frozen(), size, smallestSnapshot);
  } catch (err) {
    const code = (err as NovaError).code;
    if (code !== 'CLOSED' && code !== 'REMOTE') throw err;
    db.warn(`flush of memtable ${mem.id}: ${(err as Error).message}; building it on this thread`);
    return buildTableInSlices(mem, size, smallestSnapshot);
  }
}

/**
 * Builds and stores the L0 table of `mem`; the caller records it. Versions no reader can see
 * are left out (flush.ts): a snapshot taken later reads at a sequence above all of `mem`.
 */
export async function writeL0(db: EngineState, mem: Memtable): Promise<LiveTable> {
  const file = db.nextFile++;
  const size = mem.approximateBytes + 4096;
  const oldest = db.smallestSnapshot();
  const built = db.options.mergeInWorker ? await buildFlushTable(db, mem, size, oldest) : await buildTableInSlices(mem, size, oldest);
  const fragments = await db.store.writeTable(file, built.bytes);
  const meta: TableMeta = {
    level: 0, file, size: built.bytes.length, entries: built.entries,
    smallest: built.smallest!, largest: built.largest!, fragments,
  };
  return { meta, reader: readerOf(db, built.bytes, file), scansAtAdd: db.scans };
}

/** One memtable holding every entry of `group` (they hold versions with distinct sequences). */
function combined(group: readonly Memtable[]): Memtable {
  const out = new Memtable(0, group.reduce((n, m) => n + m.approximateBytes, 0) + 4096);
  for (const m of group) {
    const it = m.iterator();
    for (it.first(); it.valid; it.next()) {
      const k = it.key;
      out.add(sequenceOf(k), typeOf(k) as ValueType, k.subarray(0, k.length - TRAILER_BYTES), it.value);
    }
  }
  return out;
}
