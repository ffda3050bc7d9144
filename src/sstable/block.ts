/**
 * Blocks of sorted key/value entries with prefix-compressed keys and restart points
 * (doc/format/sstable.md, "Block"). Pure: bytes in, bytes out.
 *
 *   entry    = varint shared | varint unshared | varint valueLength | key[shared..] | value
 *   block    = entry* | u32 restart offset * n | u32 n
 *
 * Every `restartInterval`-th entry stores its whole key (shared = 0) and its offset is a
 * restart point, so a seek binary-searches the restarts and then scans at most an interval.
 */
import { ByteBuilder, readU32, readVarint } from '../common/coding.js';
import { NovaError } from '../common/errors.js';
import { compareInternalKeyAt, compareInternalKeys } from '../common/internal-key.js';

/** What a released Block points at (Block.release). */
const EMPTY = Buffer.alloc(0);

export type Compare = (a: Uint8Array, b: Uint8Array) => number;

/** Builds one block. REQUIRES: keys are added in increasing order of the table's comparator. */
export class BlockBuilder {
  private readonly out = new ByteBuilder(8192);
  private readonly restarts: number[] = [0];
  private counter = 0;
  private last = Buffer.allocUnsafe(64); // the previous key, reused
  private lastLen = 0;
  private entries = 0;

  constructor(private readonly restartInterval = 16) {}

  get isEmpty(): boolean {
    return this.entries === 0;
  }

  /** Bytes the block will take once finished. */
  get estimatedSize(): number {
    return this.out.length + this.restarts.length * 4 + 4;
  }

  add(key: Uint8Array, value: Uint8Array): void {
    let shared = 0;
    if (this.counter < this.restartInterval) {
      const n = Math.min(this.lastLen, key.length);
      while (shared < n && this.last[shared] === key[shared]) shared++;
    } else {
      this.restarts.push(this.out.length);
      this.counter = 0;
    }
    this.out.varint(shared);
    this.out.varint(key.length - shared);
    this.out.varint(value.length);
    this.out.bytes(key, shared);
    this.out.bytes(value);
    if (key.length > this.last.length) this.last = Buffer.allocUnsafe(key.length * 2);
    for (let i = shared; i < key.length; i++) this.last[i] = key[i];
    this.lastLen = key.length;
    this.counter++;
    this.entries++;
  }

  /** The finished block: a view valid until `reset` (copy it to keep it). */
  finish(): Buffer {
    for (const r of this.restarts) this.out.u32(r);
    this.out.u32(this.restarts.length);
    return this.out.view();
  }

  reset(): void {
    this.out.reset();
    this.restarts.length = 1;
    this.counter = 0;
    this.lastLen = 0;
    this.entries = 0;
  }
}

/**
 * Reads a block. Construction validates the restart array; entries are validated as they
 * are decoded, and any fault throws CORRUPTION with `where` and the offset in the block.
 */
export class Block {
  data!: Buffer;
  dataEnd!: number;
  private restarts!: number;
  restartCount!: number;
  private where!: string;
  private at!: number;

  /**
   * `where` names the block in errors; with `at` >= 0 it is a table's name and `at` the data
   * block's offset in it (the message is built only on failure).
   */
  constructor(data: Buffer, where: string, at = -1) {
    this.reset(data, where, at);
  }

  /**
   * Points this Block at other bytes, validated as by the constructor. A table reader reuses
   * one Block for its point lookups, and a table iterator one for its walk, instead of keeping
   * an object per block read: those were most of a long-running LTC's heap, which every full
   * GC marked.
   */
  reset(data: Buffer, where: string, at = -1): this {
    this.data = data;
    this.where = where;
    this.at = at;
    if (data.length < 4) this.fail(0, 'block shorter than its restart count');
    this.restartCount = readU32(data, data.length - 4);
    const restartBytes = (this.restartCount + 1) * 4;
    if (this.restartCount === 0 || restartBytes > data.length) {
      this.fail(data.length - 4, `restart count ${this.restartCount} does not fit`);
    }
    this.restarts = data.length - restartBytes;
    this.dataEnd = this.restarts;
    let prev = -1;
    for (let i = 0; i < this.restartCount; i++) {
      const r = this.restartPoint(i);
      if (r <= prev || r > this.dataEnd || (i === 0 && r !== 0)) this.fail(this.restarts + i * 4, `bad restart point ${r}`);
      prev = r;
    }
    return this;
  }

  /**
   * Lets go of the bytes (a reused Block would otherwise keep what it last read, and the
   * buffer under them, alive); reset() before the next use.
   */
  release(): void {
    this.data = EMPTY;
    this.restartCount = 0;
    this.scratch?.release();
  }

  restartPoint(i: number): number {
    return readU32(this.data, this.restarts + i * 4);
  }

  iterator(compare: Compare): BlockIterator {
    return new BlockIterator(this, compare);
  }

  private scratch: BlockIterator | undefined;

  /** One iterator kept for point lookups: REQUIRES that no other use of it is in progress. */
  scratchIterator(compare: Compare): BlockIterator {
    this.scratch ??= new BlockIterator(this, compare);
    return this.scratch;
  }

  fail(offset: number, why: string): never {
    const where = this.at >= 0 ? `${this.where} data block at offset ${this.at}` : this.where;
    throw new NovaError('CORRUPTION', `${where}: ${why} at block offset ${offset}`);
  }
}

