/**
 * The read path: point reads through memtables and levels, table readers (whole, or metadata
 * with a block cache), block loads on a cache miss, and the merged iterators scans use.
 * Functions over EngineState.
 */
import { join } from 'node:path';
import { NovaError } from '../common/errors.js';
import { compareBytes, makeInternalKey, SEEK_TYPE, TRAILER_BYTES } from '../common/internal-key.js';
import { LEVELS } from '../compaction/picker.js';
import type { TableMeta } from '../log/version-edit.js';
import { TRAILER_BYTES as BLOCK_TRAILER, FOOTER_BYTES, metadataStart, readFooter } from '../sstable/format.js';
import { type InternalIterator, MergingIterator, VisibleIterator } from '../sstable/merging-iterator.js';
import { levelIterator } from '../sstable/two-level-iterator.js';
import { BlockMiss, TableReader } from '../sstable/table-reader.js';
import type { ReadOptions, ScanOptions } from './engine-options.js';
import { countScan } from './background.js';
import { EngineState, type LiveTable, type Pins } from './engine-state.js';
import { tableName } from './local-store.js';
import type { LookupIndex } from './lookup-index.js';
import type { Memtable } from '../memtable/memtable.js';

/**
 * The value of `key` at sequence `seq`. A read of the present (`latest`) asks the lookup index
 * first, which names the one memtable or L0 table to read, or sends it to L1 and below; when
 * it cannot answer, every memtable of the key's Drange and every L0 table is searched.
 */
export function getNow(db: EngineState, key: Uint8Array, seq: number, latest = false): Buffer | undefined {
  db.searched.gets++;
  if (latest && db.lookup) {
    const found = indexedGet(db, db.lookup, key, seq);
    if (found !== UNKNOWN) {
      if (db.options.checkIndexes) checkAnswer(key, found, searchAll(db, key, seq, false));
      return found;
    }
  }
  return searchAll(db, key, seq, true);
}

/** The index could not answer: search everything. */
const UNKNOWN = Symbol('unknown');

function indexedGet(db: EngineState, index: LookupIndex, key: Uint8Array, seq: number): Buffer | undefined | typeof UNKNOWN {
  const place = index.find(key);
  if (!place) return index.complete ? deeper(db, key, seq) : UNKNOWN;
  if (place.kind === 'deeper') return deeper(db, key, seq);
  // Not found there at `seq`: its newest version came after this read began; search all.
  if (place.kind === 'memtable') {
    if (db.memtables.isTwin(place.memtable)) return UNKNOWN; // its twins may hold a version between
    db.searched.getMemtables++;
    const r = place.memtable.get(key, seq);
    return r ? (r.type === 'put' ? Buffer.from(r.value) : undefined) : UNKNOWN;
  }
  const t = db.levels[0].find((x) => x.meta.file === place.file);
  if (!t) return deeper(db, key, seq); // compacted into L1 since
  db.searched.getTables++;
  const r = t.reader.get(key, seq);
  return r ? (r.type === 'put' ? r.value : undefined) : UNKNOWN;
}

/** Every memtable of the key's Drange, newest first, then L0 newest first, then deeper. */
function searchAll(db: EngineState, key: Uint8Array, seq: number, count: boolean): Buffer | undefined {
  const d = db.memtables.drangeOf(key);
  if (db.memtables.mixed(d)) {
    // Twins (a duplicated Drange's copies) hold a key's versions interleaved: read every
    // memtable of the Drange, keep the newest.
    let newest: Memtable | undefined;
    let at = -1;
    for (const m of db.memtables.list(d)) {
      if (count) db.searched.getMemtables++;
      const s = m.sequenceOf(key, seq);
      if (s > at) [newest, at] = [m, s];
    }
    const r = newest?.get(key, seq);
    if (r) return r.type === 'put' ? Buffer.from(r.value) : undefined;
  } else {
    for (const m of db.memtables.list(d)) {
      if (count) db.searched.getMemtables++;
      const r = m.get(key, seq);
      if (r) return r.type === 'put' ? Buffer.from(r.value) : undefined;
    }
  }
  const l0 = db.levels[0];
  for (let i = l0.length - 1; i >= 0; i--) {
    if (count) db.searched.getTables++;
    const r = l0[i].reader.get(key, seq);
    if (r) return r.type === 'put' ? r.value : undefined;
  }
  return deeper(db, key, seq);
}

