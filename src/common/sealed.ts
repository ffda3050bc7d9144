/**
 * A sealed byte string: `u32 magic | u8 version | ... header ... | body | u32 xxh32`, where the
 * checksum covers everything before it. Small out-of-band formats (worker addresses, remote
 * keys) use it so that a garbled copy is refused, with the offset of the fault, before any
 * field is trusted. Each format supplies its own header layout and says where its body length is.
 */
import { checksum32 } from './checksum.js';
import { NovaError, type ErrorCode } from './errors.js';

export interface SealedFormat {
  /** Name used in error messages ("remote key"). */
  what: string;
  code: ErrorCode;
  magic: number;
  version: number;
  /** Bytes before the body. */
  header: number;
  /** Offset of the field that holds the body length, and how to read it. */
  lengthOffset: number;
  bodyLength: (b: Buffer) => number;
}

/** Writes the checksum trailer of a sealed buffer whose other bytes are already filled in. */
export function stampSeal(out: Buffer): Buffer {
  out.writeUInt32LE(checksum32(out.subarray(0, out.length - 4)), out.length - 4);
  return out;
}

/** Validates a sealed buffer; returns it as a Buffer. Throws `format.code` naming the offset. */
export function openSeal(bytes: Uint8Array, format: SealedFormat): Buffer {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const bad = (offset: number, why: string): never => {
    throw new NovaError(format.code, `${format.what}: ${why} at offset ${offset}`);
  };
  if (b.length < format.header + 4) bad(0, `${b.length} bytes is too short`);
  if (b.readUInt32LE(0) !== format.magic) bad(0, 'bad magic');
  if (b.readUInt8(4) !== format.version) bad(4, `unsupported version ${b.readUInt8(4)}`);
  const body = format.bodyLength(b);
  if (b.length !== format.header + body + 4) {
    bad(format.lengthOffset, `body length ${body} does not match ${b.length} bytes`);
  }
  const end = format.header + body;
  if (checksum32(b.subarray(0, end)) !== b.readUInt32LE(end)) bad(end, 'checksum mismatch');
  return b;
}
