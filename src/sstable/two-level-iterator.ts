/**
 * The two-level iterator (LevelDB table/two_level_iterator.cc): an index over second-level
 * iterators read as one, only the one the index is on open. A table is one (its index over
 * its data blocks, table-reader.ts); so is a sorted level (its tables, below). A subclass is
 * the index: one object per iterator, and no call through a separate index object per move.
 */
import type { InternalIterator } from './merging-iterator.js';
import { compareInternalKeys } from '../common/internal-key.js';

export abstract class TwoLevelIterator<D extends InternalIterator> implements InternalIterator {
  private data: D | undefined;

  /** Whether the index is on an entry. */
  protected abstract indexValid(): boolean;
  protected abstract indexFirst(): void;
  /** To the first entry whose iterator may hold keys at or after `target`: no earlier one does. */
  protected abstract indexSeek(target: Uint8Array): void;
  protected abstract indexNext(): void;
  /** An iterator over what the index entry names (it may re-point the one it opened last). */
  protected abstract open(): D;
  /** Throws unless `key`, the entry the iterator stopped at, is sound. */
  protected abstract check(key: Buffer): void;

  get valid(): boolean {
    return this.data !== undefined && this.data.valid;
  }

  get key(): Buffer {
    return this.data!.key;
  }

  get value(): Buffer {
    return this.data!.value;
  }

  first(): void {
    this.indexFirst();
    if (this.openData()) this.data!.first();
    this.settle();
  }

  seek(target: Uint8Array): void {
    this.indexSeek(target);
    if (this.openData()) this.data!.seek(target);
    this.settle();
  }

  next(): void {
    this.data!.next();
    this.settle();
  }

  /**
   * Opens what the index is on; false past its end. If that cannot be opened (a block not
   * loaded, a corrupt one) the iterator is left not valid, never on the old entry.
   */
  private openData(): boolean {
    this.data = undefined;
    if (!this.indexValid()) return false;
    this.data = this.open();
    return true;
  }

  /** Moves past second-level iterators with nothing left, and checks the entry it lands on. */
  private settle(): void {
    while (this.data !== undefined && !this.data.valid) {
      this.indexNext();
      if (this.openData()) this.data!.first();
    }
    if (this.data !== undefined) this.check(this.data.key);
  }
}

/** A table of a sorted level, for levelIterator: its largest internal key, and how to read it. */
export interface LevelTable {
  readonly largest: Uint8Array;
  iterator(): InternalIterator;
}

/**
 * The tables of one level whose tables do not overlap and are in key order (levels 1 and
 * deeper) as one iterator. A seek binary-searches the one table that may hold the target
 * and opens only that one; next() moves into the following table when one runs out. A scan
 * then seeks once per level, not once per table.
 */
export function levelIterator(tables: readonly LevelTable[]): InternalIterator {
  return new LevelIterator(tables);
}

class LevelIterator extends TwoLevelIterator<InternalIterator> {
  private i = 0;

  constructor(private readonly tables: readonly LevelTable[]) {
    super();
  }

  protected indexValid(): boolean {
    return this.i < this.tables.length;
  }

  protected indexFirst(): void {
    this.i = 0;
  }

  /** The first table whose largest key is at or after the target. */
  protected indexSeek(target: Uint8Array): void {
    let lo = 0;
    let hi = this.tables.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareInternalKeys(this.tables[mid].largest, target) < 0) lo = mid + 1;
      else hi = mid;
    }
    this.i = lo;
  }

  protected indexNext(): void {
    this.i++;
  }

  protected open(): InternalIterator {
    return this.tables[this.i].iterator();
  }

  /** Each table's iterator checks its own entries. */
  protected check(): void {}
}
