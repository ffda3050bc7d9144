/**
 * A cache of decoded data blocks shared by the tables of an engine whose tables are not held
 * whole (DESIGN.md §4: "a block cache"): least recently used first out, within a byte budget.
 * Keys are a reader's id and a block's offset, so a table that goes away simply ages out.
 */
import type { Block } from './block.js';

export class BlockCache {
  private readonly blocks = new Map<string, { block: Block; bytes: number; pins: number }>(); // oldest use first
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
    const key = `${reader}:${offset}`;
    const e = this.blocks.get(key);
    if (!e) {
      this.counters.misses++;
      return undefined;
    }
    this.counters.hits++;
    this.blocks.delete(key); // re-insert: most recently used last
    this.blocks.set(key, e);
    return e.block;
  }

  put(reader: number, offset: number, block: Block, bytes: number): void {
    const key = `${reader}:${offset}`;
    const old = this.blocks.get(key);
    if (old) this.used -= old.bytes;
    this.blocks.delete(key);
    this.blocks.set(key, { block, bytes, pins: old?.pins ?? 0 });
    this.used += bytes;
    this.evict(key); // never the block just put: its reader is about to use (and pin) it
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

  private evict(keep?: string): void {
    for (const [k, e] of this.blocks) {
      if (this.used <= this.capacityBytes) break;
      if (e.pins > 0 || k === keep) continue;
      this.blocks.delete(k);
      this.used -= e.bytes;
      this.counters.evictions++;
    }
  }
}
