/**
 * Frames on the TCP connections between clients, LTCs and the coordinator
 * (doc/format/wire.md, "TCP frames").
 *
 *   offset 0  u32  magic 0x4643564E ("NVCF")
 *          4  u8   version (1)
 *          5  3    reserved, 0
 *          8  u32  n = payload length
 *         12  u32  XXH32 of the payload
 *         16  n    payload (msgpack)
 *
 * A reader that meets a bad header, an oversize length or a wrong checksum stops: the
 * stream cannot be resynchronised, so the connection is closed with the reason.
 */
import { RESERVE_START_SPACE, type Packr } from 'msgpackr';
import { checksum32 } from '../common/checksum.js';
import { NovaError } from '../common/errors.js';

export const FRAME_MAGIC = 0x4643564e;
export const FRAME_VERSION = 1;
export const FRAME_HEADER = 16;
export const DEFAULT_MAX_FRAME = 64 * 1024 * 1024;

export function encodeFrame(payload: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER + payload.length);
  out.set(payload, FRAME_HEADER);
  return writeHeader(out);
}

/**
 * `value` packed as a frame's payload by `packr`, straight after room for the header, which
 * is then filled in: no copy of the payload. The frame is a view into the packer's buffer,
 * which later packs continue after (never over), so it may be kept, e.g. by a socket write.
 */
export function packFrame(packr: Packr, value: unknown): Buffer {
  return writeHeader(packr.pack(value, RESERVE_START_SPACE | FRAME_HEADER));
}

/** Fills the header of `frame` (FRAME_HEADER bytes, then the payload). */
function writeHeader(frame: Buffer): Buffer {
  const payload = frame.subarray(FRAME_HEADER);
  frame.writeUInt32LE(FRAME_MAGIC, 0);
  frame.writeUInt32LE(FRAME_VERSION, 4); // version byte + three zero bytes
  frame.writeUInt32LE(payload.length, 8);
  frame.writeUInt32LE(checksum32(payload), 12);
  return frame;
}

/** Cuts a byte stream into frame payloads. */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private consumed = 0; // bytes of the stream already returned, for error offsets

  constructor(private readonly what: string, private readonly maxFrame = DEFAULT_MAX_FRAME) {}

  /** Bytes held of a frame not yet whole. */
  get pending(): number {
    return this.buffered;
  }

  /** Adds `chunk` and returns the payloads it completes; throws CORRUPTION on a bad frame. */
  push(chunk: Buffer): Buffer[] {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const out: Buffer[] = [];
    while (this.buffered >= FRAME_HEADER) {
      const head = this.peek(FRAME_HEADER);
      const magic = head.readUInt32LE(0);
      const version = head.readUInt32LE(4);
      const length = head.readUInt32LE(8);
      if (magic !== FRAME_MAGIC || version !== FRAME_VERSION) {
        throw this.bad(`bad frame header (magic 0x${magic.toString(16)}, version word 0x${version.toString(16)})`);
      }
      if (length > this.maxFrame) throw this.bad(`frame of ${length} bytes exceeds the ${this.maxFrame}-byte limit`);
      if (this.buffered < FRAME_HEADER + length) break;
      const frame = this.take(FRAME_HEADER + length);
      const payload = frame.subarray(FRAME_HEADER);
      if (checksum32(payload) !== frame.readUInt32LE(12)) throw this.bad('frame checksum mismatch');
      this.consumed += frame.length;
      out.push(payload);
    }
    return out;
  }

  private bad(why: string): NovaError {
    return new NovaError('CORRUPTION', `${this.what}: ${why} at stream offset ${this.consumed}`);
  }

  private peek(n: number): Buffer {
    if (this.chunks[0].length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0];
  }

  private take(n: number): Buffer {
    const all = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.buffered = rest.length;
    return out;
  }
}
