/**
 * The address a peer passes to `Fabric.connect`: UCX's worker address, sealed so that a
 * garbled or foreign one is refused before UCX parses it (doc/format/wire.md):
 *
 *   u32 magic "NVWA" | u8 version | u8 reserved | u16 reserved | u32 length | UCX address
 *   | u32 xxh32 of everything before it          (little-endian)
 */
import { openSeal, stampSeal, type SealedFormat } from '../common/sealed.js';

const FORMAT: SealedFormat = {
  what: 'worker address',
  code: 'BAD_ARGUMENT',
  magic: 0x4157564e, // "NVWA" read little-endian
  version: 1, // 1: UCX worker address and xxh32 checksum
  header: 12,
  lengthOffset: 8,
  bodyLength: (b) => b.readUInt32LE(8),
};

export function sealWorkerAddress(ucx: Uint8Array): Buffer {
  const out = Buffer.alloc(FORMAT.header + ucx.length + 4);
  out.writeUInt32LE(FORMAT.magic, 0);
  out.writeUInt8(FORMAT.version, 4);
  out.writeUInt32LE(ucx.length, 8);
  out.set(ucx, FORMAT.header);
  return stampSeal(out);
}

/** Returns the UCX address inside a sealed one; throws BAD_ARGUMENT naming the fault's offset. */
export function openWorkerAddress(sealed: Uint8Array): Buffer {
  const b = openSeal(sealed, FORMAT);
  return Buffer.from(b.subarray(FORMAT.header, b.length - 4));
}
