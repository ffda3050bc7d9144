/**
 * A compaction: the picked tables merged into the next level, on the Compactor (a StoC) when
 * there is one, else here (on the merge worker), recorded in one MANIFEST edit before its
 * inputs are deleted. Functions over EngineState.
 */
import { NovaError } from '../common/errors.js';
import { compareInternalKeys } from '../common/internal-key.js';
import { type MergeJob, mergeTables } from '../compaction/merge.js';
import { type CompactionJob, keySpan, overlapping } from '../compaction/picker.js';
import { mergeOnWorker } from '../compaction/worker-pool.js';
import { emptyEdit, type TableMeta } from '../log/version-edit.js';
import type { CompactionRequest, Compactor } from './engine-env.js';
import { EngineState, type LiveTable } from './engine-state.js';
import { openTable, readerOf } from './read-path.js';
import { installTables, logEdit } from './version-set.js';

/**
 * Merges the job's tables into level + 1, cutting outputs at the table size between user
 * keys (merge.ts): on the Compactor (a StoC) when there is one, else here, on the merge
 * worker thread unless `mergeInWorker` is off. `instead`: bytes to merge in place of some
 * inputs' own (what nova repair salvaged of them); such a job merges here.
 */
export async function runCompaction(db: EngineState, job: CompactionJob, instead?: ReadonlyMap<number, Buffer>): Promise<void> {
  const out = job.level + 1;
  const inputs = [...job.inputs, ...job.overlapping];
  const smallestSnapshot = db.smallestSnapshot();
  // Only deeper tables within the job's key span can stop a tombstone from going.
  const { smallest, largest } = keySpan(inputs);
  const deeper = overlapping(db.levels.slice(out + 1).flat().map((t) => t.meta), smallest, largest)
    .map((t) => ({ smallest: t.smallest, largest: t.largest }));
  const added = (db.env.compactor && !instead ? await offload(db, db.env.compactor, out, inputs, smallestSnapshot, deeper) : undefined)
    ?? await mergeHere(db, out, inputs, smallestSnapshot, deeper, instead);
  const edit = emptyEdit();
  for (const m of job.inputs) edit.removed.push({ level: job.level, file: m.file });
  for (const m of job.overlapping) edit.removed.push({ level: out, file: m.file });
  const gone = new Set(inputs.map((m) => m.file));
  await installTables(db, edit, out, added, gone);
  if (job.level === 0 && db.lookup) {
    db.lookup.compacted(new Set(job.inputs.map((m) => m.file)));
    const mems = db.memtables.all().filter((m) => m.entries > 0);
    db.lookup.refreshed(db.levels[0].length === 0, mems.length > 0 ? Math.min(...mems.map((m) => m.id)) : undefined);
  }
  db.compactCursor[job.level] = job.inputs[job.inputs.length - 1].largest;
  db.counts.compactions++;
  for (const f of gone) await db.store.deleteTable(f);
}

/** Codes of an input that cannot be read now but may be later (a StoC holding it is away). */
const AWAY: ReadonlySet<string> = new Set(['PEER_LOST', 'DEADLINE_EXCEEDED', 'CLOSED', 'UNAVAILABLE']);

/**
 * A job whose inputs cannot be read now (held as metadata only, on a StoC that is away): it
 * waits and is picked again later; the engine goes on (background.ts).
 */
export class Postponed extends NovaError {
  constructor(why: string) {
    super('UNAVAILABLE', `compaction postponed: ${why}`);
  }
}

