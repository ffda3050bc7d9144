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
  const bad = (offset: number, why: string): never => {
    throw new NovaError('CORRUPTION', `${where}: write batch ${why} at offset ${offset}`);
  };
  if (record.length < HEADER) bad(0, `of ${record.length} bytes is shorter than its header`);
  if (record[0] !== BATCH_VERSION) bad(0, `has unsupported version ${record[0]}`);
  const memtableId = readU32(record, 1);
  const firstSequence = readU64(record, 5);
  const count = readU32(record, 13);
  const entries: BatchEntry[] = [];
  const c = { at: HEADER };
  try {
    while (c.at < record.length) {
      const typeAt = c.at;
      const type = record[c.at++];
      if (type !== ValueType.Put && type !== ValueType.Delete) bad(typeAt, `has unknown entry type ${type}`);
      const klen = readVarint(record, c, record.length);
      if (c.at + klen > record.length) bad(c.at, `key of ${klen} bytes overruns the record`);
      const key = record.subarray(c.at, c.at + klen);
      c.at += klen;
      let value: Buffer = Buffer.alloc(0);
      if (type === ValueType.Put) {
        const vlen = readVarint(record, c, record.length);
        if (c.at + vlen > record.length) bad(c.at, `value of ${vlen} bytes overruns the record`);
        value = record.subarray(c.at, c.at + vlen);
        c.at += vlen;
      }
      entries.push({ type: type as ValueType, key, value });
    }
  } catch (err) {
    if (err instanceof NovaError && !err.message.startsWith(where)) bad(c.at, err.message);
    throw err;
  }
  if (entries.length !== count) bad(13, `says ${count} entries but holds ${entries.length}`);
  return { memtableId, firstSequence, entries };
}
