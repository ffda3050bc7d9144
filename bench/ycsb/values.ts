/**
 * Values the runner writes. Each encodes its key and a version, so a read can tell a value
 * that is missing, corrupt, another key's, or stale (an older version than one already
 * acknowledged). The body is a slice of a fixed random pool: incompressible (so stores that
 * compress get no unfair help), and no per-write random generation.
 *
 *   u32 magic "NVV1" | u64 key number | u32 version | u32 checksum | body
 *
 * The checksum (xxh32 of everything but itself) is computed only when verifying.
 */
import { xxh32 } from '../../src/common/xxh32.js';
import { Random } from './generators.js';

const MAGIC = 0x3156564e; // "NVV1" little-endian
export const VALUE_HEADER = 20;
const POOL_BYTES = 1 << 20;

let pool: Buffer | undefined;
function randomPool(): Buffer {
  if (!pool) {
    const r = new Random(0x5eed);
    pool = Buffer.allocUnsafe(POOL_BYTES + 64 * 1024);
    for (let i = 0; i < pool.length; i += 4) pool.writeUInt32LE(Math.floor(r.next() * 4294967296), i);
  }
  return pool;
}

export function checkValueSize(size: number): void {
  if (!(Number.isInteger(size) && size >= VALUE_HEADER && size <= 64 * 1024)) {
    throw new Error(`value size ${size}: must be an integer from ${VALUE_HEADER} to 65536 bytes (the key, version and checksum take ${VALUE_HEADER})`);
  }
}

/** The value for (key, version), `size` bytes. */
export function makeValue(keyNum: number, version: number, size: number, withChecksum: boolean): Buffer {
  const p = randomPool();
  const v = Buffer.allocUnsafe(size);
  const start = ((keyNum * 2654435761 + version * 40503) >>> 0) % POOL_BYTES;
  p.copy(v, VALUE_HEADER, start, start + size - VALUE_HEADER);
  v.writeUInt32LE(MAGIC, 0);
  v.writeUInt32LE(keyNum >>> 0, 4);
  v.writeUInt32LE(Math.floor(keyNum / 4294967296), 8);
  v.writeUInt32LE(version >>> 0, 12);
  v.writeUInt32LE(withChecksum ? checksumOf(v) : 0, 16);
  return v;
}

function checksumOf(v: Buffer): number {
  return (xxh32(v, 0, 16) ^ Math.imul(xxh32(v, VALUE_HEADER, v.length), 0x9e3779b1)) >>> 0;
}

export type Decoded = { ok: true; keyNum: number; version: number } | { ok: false; why: string };

/** Validates a value read back: length, magic and checksum. */
export function decodeValue(v: Uint8Array, size: number): Decoded {
  const b = Buffer.from(v.buffer, v.byteOffset, v.length);
  if (b.length !== size) return { ok: false, why: `length ${b.length}, expected ${size}` };
  if (b.readUInt32LE(0) !== MAGIC) return { ok: false, why: 'bad magic' };
  if (b.readUInt32LE(16) !== checksumOf(b)) return { ok: false, why: 'checksum mismatch' };
  return { ok: true, keyNum: b.readUInt32LE(4) + b.readUInt32LE(8) * 4294967296, version: b.readUInt32LE(12) };
}
