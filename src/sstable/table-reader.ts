/**
 * Reads an SSTable held in memory (doc/format/sstable.md). Opening checks the footer, the
 * index block and the filter block; data blocks are checked when first read. Any fault
 * throws CORRUPTION naming the table and the offset; bad bytes are never returned as data.
 */
import { NovaError } from '../common/errors.js';
import {
  SEEK_TYPE, TRAILER_BYTES as KEY_TRAILER, ValueType, abbreviateKey, checkInternalKey, isInternalKey, compareBytes, compareInternalKeyAt, compareInternalKeys,
  typeOf, writeTrailer,
} from '../common/internal-key.js';
import { Block, type BlockIterator } from './block.js';
import type { InternalIterator } from './merging-iterator.js';
import { TwoLevelIterator } from './two-level-iterator.js';
import { filterHash, filterMayContain } from './filter.js';
import { BlockCache } from './block-cache.js';
import { TRAILER_BYTES as BLOCK_TRAILER, decodeHandle, readBlock, readFooter, type BlockHandle, type Footer } from './format.js';
import { TableBuilder } from './table-builder.js';

export type GetResult = { type: 'put'; value: Buffer } | { type: 'delete' } | undefined;

/**
 * Thrown by a reader that does not hold its whole table when a data block it needs is not in
 * its cache: load it (TableReader.insert) and try again. A signal, not an Error: a miss is
 * routine under a memory budget, and an Error's stack trace costs more than the read it stops.
 */
export class BlockMiss {
  constructor(readonly table: TableReader, readonly handle: BlockHandle) {}

  toString(): string {
    return `${this.table.name}: data block at offset ${this.handle.offset} is not loaded`;
  }
}

let nextReaderId = 1;

export class TableReader {
  readonly footer: Footer;
  private readonly filter: Buffer;
  /** Which data blocks of the table's own bytes (whole, or cached whole) were checked (1), by position in the index. */
  private readonly checked: Uint8Array;
  /** Whole tables: the one Block point lookups decode, pointed at each block in turn. */
  private lookupBlock: Block | undefined;
  /** Set when the reader holds only its metadata: data blocks come from this cache. */
  private cache: BlockCache | undefined;
  private readonly id = nextReaderId++;
  private readonly tableKey = BlockCache.tableKey(this.id);
  /** Set when the table left the tree (uncache): nothing of it is cached again. */
  private dropped = false;
  /** Where `bytes` starts in the table (0 when it is the whole table). */
  private base = 0;
  /** Set for a table no copy of which reads (damaged): reads of its keys fail with this. */
  private damage: Damage | undefined;

  // The index decoded once into flat arrays: seeks and point lookups binary-search the
  // abbreviated keys and touch full keys only on ties. An abbreviation is the 6 user-key bytes
  // after the prefix every index key shares, as a number: keys alike in their first bytes
  // (the bench's `user000000…`) would otherwise all tie. Flat, not an
  // object per entry: a 16 MiB table has ~4,000 entries, and readers come and go with every
  // compaction (thousands of long-lived small objects each were what the LTC's GC marked).
  private readonly indexKeys: Buffer; // every key, back to back
  private readonly indexKeyStart: Uint32Array; // key i is [start[i], start[i + 1])
  private readonly indexAbbr: Float64Array;
  private readonly sharedPrefix: number; // user-key bytes every index key starts with (those of key 0)
  private readonly blockOffset: Float64Array;
  private readonly blockSize: Float64Array;