function deeper(db: EngineState, key: Uint8Array, seq: number): Buffer | undefined {
  for (let level = 1; level < LEVELS; level++) {
    const t = findTable(db.levels[level], key);
    const r = t?.reader.get(key, seq);
    if (r) return r.type === 'put' ? r.value : undefined;
  }
  return undefined;
}

/** checkIndexes: an index's answer must be a full search's. */
function checkAnswer(key: Uint8Array, indexed: Buffer | undefined, full: Buffer | undefined): void {
  const same = indexed === undefined ? full === undefined : full !== undefined && indexed.equals(full);
  if (!same) {
    throw new NovaError('CORRUPTION', `lookup index: key ${Buffer.from(key).toString('hex')} read ${indexed === undefined ? 'nothing' : `${indexed.length} bytes`}, a full search ${full === undefined ? 'nothing' : `${full.length} bytes`}`);
  }
}

/**
 * Loads the block a read missed into the cache (one load per block at a time) and pins it
 * for the read (`pins`), which unpins what it pinned when it ends.
 */
export async function load(db: EngineState, miss: BlockMiss, pins: Pins): Promise<void> {
  const live = (): LiveTable | undefined => liveTableOf(db, miss.table);
  const table = live();
  if (!table) return; // compacted away meanwhile: the next try reads its successor
  const key = `${table.meta.file}:${miss.handle.offset}`;
  let p = db.loading.get(key);
  if (!p) {
    p = readChecked(db, table.meta, miss.handle.offset, miss.handle.size + BLOCK_TRAILER, (bytes) => miss.table.insert(miss.handle, bytes))
      .finally(() => db.loading.delete(key));
    db.loading.set(key, p);
  }
  try {
    await p;
  } catch (err) {
    if (live()) throw err; // else it was deleted after a compaction replaced it: try again
    return;
  }
  // Evicted again before this read could pin it (other loads ran meanwhile): the retry loads it.
  if (miss.table.pin(miss.handle.offset)) pins.push([miss.table, miss.handle.offset]);
}

/** The live table `reader` reads, if it is still in a level (without a copy of the levels: this runs on every miss). */
function liveTableOf(db: EngineState, reader: TableReader): LiveTable | undefined {
  for (const level of db.levels) {
    for (const t of level) if (t.reader === reader) return t;
  }
  return undefined;
}

/** A reader of table `file` just written from `bytes`: whole; or with a block cache, its metadata (copied out) and the table cached whole while there is room. */
export function readerOf(db: EngineState, bytes: Buffer, file: number): TableReader {
  const name = join(db.dir, tableName(file));
  if (!db.cache) return new TableReader(bytes, name);
  const start = metadataStart(readFooter(bytes, name));
  const reader = TableReader.metadataOnly(Buffer.from(bytes.subarray(start)), start, name, db.cache);
  if (roomFor(db, bytes.length)) reader.fill(bytes);
  return reader;
}

/**
 * Whether the block cache has room for a table of `bytes` without evicting: a table the LTC
 * writes or opens is cached whole while there is room (as a file system's page cache keeps what
 * was just written), so reads go to the StoCs only for what the budget cannot hold.
 */
function roomFor(db: EngineState, bytes: number): boolean {
  return db.cache !== undefined && db.cache.capacity - db.cache.bytes - db.cacheReserved >= bytes;
}

/**
 * Opens table `meta`: whole; or, with a block cache, its metadata and, while the cache has room
 * (and `whole`), its data blocks cached (one read of the whole table), else only its metadata
 * (two reads: the footer, then filter and index).
 */
