/**
 * A cache of decoded data blocks shared by the tables of an engine whose tables are not held
 * whole (DESIGN.md §4: "a block cache"), within a byte budget: least recently used first out,
 * by second chance (CLOCK): a hit only marks its block, and eviction passes over marked blocks
 * once, so a hit costs one lookup, not a reordering. Keys are a reader's id and a block's
 * offset; a table that leaves the tree drops its blocks (TableReader.uncache).
 */
import type { Block } from './block.js';

interface Entry {
  key: string;
  block?: Block;
  table?: Buffer;
  bytes: number;
  pins: number;
  used: boolean;
  /** Where it is on the clock's face (ring). */
  slot: number;
}

export class BlockCache {
  /** Blocks (`reader:offset`) and tables cached whole (`reader:t`). */
  private readonly entries = new Map<string, Entry>();
  /**
   * The clock's face: entries in the order the hand meets them, new ones at the end, a removed
   * one leaving a hole until more than half are holes. An array, not a live iterator over the
   * Map: such an iterator keeps every table the Map has outgrown, and with it each entry
   * removed since (whole tables of hundreds of MiB).
   */
  private ring: Array<Entry | undefined> = [];
  private holes = 0;
  /** The clock's hand: the slot evict looks at next. */
  private hand = 0;
  private used = 0;
  readonly counters = { hits: 0, misses: 0, evictions: 0 };

  constructor(private capacityBytes: number) {}

  get capacity(): number {
    return this.capacityBytes;
  }

  /** A new budget; blocks beyond it (but pinned ones) go now. */
  resize(bytes: number): void {
    this.capacityBytes = Math.max(0, bytes);
    this.evict();
  }

  get bytes(): number {
    return this.used;
  }

  get(reader: number, offset: number): Block | undefined {
    const e = this.entries.get(`${reader}:${offset}`);
    if (!e) {
      this.counters.misses++;
      return undefined;
    }
    this.counters.hits++;
    e.used = true;
    return e.block;
  }

  /** Whether reader `reader`'s block at `offset` is cached, without counting a hit or a miss. */
  has(reader: number, offset: number): boolean {
    return this.entries.has(`${reader}:${offset}`);
  }

  /** The key of reader `reader`'s table cached whole (its readers keep it: a lookup per block read builds no string). */
  static tableKey(reader: number): string {
    return `${reader}:t`;
  }

  /** Whether table `key` is cached whole, without counting a hit. */
  hasTable(key: string): boolean {
    return this.entries.get(key)?.table !== undefined;
  }

  /** The bytes of a table cached whole (`key`: tableKey), if they are (a hit when they are). */
  table(key: string): Buffer | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    this.counters.hits++;
    e.used = true;
    return e.table;
  }

  /** Caches a table whole (`key`: tableKey): one entry of its bytes. */
  putTable(key: string, bytes: Buffer): void {
    const old = this.entries.get(key);
    if (old) this.drop(old);
    this.add(key, bytes.length, 0, undefined, bytes);
    this.evict(key);
  }

  removeTable(key: string): void {
    this.removeKey(key);
  }

  put(reader: number, offset: number, block: Block, bytes: number): void {
    const key = `${reader}:${offset}`;
    const old = this.entries.get(key);
    if (old) this.drop(old);
    this.add(key, bytes, old?.pins ?? 0, block);
    this.evict(key); // never the block just put: its reader is about to use (and pin) it
  }

  /** Drops a block, unless a read has it pinned (it goes when evicted after its unpin). */
  remove(reader: number, offset: number): void {
    this.removeKey(`${reader}:${offset}`);
  }

  private removeKey(key: string): void {
    const e = this.entries.get(key);
    if (e && e.pins === 0) this.drop(e);
  }

  /**
   * Keeps a block in the cache until unpinned, over the budget if need be. A read that loads
   * blocks and starts again pins what it loaded, so it always gets further: without pins, a
   * scan over more tables than the cache holds blocks of could evict its own blocks forever.
   * False (and nothing pinned) if the block is not cached.
   */
  pin(reader: number, offset: number): boolean {
    const e = this.entries.get(`${reader}:${offset}`);
    if (e) e.pins++;
    return e !== undefined;
  }

  unpin(reader: number, offset: number): void {
    const e = this.entries.get(`${reader}:${offset}`);
    if (e && e.pins > 0) e.pins--;
    this.evict();
  }

  /** A new entry, at the end of the clock's face: a block, or a table cached whole. */
  private add(key: string, bytes: number, pins: number, block?: Block, table?: Buffer): void {
    const e: Entry = { key, block, table, bytes, pins, used: false, slot: this.ring.length };
    this.ring.push(e);
    this.entries.set(e.key, e);
    this.used += e.bytes;
  }

  private drop(e: Entry): void {
    this.ring[e.slot] = undefined;
    this.holes++;
    this.entries.delete(e.key);
    this.used -= e.bytes;
    if (this.holes > MIN_HOLES && 2 * this.holes > this.ring.length) this.closeHoles();
  }

  /** Moves the entries together, in order, the hand at the first entry at or after its slot. */
  private closeHoles(): void {
    const ring: Entry[] = [];
    let hand = -1;
    for (let i = 0; i < this.ring.length; i++) {
      if (i === this.hand) hand = ring.length;
      const e = this.ring[i];
      if (e) {
        e.slot = ring.length;
        ring.push(e);
      }
    }
    this.ring = ring;
    this.holes = 0;
    this.hand = hand < 0 ? ring.length : hand;
  }

  /**
   * Evicts until within budget, by the clock's hand, which goes on from where the last call
   * stopped. A marked entry loses its mark and is met again a lap later; pinned entries and
   * `keep` are passed over; past two laps without evicting, what is left is pinned and the
   * cache stays over budget until an unpin.
   */
  private evict(keep?: string): void {
    let passed = 0;
    while (this.used > this.capacityBytes && passed <= 2 * this.entries.size) {
      if (this.hand >= this.ring.length) {
        if (this.entries.size === 0) return;
        this.hand = 0;
      }
      const e = this.ring[this.hand++];
      if (!e) continue;
      if (e.pins > 0 || e.key === keep || e.used) {
        if (e.pins === 0 && e.key !== keep) e.used = false;
        passed++;
        continue;
      }
      this.drop(e);
      this.counters.evictions++;
      passed = 0;
    }
  }
}

/** Holes the clock's face keeps before it is closed up, so a small cache is not rebuilt every few removals. */
const MIN_HOLES = 64;
