/**
 * A cache of decoded data blocks shared by the tables of an engine whose tables are not held
 * whole (DESIGN.md §4: "a block cache"), within a byte budget: least recently used first out,
 * by second chance (CLOCK): a hit only marks its block, and eviction passes over marked blocks
 * once, so a hit costs one lookup, not a reordering. Keys are a reader's id and a block's
 * offset; a table that leaves the tree drops its blocks (TableReader.uncache).
 */
import type { Block } from './block.js';

export class BlockCache {
  /** Blocks (`reader:offset`) and tables cached whole (`reader:t`), in the order the clock's hand meets them. */
  private readonly blocks = new Map<string, { block?: Block; table?: Buffer; bytes: number; pins: number; used: boolean }>();
  private used = 0;
  /** The clock's hand (evict). */
  private hand = this.blocks.entries();
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
    const key = `${reader}:${offset}`;
    const e = this.blocks.get(key);
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
    return this.blocks.has(`${reader}:${offset}`);
  }

  /** The key of reader `reader`'s table cached whole (its readers keep it: a lookup per block read builds no string). */
  static tableKey(reader: number): string {
    return `${reader}:t`;
  }

  /** The bytes of a table cached whole (`key`: tableKey), if they are (a hit when they are). */
  /** Whether table `key` is cached whole, without counting a hit. */
  hasTable(key: string): boolean {
    return this.blocks.get(key)?.table !== undefined;
  }

  table(key: string): Buffer | undefined {
    const e = this.blocks.get(key);
    if (!e) return undefined;
    this.counters.hits++;
    e.used = true;
    return e.table;
  }

  /** Caches a table whole (`key`: tableKey): one entry of its bytes. */
  putTable(key: string, bytes: Buffer): void {
    const old = this.blocks.get(key);
    if (old) this.used -= old.bytes;
    this.blocks.delete(key);
    this.blocks.set(key, { table: bytes, bytes: bytes.length, pins: 0, used: false });
    this.used += bytes.length;
    this.evict(key);
  }

  removeTable(key: string): void {
    this.removeKey(key);
  }

  put(reader: number, offset: number, block: Block, bytes: number): void {
    const key = `${reader}:${offset}`;
    const old = this.blocks.get(key);
    if (old) this.used -= old.bytes;
    this.blocks.delete(key);
    this.blocks.set(key, { block, bytes, pins: old?.pins ?? 0, used: false });
    this.used += bytes;
    this.evict(key); // never the block just put: its reader is about to use (and pin) it
  }

  /** Drops a block, unless a read has it pinned (it goes when evicted after its unpin). */
  remove(reader: number, offset: number): void {
    this.removeKey(`${reader}:${offset}`);
  }

  private removeKey(key: string): void {
    const e = this.blocks.get(key);
    if (!e || e.pins > 0) return;
    this.blocks.delete(key);
    this.used -= e.bytes;
  }

  /**
   * Keeps a block in the cache until unpinned, over the budget if need be. A read that loads
   * blocks and starts again pins what it loaded, so it always gets further: without pins, a
   * scan over more tables than the cache holds blocks of could evict its own blocks forever.
   * False (and nothing pinned) if the block is not cached.
   */
  pin(reader: number, offset: number): boolean {
    const e = this.blocks.get(`${reader}:${offset}`);
    if (e) e.pins++;
    return e !== undefined;
  }

  unpin(reader: number, offset: number): void {
    const e = this.blocks.get(`${reader}:${offset}`);
    if (e && e.pins > 0) e.pins--;
    this.evict();
  }

  /**
   * Evicts until within budget, by the clock's hand: one live iterator over the entries, so each
   * call goes on from where the last stopped (starting over from the front each time walked past
   * every entry deleted since the Map last compacted). A marked entry loses its mark and is met
   * again a lap later; pinned entries and `keep` are passed over; past two laps without evicting,
   * what is left is pinned and the cache stays over budget until an unpin.
   */
  private evict(keep?: string): void {
    let passed = 0;
    while (this.used > this.capacityBytes && passed <= 2 * this.blocks.size) {
      let next = this.hand.next();
      if (next.done) {
        this.hand = this.blocks.entries();
        next = this.hand.next();
        if (next.done) return;
      }
      const [k, e] = next.value;
      if (e.pins > 0 || k === keep || e.used) {
        if (e.pins === 0 && k !== keep) e.used = false;
        passed++;
        continue;
      }
      this.blocks.delete(k);
      this.used -= e.bytes;
      this.counters.evictions++;
      passed = 0;
    }
  }
}
