/**
 * The record format of a Gemini cache instance's `cache.log` (doc/format/cache.md). Pure
 * functions: the encoder turns a record into the bytes to append; the reader turns a file's
 * bytes back into records. CacheStore (cache-store.ts) owns the file.
 *
 *   file   = header record*
 *   header = "NOVACACH" | u32 version (2) | u32 xxh32(the 12 bytes before it)
 *   record = u32 length | u32 xxh32(the length's 4 bytes) | u32 xxh32(body) | body[length]
 *   body   = u8 type | fields
 *
 * Integers are little-endian. A record is one append, so a crash can cut short only the last
 * one: a record cut short, or one whose body fails its checksum and ends the file, is a torn
 * tail (the reader stops before it); damage with more records after it is CORRUPTION. The length
 * has a checksum of its own (version 2) so that a damaged length, which would make the record
 * seem to run past the end, is told from a record cut short: else everything after it would be
 * dropped as a torn tail, deletes included, and entries they had deleted would come back.
 */
import { checksum32 } from '../common/checksum.js';
import { ByteBuilder, readU32, readU64 } from '../common/coding.js';
import { NovaError } from '../common/errors.js';

/** The file's name in its directory. */
export const CACHE_LOG = 'cache.log';
export const CACHE_LOG_MAGIC = Buffer.from('NOVACACH', 'latin1');
/** Versions: 1 — the six record types below, an 8-byte frame (length, body checksum); 2 — the frame checks its length too (12 bytes). */
export const CACHE_LOG_VERSION = 2;
export const CACHE_LOG_HEADER = 16;
/** u32 length | u32 checksum of the length | u32 checksum of the body, before each body (version 2). */
export const CACHE_FRAME = 12;
/** Version 1's frame: u32 length | u32 checksum of the body. */
const V1_FRAME = 8;
/** Largest key a record may hold. */
export const MAX_CACHE_KEY = 64 * 1024;
/** Largest body a record may hold (a SET's value is what may approach it). */
export const MAX_CACHE_RECORD = 64 * 1024 * 1024;

/** Record types. Written to disk: never renumber; a retired value stays reserved. */
export const CacheRecordType = {
  /** u32 fragment | u64 configId | u32 keyLength | key | value (the rest) */
  Set: 1,
  /** key (the rest); logged even for an absent key */
  Delete: 2,
  /** u32 fragment | u64 configId: a dirty list with its marker, replacing any list of the fragment */
  DirtyInit: 3,
  /** u32 fragment | key (the rest): appended to the fragment's list, which starts without marker if there is none */
  DirtyAdd: 4,
  /** u32 fragment: the list is gone (evicted) */
  DirtyDrop: 5,
  /** u32 fragment: the list was fully processed; it stays as a done tombstone without keys */
  DirtyDone: 6,
} as const;

export type CacheRecord =
  | { type: 'set'; fragment: number; configId: number; key: Buffer; value: Buffer }
  | { type: 'delete'; key: Buffer }
  | { type: 'dirtyInit'; fragment: number; configId: number }
  | { type: 'dirtyAdd'; fragment: number; key: Buffer }
  | { type: 'dirtyDrop'; fragment: number }
  | { type: 'dirtyDone'; fragment: number };

/** The 16 bytes a cache.log starts with. */
export function cacheLogHeader(): Buffer {
  const b = Buffer.alloc(CACHE_LOG_HEADER);
  CACHE_LOG_MAGIC.copy(b, 0);
  b.writeUInt32LE(CACHE_LOG_VERSION, 8);
  b.writeUInt32LE(checksum32(b.subarray(0, 12)), 12);
  return b;
}

/** Bytes `encodeCacheRecord` writes for `r` (frame included), without encoding it. */
export function cacheRecordSize(r: CacheRecord): number {
  return CACHE_FRAME + bodySize(r);
}

function bodySize(r: CacheRecord): number {
  switch (r.type) {
    case 'set': return 17 + r.key.length + r.value.length;
    case 'delete': return 1 + r.key.length;
    case 'dirtyInit': return 13;
    case 'dirtyAdd': return 5 + r.key.length;
    case 'dirtyDrop':
    case 'dirtyDone': return 5;
  }
}

/**
 * The bytes to append for `r`: its frame and body. BAD_ARGUMENT for what the reader would
 * refuse (a key over MAX_CACHE_KEY, a body over MAX_CACHE_RECORD, a fragment that is not a
 * u32, a configId that is not a non-negative safe integer), so nothing unreadable is written.
 */