  /** A reader over the whole table in `bytes`. */
  constructor(readonly bytes: Buffer, readonly name: string, metadataOnly?: { start: number; cache: BlockCache }) {
    this.footer = readFooter(bytes, name);
    if (metadataOnly) {
      this.base = metadataOnly.start;
      this.cache = metadataOnly.cache;
      if (Math.min(this.footer.index.offset, this.footer.filter.offset) < this.base) {
        throw new NovaError('CORRUPTION', `${name}: metadata starts at offset ${Math.min(this.footer.index.offset, this.footer.filter.offset)}, before the ${this.base} given`);
      }
    }
    const index = new Block(readBlock(bytes, this.shift(this.footer.index), name, 'index'), `${name} index block`);
    this.filter = readBlock(bytes, this.shift(this.footer.filter), name, 'filter');
    const it = index.iterator(compareInternalKeys);
    let n = 0;
    let keyBytes = 0;
    for (it.first(); it.valid; it.next()) {
      n++;
      keyBytes += it.key.length;
    }
    this.indexKeys = Buffer.allocUnsafe(keyBytes);
    this.indexKeyStart = new Uint32Array(n + 1);
    this.indexAbbr = new Float64Array(n);
    this.blockOffset = new Float64Array(n);
    this.blockSize = new Float64Array(n);
    this.checked = new Uint8Array(n);
    let i = 0;
    for (it.first(); it.valid; it.next(), i++) {
      const k = it.key;
      checkInternalKey(k, `${name} index entry`);
      const at = this.indexKeyStart[i];
      this.indexKeys.set(k, at);
      this.indexKeyStart[i + 1] = at + k.length;
      const h = decodeHandle(it.value, `${name} index entry ${i}`);
      this.blockOffset[i] = h.offset;
      this.blockSize[i] = h.size;
    }
    // Sorted keys: what the first and last share, every key between shares.
    const keys = this.indexKeys;
    const start = this.indexKeyStart;
    let p = 0;
    if (n > 0) {
      const lastAt = start[n - 1];
      const max = Math.min(start[1] - KEY_TRAILER, start[n] - KEY_TRAILER - lastAt);
      while (p < max && keys[p] === keys[lastAt + p]) p++;
    }
    this.sharedPrefix = p;
    for (let j = 0; j < n; j++) this.indexAbbr[j] = abbreviateKey(keys, start[j] + p, start[j + 1] - KEY_TRAILER);
  }

  /**
   * A reader over a table's metadata only — `meta` is the table's bytes from `start` (at or
   * before its filter and index) to its end — whose data blocks come from `cache`, loaded on
   * a BlockMiss. Where the metadata starts: `metadataStart` of the table's footer.
   */
  static metadataOnly(meta: Buffer, start: number, name: string, cache: BlockCache): TableReader {
    return new TableReader(meta, name, { start, cache });
  }

  /**
   * A stand-in for a table that no copy of could be read (`error`, CORRUPTION naming table and
   * offset), whose internal keys span [smallest, largest]: a read or scan that reaches those
   * keys fails with `error`; others pass it by. It holds none of the table's bytes.
   */
  static damaged(name: string, error: NovaError, smallest: Buffer, largest: Buffer): TableReader {
    const r = new TableReader(new TableBuilder().finish().bytes, name);
    r.damage = { error, smallest, largest };
    return r;
  }

  /** Why the table cannot be read, if it is a stand-in (damaged). */
  get damaged(): NovaError | undefined {
    return this.damage?.error;
  }

  /** Whether the reader holds the whole table (`bytes`), or only its metadata. */
  get whole(): boolean {
    return this.cache === undefined;
  }

  /** Whether the whole table is in memory: held, or cached whole. */
  get inMemory(): boolean {
    return this.cache ? this.cache.hasTable(this.tableKey) : true;
  }

  /** The whole table's bytes, if the reader has them (whole, or cached whole). */
  ownBytes(): Buffer | undefined {
    if (this.damage) return undefined; // it has none of the table's
    return this.cache ? this.cache.table(this.tableKey) : this.bytes;
  }

  /**
   * The data block a read from user key `userKey` at `snapshot` onwards starts in, when it is
   * not at hand (neither the table's bytes nor the cache hold it): what a scan can load before
   * it reads. Undefined when it is at hand, or every key of the table sorts before it.
   */
  missingBlockFor(userKey: Uint8Array, snapshot: number): BlockHandle | undefined {
    if (!this.cache || this.damage || this.cache.hasTable(this.tableKey)) return undefined;
    const target = Buffer.allocUnsafe(userKey.length + KEY_TRAILER);
    target.set(userKey, 0);
    writeTrailer(target, userKey.length, snapshot, SEEK_TYPE);
    const b = this.firstBlockFor(target);
    if (b >= this.blockCount) return undefined;
    const offset = this.blockOffset[b];
    return this.cache.has(this.id, offset) ? undefined : { offset, size: this.blockSize[b] };
  }

  /** Checks `bytes` (a data block with its trailer, read from the table at `handle`) and caches it. */
  insert(handle: BlockHandle, bytes: Buffer): void {
    const block = new Block(readBlock(bytes, { offset: 0, size: handle.size }, `${this.name} (data block at offset ${handle.offset})`, 'data'),
      this.name, handle.offset);
    if (!this.dropped) this.cache!.put(this.id, handle.offset, block, bytes.length);
  }

  /** Keeps the cached block at `offset` cached until `unpin` (BlockCache.pin); false if it is not cached. */
  pin(offset: number): boolean {
    return this.cache?.pin(this.id, offset) ?? false;
  }

