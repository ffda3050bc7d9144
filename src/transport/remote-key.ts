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
import { checksum32 } from '../common/checksum.js';
import { NovaError } from '../common/errors.js';

const MAGIC = 0x4b52564e; // "NVRK" read little-endian
/** Version 1: address, length, packed rkey, xxh32 checksum. */
const VERSION = 1;
const HEADER = 24;

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
    const out = Buffer.alloc(HEADER + this.packed.length + 4);
    out.writeUInt32LE(MAGIC, 0);
    out.writeUInt8(VERSION, 4);
    out.writeUInt16LE(this.packed.length, 6);
    out.writeBigUInt64LE(this.address, 8);
    out.writeBigUInt64LE(BigInt(this.length), 16);
    this.packed.copy(out, HEADER);
    out.writeUInt32LE(checksum32(out.subarray(0, HEADER + this.packed.length)), HEADER + this.packed.length);
    return out;
  }

  /** Parses a serialised key; throws BAD_REMOTE_KEY naming the offset of the first fault. */
  static parse(bytes: Uint8Array): RemoteKey {
    const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const bad = (offset: number, what: string): never => {
      throw new NovaError('BAD_REMOTE_KEY', `remote key: ${what} at offset ${offset}`);
    };
    if (b.length < HEADER + 4) bad(0, `${b.length} bytes is too short`);
    if (b.readUInt32LE(0) !== MAGIC) bad(0, 'bad magic');
    if (b.readUInt8(4) !== VERSION) bad(4, `unsupported version ${b.readUInt8(4)}`);
    const rkeyLength = b.readUInt16LE(6);
    if (b.length !== HEADER + rkeyLength + 4) {
      bad(6, `rkey length ${rkeyLength} does not match a key of ${b.length} bytes`);
    }
    const sum = b.readUInt32LE(HEADER + rkeyLength);
    if (checksum32(b.subarray(0, HEADER + rkeyLength)) !== sum) bad(HEADER + rkeyLength, 'checksum mismatch');
    const length = b.readBigUInt64LE(16);
    if (length > BigInt(Number.MAX_SAFE_INTEGER)) bad(16, 'length too large');
    return new RemoteKey(b.readBigUInt64LE(8), Number(length),
      Buffer.from(b.subarray(HEADER, HEADER + rkeyLength)));
  }
}