/**
 * Iterates a block. `key` is a view into a buffer the iterator reuses: copy it to keep it
 * past the next move. `value` is a view into the block.
 */
export class BlockIterator {
  private keyBuf = Buffer.allocUnsafe(64);
  private keyLen = 0;
  private valueStart = 0;
  private valueEnd = 0;
  // Views made on first use at each position: a merge asks for the same key many times
  // (heap comparisons, checks), and each view is an allocation.
  private keyView: Buffer | undefined;
  private valueView: Buffer | undefined;
  private next_ = 0; // offset of the entry after the current one
  private current = -1; // offset of the current entry, -1 when not valid
  private readonly cursor = { at: 0 };

  /** Whether `compare` is the internal-key order (every table's): keys are then compared in place. */
  private readonly internal: boolean;

  constructor(private block: Block, private readonly compare: Compare) {
    this.internal = compare === compareInternalKeys;
  }

  /** Drops its views of the block's bytes (Block.release); not valid until first() or seek(). */
  release(): void {
    this.valueView = undefined;
    this.current = -1;
  }

  /** Points this iterator at `block` instead (or at its own Block re-pointed): not valid until first() or seek(). */
  retarget(block: Block): this {
    this.block = block;
    this.seekToRestart(0);
    return this;
  }

  get valid(): boolean {
    return this.current >= 0;
  }

  get key(): Buffer {
    return (this.keyView ??= this.keyBuf.subarray(0, this.keyLen));
  }

  get value(): Buffer {
    return (this.valueView ??= this.block.data.subarray(this.valueStart, this.valueEnd));
  }

  first(): void {
    this.seekToRestart(0);
    this.step();
  }

  next(): void {
    this.step();
  }

  /** Positions at the first entry with key >= target (or not valid). */
  seek(target: Uint8Array): void {
    let lo = 0;
    let hi = this.block.restartCount - 1;
    // The last restart point whose key < target.
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.compareAtRestart(mid, target) < 0) lo = mid;
      else hi = mid - 1;
    }
    this.seekToRestart(lo);
    for (this.step(); this.valid; this.step()) {
      if (this.compareCurrent(target) >= 0) return;
    }
  }

  /**
   * The key at restart point `i` against `target`, read where it lies in the block (a restart
   * entry shares nothing with the one before): the binary search neither copies keys nor
   * moves the iterator (LevelDB's Block::Iter::Seek does the same).
   */
  private compareAtRestart(i: number, target: Uint8Array): number {
    const data = this.block.data;
    const end = this.block.dataEnd;
    const at = this.block.restartPoint(i);
    const c = this.cursor;
    c.at = at;
    const shared = readVarint(data, c, end);
    const unshared = readVarint(data, c, end);
    const valueLength = readVarint(data, c, end);
    if (shared !== 0 || c.at + unshared + valueLength > end) {
      this.block.fail(at, `entry (shared ${shared}, unshared ${unshared}, value ${valueLength}) at a restart point overruns the block`);
    }
    return this.internal
      ? compareInternalKeyAt(data, c.at, c.at + unshared, target)
      : this.compare(data.subarray(c.at, c.at + unshared), target);
  }

  /**
   * The current key against `target`, without making a view of it when the order is that of
   * internal keys (every table's): a scan seeks a data block in every table it reads, and
   * views were most of a scan's allocations.
   */
  private compareCurrent(target: Uint8Array): number {
    return this.internal
      ? compareInternalKeyAt(this.keyBuf, 0, this.keyLen, target)
      : this.compare(this.key, target);
  }

  private seekToRestart(i: number): void {
    this.keyLen = 0;
    this.keyView = this.valueView = undefined;
    this.next_ = this.block.restartPoint(i);
    this.current = -1;
  }

  /** Decodes the entry at next_, or becomes invalid at the end of the data. */
  private step(): void {
    const data = this.block.data;
    const end = this.block.dataEnd;
    const at = this.next_;
    if (at >= end) {
      this.current = -1;
      return;
    }
    const c = this.cursor;
    c.at = at;
    const shared = readVarint(data, c, end);
    const unshared = readVarint(data, c, end);
    const valueLength = readVarint(data, c, end);
    if (shared > this.keyLen || c.at + unshared + valueLength > end) {
      this.block.fail(at, `entry (shared ${shared}, unshared ${unshared}, value ${valueLength}) overruns the block`);
    }
    const keyLength = shared + unshared;
    if (keyLength > this.keyBuf.length) {
      const grown = Buffer.allocUnsafe(Math.max(keyLength, this.keyBuf.length * 2));
      this.keyBuf.copy(grown, 0, 0, shared);
      this.keyBuf = grown;
    }
    if (unshared <= 32) { // short copies by hand: cheaper than a native copy's set-up
      const kb = this.keyBuf;
      for (let i = 0, from = c.at; i < unshared; i++) kb[shared + i] = data[from + i];
    } else {
      data.copy(this.keyBuf, shared, c.at, c.at + unshared);
    }
    this.keyView = this.valueView = undefined;
    this.keyLen = keyLength;
    this.valueStart = c.at + unshared;
    this.valueEnd = this.valueStart + valueLength;
    this.current = at;
    this.next_ = this.valueEnd;
  }
}
