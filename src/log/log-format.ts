/**
 * Log file framing (doc/format/log.md), after LevelDB's log format: the file is a sequence
 * of 32 KiB blocks; a record is cut into fragments that never cross a block boundary.
 *
 *   fragment = u32 xxh32(type | payload) | u16 length | u8 type | payload
 *   type     = 1 FULL | 2 FIRST | 3 MIDDLE | 4 LAST     (never renumber; 0 = block padding)
 *
 * A block tail shorter than a fragment header is zero-filled. Pure: the writer turns
 * records into bytes to append; the reader turns a file's bytes back into records.
 */
import { checksum32 } from '../common/checksum.js';
import { ByteBuilder, readU32 } from '../common/coding.js';
import { NovaError } from '../common/errors.js';

export const LOG_BLOCK = 32 * 1024;
export const LOG_HEADER = 7;
const FULL = 1;
const FIRST = 2;
const MIDDLE = 3;
const LAST = 4;

/** Frames records. Keeps the offset within the current block across calls. */
export class LogFramer {
  private blockOffset: number;
  private readonly out = new ByteBuilder(LOG_BLOCK);

  /** `fileSize`: bytes already in the file (when appending to an existing log). */
  constructor(fileSize = 0) {
    this.blockOffset = fileSize % LOG_BLOCK;
  }

  /** The bytes to append for `payload`. A view, valid until the next call. */
  frame(payload: Uint8Array): Buffer {
    this.out.reset();
    let at = 0;
    let first = true;
    do {
      const left = LOG_BLOCK - this.blockOffset;
      if (left < LOG_HEADER) {
        for (let i = 0; i < left; i++) this.out.u8(0);
        this.blockOffset = 0;
        continue;
      }
      const n = Math.min(payload.length - at, left - LOG_HEADER);
      const last = at + n === payload.length;
      const type = first && last ? FULL : first ? FIRST : last ? LAST : MIDDLE;
      const start = this.out.length;
      this.out.u32(0); // checksum, filled below
      this.out.u8(n & 0xff);
      this.out.u8(n >>> 8);
      this.out.u8(type);
      this.out.bytes(payload, at, at + n);
      const view = this.out.view();
      view.writeUInt32LE(checksum32(view.subarray(start + 6, start + LOG_HEADER + n)), start);
      this.blockOffset += LOG_HEADER + n;
      at += n;
      first = false;
    } while (at < payload.length);
    return this.out.view();
  }
}

export interface LogContents {
  records: Buffer[];
  /** Offset of a torn tail (a last record cut short by a crash), if any. */
  tornAt?: number;
  /** Bytes of the file that hold whole records. */
  validBytes: number;
}

/** Damage found by scanLog: where, and what. */
class Damage {
  constructor(readonly offset: number, readonly why: string) {}
}

/**
 * Reads every record of a log file. A damaged last record (cut short, or with a bad
 * checksum and nothing valid after it) is a torn tail from a crash: reported in `tornAt`,
 * not thrown. Damage before a valid record is CORRUPTION naming the file and offset.
 */
export function readLog(file: Buffer, name: string): LogContents {
  const out: LogContents = { records: [], validBytes: 0 };
  try {
    return scanLog(file, out);
  } catch (err) {
    if (err instanceof Damage) throw new NovaError('CORRUPTION', `${name}: ${err.why} at offset ${err.offset}`);
    throw err;
  }
}

/**
 * The records before the first damage of any kind, never throwing: `damage` says where the
 * reading stopped when whole records follow the damage (a hole, which a replica of a log
 * whose appends overlap may hold: see stoc-log-store.ts). A torn tail is reported as readLog
 * does.
 */
export function readLogPrefix(file: Buffer): LogContents & { damage?: { offset: number; why: string } } {
  const out: LogContents = { records: [], validBytes: 0 };
  try {
    return scanLog(file, out);
  } catch (err) {
    if (err instanceof Damage) return { ...out, damage: { offset: err.offset, why: err.why } };
    throw err;
  }
}