  unpin(offset: number): void {
    this.cache?.unpin(this.id, offset);
    if (this.dropped) this.cache?.remove(this.id, offset);
  }

  /**
   * Caches the table whole (`table`, its bytes), as one entry: its blocks are then read from
   * those bytes as a whole table's are, with no object per block to keep or collect, until the
   * cache evicts it; then they are loaded one by one again.
   */
  fill(table: Buffer): void {
    if (!this.cache) return;
    this.checked.fill(0);
    this.cache.putTable(this.tableKey, table);
  }

  /**
   * Drops the table and its blocks from the cache for good: the table has left the tree. A
   * block a read was loading meanwhile is not cached, and one it has pinned goes at its unpin.
   */
  uncache(): void {
    if (!this.cache) return;
    this.dropped = true;
    this.cache.removeTable(this.tableKey);
    for (let b = 0; b < this.blockOffset.length; b++) this.cache.remove(this.id, this.blockOffset[b]);
  }

  private shift(h: BlockHandle): BlockHandle {
    return this.base === 0 ? h : { offset: h.offset - this.base, size: h.size };
  }

  get entries(): number {
    return this.footer.entries;
  }

  /** Where each data block ends (with its trailer), in table order. */
  dataBlockEnds(): number[] {
    return Array.from(this.blockOffset, (offset, i) => offset + this.blockSize[i] + BLOCK_TRAILER);
  }

  /** False only if no version of `userKey` can be in this table. */
  mayContain(userKey: Uint8Array): boolean {
    return filterMayContain(this.filter, filterHash(userKey));
  }

  private lookup = Buffer.allocUnsafe(64);

  /** The newest version of `userKey` with sequence <= `snapshot`, if this table has one. */
  get(userKey: Uint8Array, snapshot: number): GetResult {
    if (this.damage) {
      const d = this.damage;
      if (compareBytes(userKey, 0, userKey.length, d.smallest, 0, d.smallest.length - KEY_TRAILER) >= 0 &&
        compareBytes(userKey, 0, userKey.length, d.largest, 0, d.largest.length - KEY_TRAILER) <= 0) throw d.error;
      return undefined;
    }
    if (!this.mayContain(userKey)) return undefined;
    // Point lookups reuse one lookup key and the blocks' scratch iterators: no allocation
    // beyond the result. Safe because a get runs to completion synchronously.
    const n = userKey.length + KEY_TRAILER;
    if (this.lookup.length < n) this.lookup = Buffer.allocUnsafe(n * 2);
    this.lookup.set(userKey, 0);
    writeTrailer(this.lookup, userKey.length, snapshot, SEEK_TYPE);
    const target = this.lookup.subarray(0, n);
    try {
      for (let b = this.firstBlockFor(target), blocks = this.blockCount; b < blocks; b++) {
        const it = this.lookupBlockAt(b).scratchIterator(compareInternalKeys);
        it.seek(target);
        if (!it.valid) continue; // the key sorts after this block: the next one starts with it
        const k = it.key;
        this.checkEntry(k, b);
        if (compareBytes(k, 0, k.length - KEY_TRAILER, userKey, 0, userKey.length) !== 0) return undefined;
        return typeOf(k) === ValueType.Put ? { type: 'put', value: Buffer.from(it.value) } : { type: 'delete' };
      }
      return undefined;
    } finally {
      // The reused Block points into the table's bytes; a table cached whole must not stay in memory through it once evicted.
      this.lookupBlock?.release();
    }
  }

  /** The table's entries in order; keys and values are views, copy them to keep them. */
  iterator(): InternalIterator {
    return this.damage ? new DamagedIterator(this.damage) : new TableIterator(this);
  }

  /** Data blocks in the table. */
  get blockCount(): number {
    return this.indexAbbr.length;
  }

