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