export async function openTable(db: EngineState, meta: TableMeta, whole = true): Promise<TableReader> {
  const name = join(db.dir, tableName(meta.file));
  if (!db.cache) return new TableReader(await db.store.readTable(meta.file, meta.fragments), name);
  if (whole && roomFor(db, meta.size)) {
    // Tables opened at once (a compaction's outputs) must not all count on the same room.
    db.cacheReserved += meta.size;
    let bytes: Buffer;
    try {
      bytes = await db.store.readTable(meta.file, meta.fragments);
    } finally {
      db.cacheReserved -= meta.size;
    }
    return readerOf(db, bytes, meta.file);
  }
  const start = await readChecked(db, meta, meta.size - FOOTER_BYTES, FOOTER_BYTES, (b) => {
    const at = metadataStart(readFooter(b, name));
    if (at > meta.size - FOOTER_BYTES) throw new NovaError('CORRUPTION', `${name}: metadata at offset ${at}, past the table's ${meta.size} bytes`);
    return at;
  });
  return readChecked(db, meta, start, meta.size - start, (b) => TableReader.metadataOnly(b, start, name, db.cache!));
}

/**
 * `parse` of bytes [offset, offset + length) of table `meta`, parsed as they are read, so a
 * copy that fails the parse (CORRUPTION) sends the read to another copy where the store keeps
 * copies (BlockStore.readRange).
 */
async function readChecked<T>(db: EngineState, meta: TableMeta, offset: number, length: number, parse: (bytes: Buffer) => T): Promise<T> {
  let parsed: { value: T } | undefined;
  const bytes = await db.store.readRange!(meta.file, meta.fragments, offset, length, (b) => { parsed = { value: parse(b) }; });
  return (parsed ?? { value: parse(bytes) }).value;
}

/**
 * Adds the rows from `start` to `out` until the scan's end, limit or byte budget. With the range
 * index, a scan goes one partition at a time (the Dranges' intervals): each merges only the
 * memtables listed under that Drange and the L0 tables whose span meets the partition, with
 * L1 and below; a scan that ends in its first partition never reads the others' sources.
 * The partitions are the memtable lists and the L0 tables' spans themselves, kept by flushes,
 * compactions and reorganizations, so there is no second structure to keep in step.
 */
export function scanInto(db: EngineState, out: Array<[Buffer, Buffer]>, page: { bytes: number }, start: Uint8Array, seq: number, options: ScanOptions): void {
  db.searched.scans++;
  if (!db.options.rangeIndex) {
    const all = iterators(db);
    db.searched.scanMemtables += db.memtables.all().length;
    db.searched.scanTables += db.levels[0].length;
    scanPart(out, page, all, start, options.end, seq, options);
    return;
  }
  const checked = db.options.checkIndexes ? { out: [...out], page: { ...page } } : undefined;
  const bounds = db.memtables.drangeBounds;
  for (let p = db.memtables.drangeOf(start); p <= bounds.length; p++) {
    const from = p === 0 || compareKeys(start, bounds[p - 1]) > 0 ? start : bounds[p - 1];
    const end = bounds[p] && (!options.end || compareKeys(bounds[p], options.end) < 0) ? bounds[p] : options.end;
    const mems = db.memtables.forKey(from);
    const l0 = db.levels[0].filter((t) => meets(t, from, end));
    db.searched.scanMemtables += mems.length;
    db.searched.scanTables += l0.length;
    const its: InternalIterator[] = [...mems.map((m) => m.iterator()), ...l0.map((t) => t.reader.iterator()), ...deeperIterators(db)];
    const full = scanPart(out, page, its, from, end, seq, options);
    if (!full || end === options.end) break;
  }
  if (checked) {
    scanPart(checked.out, checked.page, iterators(db), start, options.end, seq, options);
    const same = checked.out.length === out.length && checked.out.every(([k, v], i) => k.equals(out[i][0]) && v.equals(out[i][1]));
    if (!same) throw new NovaError('CORRUPTION', `range index: a scan from ${Buffer.from(start).toString('hex')} read ${out.length} rows, a full merge ${checked.out.length} (or others)`);
  }
}

