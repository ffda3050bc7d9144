/**
 * Opening a range: the MANIFEST replayed into the tree, the bound logs replayed into fresh L0
 * tables, the session table rebuilt, and a new MANIFEST stating the whole tree installed.
 * Functions over EngineState.
 */
import { performance } from 'node:perf_hooks';
import { NovaError } from '../common/errors.js';
import { tableLost } from '../compaction/fragments.js';
import { compareInternalKeys, TRAILER_BYTES } from '../common/internal-key.js';
import { LEVELS } from '../compaction/picker.js';
import { readLog } from '../log/log-format.js';
import { decodeEdit, emptyEdit, ManifestState, type TableMeta } from '../log/version-edit.js';
import { decodeBatch } from '../log/write-batch.js';
import { Memtable } from '../memtable/memtable.js';
import { TableReader } from '../sstable/table-reader.js';
import { tableName } from './local-store.js';
import { copiesOf, drangeOf, type Layout, layoutOf } from './dranges.js';
import { LookupIndex } from './lookup-index.js';
import { EngineState, type LiveTable } from './engine-state.js';
import { writeL0 } from './flush-job.js';
import { newMemtable } from './make-room.js';
import { MemtableSet } from './memtable-set.js';
import { openTable } from './read-path.js';
import { installTables, logEdit } from './version-set.js';

/** Tables whose metadata an open reads at once. */
const OPEN_AT_ONCE = 16;

export async function recover(db: EngineState): Promise<void> {
  // How long each step took, in the note an open leaves (a moving range waits on all of it).
  let mark = performance.now();
  const took: string[] = [];
  const step = (what: string): void => {
    const now = performance.now();
    took.push(`${what} ${Math.round(now - mark)} ms`);
    mark = now;
  };
  const state = new ManifestState();
  const current = await db.env.manifests.readCurrent();
  step('MANIFEST');
  if (current) {
    const path = current.name;
    const contents = readLog(current.bytes, path);
    if (contents.tornAt !== undefined) db.warn(`${path}: torn tail at offset ${contents.tornAt} dropped (a crash during an update)`);
    contents.records.forEach((r, i) => {
      state.apply(decodeEdit(r, `${path} record ${i}`));
    });
  }
  db.nextFile = Math.max(db.nextFile, state.nextFile);
  db.recoveredNextFile = db.nextFile;
  db.lastSequence = Math.max(db.lastSequence, state.lastSequence);
  if (state.sessions) db.sessions.load(state.sessions, `${current!.name}: sessions`);
  const { tables, logs, bounds } = state;
  // By their metadata, several at a time: the range serves sooner (a move waits on this), and
  // warmTables caches them whole afterwards while there is room.
  const lost = (t: TableMeta): boolean => !!db.env.isLost && tableLost(t.fragments, db.env.isLost);
  const metas = [...tables.values()].filter((t) => !lost(t)).sort((a, b) => a.file - b.file);
  // Tables on a StoC removed as dead: named, and left out of the new MANIFEST below.
  for (const t of tables.values()) if (lost(t)) db.loseTable(t);
  const readers = new Array<TableReader>(metas.length);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(OPEN_AT_ONCE, metas.length) }, async () => {
    while (next < metas.length) {
      const i = next++;
      readers[i] = await openTable(db, metas[i], false).catch((err: NovaError) => {
        // Every copy of its metadata damaged: the range opens all the same (salvage.ts).
        if (err.code !== 'CORRUPTION') throw err;
        db.markDamaged(metas[i].file, err.message);
        return TableReader.damaged(tableName(metas[i].file), err, metas[i].smallest, metas[i].largest);
      });
    }
  }));
  metas.forEach((meta, i) => db.levels[meta.level].push({ meta, reader: readers[i] }));
  step(`${metas.length} tables`);
  for (let l = 1; l < LEVELS; l++) db.levels[l].sort((a, b) => compareInternalKeys(a.meta.smallest, b.meta.smallest));
  // Replay every bound log into one memtable per Drange (so no one memtable must hold all
  // of them). Sequence numbers order the entries within each, and every entry in a log is
  // newer than what its Drange has in tables (flushes take the oldest memtables first), so
  // these L0 tables, newest of all and disjoint, hold them correctly.
  const replays = Array.from({ length: bounds.length + 1 }, () => new Memtable(0));
  for (const [memtable, log] of [...logs.entries()].sort((a, b) => a[0] - b[0])) {
    const path = db.env.logs.describe(log);
    const bytes = await db.env.logs.read(log);
    if (bytes === undefined) {
      throw new NovaError('CORRUPTION', `${path}: log of memtable ${memtable} named by the MANIFEST is missing`);
    }
    const contents = readLog(bytes, path);
    if (contents.tornAt !== undefined) {
      db.warn(`${path}: torn tail at offset ${contents.tornAt} truncated (writes never acknowledged)`);
    }
    contents.records.forEach((r, i) => {
      const b = decodeBatch(r, `${path} record ${i}`);
      b.entries.forEach((e, j) => replays[drangeOf(bounds, e.key)].add(b.firstSequence + j, e.type, e.key, e.value));
      if (b.session) db.sessions.replay(b.session);
      db.lastSequence = Math.max(db.lastSequence, b.firstSequence + b.entries.length - 1);
    });
  }
  step(`logs (${replays.reduce((n, m) => n + m.entries, 0)} entries)`);
  // What the stores hold now, named or not. Numbers given out from here on are above all of
  // it (the new MANIFEST records that), so what the tree does not name can be deleted after
  // the open (Engine.open) without racing a file given its number.
  const [tablesThere, logsThere] = await Promise.all([db.store.listTables(), db.env.logs.list()]);
  for (const f of [...tablesThere, ...logsThere]) if (f >= db.nextFile) db.nextFile = f + 1;
  db.leftovers = { tables: tablesThere, logs: logsThere };
  step('listing');
  // A fresh MANIFEST that states the whole tree, and fresh memtables and logs for writes.
  const manifestFile = db.nextFile++;
  db.manifest = await db.env.manifests.create(manifestFile);
  db.manifestState = new ManifestState();
  const snapshot = emptyEdit();
  const where = current?.name ?? 'MANIFEST';
  const layout = layoutFrom(state.tranges, bounds, state.copies, where);
  // Nova-LSM-R is one Drange with α copies (a tree with Dranges cannot open so).
  const random = db.options.ltcVariant === 'nova-r';
  if (random && bounds.length > 0) throw new NovaError('BAD_ARGUMENT', `${where}: this range has Dranges; ltcVariant nova-r cannot open it`);
  if (random) layout.copies = [db.options.activeMemtables];
  const copies = copiesOf(layout);
  const fresh: Memtable[][] = [];
  for (const n of copies) {
    const ms: Memtable[] = [];
    for (let i = 0; i < n; i++) ms.push(await newMemtable(db, snapshot));
    fresh.push(ms);
  }
  snapshot.added.push(...db.levels.flat().map((t) => t.meta));
  // Old logs stay bound until their entries are in a table (below); empty ones need not.
  const replayed = replays.some((m) => m.entries > 0);
  if (replayed) for (const [memtable, log] of logs) snapshot.boundLogs.push({ memtable, log });
  if (bounds.length > 0) snapshot.dranges = bounds;
  if (bounds.length > 0 && state.tranges) snapshot.tranges = state.tranges;
  if (bounds.length > 0 && state.copies) snapshot.copies = state.copies;
  snapshot.sessions = db.sessions.encode();
  snapshot.nextFile = db.nextFile;
  snapshot.lastSequence = db.lastSequence;
  await logEdit(db, snapshot);
  await db.env.manifests.install(manifestFile);
  db.manifestInstalled = true;
  step('new MANIFEST and logs');
  db.memtables = new MemtableSet(bounds, fresh);
  db.layout = layout;
  db.trangeWrites = new Array(db.layout.tranges.length + 1).fill(0);
  // The tree's Dranges come from its MANIFEST, whatever α this open asks for; δ must leave
  // room for one immutable memtable beside their active ones.
  db.memtableLimit = Math.max(db.options.maxMemtables, fresh.flat().length + 1);
  // What the replayed logs held becomes L0 tables, recorded in one edit that also
  // releases the logs (a crash before it leaves unrecorded tables, deleted next open).
  if (replayed) {
    const tables: LiveTable[] = [];
    for (const m of replays) if (m.entries > 0) tables.push(await writeL0(db, m));
    const edit = emptyEdit();
    edit.releasedLogs.push(...logs.keys());
    await installTables(db, edit, 0, tables);
    step('L0 from logs');
  }
  if (db.options.lookupIndexBytes > 0) db.lookup = buildLookup(db);
  db.fitCache();
  db.options.onNote?.(`opened: ${took.join(', ')}`);
}