export function encodeCacheRecord(r: CacheRecord): Buffer {
  const size = bodySize(r);
  if (size > MAX_CACHE_RECORD) throw new NovaError('BAD_ARGUMENT', `cache record of ${size} bytes exceeds ${MAX_CACHE_RECORD}`);
  if ('key' in r && r.key.length > MAX_CACHE_KEY) throw new NovaError('BAD_ARGUMENT', `cache key of ${r.key.length} bytes exceeds ${MAX_CACHE_KEY}`);
  if ('fragment' in r) checkU32('fragment', r.fragment);
  if ('configId' in r && !(Number.isSafeInteger(r.configId) && r.configId >= 0)) {
    throw new NovaError('BAD_ARGUMENT', `configId ${r.configId} is not a non-negative safe integer`);
  }
  const b = new ByteBuilder(CACHE_FRAME + size);
  b.zeros(CACHE_FRAME);
  switch (r.type) {
    case 'set':
      b.u8(CacheRecordType.Set);
      b.u32(r.fragment);
      b.u64(r.configId);
      b.u32(r.key.length);
      b.bytes(r.key);
      b.bytes(r.value);
      break;
    case 'delete':
      b.u8(CacheRecordType.Delete);
      b.bytes(r.key);
      break;
    case 'dirtyInit':
      b.u8(CacheRecordType.DirtyInit);
      b.u32(r.fragment);
      b.u64(r.configId);
      break;
    case 'dirtyAdd':
      b.u8(CacheRecordType.DirtyAdd);
      b.u32(r.fragment);
      b.bytes(r.key);
      break;
    case 'dirtyDrop':
      b.u8(CacheRecordType.DirtyDrop);
      b.u32(r.fragment);
      break;
    case 'dirtyDone':
      b.u8(CacheRecordType.DirtyDone);
      b.u32(r.fragment);
      break;
  }
  const out = b.finish();
  out.writeUInt32LE(size, 0);
  out.writeUInt32LE(checksum32(out.subarray(0, 4)), 4);
  out.writeUInt32LE(checksum32(out.subarray(CACHE_FRAME)), 8);
  return out;
}

function checkU32(what: string, v: number): void {
  if (!(Number.isInteger(v) && v >= 0 && v <= 0xffff_ffff)) throw new NovaError('BAD_ARGUMENT', `${what} ${v} is not a u32`);
}

export interface CacheLogContents {
  /** The file's format version (a version 1 file is rewritten as the current one when opened). */
  version: number;
  /** The records in file order. Keys and values are views into the bytes read: copy what is kept. */
  records: CacheRecord[];
  /** Bytes of the file that hold the header and whole records: where a torn tail starts. */
  validBytes: number;
  /** Set when the file ends in a torn tail: what was found, naming the file and offset. */
  tornTail?: string;
}

/**
 * Reads the records of `bytes`, the contents of cache.log (`file` names it in messages).
 * A bad header is CORRUPTION. A bad record (cut short, a checksum mismatch, an unknown type,
 * a malformed field, a length over the bounds) is a torn tail when its frame reaches the end
 * of the file, or when only zeros follow it (space a file system extended but never wrote);
 * anywhere else it is CORRUPTION naming the file and offset.
 */
export function readCacheLog(bytes: Buffer, file: string): CacheLogContents {
  const corrupt = (at: number, why: string): never => {
    throw new NovaError('CORRUPTION', `${file}: offset ${at}: ${why}`);
  };
  if (bytes.length < CACHE_LOG_HEADER) corrupt(0, `a header of ${bytes.length} bytes (it takes ${CACHE_LOG_HEADER})`);
  if (!bytes.subarray(0, 8).equals(CACHE_LOG_MAGIC)) corrupt(0, 'not a cache log (bad magic)');
  const version = readU32(bytes, 8);
  if (version !== 1 && version !== CACHE_LOG_VERSION) corrupt(8, `format version ${version} (this build reads 1 and ${CACHE_LOG_VERSION})`);
  if (readU32(bytes, 12) !== checksum32(bytes.subarray(0, 12))) corrupt(12, 'header checksum mismatch');

  const records: CacheRecord[] = [];
  let at = CACHE_LOG_HEADER;
  while (at < bytes.length) {
    const why = version === 1 ? recordV1(bytes, at) : record(bytes, at);
    if (typeof why !== 'string') {
      records.push(why.record);
      at = why.end;
      continue;
    }
    // A record is one append: only the last can have been cut short by a crash.
    if (tornAt(bytes, at, version) || allZero(bytes, at)) {
      return { version, records, validBytes: at, tornTail: `${file}: offset ${at}: ${why} (a torn tail: a write cut short)` };
    }
    corrupt(at, why);
  }
  return { version, records, validBytes: at };
}

/**
 * Whether the damaged record at `at` may be the last append cut short: version 2, its frame cut
 * short, or its (checked) length reaching the end of the file; version 1, its length (unchecked)
 * reaching the end.
 */
