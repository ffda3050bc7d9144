/**
 * The MANIFEST side of the tree: version edits appended in call order (none after a failed
 * append), and the MANIFEST moved to a new file that states the whole tree when it lost
 * replicas or grew too large. Functions over EngineState (whose `levels`, `nextFile` and
 * `lastSequence` are the tree the edits describe).
 */
import { compareInternalKeys } from '../common/internal-key.js';
import { LEVELS } from '../compaction/picker.js';
import { encodeEdit, type VersionEdit } from '../log/version-edit.js';
import type { LogWriter } from '../logc/log-store.js';
import { EngineState, type LiveTable } from './engine-state.js';

/** A MANIFEST that lost replicas moves to a new file at most this often (rollManifest). */
const MANIFEST_ROLL_INTERVAL_MS = 10_000;

/**
 * Records `added` (tables of `level`, stored durably) and the removal of `gone` in `edit`, with
 * the file number and sequence so far; logs it; then makes the tree so. A flush, a compaction
 * and the end of recovery all end here.
 */
export async function installTables(db: EngineState, edit: VersionEdit, level: number, added: LiveTable[], gone?: ReadonlySet<number>): Promise<void> {
  edit.added.push(...added.map((t) => t.meta));
  edit.nextFile = db.nextFile;
  edit.lastSequence = db.lastSequence;
  await logEdit(db, edit);
  if (gone) {
    for (const f of gone) db.damaged.delete(f); // left the tree: no compaction waits on it
    for (let l = 0; l < LEVELS; l++) {
      // A table that leaves the tree leaves the block cache too: its blocks would only wait
      // there to be evicted, taking the room new tables are cached in.
      for (const t of db.levels[l]) if (gone.has(t.meta.file)) t.reader.uncache();
      db.levels[l] = db.levels[l].filter((t) => !gone.has(t.meta.file));
    }
  }
  db.levels[level].push(...added); // L0: newest last
  if (level > 0) db.levels[level].sort((a, b) => compareInternalKeys(a.meta.smallest, b.meta.smallest));
  db.fitCache();
}

export async function logEdit(db: EngineState, edit: VersionEdit): Promise<void> {
  const run = db.manifestChain.then(async () => {
    // After a failed append the MANIFEST's tail is unknown (a torn record, a lost
    // fdatasync): an edit after it could be dropped by recovery along with the tear, while
    // what it allowed (deleting a compaction's inputs) has happened. So none follows.
    if (db.manifestFailure) throw db.manifestFailure;
    const record = encodeEdit(edit);
    await db.manifest.append([record], true);
    if (db.manifestBytes === 0) db.manifestBaseBytes = record.length;
    db.manifestBytes += record.length;
    db.manifestState.apply(edit);
    if (!db.manifestInstalled) return;
    if (db.manifest.degraded && Date.now() - db.lastManifestRoll >= MANIFEST_ROLL_INTERVAL_MS) await rollManifest(db, 'replicas');
    else if (db.manifestBytes >= Math.max(db.options.maxManifestBytes, 2 * db.manifestBaseBytes)) await rollManifest(db, 'size');
  });
  db.manifestChain = run.catch((err: unknown) => { db.manifestFailure ??= err as Error; });
  await run;
}

/**
 * Moves the MANIFEST to a new file stating the whole tree, on StoCs that answer: when the
 * current one lost replicas (a StoC died; otherwise the next StoC lost could take the
 * range's last MANIFEST with it), grew past maxManifestBytes, or may be on StoCs leaving
 * the cluster (evacuation.ts). Runs in the MANIFEST
 * chain, so the state it states is exactly what the edits so far say. If the new file
 * cannot be made, the current one goes on; once its first edit may be whole, the new file
 * may be chosen at recovery (it is the highest-numbered), so from there only the new one is
 * written, or nothing more.
 */
export async function rollManifest(db: EngineState, why: 'replicas' | 'size' | 'drain'): Promise<boolean> {
  db.lastManifestRoll = Date.now();
  const file = db.nextFile++;
  let next: LogWriter;
  try {
    next = await db.env.manifests.create(file);
  } catch (err) {
    db.warn(`MANIFEST ${file} not started (${(err as Error).message}); the current one goes on${why === 'drain' ? '' : ' with fewer replicas'}`);
    return false;
  }
  const [now, then] = [next.replicaCount ?? 0, db.manifest.replicaCount ?? 0];
  // Off StoCs that leave, with as many replicas as the StoCs that take new files allow.
  const need = why === 'drain' ? db.env.manifests.placeableReplicas?.() ?? 0 : 0;
  if (why === 'replicas' ? now <= then : why === 'size' ? now < then : now < need) {
    // No more StoCs answered than before (a dead one still looks healthy for a while), or
    // fewer than the current one has: keep the current one. The new file holds no record,
    // so no recovery ever chooses it.
    await next.close();
    return false;
  }
  const snapshot = db.manifestState.snapshot();
  snapshot.nextFile = Math.max(snapshot.nextFile ?? 0, db.nextFile);
  const record = encodeEdit(snapshot);
  await next.append([record], true); // a failure here ends the chain (the caller records it)
  db.manifestBytes = db.manifestBaseBytes = record.length;
  db.manifestState.apply(snapshot);
  const old = db.manifest;
  db.manifest = next;
  await old.close();
  db.counts.manifestRolls++;
  if (why === 'replicas') db.warn(`MANIFEST moved to ${file}: the previous one had lost replicas`);
  else if (why === 'size') db.options.onNote?.(`MANIFEST moved to ${file}: the previous one passed ${db.options.maxManifestBytes} bytes`);
  else db.options.onNote?.(`MANIFEST moved to ${file}: off StoCs leaving the cluster`);
  await db.env.manifests.install(file).catch((err: Error) => db.warn(`older MANIFESTs not all removed: ${err.message}`));
  return true;
}
