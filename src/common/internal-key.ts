/**
 * Internal keys (DESIGN.md §3): user key followed by an 8-byte little-endian trailer
 * `sequence * 256 + type`, as in LevelDB. Ordered by user key ascending (bytewise), then by
 * sequence descending, so the newest version of a key comes first. Sequences are below
 * 2^53 (JS-safe); a snapshot is a sequence number.
 */
import { NovaError } from './errors.js';

/** Value types in the trailer. Written to disk: never renumber. */
export const ValueType = { Delete: 0, Put: 1 } as const;
export type ValueType = (typeof ValueType)[keyof typeof ValueType];

export const TRAILER_BYTES = 8;
export const MAX_SEQUENCE = 2 ** 53 - 1;
/** The type to seek with: at one sequence, sorts before (newer than) any real type. */
export const SEEK_TYPE = ValueType.Put;

export function makeInternalKey(userKey: Uint8Array, sequence: number, type: ValueType): Buffer {
  const out = Buffer.allocUnsafe(userKey.length + TRAILER_BYTES);
  out.set(userKey, 0);
  writeTrailer(out, userKey.length, sequence, type);
  return out;
}

export function writeTrailer(out: Uint8Array, at: number, sequence: number, type: number): void {
  const lo = (sequence % 0x1000000) * 256 + type;
  const hi = Math.floor(sequence / 0x1000000);
  out[at] = lo & 0xff; out[at + 1] = (lo >>> 8) & 0xff; out[at + 2] = (lo >>> 16) & 0xff; out[at + 3] = lo >>> 24;
  out[at + 4] = hi & 0xff; out[at + 5] = (hi >>> 8) & 0xff; out[at + 6] = (hi >>> 16) & 0xff; out[at + 7] = hi >>> 24;
}

function trailerLo(k: Uint8Array, at: number): number {
  return (k[at] | (k[at + 1] << 8) | (k[at + 2] << 16)) + k[at + 3] * 0x1000000;
}

function trailerHi(k: Uint8Array, at: number): number {
  return (k[at + 4] | (k[at + 5] << 8) | (k[at + 6] << 16)) + k[at + 7] * 0x1000000;
}

export function sequenceOf(ikey: Uint8Array): number {
  const at = ikey.length - TRAILER_BYTES;
  return trailerHi(ikey, at) * 0x1000000 + Math.floor(trailerLo(ikey, at) / 256);
}

export function typeOf(ikey: Uint8Array): number {
  return ikey[ikey.length - TRAILER_BYTES];
}

export function userKeyOf(ikey: Buffer): Buffer {
  return ikey.subarray(0, ikey.length - TRAILER_BYTES);
}

/** Bytewise comparison of a[aStart, aEnd) and b[bStart, bEnd), without allocating. */
export function compareBytes(a: Uint8Array, aStart: number, aEnd: number, b: Uint8Array, bStart: number, bEnd: number): number {
  const n = Math.min(aEnd - aStart, bEnd - bStart);
  for (let i = 0; i < n; i++) {
    const d = a[aStart + i] - b[bStart + i];
    if (d !== 0) return d;
  }
  return (aEnd - aStart) - (bEnd - bStart);
}

/** Orders internal keys: user key ascending, then sequence (and type) descending. */
export function compareInternalKeys(a: Uint8Array, b: Uint8Array): number {
  const au = a.length - TRAILER_BYTES;
  const bu = b.length - TRAILER_BYTES;
  const c = compareBytes(a, 0, au, b, 0, bu);
  if (c !== 0) return c;
  const hi = trailerHi(b, bu) - trailerHi(a, au);
  if (hi !== 0) return hi;
  return trailerLo(b, bu) - trailerLo(a, au);
}

/** compareInternalKeys of the key in a[aStart, aEnd) and b, without making a view of it. */
export function compareInternalKeyAt(a: Uint8Array, aStart: number, aEnd: number, b: Uint8Array): number {
  const au = aEnd - TRAILER_BYTES;
  const bu = b.length - TRAILER_BYTES;
  const c = compareBytes(a, aStart, au, b, 0, bu);
  if (c !== 0) return c;
  const hi = trailerHi(b, bu) - trailerHi(a, au);
  if (hi !== 0) return hi;
  return trailerLo(b, bu) - trailerLo(a, au);
}

/** Whether `ikey` can hold a trailer with a known type: checkInternalKey's test, for hot paths that build no `where`. */
export function isInternalKey(ikey: Uint8Array): boolean {
  if (ikey.length < TRAILER_BYTES) return false;
  const type = typeOf(ikey);
  return type === ValueType.Put || type === ValueType.Delete;
}

/** Throws CORRUPTION unless `ikey` can hold a trailer with a known type. */
export function checkInternalKey(ikey: Uint8Array, where: string): void {
  if (isInternalKey(ikey)) return;
  if (ikey.length < TRAILER_BYTES) {
    throw new NovaError('CORRUPTION', `${where}: internal key of ${ikey.length} bytes has no trailer`);
  }
  const type = typeOf(ikey);
  if (type !== ValueType.Put && type !== ValueType.Delete) {
    throw new NovaError('CORRUPTION', `${where}: unknown value type ${type}`);
  }
}

/**
 * The first 6 bytes of b[start, end) as a number, zero-padded. Numbers order like the bytes
 * they abbreviate, so a comparison of abbreviations decides most key comparisons without
 * reading the keys; equal abbreviations need the full comparison.
 */
export function abbreviateKey(b: Uint8Array, start: number, end: number): number {
  let v = 0;
  for (let i = 0; i < 6; i++) v = v * 256 + (start + i < end ? b[start + i] : 0);
  return v;
}
