/**
 * RemoteKey: what a peer needs to READ or WRITE one of our memory regions — its address,
 * the length it may touch, and UCX's packed rkey. Serialised form (doc/format/wire.md):
 *
 *   u32 magic "NVRK" | u8 version | u8 reserved | u16 rkeyLength | u64 address | u64 length
 *   | rkey bytes | u32 xxh32 of everything before it          (little-endian)
 *
 * A key may be narrowed (`slice`) before it is handed out, so a peer can only reach part of
 * a region; bounds are checked against the key's own length before anything is posted.
 */
import { NovaError } from '../common/errors.js';
import { openSeal, stampSeal, type SealedFormat } from '../common/sealed.js';

const FORMAT: SealedFormat = {
  what: 'remote key',
  code: 'BAD_REMOTE_KEY',
  magic: 0x4b52564e, // "NVRK" read little-endian
  version: 1, // 1: address, length, packed rkey, xxh32 checksum
  header: 24,
  lengthOffset: 6,
  bodyLength: (b) => b.readUInt16LE(6),
};

export class RemoteKey {
  constructor(
    readonly address: bigint,
    readonly length: number,
    readonly packed: Buffer,
  ) {}

  /** A key for bytes [offset, offset + length) of this one. */
  slice(offset: number, length: number): RemoteKey {
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 ||
        length < 0 || offset + length > this.length) {
      throw new NovaError('OUT_OF_BOUNDS',
        `slice [${offset}, ${offset}+${length}) is outside a key of ${this.length} bytes`);
    }
    return new RemoteKey(this.address + BigInt(offset), length, this.packed);
  }

  serialize(): Buffer {
    const out = Buffer.alloc(FORMAT.header + this.packed.length + 4);
    out.writeUInt32LE(FORMAT.magic, 0);
    out.writeUInt8(FORMAT.version, 4);
    out.writeUInt16LE(this.packed.length, 6);
    out.writeBigUInt64LE(this.address, 8);
    out.writeBigUInt64LE(BigInt(this.length), 16);
    this.packed.copy(out, FORMAT.header);
    return stampSeal(out);
  }

  /** Parses a serialised key; throws BAD_REMOTE_KEY naming the offset of the first fault. */
  static parse(bytes: Uint8Array): RemoteKey {
    const b = openSeal(bytes, FORMAT);
    const length = b.readBigUInt64LE(16);
    if (length > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new NovaError('BAD_REMOTE_KEY', 'remote key: length too large at offset 16');
    }
    return new RemoteKey(b.readBigUInt64LE(8), Number(length), Buffer.from(b.subarray(FORMAT.header, b.length - 4)));
  }
}
