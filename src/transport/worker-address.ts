/**
 * The address a peer passes to `Fabric.connect`: UCX's worker address, sealed so that a
 * garbled or foreign one is refused before UCX parses it (doc/format/wire.md):
 *
 *   u32 magic "NVWA" | u8 version | u8 reserved | u16 reserved | u32 length | UCX address
 *   | u32 xxh32 of everything before it          (little-endian)
 */
import { checksum32 } from '../common/checksum.js';
import { NovaError } from '../common/errors.js';

const MAGIC = 0x4157564e; // "NVWA" read little-endian
/** Version 1: UCX worker address and xxh32 checksum. */
const VERSION = 1;
const HEADER = 12;

export function sealWorkerAddress(ucx: Uint8Array): Buffer {
  const out = Buffer.alloc(HEADER + ucx.length + 4);
  out.writeUInt32LE(MAGIC, 0);
  out.writeUInt8(VERSION, 4);
  out.writeUInt32LE(ucx.length, 8);
  out.set(ucx, HEADER);
  out.writeUInt32LE(checksum32(out.subarray(0, HEADER + ucx.length)), HEADER + ucx.length);
  return out;
}

/** Returns the UCX address inside a sealed one; throws BAD_ARGUMENT naming the fault's offset. */
export function openWorkerAddress(sealed: Uint8Array): Buffer {
  const b = Buffer.from(sealed.buffer, sealed.byteOffset, sealed.byteLength);
  const bad = (offset: number, what: string): never => {
    throw new NovaError('BAD_ARGUMENT', `worker address: ${what} at offset ${offset}`);
  };
  if (b.length < HEADER + 4) bad(0, `${b.length} bytes is too short`);
  if (b.readUInt32LE(0) !== MAGIC) bad(0, 'bad magic');
  if (b.readUInt8(4) !== VERSION) bad(4, `unsupported version ${b.readUInt8(4)}`);
  const length = b.readUInt32LE(8);
  if (b.length !== HEADER + length + 4) bad(8, `length ${length} does not match ${b.length} bytes`);
  if (checksum32(b.subarray(0, HEADER + length)) !== b.readUInt32LE(HEADER + length)) {
    bad(HEADER + length, 'checksum mismatch');
  }
  return Buffer.from(b.subarray(HEADER, HEADER + length));
}
