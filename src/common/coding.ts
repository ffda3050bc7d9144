/**
 * Little-endian fixed-width and varint encodings shared by the on-disk formats, and a
 * growable byte builder. Pure functions; LevelDB's util/coding.h in spirit.
 */
import { NovaError } from './errors.js';

/** An append-only byte buffer that doubles as it grows. */
export class ByteBuilder {
  private buf: Buffer;
  private len = 0;

  /**
   * `unpooled`: never in Node's shared pool of small buffers, so the buffer is the builder's
   * alone and can be transferred to another thread as it is (a finished table, worker-main.ts).
   */
  constructor(initial: number | Buffer = 4096, private readonly unpooled = false) {
    // A Buffer given is memory to build in (its contents are overwritten): see TableOptions.memory.
    this.buf = typeof initial === 'number' ? this.alloc(initial) : initial;
  }

  private alloc(n: number): Buffer {
    return this.unpooled ? Buffer.allocUnsafeSlow(n) : Buffer.allocUnsafe(n);
  }

  get length(): number {
    return this.len;
  }

  /** Bytes it holds before it must grow. */
  get capacity(): number {
    return this.buf.length;
  }

  reset(): void {
    this.len = 0;
  }

  private reserve(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = this.alloc(size);
    this.buf.copy(next, 0, 0, this.len);
    this.buf = next;
  }

  bytes(data: Uint8Array, start = 0, end = data.length): void {
    const n = end - start;
    this.reserve(n);
    if (n > 64) {
      this.buf.set(start === 0 && end === data.length ? data : data.subarray(start, end), this.len);
    } else {
      // Short copies by hand: cheaper than a subarray view and a native copy.
      const b = this.buf;
      const at = this.len;
      for (let i = 0; i < n; i++) b[at + i] = data[start + i];
    }
    this.len += n;
  }

  /** `n` zero bytes (room for a header written later). */
  zeros(n: number): void {
    this.reserve(n);
    this.buf.fill(0, this.len, this.len + n);
    this.len += n;
  }

  u8(v: number): void {
    this.reserve(1);
    this.buf[this.len++] = v;
  }

  u32(v: number): void {
    this.reserve(4);
    this.buf.writeUInt32LE(v >>> 0, this.len);
    this.len += 4;
  }

  /** A non-negative safe integer as 8 bytes. */
  u64(v: number): void {
    this.reserve(8);
    this.buf.writeUInt32LE(v % 0x1_0000_0000, this.len);
    this.buf.writeUInt32LE(Math.floor(v / 0x1_0000_0000), this.len + 4);
    this.len += 8;
  }

  /** A non-negative safe integer as a LEB128 varint (at most 8 bytes for 2^53). */
  varint(v: number): void {
    this.reserve(10);
    while (v >= 0x80) {
      this.buf[this.len++] = (v % 0x80) | 0x80;
      v = Math.floor(v / 0x80);
    }
    this.buf[this.len++] = v;
  }

  /** A copy of the bytes written so far. */
  finish(): Buffer {
    return Buffer.from(this.buf.subarray(0, this.len));
  }

  /** The bytes written so far, without copying; valid until the next write or reset (or for
   * good, if nothing more is written). */
  view(): Buffer {
    return this.buf.subarray(0, this.len);
  }
}

/** Bytes of `v` as a varint (ByteBuilder.varint). */
export function varintLength(v: number): number {
  let n = 1;
  while (v >= 0x80) {
    v = Math.floor(v / 0x80);
    n++;
  }
  return n;
}

export function readU64(b: Uint8Array, at: number): number {
  const v = b[at] + b[at + 1] * 2 ** 8 + b[at + 2] * 2 ** 16 + b[at + 3] * 2 ** 24 +
    (b[at + 4] + b[at + 5] * 2 ** 8 + b[at + 6] * 2 ** 16 + b[at + 7] * 2 ** 24) * 2 ** 32;
  if (!Number.isSafeInteger(v)) throw new NovaError('CORRUPTION', `u64 at offset ${at} exceeds 2^53`);
  return v;
}

export function readU32(b: Uint8Array, at: number): number {
  return (b[at] | (b[at + 1] << 8) | (b[at + 2] << 16)) + b[at + 3] * 2 ** 24;
}

/**
 * Decodes a varint at `at`, not reading at or past `end`. Returns the value and sets
 * `cursor.at` past it; throws CORRUPTION if it runs past `end` or exceeds 2^53.
 */
export function readVarint(b: Uint8Array, cursor: { at: number }, end: number): number {
  let v = 0;
  let scale = 1;
  let at = cursor.at;
  for (let i = 0; i < 8; i++) {
    if (at >= end) throw new NovaError('CORRUPTION', `varint at offset ${cursor.at} runs past ${end}`);
    const byte = b[at++];
    v += (byte & 0x7f) * scale;
    if (byte < 0x80) {
      cursor.at = at;
      return v;
    }
    scale *= 0x80;
  }
  throw new NovaError('CORRUPTION', `varint at offset ${cursor.at} is too long`);
}
