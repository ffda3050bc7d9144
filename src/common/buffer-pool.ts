/**
 * Table-sized memory kept for reuse by the code that reads, merges and writes whole tables
 * over and over (a StoC's compaction jobs).
 *
 * Why: a fresh buffer of many MiB comes from the kernel as untouched pages, and the first
 * write to each 4 KiB page takes a fault that zeroes it: for a StoC allocating every input and
 * output of every job afresh, most of its time (doc/decisions/compaction-buffer-pool.md).
 * Memory given back here is handed out again already faulted in.
 *
 * Rules: only memory the giver owns alone is given, once nothing reads or writes it any more
 * (memory given while in use would be overwritten by the next job). Node's shared slab of
 * small Buffers is never owned alone, which is one reason needs under the granule (at least
 * 64 KiB, far above that slab) are neither kept nor pooled. The pool holds at most `maxBytes`;
 * beyond that memory given is left to the garbage collector. Memory is handed out in whole
 * ArrayBuffers of their own (byteOffset 0), so it can be transferred to a worker and back.
 */
import { NovaError } from './errors.js';

/** Smallest granule: far above Node's 8 KiB slab of small Buffers, which is never one owner's. */
const MIN_GRANULE = 64 * 1024;

export class BufferPool {
  /** Free ArrayBuffers, smallest first. */
  private readonly free: ArrayBuffer[] = [];
  private pooledBytes = 0;
  readonly counters = { taken: 0, reused: 0, given: 0, dropped: 0 };

  /**
   * @param maxBytes most bytes kept free between uses
   * @param granule sizes are rounded up to a multiple of this, so buffers fit many needs;
   *   needs under it are not pooled (they cost few faults)
   */
  constructor(private maxBytes: number, readonly granule = 1 << 20) {
    if (!(granule >= MIN_GRANULE)) throw new NovaError('BAD_ARGUMENT', `BufferPool: a granule of ${granule} bytes is under ${MIN_GRANULE}`);
  }

  /** Keeps at most `bytes` free from now on; free buffers past it are left to the garbage collector. */
  setMax(bytes: number): void {
    this.maxBytes = bytes;
    while (this.pooledBytes > this.maxBytes && this.free.length > 0) {
      this.pooledBytes -= this.free.pop()!.byteLength; // the largest first
      this.counters.dropped++;
    }
  }

  /** Bytes held free now. */
  get bytes(): number {
    return this.pooledBytes;
  }

  /**
   * `size` bytes (contents undefined) over an ArrayBuffer of their own: a free one that fits
   * (at most twice the size, so a large buffer is not spent on a small need), else new.
   */
  take(size: number): Buffer {
    this.counters.taken++;
    if (size >= this.granule) {
      const i = this.fit(size);
      if (i >= 0) {
        const ab = this.free.splice(i, 1)[0];
        this.pooledBytes -= ab.byteLength;
        this.counters.reused++;
        return Buffer.from(ab, 0, size);
      }
      return Buffer.from(Buffer.allocUnsafeSlow(roundUp(size, this.granule)).buffer, 0, size);
    }
    return Buffer.allocUnsafeSlow(size);
  }

  /**
   * Up to `count` free ArrayBuffers of at least `size` bytes, taken out of the pool (none are
   * made): memory to send to a worker that will fill it and send it back.
   */
  takeFree(size: number, count: number): ArrayBuffer[] {
    const out: ArrayBuffer[] = [];
    while (out.length < count) {
      const i = this.fit(size, Infinity);
      if (i < 0) break;
      const ab = this.free.splice(i, 1)[0];
      this.pooledBytes -= ab.byteLength;
      out.push(ab);
    }
    this.counters.reused += out.length;
    return out;
  }

  /** Takes back `ab`, whose every user is done with it. Detached or small ones are ignored. */
  give(ab: ArrayBufferLike): void {
    if (!(ab instanceof ArrayBuffer) || ab.byteLength < this.granule) return;
    if (this.pooledBytes + ab.byteLength > this.maxBytes || this.free.includes(ab)) {
      this.counters.dropped++;
      return;
    }
    this.counters.given++;
    let i = 0;
    while (i < this.free.length && this.free[i].byteLength < ab.byteLength) i++;
    this.free.splice(i, 0, ab);
    this.pooledBytes += ab.byteLength;
  }

  /** The smallest free buffer of at least `size` bytes and at most `size * most`; -1 if none. */
  private fit(size: number, most = 2): number {
    for (let i = 0; i < this.free.length; i++) {
      const n = this.free[i].byteLength;
      if (n >= size) return n <= size * most ? i : -1;
    }
    return -1;
  }
}

function roundUp(n: number, to: number): number {
  return Math.ceil(n / to) * to;
}
