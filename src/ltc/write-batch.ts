/**
 * A write batch: puts and deletes applied atomically with consecutive sequence numbers,
 * and its encoding as a log record (doc/format/log.md, "Write batch"):
 *
 *   u8 version (1) | u32 memtableId | u64 firstSequence | u32 count | entry*
 *   entry = u8 type (0 delete, 1 put) | varint keyLength | key | [varint valueLength | value]
 *
 * Limits are checked when an entry is added, so an oversize key or value never reaches
 * the log; decoding validates every length and fails with CORRUPTION naming where.
 */
import { ByteBuilder, readU32, readU64, readVarint } from '../common/coding.js';
import { NovaError } from '../common/errors.js';
import { ValueType } from '../common/internal-key.js';

/** Batch record versions. 1: memtable id, first sequence, typed entries. Never renumber. */
const BATCH_VERSION = 1;
const HEADER = 17;

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
  private readonly body = new ByteBuilder(256);
  private n = 0;

  constructor(private readonly limits: Limits = DEFAULT_LIMITS) {}

  get count(): number {
    return this.n;
  }

  /** Bytes of the encoded entries (without the header). */
  get byteSize(): number {
    return this.body.length;
  }

  put(key: Uint8Array, value: Uint8Array): this {
    this.check(key, value);
    this.body.u8(ValueType.Put);
    this.body.varint(key.length);
    this.body.bytes(key);
    this.body.varint(value.length);
    this.body.bytes(value);
    this.n++;
    return this;
  }

  delete(key: Uint8Array): this {
    this.check(key, undefined);
    this.body.u8(ValueType.Delete);
    this.body.varint(key.length);
    this.body.bytes(key);
    this.n++;
    return this;
  }

  /** An independent copy. */
  clone(): WriteBatch {
    const c = new WriteBatch(this.limits);
    c.body.bytes(this.body.view());
    c.n = this.n;
    return c;
  }

  clear(): void {
    this.body.reset();
    this.n = 0;
  }

  /** The key of the first entry, a view into the batch; undefined when it is empty. */
  firstKey(): Buffer | undefined {
    if (this.n === 0) return undefined;
    const b = this.body.view();
    const c = { at: 1 }; // after the type byte
    const klen = readVarint(b, c, b.length);
    return b.subarray(c.at, c.at + klen);
  }

  /** Calls `fn` for each entry in order; keys and values are views into the batch. */
  forEach(fn: EntryFn): void {
    forEachEntry(this.body.view(), 0, 'write batch', fn);
  }

  /** The log record for this batch, its entries numbered from `firstSequence`. */
  encode(memtableId: number, firstSequence: number): Buffer {
    const out = new ByteBuilder(HEADER + this.body.length);
    out.u8(BATCH_VERSION);
    out.u32(memtableId);
    out.u64(firstSequence);
    out.u32(this.n);
    out.bytes(this.body.view());
    return out.finish();
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
}

export function decodeBatch(record: Buffer, where: string): DecodedBatch {
  if (record.length < HEADER) batchError(where, 0, `of ${record.length} bytes is shorter than its header`);
  if (record[0] !== BATCH_VERSION) batchError(where, 0, `has unsupported version ${record[0]}`);
  const memtableId = readU32(record, 1);
  const firstSequence = readU64(record, 5);
  const count = readU32(record, 13);
  const entries: BatchEntry[] = [];
  forEachEntry(record, HEADER, where, (type, key, value) => entries.push({ type, key, value }));
  if (entries.length !== count) batchError(where, 13, `says ${count} entries but holds ${entries.length}`);
  return { memtableId, firstSequence, entries };
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
