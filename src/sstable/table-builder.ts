/**
 * Builds an SSTable in memory from entries in increasing internal-key order
 * (doc/format/sstable.md). Pure: the caller decides where the bytes go (a local file, or
 * fragments on StoCs), so an LTC and a StoC build tables with the same code.
 */
import { ByteBuilder } from '../common/coding.js';
import { NovaError } from '../common/errors.js';
import { TRAILER_BYTES as KEY_TRAILER, compareBytes, compareInternalKeys } from '../common/internal-key.js';
import { BlockBuilder } from './block.js';
import { buildFilter, filterHash } from './filter.js';
import { TABLE_FORMAT_VERSION, encodeHandle, writeBlock, writeFooter, type BlockHandle } from './format.js';

export interface TableOptions {
  /** Target uncompressed size of a data block. */
  blockSize?: number;
  /** Entries between restart points in a block. */
  restartInterval?: number;
  /** Bloom filter bits per distinct user key. */
  bitsPerKey?: number;
}

export interface BuiltTable {
  bytes: Buffer;
  entries: number;
  smallest: Buffer | undefined;
  largest: Buffer | undefined;
}

export class TableBuilder {
  private readonly out = new ByteBuilder(64 * 1024);
  private readonly data: BlockBuilder;
  private readonly index = new BlockBuilder(1);
  private readonly hashes: number[] = [];
  private readonly blockSize: number;
  private readonly bitsPerKey: number;
  private last: Buffer | undefined;
  private smallest: Buffer | undefined;
  private entries = 0;
  private finished = false;

  constructor(options: TableOptions = {}) {
    this.blockSize = options.blockSize ?? 4096;
    this.bitsPerKey = options.bitsPerKey ?? 10;
    this.data = new BlockBuilder(options.restartInterval ?? 16);
  }

  /** Bytes written so far (for cutting compaction outputs at a target size). */
  get estimatedSize(): number {
    return this.out.length + this.data.estimatedSize;
  }

  /** REQUIRES: `internalKey` sorts after every key added before. */
  add(internalKey: Uint8Array, value: Uint8Array): void {
    if (this.finished) throw new NovaError('BAD_ARGUMENT', 'table builder: add after finish');
    if (internalKey.length < KEY_TRAILER) throw new NovaError('BAD_ARGUMENT', 'table builder: key has no trailer');
    const last = this.last;
    if (last && compareInternalKeys(last, internalKey) >= 0) {
      throw new NovaError('BAD_ARGUMENT', 'table builder: keys must be added in increasing order');
    }
    const userEnd = internalKey.length - KEY_TRAILER;
    if (!last || compareBytes(last, 0, last.length - KEY_TRAILER, internalKey, 0, userEnd) !== 0) {
      this.hashes.push(filterHash(internalKey, 0, userEnd));
    }
    this.data.add(internalKey, value);
    this.last = Buffer.from(internalKey);
    if (!this.smallest) this.smallest = this.last;
    this.entries++;
    if (this.data.estimatedSize >= this.blockSize) this.flushBlock();
  }

  finish(): BuiltTable {
    if (this.finished) throw new NovaError('BAD_ARGUMENT', 'table builder: finish twice');
    this.finished = true;
    if (!this.data.isEmpty) this.flushBlock();
    const filter = writeBlock(this.out, buildFilter(this.hashes, this.bitsPerKey));
    const index = writeBlock(this.out, this.index.finish());
    writeFooter(this.out, { index, filter, entries: this.entries, version: TABLE_FORMAT_VERSION });
    return { bytes: this.out.finish(), entries: this.entries, smallest: this.smallest, largest: this.last };
  }

  private flushBlock(): void {
    const handle: BlockHandle = writeBlock(this.out, this.data.finish());
    this.data.reset();
    const h = new ByteBuilder(16);
    encodeHandle(h, handle);
    this.index.add(this.last!, h.finish()); // the block's last key: seek lands in the right block
  }
}