function tornAt(b: Buffer, at: number, version: number): boolean {
  const frame = version === 1 ? V1_FRAME : CACHE_FRAME;
  if (b.length - at < frame) return true;
  const length = readU32(b, at);
  if (version !== 1 && readU32(b, at + 4) !== checksum32(b.subarray(at, at + 4))) return false;
  return at + frame + length >= b.length;
}

/** The version 2 record at `at`, or why there is none. */
function record(b: Buffer, at: number): { record: CacheRecord; end: number } | string {
  if (b.length - at < CACHE_FRAME) return `a record frame cut short (${b.length - at} of ${CACHE_FRAME} bytes)`;
  if (readU32(b, at + 4) !== checksum32(b.subarray(at, at + 4))) return 'record length checksum mismatch';
  return body(b, at, CACHE_FRAME, 8);
}

/** A version 1 record at `at` (its length unchecked), or why there is none. */
function recordV1(b: Buffer, at: number): { record: CacheRecord; end: number } | string {
  if (b.length - at < V1_FRAME) return `a record frame cut short (${b.length - at} of ${V1_FRAME} bytes)`;
  return body(b, at, V1_FRAME, 4);
}

/** The body of the record at `at`, whose frame is `frame` bytes with the body's checksum at `sum`. */
function body(b: Buffer, at: number, frame: number, sum: number): { record: CacheRecord; end: number } | string {
  const length = readU32(b, at);
  if (length === 0) return 'a record of 0 bytes';
  if (length > MAX_CACHE_RECORD) return `a record of ${length} bytes (at most ${MAX_CACHE_RECORD})`;
  const start = at + frame;
  const end = start + length;
  if (end > b.length) return `a record of ${length} bytes runs past the end of the file (${b.length})`;
  const content = b.subarray(start, end);
  if (checksum32(content) !== readU32(b, at + sum)) return 'record checksum mismatch';
  const r = decodeBody(content);
  return typeof r === 'string' ? r : { record: r, end };
}

function decodeBody(body: Buffer): CacheRecord | string {
  const type = body[0];
  const key = (from: number): Buffer | string =>
    body.length - from > MAX_CACHE_KEY ? `a key of ${body.length - from} bytes (at most ${MAX_CACHE_KEY})` : body.subarray(from);
  const exactly = (n: number, name: string): string | undefined =>
    body.length === n ? undefined : `a ${name} record of ${body.length} bytes (it takes ${n})`;
  switch (type) {
    case CacheRecordType.Set: {
      if (body.length < 17) return `a SET record of ${body.length} bytes (at least 17)`;
      const configId = u64(body, 5);
      if (configId === undefined) return 'a configId over 2^53';
      const keyLength = readU32(body, 13);
      if (keyLength > MAX_CACHE_KEY) return `a key of ${keyLength} bytes (at most ${MAX_CACHE_KEY})`;
      if (17 + keyLength > body.length) return `a key of ${keyLength} bytes runs past its record`;
      return {
        type: 'set', fragment: readU32(body, 1), configId,
        key: body.subarray(17, 17 + keyLength), value: body.subarray(17 + keyLength),
      };
    }
    case CacheRecordType.Delete: {
      const k = key(1);
      return typeof k === 'string' ? k : { type: 'delete', key: k };
    }
    case CacheRecordType.DirtyInit: {
      const bad = exactly(13, 'DIRTY_INIT');
      if (bad) return bad;
      const configId = u64(body, 5);
      if (configId === undefined) return 'a configId over 2^53';
      return { type: 'dirtyInit', fragment: readU32(body, 1), configId };
    }
    case CacheRecordType.DirtyAdd: {
      if (body.length < 5) return `a DIRTY_ADD record of ${body.length} bytes (at least 5)`;
      const k = key(5);
      return typeof k === 'string' ? k : { type: 'dirtyAdd', fragment: readU32(body, 1), key: k };
    }
    case CacheRecordType.DirtyDrop:
      return exactly(5, 'DIRTY_DROP') ?? { type: 'dirtyDrop', fragment: readU32(body, 1) };
    case CacheRecordType.DirtyDone:
      return exactly(5, 'DIRTY_DONE') ?? { type: 'dirtyDone', fragment: readU32(body, 1) };
    default:
      return `unknown record type ${type}`;
  }
}

/** The u64 at `at`, or undefined if it is not a safe integer. */
function u64(b: Buffer, at: number): number | undefined {
  if (readU32(b, at + 4) > 0x1f_ffff) return undefined;
  return readU64(b, at);
}

function allZero(b: Buffer, from: number): boolean {
  for (let i = from; i < b.length; i++) if (b[i] !== 0) return false;
  return true;
}