/** Bytes the lookup index is given per key it may hold (lookup-index.ts counts its use). */
const LOOKUP_BYTES_PER_KEY = 100;

/**
 * The lookup index of the tree as recovery left it: its memtables are new and empty, so the
 * keys are those of its L0 tables, read oldest first (a newer table's version wins). Tables
 * held as metadata only (not cached whole) are not read: the index then lacks them until L0
 * has been compacted away, and gets search as without it meanwhile.
 */
function buildLookup(db: EngineState): LookupIndex {
  const index = new LookupIndex(Math.floor(db.options.lookupIndexBytes / LOOKUP_BYTES_PER_KEY));
  for (const m of db.memtables.all()) index.opened(m);
  for (const t of db.levels[0]) {
    if (!t.reader.ownBytes()) {
      index.lacks(db.nextFile);
      break;
    }
    const slot = index.table(t.meta.file);
    const it = t.reader.iterator();
    for (it.first(); it.valid; it.next()) index.wrote(it.key.subarray(0, it.key.length - TRAILER_BYTES), slot);
  }
  return index;
}

/**
 * The layout a MANIFEST states: its Tranges with the Dranges among them (or one Trange per
 * Drange, before Tranges), and each Drange's copies.
 */
function layoutFrom(tranges: Buffer[] | undefined, bounds: Buffer[], copies: number[] | undefined, where: string): Layout {
  if (copies && copies.length !== bounds.length + 1) throw new NovaError('CORRUPTION', `${where}: it gives ${copies.length} Dranges copies, not ${bounds.length + 1}`);
  const withCopies = (l: Layout): Layout => (copies ? { ...l, copies } : l);
  if (!tranges) return withCopies(layoutOf(bounds));
  const dranges = bounds.map((b) => tranges.findIndex((t) => t.equals(b)));
  for (let i = 0; i < tranges.length; i++) {
    if (i > 0 && Buffer.compare(tranges[i - 1], tranges[i]) >= 0) throw new NovaError('CORRUPTION', `${where}: its Trange bounds are not ascending`);
  }
  if (dranges.some((i) => i < 0)) throw new NovaError('CORRUPTION', `${where}: a Drange bound is not among its Trange bounds`);
  return withCopies({ tranges, dranges });
}
