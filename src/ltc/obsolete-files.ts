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
  await sweepOrphanTables(db, Infinity);
  for (const file of await db.env.logs.list()) if (!db.logs.has(file)) await db.env.logs.remove(file);
}

/**
 * Deletes tables numbered below `below` that the tree does not name. An open sweeps every
 * number (removeObsoleteFiles), and later those below what the MANIFEST had reserved at
 * recovery: never given out again, so such a table is an orphan however late it was written
 * (a compaction its last owner gave up).
 */
export async function sweepOrphanTables(db: EngineState, below: number): Promise<void> {
  for (const file of await db.store.listTables()) {
    if (db.stopping || db.closed || db.failed) return;
    // The tree may have changed while we awaited: checked against it as it is now.
    if (file < below && !db.levels.some((level) => level.some((t) => t.meta.file === file))) await db.store.deleteTable(file);
  }
}
