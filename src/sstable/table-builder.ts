/**
 * Builds an SSTable in memory from entries in increasing internal-key order
 * (doc/format/sstable.md). Pure: the caller decides where the bytes go (a local file, or
 * fragments on StoCs), so an LTC and a StoC build tables with the same code.
 */
import { ByteBuilder } from '../common/coding.js';
import { NovaError } from '../common/errors.js';
import { TRAILER_BYTES as KEY_TRAILER, compareBytes, compareInternalKeyAt } from '../common/internal-key.js';
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
  /** Expected table size in bytes: the output buffer starts there instead of growing to it. */
  expectedSize?: number;
  /**
   * Memory to build the table in (an ArrayBuffer of its own, e.g. from a BufferPool), instead
   * of a new buffer: the table's bytes are then a view of it from offset 0 (unless the table
   * outgrew it), never copied to shed slack, so the caller can reuse the memory afterwards.
   * A table that outgrew it is not trimmed either (up to twice its size in slack).
   */
  memory?: ArrayBuffer;
}

export interface BuiltTable {
  bytes: Buffer;
  entries: number;
  smallest: Buffer | undefined;
  largest: Buffer | undefined;
}

export class TableBuilder {
  private readonly out: ByteBuilder;
  private readonly data: BlockBuilder;
  private readonly index = new BlockBuilder(1);
  private readonly hashes: number[] = [];
  private readonly blockSize: number;
  private readonly bitsPerKey: number;
  private last = Buffer.allocUnsafe(64); // the previous key, reused
  private lastLen = 0;
  private smallest: Buffer | undefined;
  private entries = 0;
  private finished = false;
  private readonly given: boolean;

  constructor(options: TableOptions = {}) {
    this.blockSize = options.blockSize ?? 4096;
    this.bitsPerKey = options.bitsPerKey ?? 10;
    this.given = options.memory !== undefined;
    this.out = new ByteBuilder(options.memory ? Buffer.from(options.memory) : options.expectedSize ?? 64 * 1024, true);
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
    // Compared where the last key lies, user keys once: a merge adds millions of entries.
    const userEnd = internalKey.length - KEY_TRAILER;
    let newUser = true;
    if (this.entries > 0) {
      const c = compareBytes(this.last, 0, this.lastLen - KEY_TRAILER, internalKey, 0, userEnd);
      newUser = c !== 0;
      if (c > 0 || (c === 0 && compareInternalKeyAt(this.last, 0, this.lastLen, internalKey) >= 0)) {
        throw new NovaError('BAD_ARGUMENT', 'table builder: keys must be added in increasing order');
      }
    }
    if (newUser) this.hashes.push(filterHash(internalKey, 0, userEnd));
    this.data.add(internalKey, value);
    if (internalKey.length > this.last.length) this.last = Buffer.allocUnsafe(internalKey.length * 2);
    this.last.set(internalKey, 0);
    this.lastLen = internalKey.length;
    if (!this.smallest) this.smallest = Buffer.from(internalKey);
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
    const largest = this.entries > 0 ? Buffer.from(this.last.subarray(0, this.lastLen)) : undefined;
    // The builder is done with its buffer: hand it over without a copy unless mostly slack.
    const bytes = this.out.view();
    const out = !this.given && bytes.buffer.byteLength > bytes.length * 1.5 ? Buffer.from(bytes) : bytes;
    return { bytes: out, entries: this.entries, smallest: this.smallest, largest };
  }

  private readonly handle = new ByteBuilder(16);

  private flushBlock(): void {
    const handle: BlockHandle = writeBlock(this.out, this.data.finish());
    this.data.reset();
    this.handle.reset();
    encodeHandle(this.handle, handle);
    // The block's last key: a seek for k lands on the first block whose last key >= k.
    this.index.add(this.last.subarray(0, this.lastLen), this.handle.view()); // add copies it
  }
}
