/**
 * A write batch: puts and deletes applied atomically with consecutive sequence numbers,
 * and its encoding as a log record (doc/format/log.md, "Write batch"):
 *
 *   u8 version (2) | u32 memtableId | u64 firstSequence | u32 count | u8 flags | [session] | entry*
 *   session = u64 idHigh | u64 idLow | u64 seq | u64 floor   (flags bit 0; sessions.ts)
 *   entry = u8 type (0 delete, 1 put) | varint keyLength | key | [varint valueLength | value]
 *
 * Limits are checked when an entry is added, so an oversize key or value never reaches
 * the log; decoding validates every length and fails with CORRUPTION naming where.
 */
import { ByteBuilder, readU32, readU64, readVarint, varintLength } from '../common/coding.js';
import { NovaError } from '../common/errors.js';
import { ValueType } from '../common/internal-key.js';
import { CLIENT_ID_BYTES, type SessionRef } from '../common/write-id.js';

/**
 * Batch record versions. Never renumber.
 * 1: memtable id, first sequence, typed entries.
 * 2: a flags byte after the count, and the client's session and write number when flag 1 is set.
 */
const BATCH_VERSION = 2;
const V1_HEADER = 17;
const V2_HEADER = 18;
const FLAG_SESSION = 1;
const SESSION_BYTES = CLIENT_ID_BYTES + 16;
/** Room reserved before the entries: the longest header. A record starts where its header does. */
const RESERVED = V2_HEADER + SESSION_BYTES;

export interface Limits {
  /** Largest key, bytes. */
  maxKeyBytes: number;
  /** Largest value, bytes. */
  maxValueBytes: number;
}

export const DEFAULT_LIMITS: Limits = { maxKeyBytes: 4 * 1024, maxValueBytes: 4 * 1024 * 1024 };

export interface BatchEntry {
  type: ValueType;
  key: Buffer;
  value: Buffer; // empty for deletes
}

export type EntryFn = (type: ValueType, key: Buffer, value: Buffer) => void;

export class WriteBatch {
  /**
   * The log record itself (LevelDB's WriteBatch rep): RESERVED bytes, the header filled in by encode(),
   * then the entries. Encoding then copies nothing.
   */
  private readonly rep: ByteBuilder;
  private n = 0;

  /** `capacity`: bytes of entries expected (the record grows past it as needed). */
  constructor(private readonly limits: Limits = DEFAULT_LIMITS, capacity = 256) {
    this.rep = new ByteBuilder(RESERVED + capacity);
    this.rep.zeros(RESERVED);
  }

  /** Entry bytes for a batch of one put of `key` and `value` (its exact capacity). */
  static putBytes(key: Uint8Array, value: Uint8Array): number {
    return 1 + varintLength(key.length) + key.length + varintLength(value.length) + value.length;
  }

  get count(): number {
    return this.n;
  }

  /** Bytes of the encoded entries (without the header). */
  get byteSize(): number {
    return this.rep.length - RESERVED;
  }

  put(key: Uint8Array, value: Uint8Array): this {
    this.check(key, value);
    this.rep.u8(ValueType.Put);
    this.rep.varint(key.length);
    this.rep.bytes(key);
    this.rep.varint(value.length);
    this.rep.bytes(value);
    this.n++;
    return this;
  }

  delete(key: Uint8Array): this {
    this.check(key, undefined);
    this.rep.u8(ValueType.Delete);
    this.rep.varint(key.length);
    this.rep.bytes(key);
    this.n++;
    return this;
  }

  /** An independent copy. */
  clone(): WriteBatch {
    const c = new WriteBatch(this.limits, this.byteSize);
    c.rep.bytes(this.rep.view(), RESERVED);
    c.n = this.n;
    return c;
  }

  clear(): void {
    this.rep.reset();
    this.rep.zeros(RESERVED);
    this.n = 0;
  }

  /** The key of the first entry, a view into the batch; undefined when it is empty. */
  firstKey(): Buffer | undefined {
    if (this.n === 0) return undefined;
    const b = this.rep.view();
    const c = { at: RESERVED + 1 }; // after the type byte
    const klen = readVarint(b, c, b.length);
    return b.subarray(c.at, c.at + klen);
  }

  /** Calls `fn` for each entry in order; keys and values are views into the batch. */
  forEach(fn: EntryFn): void {
    forEachEntry(this.rep.view(), RESERVED, 'write batch', fn);
  }

