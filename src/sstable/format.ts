/**
 * SSTable framing (doc/format/sstable.md): block handles, block trailers with checksums,
 * and the fixed-size footer. Pure functions over byte arrays.
 *
 *   table   = (data block | trailer)* | filter block | trailer | index block | trailer | footer
 *   trailer = u8 compression (0 = none) | u32 xxh32(block | compression)
 *   footer  = u64 indexOffset | u32 indexSize | u64 filterOffset | u32 filterSize
 *             | u64 entries | u32 formatVersion | u32 xxh32(footer[0, 36)) | u64 magic   (48 bytes)
 */
import { checksum32 } from '../common/checksum.js';
import { ByteBuilder, readU32, readU64, readVarint } from '../common/coding.js';
import { NovaError } from '../common/errors.js';

export const TABLE_MAGIC_LO = 0x31545353; // "SST1"
export const TABLE_MAGIC_HI = 0x41564f4e; // "NOVA"
/** Format versions. 1: blocks, full bloom filter, index of last keys. Never renumber. */
export const TABLE_FORMAT_VERSION = 1;
export const FOOTER_BYTES = 48;
export const TRAILER_BYTES = 5;
export const COMPRESSION_NONE = 0;

export interface BlockHandle {
  offset: number;
  size: number; // without the trailer
}

export interface Footer {
  index: BlockHandle;
  filter: BlockHandle;
  entries: number;
  version: number;
}

export function encodeHandle(out: ByteBuilder, h: BlockHandle): void {
  out.varint(h.offset);
  out.varint(h.size);
}

export function decodeHandle(b: Uint8Array, where: string): BlockHandle {
  const c = { at: 0 };
  try {
    const offset = readVarint(b, c, b.length);
    const size = readVarint(b, c, b.length);
    if (c.at !== b.length) throw new NovaError('CORRUPTION', `${b.length - c.at} stray bytes`);
    return { offset, size };
  } catch (err) {
    throw new NovaError('CORRUPTION', `${where}: bad block handle: ${(err as Error).message}`);
  }
}

/** Appends `block` and its trailer to `out`; returns the block's handle. */
export function writeBlock(out: ByteBuilder, block: Buffer): BlockHandle {
  const offset = out.length;
  out.bytes(block);
  out.u8(COMPRESSION_NONE);
  const view = out.view();
  out.u32(checksum32(view.subarray(offset, offset + block.length + 1)));
  return { offset, size: block.length };
}

/** The block at `h` in `table`, after checking bounds, compression and checksum. */
export function readBlock(table: Buffer, h: BlockHandle, name: string, what: string): Buffer {
  if (h.offset + h.size + TRAILER_BYTES > table.length) {
    throw new NovaError('CORRUPTION', `${name}: ${what} block [${h.offset}, +${h.size}) runs past the end (${table.length}) at offset ${h.offset}`);
  }
  const end = h.offset + h.size;
  const stored = readU32(table, end + 1);
  if (checksum32(table.subarray(h.offset, end + 1)) !== stored) {
    throw new NovaError('CORRUPTION', `${name}: ${what} block checksum mismatch at offset ${h.offset}`);
  }
  if (table[end] !== COMPRESSION_NONE) {
    throw new NovaError('CORRUPTION', `${name}: ${what} block has unknown compression ${table[end]} at offset ${end}`);
  }
  return table.subarray(h.offset, end);
}

export function writeFooter(out: ByteBuilder, f: Footer): void {
  const start = out.length;
  out.u64(f.index.offset);
  out.u32(f.index.size);
  out.u64(f.filter.offset);
  out.u32(f.filter.size);
  out.u64(f.entries);
  out.u32(f.version);
  out.u32(checksum32(out.view().subarray(start, start + 36)));
  out.u32(TABLE_MAGIC_LO);
  out.u32(TABLE_MAGIC_HI);
}

export function readFooter(table: Buffer, name: string): Footer {
  const at = table.length - FOOTER_BYTES;
  const bad = (offset: number, why: string): never => {
    throw new NovaError('CORRUPTION', `${name}: ${why} at offset ${offset}`);
  };
  if (at < 0) bad(0, `${table.length} bytes is too short for a table`);
  if (readU32(table, at + 40) !== TABLE_MAGIC_LO || readU32(table, at + 44) !== TABLE_MAGIC_HI) bad(at + 40, 'bad magic');
  if (checksum32(table.subarray(at, at + 36)) !== readU32(table, at + 36)) bad(at + 36, 'footer checksum mismatch');
  const version = readU32(table, at + 32);
  if (version !== TABLE_FORMAT_VERSION) bad(at + 32, `unsupported format version ${version}`);
  return {
    index: { offset: readU64(table, at), size: readU32(table, at + 8) },
    filter: { offset: readU64(table, at + 12), size: readU32(table, at + 20) },
    entries: readU64(table, at + 24),
    version,
  };
}

/** Where a table's metadata (filter, index, footer) starts: the bytes a metadata-only reader needs from. */
export function metadataStart(f: Footer): number {
  return Math.min(f.filter.offset, f.index.offset);
}
