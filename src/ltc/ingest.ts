/**
 * Bulk ingest (RocksDB's IngestExternalFile, done by the LTC): a run of puts in key order
 * becomes one SSTable off the write path — no log record, no memtable, no flush, no L0 — stored
 * durably on the StoCs and installed by one MANIFEST edit in the deepest level it may go to.
 * Its entries share one new sequence number, newer than every write acknowledged before it.
 *
 * Where it may go: a read takes the first version it meets, memtables first, then L0 newest
 * first, then each level down, so the table must sit above every version of its keys that is
 * older and below none that is newer. So
 *  - no memtable may hold a key of its span when its sequence is taken (those versions are
 *    older, yet read first): then it is refused, and the caller writes the entries as a batch;
 *  - at the install, no table in its level or above may meet its span, and none anywhere that
 *    was made after the sequence was taken (it may hold newer versions, moved down meanwhile):
 *    such a table refuses it too. The install holds the compaction loop's place, so no
 *    compaction moves tables between that check and the edit.
 * Every refusal applies nothing, and a client numbered ingest that was refused may be retried.
 */
import { NovaError } from '../common/errors.js';
import { MAX_SEQUENCE, SEEK_TYPE, TRAILER_BYTES, ValueType, compareBytes, makeInternalKey } from '../common/internal-key.js';
import { LEVELS, overlapping } from '../compaction/picker.js';
import { emptyEdit, type TableMeta } from '../log/version-edit.js';
import type { SessionRef } from '../common/write-id.js';
import { TableBuilder } from '../sstable/table-builder.js';
import { inLoopPlace } from './background.js';
import { betweenWrites } from './commit.js';
import { EngineState } from './engine-state.js';
import { readerOf } from './read-path.js';
import { installTables } from './version-set.js';
import type { Ticket } from './sessions.js';

/** An ingest's bound: the entries of one request, built into one table in memory. */
export const MAX_INGEST_BYTES = 48 * 1024 * 1024;

export type IngestOutcome =
  /** Installed in `level` as table `file` (level undefined: a retry of an ingest applied before). */
  | { level: number | undefined; file?: number; bytes?: number }
  /** Nothing applied, and why: the caller writes the entries as ordinary writes. */
  | { refused: string };

/** Entries added between turns given back to the event loop while the table is built. */
const SLICE_BYTES = 1 << 20;

/** Checks `keys` (ascending, no repeats) and `values` against the engine's limits; the bytes they take. */
function checkEntries(db: EngineState, keys: Buffer[], values: Buffer[]): number {
  if (keys.length === 0 || keys.length !== values.length) {
    throw new NovaError('BAD_ARGUMENT', `an ingest is one or more keys with a value each, not ${keys.length} keys and ${values.length} values`);
  }
  const { maxKeyBytes, maxValueBytes } = db.options.limits;
  let bytes = 0;
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i];
    if (k.length > maxKeyBytes) throw new NovaError('BAD_ARGUMENT', `ingest: key ${i} of ${k.length} bytes exceeds the limit of ${maxKeyBytes} bytes (maxKeyBytes)`);
    if (values[i].length > maxValueBytes) throw new NovaError('BAD_ARGUMENT', `ingest: value ${i} of ${values[i].length} bytes exceeds the limit of ${maxValueBytes} bytes (maxValueBytes)`);
    if (i > 0 && compareBytes(keys[i - 1], 0, keys[i - 1].length, k, 0, k.length) >= 0) {
      throw new NovaError('BAD_ARGUMENT', `ingest: key ${i} does not sort after key ${i - 1}: an ingest's keys are ascending, each once`);
    }
    bytes += k.length + values[i].length;
  }
  if (bytes > MAX_INGEST_BYTES) throw new NovaError('BAD_ARGUMENT', `ingest: ${bytes} bytes of entries exceed the ${MAX_INGEST_BYTES} one ingest takes: send fewer at a time`);
  return bytes;
}

/** Whether some memtable holds a key in [first, last]. */
function memtablesMeet(db: EngineState, first: Buffer, last: Buffer): boolean {
  for (const m of db.memtables.all()) {
    if (m.entries === 0) continue;
    const it = m.iterator();
    it.seek(makeInternalKey(first, MAX_SEQUENCE, SEEK_TYPE)); // before every version of `first`
    if (!it.valid) continue;
    const k = it.key;
    if (compareBytes(k, 0, k.length - TRAILER_BYTES, last, 0, last.length) <= 0) return true;
  }
  return false;
}

/**
 * The deepest level, 1 or below, whose tables and those above meet nothing of [first, last];
 * or why there is none: a table above meets it, or one made since the sequence was taken
 * (file `since` or later) does anywhere.
 */
