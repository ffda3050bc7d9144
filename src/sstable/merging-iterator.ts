/**
 * Iterators over internal keys, and the two that combine them (LevelDB table/merger.cc and
 * db/db_iter.cc). Pure: a StoC runs the same merge as an LTC.
 *
 * MergingIterator: the k-way merge of children in internal-key order (a binary heap).
 * VisibleIterator: what a reader at `snapshot` sees — for each user key, the newest version
 * with sequence <= snapshot, and nothing if that version is a delete.
 * Keys and values are views valid until the next move; copy them to keep them.
 */
import {
  TRAILER_BYTES, ValueType, compareBytes, compareInternalKeys, sequenceOf,
} from '../common/internal-key.js';

export interface InternalIterator {
  readonly valid: boolean;
  readonly key: Buffer;
  readonly value: Buffer;
  first(): void;
  seek(target: Uint8Array): void;
  next(): void;
}

export class MergingIterator implements InternalIterator {
  private heap: InternalIterator[] = [];

  constructor(private readonly children: InternalIterator[]) {}

  get valid(): boolean {
    return this.heap.length > 0;
  }

  get key(): Buffer {
    return this.heap[0].key;
  }

  get value(): Buffer {
    return this.heap[0].value;
  }

  first(): void {
    for (const c of this.children) c.first();
    this.rebuild();
  }

  seek(target: Uint8Array): void {
    for (const c of this.children) c.seek(target);
    this.rebuild();
  }

  next(): void {
    const top = this.heap[0];
    top.next();
    if (!top.valid) {
      const last = this.heap.pop()!;
      if (this.heap.length === 0) return;
      this.heap[0] = last;
    }
    this.siftDown(0);
  }

  private rebuild(): void {
    this.heap = this.children.filter((c) => c.valid);
    for (let i = (this.heap.length >>> 1) - 1; i >= 0; i--) this.siftDown(i);
  }

  private siftDown(i: number): void {
    const h = this.heap;
    const n = h.length;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) return;
      const r = l + 1;
      const m = r < n && compareInternalKeys(h[r].key, h[l].key) < 0 ? r : l;
      if (compareInternalKeys(h[m].key, h[i].key) >= 0) return;
      [h[i], h[m]] = [h[m], h[i]];
      i = m;
    }
  }
}

/** User-visible entries at `snapshot`: newest version per user key, deletes hidden. */
export class VisibleIterator {
  private userKey = Buffer.allocUnsafe(64);
  private userLen = 0;
  private ok = false;

  constructor(private readonly inner: InternalIterator, private readonly snapshot: number) {}

  get valid(): boolean {
    return this.ok;
  }

  /** The user key (a view; copy to keep). */
  get key(): Buffer {
    return this.userKey.subarray(0, this.userLen);
  }

  get value(): Buffer {
    return this.inner.value;
  }

  first(): void {
    this.inner.first();
    this.settle(false);
  }

  /** Positions at the first visible user key >= `internalTarget`'s user key. */
  seek(internalTarget: Uint8Array): void {
    this.inner.seek(internalTarget);
    this.settle(false);
  }

  next(): void {
    this.settle(true);
  }

  /**
   * Moves to the next visible entry. With `skipCurrent`, first passes every remaining
   * version of the current user key.
   */
  private settle(skipCurrent: boolean): void {
    const it = this.inner;
    let skipping = skipCurrent;
    while (it.valid) {
      const k = it.key;
      const ulen = k.length - TRAILER_BYTES;
      if (skipping && compareBytes(k, 0, ulen, this.userKey, 0, this.userLen) === 0) {
        it.next();
        continue;
      }
      if (sequenceOf(k) > this.snapshot) {
        it.next(); // too new for this snapshot
        continue;
      }
      // The newest visible version of a new user key.
      this.remember(k, ulen);
      if (k[ulen] === ValueType.Delete) {
        skipping = true;
        it.next();
        continue;
      }
      this.ok = true;
      return;
    }
    this.ok = false;
  }

  private remember(k: Buffer, ulen: number): void {
    if (ulen > this.userKey.length) this.userKey = Buffer.allocUnsafe(ulen * 2);
    k.copy(this.userKey, 0, 0, ulen);
    this.userLen = ulen;
  }
}