  /**
   * The log record for this batch, its entries numbered from `firstSequence`, naming the
   * client's write when there is one: a view of the batch's own bytes with the header filled
   * in (it ends where the entries start), valid until the batch changes.
   */
  encode(memtableId: number, firstSequence: number, session?: SessionRef): Buffer {
    const rep = this.rep.view();
    const start = session ? 0 : SESSION_BYTES;
    const out = rep.subarray(start);
    out[0] = BATCH_VERSION;
    out.writeUInt32LE(memtableId >>> 0, 1);
    writeU64(out, firstSequence, 5);
    out.writeUInt32LE(this.n >>> 0, 13);
    out[17] = session ? FLAG_SESSION : 0;
    if (session) {
      writeU64(out, session.idHigh, V2_HEADER);
      writeU64(out, session.idLow, V2_HEADER + 8);
      writeU64(out, session.seq, V2_HEADER + CLIENT_ID_BYTES);
      writeU64(out, session.floor, V2_HEADER + CLIENT_ID_BYTES + 8);
    }
    return out;
  }

  private check(key: Uint8Array, value: Uint8Array | undefined): void {
    if (key.length > this.limits.maxKeyBytes) {
      throw new NovaError('BAD_ARGUMENT', `key of ${key.length} bytes exceeds the limit of ${this.limits.maxKeyBytes} bytes (maxKeyBytes)`);
    }
    if (value !== undefined && value.length > this.limits.maxValueBytes) {
      throw new NovaError('BAD_ARGUMENT', `value of ${value.length} bytes exceeds the limit of ${this.limits.maxValueBytes} bytes (maxValueBytes)`);
    }
  }
}

export interface DecodedBatch {
  memtableId: number;
  firstSequence: number;
  entries: BatchEntry[];
  /** The client's write it was, if a client numbered it (`open` is not logged: false). */
  session?: SessionRef;
}

export function decodeBatch(record: Buffer, where: string): DecodedBatch {
  const version = record.length > 0 ? record[0] : undefined;
  const header = version === 1 ? V1_HEADER : V2_HEADER;
  if (record.length < header) batchError(where, 0, `of ${record.length} bytes is shorter than its header`);
  if (version !== 1 && version !== 2) batchError(where, 0, `has unsupported version ${record[0]}`);
  const memtableId = readU32(record, 1);
  const firstSequence = readU64(record, 5);
  const count = readU32(record, 13);
  let at = header;
  let session: SessionRef | undefined;
  if (version === 2) {
    const flags = record[17];
    if ((flags & ~FLAG_SESSION) !== 0) batchError(where, 17, `has unknown flags ${flags}`);
    if (flags & FLAG_SESSION) {
      if (record.length < V2_HEADER + SESSION_BYTES) batchError(where, V2_HEADER, 'ends inside its session');
      const idHigh = readU64(record, V2_HEADER);
      const idLow = readU64(record, V2_HEADER + 8);
      const seq = readU64(record, V2_HEADER + CLIENT_ID_BYTES);
      const floor = readU64(record, V2_HEADER + CLIENT_ID_BYTES + 8);
      if (seq < 1 || floor > seq) batchError(where, V2_HEADER + CLIENT_ID_BYTES, `has write ${seq} under floor ${floor}`);
      session = { idHigh, idLow, seq, floor, open: false };
      at += SESSION_BYTES;
    }
  }
  const entries: BatchEntry[] = [];
  forEachEntry(record, at, where, (type, key, value) => entries.push({ type, key, value }));
  if (entries.length !== count) batchError(where, 13, `says ${count} entries but holds ${entries.length}`);
  return session ? { memtableId, firstSequence, entries, session } : { memtableId, firstSequence, entries };
}

function writeU64(out: Buffer, v: number, at: number): void {
  out.writeUInt32LE(v % 0x1_0000_0000, at);
  out.writeUInt32LE(Math.floor(v / 0x1_0000_0000), at + 4);
}

const EMPTY: Buffer = Buffer.alloc(0);

function batchError(where: string, offset: number, why: string): never {
  throw new NovaError('CORRUPTION', `${where}: write batch ${why} at offset ${offset}`);
}

/** Walks the entries in `b` from `at` to its end, validating every length. */
function forEachEntry(b: Buffer, at: number, where: string, fn: EntryFn): void {
  const c = { at };
  try {
    while (c.at < b.length) {
      const typeAt = c.at;
      const type = b[c.at++];
      if (type !== ValueType.Put && type !== ValueType.Delete) batchError(where, typeAt, `has unknown entry type ${type}`);
      const klen = readVarint(b, c, b.length);
      if (c.at + klen > b.length) batchError(where, c.at, `key of ${klen} bytes overruns the record`);
      const key = b.subarray(c.at, c.at + klen);
      c.at += klen;
      let value = EMPTY;
      if (type === ValueType.Put) {
        const vlen = readVarint(b, c, b.length);
        if (c.at + vlen > b.length) batchError(where, c.at, `value of ${vlen} bytes overruns the record`);
        value = b.subarray(c.at, c.at + vlen);
        c.at += vlen;
      }
      fn(type as ValueType, key, value);
    }
  } catch (err) {
    if (err instanceof NovaError && !err.message.startsWith(where)) batchError(where, c.at, err.message);
    throw err;
  }
}