export function ingestLevel(levels: readonly TableMeta[][], first: Buffer, last: Buffer, since: number): number | string {
  // Tables are compared by user key alone: any trailer does.
  const meeting = levels.map((l) => overlapping(l, makeInternalKey(first, MAX_SEQUENCE, SEEK_TYPE), makeInternalKey(last, 0, ValueType.Put)));
  const newer = meeting.flat().find((t) => t.file >= since);
  if (newer) return `table ${newer.file} (L${newer.level}) was made since the ingest began and holds keys of its span`;
  if (meeting[0].length > 0) return 'L0 holds keys of its span';
  let level = 0;
  while (level + 1 < LEVELS && meeting[level + 1].length === 0) level++;
  return level === 0 ? 'L1 holds keys of its span' : level;
}

/** Builds the table: every entry a put at `sequence`, giving the event loop a turn between slices. */
async function build(keys: Buffer[], values: Buffer[], sequence: number, bytes: number): Promise<ReturnType<TableBuilder['finish']>> {
  const builder = new TableBuilder({ expectedSize: bytes + keys.length * 24 + 4096 });
  let slice = 0;
  for (let i = 0; i < keys.length; i++) {
    const ikey = makeInternalKey(keys[i], sequence, ValueType.Put);
    builder.add(ikey, values[i]);
    slice += ikey.length + values[i].length;
    if (slice >= SLICE_BYTES) {
      slice = 0;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
  return builder.finish();
}

/** Ingests `keys` (ascending) with `values` as one table (the file comment). */
export async function ingest(db: EngineState, keys: Buffer[], values: Buffer[], session?: SessionRef): Promise<IngestOutcome> {
  db.assertOpen();
  if (db.failed) throw db.failed;
  const bytes = checkEntries(db, keys, values);
  let ticket: Ticket | undefined;
  if (session) {
    const entry = db.sessions.enter(session);
    if ('settled' in entry) {
      await entry.settled;
      return { level: undefined };
    }
    ticket = entry.ticket;
  }
  const first = keys[0];
  const last = keys[keys.length - 1];
  let file: number | undefined;
  let installing = false;
  try {
    let sequence = 0;
    let since = 0;
    let refused: string | undefined;
    await betweenWrites(db, async () => {
      if (memtablesMeet(db, first, last)) {
        refused = 'a memtable holds keys of its span';
        return;
      }
      sequence = ++db.lastSequence;
      since = db.nextFile;
    });
    if (refused) return done({ refused });
    file = db.nextFile++;
    const built = await build(keys, values, sequence, bytes);
    const fragments = await db.store.writeTable(file, built.bytes);
    const outcome = await inLoopPlace(db, async (): Promise<IngestOutcome> => {
      const level = ingestLevel(db.levels.map((l) => l.map((t) => t.meta)), first, last, since);
      if (typeof level === 'string') return { refused: level };
      const meta: TableMeta = { level, file: file!, size: built.bytes.length, entries: built.entries, smallest: built.smallest!, largest: built.largest!, fragments };
      const edit = emptyEdit();
      // This edit, and any logged while it is, record the ingest as applied under its client's
      // write number: a retry after a crash is answered, not applied again.
      if (ticket) db.sessions.applying(ticket);
      edit.sessions = db.sessions.encode();
      installing = true; // from here the MANIFEST may name the table: it is never deleted
      try {
        await installTables(db, edit, level, [{ meta, reader: readerOf(db, built.bytes, file!), scansAtAdd: db.scans }]);
      } catch (err) {
        // The MANIFEST's tail is unknown now: the engine fails, and a reopen knows what it holds.
        throw db.fail('ingest', err);
      }
      if (ticket) db.sessions.applied(ticket);
      ticket = undefined;
      db.counts.ingests++;
      db.counts.ingestedEntries += built.entries;
      return { level, file: file!, bytes: built.bytes.length };
    });
    if ('refused' in outcome) {
      await db.store.deleteTable(file).catch(() => undefined); // never named by the tree; an open sweeps it if this fails
      return done(outcome);
    }
    return outcome;
  } catch (err) {
    if (ticket) db.sessions.failed(ticket, err as Error);
    if (file !== undefined && !installing) await db.store.deleteTable(file).catch(() => undefined);
    throw err;
  }

  function done(outcome: IngestOutcome): IngestOutcome {
    if (ticket) db.sessions.failed(ticket, new NovaError('BUSY', `ingest refused: ${(outcome as { refused: string }).refused}`));
    ticket = undefined;
    return outcome;
  }
}
