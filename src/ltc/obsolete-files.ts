/**
 * Files a crash or a recovery left behind that the MANIFEST does not name. Functions over
 * EngineState.
 */
import { EngineState } from './engine-state.js';

/**
 * Deletes files the new MANIFEST does not name: replayed logs, and what a crash left
 * behind — a table whose edit never landed (its entries are still in logs or in the
 * compaction's inputs), a log never bound (no write reached it). Other files are left
 * alone. (Installing the new MANIFEST removed the old ones.)
 */
export async function removeObsoleteFiles(db: EngineState): Promise<void> {
  const liveTables = new Set(db.levels.flat().map((t) => t.meta.file));
  for (const file of await db.store.listTables()) if (!liveTables.has(file)) await db.store.deleteTable(file);
  for (const file of await db.env.logs.list()) if (!db.logs.has(file)) await db.env.logs.remove(file);
}

/**
 * Deletes tables numbered below `below` that the tree does not name: an open's second sweep.
 * Numbers below what the MANIFEST had reserved at recovery are never given out again, so such
 * a table is an orphan however late it was written (a compaction its last owner gave up).
 */
export async function sweepOrphanTables(db: EngineState, below: number): Promise<void> {
  if (db.stopping || db.closed || db.failed) return;
  const live = new Set(db.levels.flat().map((t) => t.meta.file));
  for (const file of await db.store.listTables()) {
    if (db.stopping || db.closed) return;
    if (file < below && !live.has(file) && !db.levels.flat().some((t) => t.meta.file === file)) await db.store.deleteTable(file);
  }
}