/**
 * Adds rows of `its` from `from` up to `end` (exclusive) until the limit or byte budget;
 * whether it reached `end` (or the sources' end) with room left.
 */
function scanPart(out: Array<[Buffer, Buffer]>, page: { bytes: number }, its: InternalIterator[], from: Uint8Array, end: Uint8Array | undefined,
  seq: number, options: ScanOptions): boolean {
  const it = new VisibleIterator(new MergingIterator(its), seq);
  const limit = options.limit ?? Infinity;
  const maxBytes = options.maxBytes ?? Infinity;
  for (it.seek(makeInternalKey(from, seq, SEEK_TYPE)); it.valid; it.next()) {
    if (out.length >= limit || page.bytes >= maxBytes) return false;
    const k = it.key;
    if (end && compareBytes(k, 0, k.length, end, 0, end.length) >= 0) return true;
    out.push([Buffer.from(k), Buffer.from(it.value)]);
    page.bytes += k.length + it.value.length;
  }
  return out.length < limit && page.bytes < maxBytes;
}

function compareKeys(a: Uint8Array, b: Uint8Array): number {
  return compareBytes(a, 0, a.length, b, 0, b.length);
}

/** Whether table `t`'s user-key span meets [from, end). */
function meets(t: LiveTable, from: Uint8Array, end: Uint8Array | undefined): boolean {
  const l = t.meta.largest;
  const sm = t.meta.smallest;
  return compareBytes(l, 0, l.length - TRAILER_BYTES, from, 0, from.length) >= 0 &&
    (!end || compareBytes(sm, 0, sm.length - TRAILER_BYTES, end, 0, end.length) < 0);
}

/** Every memtable and L0 table, and one LevelIterator per deeper level (its tables are disjoint). */
export function iterators(db: EngineState): InternalIterator[] {
  const its: InternalIterator[] = db.memtables.all().map((m) => m.iterator());
  for (const t of db.levels[0]) its.push(t.reader.iterator());
  return [...its, ...deeperIterators(db)];
}

/** One iterator per level below L0. */
function deeperIterators(db: EngineState): InternalIterator[] {
  const its: InternalIterator[] = [];
  for (let l = 1; l < LEVELS; l++) {
    const level = db.levels[l];
    if (level.length === 1) its.push(level[0].reader.iterator());
    else if (level.length > 1) its.push(levelIterator(level.map((t) => ({ largest: t.meta.largest, iterator: () => t.reader.iterator() }))));
  }
  return its;
}

/** The table of a sorted, disjoint level whose user-key span holds `key`, if any. */
function findTable(level: LiveTable[], key: Uint8Array): LiveTable | undefined {
  const t = firstTableFrom(level, key);
  if (!t) return undefined;
  const s = t.meta.smallest;
  return compareBytes(s, 0, s.length - TRAILER_BYTES, key, 0, key.length) <= 0 ? t : undefined;
}

/** The first table of a sorted level whose largest user key is at or after `key`: where a read from `key` starts. */
function firstTableFrom(level: LiveTable[], key: Uint8Array): LiveTable | undefined {
  let lo = 0;
  let hi = level.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const l = level[mid].meta.largest;
    if (compareBytes(l, 0, l.length - TRAILER_BYTES, key, 0, key.length) < 0) lo = mid + 1;
    else hi = mid;
  }
  return level[lo];
}

/**
 * The first block of each table a scan from `from` (before `end`) reads, where it is not at
 * hand. Loaded side by side when a scan misses: each level's table is positioned before the
 * scan returns a row, and found missing one at a time they cost a round trip to a StoC each.
 */
function scanStartMisses(db: EngineState, from: Uint8Array, end: Uint8Array | undefined, seq: number): BlockMiss[] {
  const out: BlockMiss[] = [];
  const add = (t: LiveTable | undefined): void => {
    const handle = t && meets(t, from, end) ? t.reader.missingBlockFor(from, seq) : undefined;
    if (handle) out.push(new BlockMiss(t!.reader, handle));
  };
  db.levels[0].forEach(add);
  for (let level = 1; level < LEVELS; level++) add(firstTableFrom(db.levels[level], from));
  return out;
}

