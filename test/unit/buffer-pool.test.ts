/** BufferPool (src/common/buffer-pool.ts): memory handed out again, within its cap, never twice. */
import { describe, expect, it } from 'vitest';
import { BufferPool } from '../../src/common/buffer-pool.js';

const MiB = 1 << 20;

describe('BufferPool', () => {
  it('hands memory given back out again, in whole ArrayBuffers of their own', () => {
    const pool = new BufferPool(64 * MiB);
    const a = pool.take(3 * MiB + 5);
    expect([a.length, a.byteOffset, a.buffer.byteLength]).toEqual([3 * MiB + 5, 0, 4 * MiB]); // rounded to the granule
    a.fill(7);
    pool.give(a.buffer);
    expect(pool.bytes).toBe(4 * MiB);
    const b = pool.take(4 * MiB);
    expect(b.buffer).toBe(a.buffer);
    expect(pool.bytes).toBe(0);
    expect(pool.counters).toMatchObject({ taken: 2, reused: 1, given: 1 });
    // Small needs are not pooled, but are still buffers of their own (transferable).
    const small = pool.take(1000);
    expect([small.byteOffset, small.buffer.byteLength]).toEqual([0, 1000]);
    pool.give(small.buffer);
    expect(pool.bytes).toBe(0);
  });

  it('takes the smallest that fits, never one more than twice the need', () => {
    const pool = new BufferPool(64 * MiB);
    const sizes = [8, 2, 4].map((m) => pool.take(m * MiB).buffer);
    sizes.forEach((ab) => pool.give(ab));
    expect(pool.take(3 * MiB).buffer.byteLength).toBe(4 * MiB);
    expect(pool.take(2 * MiB).buffer.byteLength).toBe(2 * MiB);
    // Only the 8 MiB one is left: too big for 3 MiB, so that need gets new memory.
    const fresh = pool.take(3 * MiB);
    expect(fresh.buffer.byteLength).toBe(3 * MiB);
    expect(pool.bytes).toBe(8 * MiB);
    // takeFree has no upper bound, and makes nothing.
    expect(pool.takeFree(MiB, 5).map((ab) => ab.byteLength)).toEqual([8 * MiB]);
    expect(pool.takeFree(MiB, 5)).toEqual([]);
  });

  it('keeps at most maxBytes, and ignores memory given twice or detached', () => {
    const pool = new BufferPool(5 * MiB);
    const a = pool.take(4 * MiB).buffer;
    const b = pool.take(4 * MiB).buffer;
    pool.give(a);
    pool.give(a); // a bug elsewhere: the same memory must not be handed out twice
    pool.give(b); // over the cap: left to the garbage collector
    expect(pool.bytes).toBe(4 * MiB);
    expect(pool.counters.dropped).toBe(2);
    const detached = pool.take(MiB + 1).buffer as ArrayBuffer; // new: the free 4 MiB is over twice the need
    structuredClone(detached, { transfer: [detached] });
    pool.give(detached);
    expect(pool.bytes).toBe(4 * MiB);
    expect(pool.takeFree(MiB, 3)).toEqual([a]);
  });

  it('drops what it keeps past a lowered maximum, the largest first, and keeps no more after', () => {
    const pool = new BufferPool(16 * MiB);
    const small = pool.take(2 * MiB).buffer;
    const large = pool.take(8 * MiB).buffer;
    pool.give(small);
    pool.give(large);
    expect(pool.bytes).toBe(10 * MiB);
    pool.setMax(4 * MiB);
    expect(pool.bytes).toBe(2 * MiB);
    expect(pool.takeFree(MiB, 3)).toEqual([small]);
    pool.give(large);
    expect(pool.bytes).toBe(0); // over the new maximum
  });
});

describe('BufferPool limits', () => {
  it('refuses a granule small enough to pool Node\'s shared slab of small Buffers', () => {
    expect(() => new BufferPool(MiB, 8192)).toThrow(/granule/);
    expect(new BufferPool(MiB, 64 * 1024).granule).toBe(64 * 1024);
  });
});