/** Fills `out` with the records it reads; throws Damage at damage before a valid record. */
function scanLog(file: Buffer, out: LogContents): LogContents {
  const records = out.records;
  let pending: Buffer[] = [];
  let recordStart = -1;
  let at = 0;
  const torn = (offset: number): LogContents => ({ records, tornAt: offset, validBytes: out.validBytes });
  const corrupt = (offset: number, why: string): never => {
    throw new Damage(offset, why);
  };
  while (at < file.length) {
    const left = LOG_BLOCK - (at % LOG_BLOCK);
    if (left < LOG_HEADER) {
      at += left; // block padding
      continue;
    }
    if (file.length - at < LOG_HEADER) return torn(recordStart >= 0 ? recordStart : at);
    const length = file[at + 4] | (file[at + 5] << 8);
    const type = file[at + 6];
    if (type === 0 && length === 0 && isZero(file, at, Math.min(file.length, at + left))) {
      // Zeros: preallocated space at the end of the file. Inside a record, or with valid
      // fragments after them, they are damage.
      if (!hasValidAfter(file, at + left)) return recordStart >= 0 ? torn(recordStart) : out;
      corrupt(at, 'zeroed block before valid fragments');
    }
    const end = at + LOG_HEADER + length;
    if (end > file.length) return torn(recordStart >= 0 ? recordStart : at);
    if (length > left - LOG_HEADER) {
      if (!hasValidAfter(file, at + left)) return torn(recordStart >= 0 ? recordStart : at);
      corrupt(at, `fragment of ${length} bytes crosses its block`);
    }
    if (checksum32(file.subarray(at + 6, end)) !== readU32(file, at)) {
      if (!hasValidAfter(file, end)) return torn(recordStart >= 0 ? recordStart : at);
      corrupt(at, 'fragment checksum mismatch');
    }
    const payload = file.subarray(at + LOG_HEADER, end);
    const inRecord = recordStart >= 0;
    if (type === FULL || type === FIRST) {
      if (inRecord) corrupt(at, 'a record starts inside another');
      if (type === FULL) {
        records.push(Buffer.from(payload));
        out.validBytes = end;
      } else {
        recordStart = at;
        pending = [payload];
      }
    } else if (type === MIDDLE || type === LAST) {
      if (!inRecord) corrupt(at, 'a record continues that never started');
      pending.push(payload);
      if (type === LAST) {
        records.push(Buffer.concat(pending));
        pending = [];
        recordStart = -1;
        out.validBytes = end;
      }
    } else {
      if (!hasValidAfter(file, end)) return torn(recordStart >= 0 ? recordStart : at);
      corrupt(at, `unknown fragment type ${type}`);
    }
    at = end;
  }
  if (recordStart >= 0) return torn(recordStart);
  return out;
}

function isZero(b: Buffer, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (b[i] !== 0) return false;
  return true;
}

/**
 * Whether a checksum-valid fragment starts at `from` or at any later block boundary (where
 * a reader can always resynchronise). If none does, the damage runs to the end of the file.
 */
function hasValidAfter(file: Buffer, from: number): boolean {
  const validAt = (p: number): boolean => {
    if (p + LOG_HEADER > file.length) return false;
    const end = p + LOG_HEADER + (file[p + 4] | (file[p + 5] << 8));
    return file[p + 6] !== 0 && end <= file.length && checksum32(file.subarray(p + 6, end)) === readU32(file, p);
  };
  if (LOG_BLOCK - (from % LOG_BLOCK) >= LOG_HEADER && validAt(from)) return true;
  for (let block = Math.ceil(from / LOG_BLOCK) * LOG_BLOCK; block < file.length; block += LOG_BLOCK) {
    if (validAt(block)) return true;
  }
  return false;
}