/** The value of `key` at the read's snapshot (Engine.get). */
export async function getValue(db: EngineState, key: Uint8Array, options: ReadOptions = {}): Promise<Buffer | undefined> {
  db.assertOpen();
  if (!db.cache) return getNow(db, key, options.snapshot?.sequence ?? db.lastSequence, !options.snapshot);
  // A get that must load a block runs again once it is loaded; its snapshot keeps the
  // versions it may see from compactions meanwhile.
  const snapshot = options.snapshot ? undefined : db.snapshot();
  const pins: Pins = [];
  try {
    for (;;) {
      try {
        return getNow(db, key, (options.snapshot ?? snapshot!).sequence, !options.snapshot);
      } catch (err) {
        if (!(err instanceof BlockMiss)) throw err;
        await load(db, err, pins);
      }
    }
  } finally {
    snapshot?.release();
    for (const [reader, offset] of pins) reader.unpin(offset);
  }
}

/** Entries with start <= key < end, in key order, at most `limit` of them. */
export async function scanRows(db: EngineState, start: Uint8Array, options: ScanOptions = {}): Promise<Array<[Buffer, Buffer]>> {
  db.assertOpen();
  countScan(db);
  const out: Array<[Buffer, Buffer]> = [];
  const page = { bytes: 0 };
  if (!db.cache) {
    scanInto(db, out, page, start, options.snapshot?.sequence ?? db.lastSequence, options);
    return out;
  }
  // A scan that must load a block goes on after its last row once the block is loaded,
  // at the same snapshot (held, so compactions keep what it may see).
  const snapshot = options.snapshot ? undefined : db.snapshot();
  const seq = (options.snapshot ?? snapshot!).sequence;
  const pins: Pins = [];
  let from: Uint8Array = start;
  try {
    for (;;) {
      try {
        scanInto(db, out, page, from, seq, options);
        return out;
      } catch (err) {
        if (!(err instanceof BlockMiss)) throw err;
        if (out.length > 0) from = Buffer.concat([out[out.length - 1][0], Buffer.alloc(1)]);
        // The others' loads are a guess at what comes next: their failures are not the scan's
        // (it may never read them), and all end before the scan does, so none pins after its unpins.
        const guesses = scanStartMisses(db, from, options.end, seq)
          .filter((m) => m.table !== err.table || m.handle.offset !== err.handle.offset)
          .map((miss) => load(db, miss, pins).catch(() => undefined));
        try {
          await load(db, err, pins);
        } finally {
          await Promise.all(guesses);
        }
      }
    }
  } finally {
    snapshot?.release();
    for (const [reader, offset] of pins) reader.unpin(offset);
  }
}

/**
 * Caches the tree's tables whole while the cache has room, L0 first (the newest data), resting
 * `pauseMs` before each: what an open leaves to after it serves (recovery opens tables by their
 * metadata, so a range that moved serves at once). A table that left the tree meanwhile is skipped; a failed read is
 * only a colder cache.
 */
export async function warmTables(db: EngineState, pauseMs = 0): Promise<void> {
  if (!db.cache) return;
  const live = (r: TableReader): boolean => db.levels.some((level) => level.some((t) => t.reader === r));
  for (const { meta, reader } of db.levels.flat()) {
    if (pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs));
    if (db.stopping || db.closed || db.failed) return;
    if (reader.inMemory || !roomFor(db, meta.size)) continue;
    db.cacheReserved += meta.size;
    let bytes: Buffer;
    try {
      bytes = await db.store.readTable(meta.file, meta.fragments);
    } catch {
      continue;
    } finally {
      db.cacheReserved -= meta.size;
    }
    if (live(reader) && !reader.inMemory && roomFor(db, bytes.length)) reader.fill(bytes);
  }
}