/** Merges on this process; each output is stored as soon as it is cut. */
export async function mergeHere(db: EngineState, out: number, inputs: TableMeta[], smallestSnapshot: number,
  deeper: CompactionRequest['deeper'], instead?: ReadonlyMap<number, Buffer>): Promise<LiveTable[]> {
  const tables = await Promise.all(inputs.map((m) => {
    const reader = db.tableFor(m.file);
    return instead?.get(m.file) ?? reader.ownBytes() ?? db.store.readTable(m.file, m.fragments);
  })).catch((err: unknown) => {
    throw AWAY.has((err as NovaError).code) ? new Postponed((err as Error).message) : err;
  });
  const merge: MergeJob = {
    tables,
    names: inputs.map((m) => db.tableFor(m.file).name),
    smallestSnapshot,
    deeper,
    targetBytes: db.options.memtableBytes,
    cuts: [...db.memtables.drangeBounds],
  };
  const added: LiveTable[] = [];
  for await (const t of db.options.mergeInWorker ? mergeOnWorker(merge) : mergeTables(merge)) {
    const file = db.nextFile++;
    const fragments = await db.store.writeTable(file, t.bytes, true);
    const meta: TableMeta = { level: out, file, size: t.bytes.length, entries: t.entries, smallest: t.smallest, largest: t.largest, fragments };
    added.push({ meta, reader: readerOf(db, t.bytes, file) });
  }
  return added;
}

/**
 * Runs the merge on the Compactor, then opens its outputs. The output numbers are reserved
 * in the MANIFEST before the job leaves: a job still running when this process dies can
 * never write a table under a number a later flush uses. Undefined if the Compactor declined.
 */
export async function offload(db: EngineState, compactor: Compactor, out: number, inputs: TableMeta[], smallestSnapshot: number,
  deeper: CompactionRequest['deeper']): Promise<LiveTable[] | undefined> {
  const targetBytes = db.options.memtableBytes;
  const inputBytes = inputs.reduce((sum, m) => sum + m.size, 0);
  // Every output but the last holds at least targetBytes; twice that count, for slack.
  const maxFiles = 2 * Math.ceil(inputBytes / targetBytes) + 2;
  const firstFile = db.nextFile;
  db.nextFile += maxFiles;
  await logEdit(db, { ...emptyEdit(), nextFile: db.nextFile });
  // Given up when the engine stops (a range moving away waits for no StoC's merge): the
  // outputs, never named by an edit, are orphans the next open deletes.
  const tables = await db.untilStopped(compactor.compact({ inputs, smallestSnapshot, deeper, targetBytes, cuts: [...db.memtables.drangeBounds], firstFile, maxFiles }));
  if (!tables) return undefined;
  tables.forEach((t, i) => {
    if (t.file < firstFile || t.file >= firstFile + maxFiles || (i > 0 && t.file <= tables[i - 1].file)) {
      throw new NovaError('CORRUPTION', `an offloaded compaction answered table ${t.file}, not in order within the numbers reserved [${firstFile}, ${firstFile + maxFiles})`);
    }
    if (i > 0 && compareInternalKeys(tables[i - 1].largest, t.smallest) >= 0) {
      throw new NovaError('CORRUPTION', `an offloaded compaction answered tables ${tables[i - 1].file} and ${t.file} whose keys overlap or are out of order`);
    }
  });
  const results = await Promise.allSettled(tables.map(async (t) => {
    const meta: TableMeta = { ...t, level: out };
    const reader = await openTable(db, meta);
    if ((reader.whole && reader.bytes.length !== t.size) || reader.entries !== t.entries) {
      reader.uncache();
      throw new NovaError('CORRUPTION', `${reader.name}: ${reader.entries} entries${reader.whole ? ` in ${reader.bytes.length} bytes` : ''}; the compaction said ${t.entries} in ${t.size}`);
    }
    return { meta, reader };
  }));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    // Outputs already opened are not used: out of the cache with them.
    for (const r of results) if (r.status === 'fulfilled') r.value.reader.uncache();
    const err: unknown = failed.reason;
    if ((err as NovaError).code === 'CORRUPTION') throw err;
    // A StoC holding an output went away after the job: merge here instead (the outputs
    // are deleted where they can be, else at the next open, as no edit names them).
    db.warn(`compaction outputs could not be read back (${(err as Error).message}); merging on this process instead`);
    await Promise.all(tables.map((t) => db.store.deleteTable(t.file).catch(() => undefined)));
    return undefined;
  }
  db.counts.offloaded++;
  return results.map((r) => (r as PromiseFulfilledResult<LiveTable>).value);
}
