/**
 * Repair of a range's table copies (doc/decisions/table-redundancy.md): a copy on a StoC that
 * left the cluster, one a read or the scrub found damaged, or one a table was written without
 * (too few StoCs up then) is made again from a good copy by the store (BlockStore.repairTable),
 * and the table's new places replace its old ones in the MANIFEST under the same file number,
 * so L0's order and every index that names the table stay as they are. Functions over
 * EngineState, run a table at a time in the compaction loop's place (Engine.repair).
 */
import { emptyEdit, type Fragment } from '../log/version-edit.js';
import type { EngineState, LiveTable } from './engine-state.js';
import { installTables, logEdit } from './version-set.js';
import { runCompaction } from './compaction-job.js';
import { jobFor } from '../compaction/picker.js';
import { readerOf } from './read-path.js';
import type { BuiltTable } from '../sstable/table-builder.js';

export interface RepairReport {
  /** Tables whose copies were made whole again, and the copies written. */
  tablesRepaired: number;
  copiesMade: number;
  /** Tables whose repair failed this time (no good copy could be read, no StoC took one). */
  failed: number;
}

/** Table `t`'s bytes: held, or read from its copies. */
export async function tableBytes(db: EngineState, t: LiveTable): Promise<Buffer> {
  return t.reader.ownBytes() ?? db.store.readTable(t.meta.file, t.meta.fragments);
}

/**
 * Records table `t` (of `level`) at its new places `fragments`, under its own number: one
 * MANIFEST edit. The caller holds the compaction loop's place, so the table is still in the tree.
 */
export async function placeCopies(db: EngineState, level: number, t: LiveTable, fragments: Fragment[]): Promise<void> {
  const meta = { ...t.meta, fragments };
  const edit = emptyEdit();
  edit.removed.push({ level, file: meta.file });
  edit.added.push(meta);
  edit.nextFile = db.nextFile;
  edit.lastSequence = db.lastSequence;
  await logEdit(db, edit);
  t.meta = meta;
}

/**
 * Merges all of L0 into L1 (a copy of an L0 table under a new number would pass newer ones),
 * with `instead` in place of some tables' bytes (runCompaction); the tables merged.
 */
export async function mergeAllL0(db: EngineState, instead?: ReadonlyMap<number, Buffer>): Promise<number> {
  const l0 = db.levels[0].map((t) => t.meta);
  await runCompaction(db, jobFor(db.levels.map((l) => l.map((t) => t.meta)), 0, l0), instead);
  return l0.length;
}

/**
 * Stores table `t` of sorted level `level` again, under a new number, where new tables go:
 * as it is, or as `instead` (what nova repair salvaged of it: within its keys, so the level
 * stays sorted).
 */
export async function storeAgain(db: EngineState, level: number, t: LiveTable, instead?: BuiltTable): Promise<void> {
  const bytes = instead?.bytes ?? await tableBytes(db, t);
  const file = db.nextFile++;
  const fragments = await db.store.writeTable(file, bytes);
  const edit = emptyEdit();
  edit.removed.push({ level, file: t.meta.file });
  const meta = instead
    ? { ...t.meta, file, fragments, size: bytes.length, entries: instead.entries, smallest: instead.smallest!, largest: instead.largest! }
    : { ...t.meta, file, fragments };
  await installTables(db, edit, level, [{ meta, reader: readerOf(db, bytes, file) }], new Set([t.meta.file]));
  await db.store.deleteTable(t.meta.file);
}

/** Tables of the tree whose store says they need repair. */
export function tablesNeedingRepair(db: EngineState): number {
  const needs = db.store.needsRepair?.bind(db.store);
  if (!needs) return 0;
  return db.levels.reduce((n, level) => n + level.filter((t) => needs(t.meta.file, t.meta.fragments)).length, 0);
}

/**
 * Repairs one table that needs it and was not `tried` yet this pass; false once none is left.
 * A table whose repair fails is warned of and left for the next pass.
 */
export async function repairStep(db: EngineState, tried: Set<number>, report: RepairReport): Promise<boolean> {
  if (db.failed) throw db.failed;
  const store = db.store;
  if (!store.needsRepair || !store.repairTable) return false;
  for (let level = 0; level < db.levels.length; level++) {
    const t = db.levels[level].find((x) => !tried.has(x.meta.file) && store.needsRepair!(x.meta.file, x.meta.fragments));
    if (!t) continue;
    tried.add(t.meta.file);
    try {
      const meta0 = t.meta;
      const done = await store.repairTable(meta0.file, meta0.fragments, () => tableBytes(db, t));
      if (done === 'rewrite') {
        // Stored anew: L0 by merging it into L1 (a new number would pass newer L0 tables).
        if (level === 0) await mergeAllL0(db);
        else await storeAgain(db, level, t);
        report.tablesRepaired++;
        return true;
      }
      if (!done) return true;
      await placeCopies(db, level, t, done.fragments);
      report.tablesRepaired++;
      report.copiesMade += done.written;
    } catch (err) {
      report.failed++;
      db.warn(`repair of table ${t.meta.file} of level ${level}: ${(err as Error).message}; tried again later`);
    }
    return true;
  }
  return false;
}
