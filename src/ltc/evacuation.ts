/**
 * Taking a range's files off StoCs that are leaving the cluster (`nova stoc remove`): its
 * memtables get new logs, its tables with a fragment there are stored again elsewhere, and its
 * MANIFEST moves to a new file, all on StoCs that take new files. With a store that keeps
 * copies, a table's copies there are made again elsewhere under its own number (repair.ts);
 * without, the table is stored again under a new one (L0 by merging it into L1). The same steps
 * repair what a StoC removed as dead held: a table with another copy of each piece is made
 * whole from those copies; one whose piece had its every copy there cannot be read, and leaves
 * the tree, named (EngineState.loseTable). Functions over EngineState.
 */
import { NovaError } from '../common/errors.js';
import { tableLost } from '../compaction/fragments.js';
import { emptyEdit, type TableMeta } from '../log/version-edit.js';
import type { EngineState } from './engine-state.js';
import { installTables, rollManifest } from './version-set.js';
import { mergeAllL0, placeCopies, storeAgain, tableBytes } from './repair.js';

/** What an evacuation did. */
export interface EvacuationReport {
  /** Tables stored again elsewhere, and their bytes; L0 tables merged into L1 to leave. */
  tablesCopied: number;
  bytesCopied: number;
  l0Merged: number;
  /** Tables lost with a dead StoC since the engine opened (EngineState.loseTable). */
  lost: string[];
}

/**
 * One step of taking the tables with a fragment on a StoC of `from` off it (the caller holds
 * the compaction loop's place for the step, and lets compactions run between steps): lost
 * ones leave the tree; else L0, if one of its tables is there, is merged into L1 (L0 is
 * ordered by file number, so a copy under a new number would pass newer tables); else one
 * table of a sorted level is copied under a new number. Adds what it did to `report`; false
 * once no table is left there.
 */
export async function evacuateStep(db: EngineState, from: ReadonlySet<number>, report: EvacuationReport): Promise<boolean> {
  if (db.failed) throw db.failed;
  const on = (t: TableMeta): boolean => t.fragments.some((f) => from.has(f.stoc));
  const lost = (t: TableMeta): boolean => !!db.env.isLost && tableLost(t.fragments, db.env.isLost);
  const gone = db.levels.flat().filter((t) => lost(t.meta));
  if (gone.length > 0) {
    const edit = emptyEdit();
    for (const t of gone) {
      edit.removed.push({ level: t.meta.level, file: t.meta.file });
      db.loseTable(t.meta);
    }
    const files = new Set(gone.map((t) => t.meta.file));
    await installTables(db, edit, 0, [], files);
    db.lookup?.compacted(files);
    const mems = db.memtables.all().filter((m) => m.entries > 0);
    db.lookup?.refreshed(db.levels[0].length === 0, mems.length > 0 ? Math.min(...mems.map((m) => m.id)) : undefined);
    return true;
  }
  // A store that keeps copies moves them, each table under its own number (repair.ts), so L0
  // keeps its order and no merge is needed.
  if (db.store.repairTable) {
    for (let level = 0; level < db.levels.length; level++) {
      const t = db.levels[level].find((x) => on(x.meta));
      if (!t) continue;
      const done = await db.store.repairTable(t.meta.file, t.meta.fragments, () => tableBytes(db, t), from);
      if (done === 'rewrite') {
        // Cut for more StoCs than are left: stored anew, L0 by merging it into L1 (its order).
        if (level === 0) return mergeL0(db, report);
        await storeAgain(db, level, t);
        report.tablesCopied++;
        report.bytesCopied += t.meta.size;
        return true;
      }
      if (!done) throw new NovaError('UNAVAILABLE', `table ${t.meta.file} could not leave StoC ${[...from].join(', ')}: no StoC could take its copies`);
      await placeCopies(db, level, t, done.fragments);
      await Promise.all([...from].map((s) => db.store.removeCopy?.(t.meta.file, s)));
      report.tablesCopied++;
      report.bytesCopied += done.bytes;
      return true;
    }
    return false;
  }
  if (db.levels[0].some((t) => on(t.meta))) return mergeL0(db, report);
  for (let level = 1; level < db.levels.length; level++) {
    const t = db.levels[level].find((x) => on(x.meta));
    if (!t) continue;
    await storeAgain(db, level, t);
    report.tablesCopied++;
    report.bytesCopied += t.meta.size;
    return true;
  }
  return false;
}

/**
 * Moves the MANIFEST to a new file, on StoCs that take new files (in the MANIFEST chain);
 * UNAVAILABLE if it could not (too few StoCs answered): the current one goes on meanwhile.
 */
export async function moveManifest(db: EngineState): Promise<void> {
  const run = db.manifestChain.then(() => rollManifest(db, 'drain'));
  db.manifestChain = run.then(() => undefined, (err: unknown) => { db.manifestFailure ??= err as Error; });
  if (!await run) throw new NovaError('UNAVAILABLE', 'the MANIFEST could not move to StoCs that take new files (too few answered); the current one goes on');
}

/** Merges all of L0 into L1, counted in `report`. */
async function mergeL0(db: EngineState, report: EvacuationReport): Promise<boolean> {
  report.l0Merged += await mergeAllL0(db);
  return true;
}
