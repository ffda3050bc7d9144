/**
 * The two-level iterator (LevelDB table/two_level_iterator.cc): an index over second-level
 * iterators read as one, only the one the index is on open. A table is one (its index over
 * its data blocks); so is a sorted level (its tables).
 */
import type { InternalIterator } from './merging-iterator.js';
import { compareInternalKeys } from '../common/internal-key.js';

/** The first level: a position over second-level iterators, and a seek to the one that may hold a target. */
export interface TwoLevelIndex<D extends InternalIterator> {
  readonly valid: boolean;
  first(): void;
  /** To the first entry whose iterator may hold keys at or after `target`: no earlier one does. */
  seek(target: Uint8Array): void;
  next(): void;
  /** An iterator over what the current entry names (it may re-point the one it opened last). */
  open(): D;
  /** Throws unless `key`, the entry the iterator stopped at, is sound. */
  check(key: Buffer): void;
}

export class TwoLevelIterator<D extends InternalIterator> implements InternalIterator {
  private data: D | undefined;

  constructor(private readonly index: TwoLevelIndex<D>) {}

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
    this.index.first();
    if (this.openData()) this.data!.first();
    this.settle();
  }

  seek(target: Uint8Array): void {
    this.index.seek(target);
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
    if (!this.index.valid) return false;
    this.data = this.index.open();
    return true;
  }

  /** Moves past second-level iterators with nothing left, and checks the entry it lands on. */
  private settle(): void {
    while (this.data !== undefined && !this.data.valid) {
      this.index.next();
      if (this.openData()) this.data!.first();
    }
    if (this.data !== undefined) this.index.check(this.data.key);
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
  return new TwoLevelIterator(new LevelIndex(tables));
}

class LevelIndex implements TwoLevelIndex<InternalIterator> {
  private i = 0;

  constructor(private readonly tables: readonly LevelTable[]) {}

  get valid(): boolean {
    return this.i < this.tables.length;
  }

  first(): void {
    this.i = 0;
  }

  /** The first table whose largest key is at or after the target. */
  seek(target: Uint8Array): void {
    let lo = 0;
    let hi = this.tables.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareInternalKeys(this.tables[mid].largest, target) < 0) lo = mid + 1;
      else hi = mid;
    }
    this.i = lo;
  }

  next(): void {
    this.i++;
  }

  open(): InternalIterator {
    return this.tables[this.i].iterator();
  }

  /** Each table's iterator checks its own entries. */
  check(): void {}
}