  /**
   * @internal The index position of the first data block whose last key is at or after
   * `target` (an internal key) — no earlier block holds it — or blockCount. A binary search of
   * the abbreviated index keys: full keys are compared only on ties.
   */
  firstBlockFor(target: Uint8Array): number {
    const keys = this.indexKeys;
    const start = this.indexKeyStart;
    const abbr = this.indexAbbr;
    const p = this.sharedPrefix;
    const userEnd = target.length - KEY_TRAILER;
    // A target that differs within the shared prefix sorts before every key or after all.
    const c = compareBytes(target, 0, Math.min(p, userEnd), keys, 0, p);
    if (c !== 0) return c < 0 ? 0 : abbr.length;
    const want = abbreviateKey(target, p, userEnd);
    let lo = 0;
    let hi = abbr.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const a = abbr[mid];
      if (a < want || (a === want && compareInternalKeyAt(keys, start[mid], start[mid + 1], target) < 0)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /**
   * @internal The data block at index position `b`, from the table's own bytes (whole, or cached
   * whole): `reuse` (the caller's own Block) re-pointed at it, or a new Block; undefined when
   * the table's bytes are not at hand (a metadata-only reader whose table is not cached whole).
   */
  ownBlockAt(b: number, reuse: Block | undefined): Block | undefined {
    const bytes = this.ownBytes();
    if (!bytes) return undefined;
    const offset = this.blockOffset[b];
    const data = this.dataBytes(bytes, b, offset, this.blockSize[b]);
    return reuse ? reuse.reset(data, this.name, offset) : new Block(data, this.name, offset);
  }

  /** @internal The data block at index position `b` from the block cache; BlockMiss if it is not there. */
  cachedBlockAt(b: number): Block {
    const offset = this.blockOffset[b];
    const cached = this.cache!.get(this.id, offset);
    if (!cached) throw new BlockMiss(this, { offset, size: this.blockSize[b] });
    return cached;
  }

  /** @internal Throws CORRUPTION, naming the table and data block `b`, unless `key` is an internal key (the name is built only then). */
  checkEntry(key: Buffer, b: number): void {
    if (!isInternalKey(key)) checkInternalKey(key, `${this.name} data block at offset ${this.blockOffset[b]}`);
  }

  /** The data block at position `b` of the index, for a point lookup (valid until the next one). */
  private lookupBlockAt(b: number): Block {
    const own = this.ownBlockAt(b, this.lookupBlock);
    if (own) return (this.lookupBlock = own);
    return this.cachedBlockAt(b);
  }

  /** Data block bytes at `offset` of the table's own `bytes`, its checksum checked on first use. */
  private dataBytes(bytes: Buffer, b: number, offset: number, size: number): Buffer {
    if (this.checked[b] === 0) {
      const data = readBlock(bytes, { offset, size }, this.name, 'data');
      this.checked[b] = 1;
      return data;
    }
    return bytes.subarray(offset, offset + size);
  }
}

/**
 * A table's entries in order: a two-level iterator whose index is a position in the reader's
 * decoded index. A seek binary-searches the decoded index as a point lookup does, and a whole
 * table's block is one Block re-pointed as the iterator moves: a scan seeks every table of
 * L0, so a seek through the index block and a Block, an iterator and a handle per block it
 * crossed were most of a scan's cost.
 */
class TableIterator extends TwoLevelIterator<BlockIterator> {
  private b: number; // index position; blockCount past the end
  private own: Block | undefined; // a whole table's re-pointed block
  private it: BlockIterator | undefined; // re-pointed at each block opened

  constructor(private readonly table: TableReader) {
    super();
    this.b = table.blockCount;
  }

  protected indexValid(): boolean {
    return this.b < this.table.blockCount;
  }

  protected indexFirst(): void {
    this.b = 0;
  }

  protected indexSeek(target: Uint8Array): void {
    this.b = this.table.firstBlockFor(target);
  }

  protected indexNext(): void {
    this.b++;
  }

  protected open(): BlockIterator {
    const own = this.table.ownBlockAt(this.b, this.own);
    if (own) this.own = own;
    const block = own ?? this.table.cachedBlockAt(this.b);
    return (this.it = this.it ? this.it.retarget(block) : block.iterator(compareInternalKeys));
  }

  protected check(key: Buffer): void {
    this.table.checkEntry(key, this.b);
  }
}

interface Damage {
  error: NovaError;
  smallest: Buffer;
  largest: Buffer;
}

/** A damaged table's iterator: positioning it anywhere at or before its largest key fails. */
class DamagedIterator implements InternalIterator {
  readonly valid = false;
  readonly key = Buffer.alloc(0);
  readonly value = Buffer.alloc(0);
  constructor(private readonly d: Damage) {}
  first(): void {
    throw this.d.error;
  }
  seek(target: Uint8Array): void {
    if (compareInternalKeys(target, this.d.largest) <= 0) throw this.d.error;
  }
  next(): void {
    throw this.d.error; // never valid, so never called
  }
}

export function openTable(bytes: Buffer, name: string): TableReader {
  if (!Buffer.isBuffer(bytes)) throw new NovaError('BAD_ARGUMENT', 'openTable: bytes must be a Buffer');
  return new TableReader(bytes, name);
}
