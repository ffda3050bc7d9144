/**
 * Files a crash or a recovery left behind that the MANIFEST does not name. Functions over
 * EngineState.
 */
import { EngineState } from './engine-state.js';

/**
 * Deletes the files an open found (EngineState.leftovers) that the tree does not name:
 * replayed logs, and what a crash left behind — a table whose edit never landed (its entries
 * are still in logs or in the compaction's inputs), a log never bound (no write reached it).
 * Runs after the open, while the range serves: no number it deletes is given out again.
 * Other files are left alone. (Installing the new MANIFEST removed the old ones.)
 */
export async function removeObsoleteFiles(db: EngineState): Promise<void> {
  const found = db.leftovers;
  db.leftovers = undefined;
  if (!found) return;
  const named = (file: number): boolean => db.levels.some((level) => level.some((t) => t.meta.file === file));
  for (const file of found.tables) {
    if (db.stopping || db.closed || db.failed) return;
    if (!named(file)) await db.store.deleteTable(file);
  }
  for (const file of found.logs) {
    if (db.stopping || db.closed || db.failed) return;
    if (!db.logs.has(file)) await db.env.logs.remove(file);
  }
}

/**
 * Deletes tables numbered below `below` that the tree does not name: those below what the
 * MANIFEST had reserved at recovery, never given out again, so such a table is an orphan
 * however late it was written (a compaction its last owner gave up).
 */
export async function sweepOrphanTables(db: EngineState, below: number): Promise<void> {
  for (const file of await db.store.listTables()) {
    if (db.stopping || db.closed || db.failed) return;
    // The tree may have changed while we awaited: checked against it as it is now.
    if (file < below && !db.levels.some((level) => level.some((t) => t.meta.file === file))) await db.store.deleteTable(file);
  }
}
