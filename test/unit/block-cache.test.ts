/**
 * The block cache and metadata-only table readers: LRU within a budget, pins that hold a
 * read's blocks, misses that say which block to load, and loaded blocks checked.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv } from '../../src/ltc/local-store.js';
import { tableName } from '../../src/ltc/local-store.js';
import { SEEK_TYPE, makeInternalKey } from '../../src/common/internal-key.js';
import type { Block } from '../../src/sstable/block.js';
import { BlockCache } from '../../src/sstable/block-cache.js';
import { TRAILER_BYTES, metadataStart, type BlockHandle } from '../../src/sstable/format.js';
import { BlockMiss, TableReader } from '../../src/sstable/table-reader.js';
import { table } from '../fixtures/tables.js';
import { rng } from '../helpers/rng.js';
import { tempDirs } from '../helpers/temp.js';
import { until } from '../helpers/until.js';

const tempDir = tempDirs('nova-cache-');

setFlagsFromString('--expose-gc');
/** A full garbage collection now (V8's gc(), exposed for this test file). */
const collectGarbage = runInNewContext('gc') as () => void;

const block = (): Block => ({}) as Block; // the cache never looks inside

describe('block cache', () => {
  it('evicts by second chance beyond its budget, the clock\'s hand going on from where it stopped, but never a pinned block or the one just put', () => {
    const c = new BlockCache(300);
    for (let i = 0; i < 3; i++) c.put(1, i, block(), 100);
    expect(c.get(1, 0)).toBeDefined(); // 0 is marked
    c.put(1, 3, block(), 100); // the hand: 0 marked (unmarked now), 1 not: 1 goes
    expect([c.get(1, 1), c.get(1, 2), c.get(1, 0), c.get(1, 3)].map((b) => b !== undefined)).toEqual([false, true, true, true]);
    c.pin(1, 2);
    c.pin(1, 0);
    c.pin(1, 3);
    c.put(1, 4, block(), 100); // all others pinned: over budget, nothing evicted, 4 kept
    expect(c.bytes).toBe(400);
    expect(c.get(1, 4)).toBeDefined(); // 4 is marked
    c.unpin(1, 2); // back within budget: the hand meets 4 (mark spent), 2 (mark spent), then 4 again: 4 goes
    expect(c.bytes).toBe(300);
    expect(c.get(1, 4)).toBeUndefined();
    expect(c.get(1, 2)).toBeDefined();
    expect(c.counters).toMatchObject({ evictions: 2 });
  });

  it('gives every block its second chance once per lap, whatever was evicted before (a hot block outlives a stream of cold ones)', () => {
    const c = new BlockCache(1000);
    for (let i = 0; i < 10; i++) c.put(1, i, block(), 100);
    for (let i = 10; i < 2000; i++) {
      expect(c.get(1, 0), `round ${i}`).toBeDefined(); // hot: used between every two puts
      c.put(1, i, block(), 100); // cold: read once
    }
    expect(c.bytes).toBe(1000);
    expect(c.counters.evictions).toBe(1990);
  });

  // The oracle: the clock as a plain list in the hand's order, the hand an index into it.
  it('evicts what a plain-list clock evicts, over random puts, hits, removals, pins and resizes (seeded)', () => {
    const random = rng(29);
    const c = new BlockCache(2000);
    let capacity = 2000;
    const face: Array<{ offset: number; bytes: number; pins: number; used: boolean }> = [];
    let hand = 0;
    const at = (offset: number): number => face.findIndex((e) => e.offset === offset);
    const cut = (i: number): void => {
      face.splice(i, 1);
      if (i < hand) hand--;
    };
    const evict = (keep?: number): void => {
      let passed = 0;
      while (face.reduce((n, e) => n + e.bytes, 0) > capacity && passed <= 2 * face.length) {
        if (hand >= face.length) hand = 0;
        const e = face[hand];
        if (e.pins > 0 || e.offset === keep || e.used) {
          if (e.pins === 0 && e.offset !== keep) e.used = false;
          hand++;
          passed++;
          continue;
        }
        cut(hand);
        passed = 0;
      }
    };
    for (let step = 0; step < 20_000; step++) {
      const offset = Math.floor(random() * 200);
      const i = at(offset);
      const op = random();
      if (op < 0.4) {
        const bytes = 10 + Math.floor(random() * 90);
        c.put(1, offset, block(), bytes);
        const pins = i >= 0 ? face[i].pins : 0;
        if (i >= 0) cut(i);
        face.push({ offset, bytes, pins, used: false });
        evict(offset);
      } else if (op < 0.7) {
        expect(c.get(1, offset) !== undefined, `step ${step}`).toBe(i >= 0);
        if (i >= 0) face[i].used = true;
      } else if (op < 0.85) {
        c.remove(1, offset);
        if (i >= 0 && face[i].pins === 0) cut(i);
      } else if (op < 0.93) {
        expect(c.pin(1, offset)).toBe(i >= 0);
        if (i >= 0) face[i].pins++;
      } else if (op < 0.99) {
        const pinned = face.filter((e) => e.pins > 0);
        const e = pinned[Math.floor(random() * pinned.length)] ?? face[i] ?? { offset };
        c.unpin(1, e.offset);
        const j = at(e.offset);
        if (j >= 0 && face[j].pins > 0) face[j].pins--;
        evict();
      } else {
        capacity = 500 + Math.floor(random() * 3000);
        c.resize(capacity);
        evict();
      }
      expect(c.bytes, `step ${step}`).toBe(face.reduce((n, e) => n + e.bytes, 0));
    }
    for (let offset = 0; offset < 200; offset++) expect(c.has(1, offset)).toBe(at(offset) >= 0);
  });

  it('keeps nothing of a table once it is removed, however the cache grew and shrank before (a live iterator as the hand kept them all)', async () => {
    const c = new BlockCache(2 ** 30);
    const refs = ((): Array<WeakRef<ArrayBuffer>> => {
      const tables = Array.from({ length: 300 }, () => Buffer.from(new ArrayBuffer(1024)));
      tables.forEach((t, i) => c.putTable(BlockCache.tableKey(i), t));
      c.put(1, 0, block(), 100);
      tables.forEach((_, i) => c.removeTable(BlockCache.tableKey(i)));
      return tables.map((t) => new WeakRef(t.buffer));
    })();
    expect(c.bytes).toBe(100);
    await new Promise((resolve) => setImmediate(resolve)); // a WeakRef holds its target until the current job ends
    collectGarbage();
    expect(refs.filter((r) => r.deref() !== undefined)).toHaveLength(0);
  });
});

describe('a metadata-only table reader', () => {
  const bytes = table(3000, 1, 7);
  const whole = new TableReader(bytes, 'whole');
  const start = metadataStart(whole.footer);

  it('misses a block it has not loaded, and after the load reads exactly as the whole table', () => {
    const r = TableReader.metadataOnly(bytes.subarray(start), start, 'meta', new BlockCache(1 << 20));
    expect(r.whole).toBe(false);
    for (let i = 0; i < 3000; i += 97) {
      const key = Buffer.from(`k${String(i).padStart(5, '0')}`);
      let got;
      for (let tries = 0; ; tries++) {
        try {
          got = r.get(key, 100);
          break;
        } catch (err) {
          expect(err).toBeInstanceOf(BlockMiss);
          const h = (err as BlockMiss).handle;
          r.insert(h, bytes.subarray(h.offset, h.offset + h.size + TRAILER_BYTES));
          expect(tries).toBe(0); // one load per block
        }
      }
      expect(got).toEqual(whole.get(key, 100));
    }
    const fresh = TableReader.metadataOnly(bytes.subarray(start), start, 'meta', new BlockCache(1 << 20));
    expect(() => fresh.iterator().seek(makeInternalKey(Buffer.from('k01000'), 100, SEEK_TYPE))).toThrow(BlockMiss);
  });

  it('caches a whole table it is given (fill) as one entry, reads blocks from it, and drops it and its blocks when the table goes (uncache)', () => {
    const cache = new BlockCache(1 << 20);
    const r = TableReader.metadataOnly(bytes.subarray(start), start, 'meta', cache);
    r.fill(bytes);
    expect(cache.bytes).toBe(bytes.length);
    const key = (i: number): Buffer => Buffer.from(`k${String(i).padStart(5, '0')}`);
    for (let i = 0; i < 3000; i += 97) expect(r.get(key(i), 100)).toEqual(whole.get(key(i), 100));
    const it = r.iterator();
    let n = 0;
    for (it.first(); it.valid; it.next()) n++;
    expect(n).toBe(3000);
    expect(cache.counters.misses).toBe(0);
    expect(r.ownBytes()).toBe(bytes);
    r.uncache();
    expect(cache.bytes).toBe(0);
    expect(() => r.get(key(5), 100)).toThrow(BlockMiss);
    const miss = (reader: TableReader): BlockHandle => { try { reader.get(key(5), 100); } catch (err) { return (err as BlockMiss).handle; } throw new Error('no miss'); };
    const h = miss(r);
    r.insert(h, bytes.subarray(h.offset, h.offset + h.size + TRAILER_BYTES)); // a load under way when its table left the tree
    expect(cache.bytes).toBe(0);
    // A block a read has pinned stays while it is pinned, and goes at its unpin once its table has left.
    const r2 = TableReader.metadataOnly(bytes.subarray(start), start, 'meta2', cache);
    r2.insert(h, bytes.subarray(h.offset, h.offset + h.size + TRAILER_BYTES));
    expect(r2.pin(h.offset)).toBe(true);
    r2.uncache();
    expect(cache.bytes).toBeGreaterThan(0);
    r2.unpin(h.offset);
    expect(cache.bytes).toBe(0);
  });

  it('a table cached whole is evicted as one entry, and a damaged block in it is CORRUPTION on first use', () => {
    const cache = new BlockCache(bytes.length + 100);
    const r = TableReader.metadataOnly(bytes.subarray(start), start, 'meta.sst', cache);
    const bad = Buffer.from(bytes);
    bad[3] ^= 1; // in the first data block
    r.fill(bad);
    expect(() => r.get(Buffer.from('k00000'), 100)).toThrow(/meta.sst: data block checksum mismatch at offset 0/);
    const other = TableReader.metadataOnly(bytes.subarray(start), start, 'other', cache);
    other.fill(bytes); // no room for both: the first goes
    expect(cache.bytes).toBe(bytes.length);
    expect(r.ownBytes()).toBeUndefined();
  });

  it('keeps nothing of a table cached whole once the cache lets it go (a reader\'s reused lookup block held it)', async () => {
    const cache = new BlockCache(bytes.length + 100);
    const r = TableReader.metadataOnly(bytes.subarray(start), start, 'meta.sst', cache);
    const gone = ((): WeakRef<ArrayBuffer> => {
      const copy = Buffer.from(bytes); // an ArrayBuffer of its own, only the cache's once given
      r.fill(copy);
      expect(r.get(Buffer.from('k01000'), 100)).toEqual(whole.get(Buffer.from('k01000'), 100));
      return new WeakRef(copy.buffer);
    })();
    cache.resize(0);
    expect(r.ownBytes()).toBeUndefined();
    await new Promise((resolve) => setImmediate(resolve)); // a WeakRef holds its target until the current job ends
    collectGarbage();
    expect(gone.deref()).toBeUndefined();
    expect(() => r.get(Buffer.from('k01000'), 100)).toThrow(BlockMiss); // and reads go on: from blocks loaded again
  });

  it('refuses a damaged block with CORRUPTION naming the table and offset', () => {
    const r = TableReader.metadataOnly(bytes.subarray(start), start, 'meta.sst', new BlockCache(1 << 20));
    let miss: BlockMiss | undefined;
    try {
      r.get(Buffer.from('k00100'), 100);
    } catch (err) {
      miss = err as BlockMiss;
    }
    const h = miss!.handle;
    const bad = Buffer.from(bytes.subarray(h.offset, h.offset + h.size + TRAILER_BYTES));
    bad[3] ^= 1;
    expect(() => r.insert(h, bad)).toThrow(new RegExp(`meta.sst .*offset ${h.offset}.*checksum`));
  });
});

describe('an engine with a block cache', () => {
  it('caches the tables it writes while there is room; past it, holds tables as metadata and loads their blocks on a miss', async () => {
    const dir = tempDir();
    const env = localEnv(dir);
    env.store.readRange = async (file, _fragments, offset, length) => readFileSync(join(dir, tableName(file))).subarray(offset, offset + length);
    let db = await Engine.open(dir, { env, blockCacheBytes: 1 << 20, memtableBytes: 64 * 1024, sync: false });
    for (let i = 0; i < 2000; i++) await db.put(Buffer.from(`key${i}`), Buffer.alloc(100, i % 256));
    await db.flush();
    expect(db.stats.tablesPerLevel.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    expect(db.stats.blockCacheBytes).toBeGreaterThan(200_000); // every table it wrote
    const whole = db.stats.blockCacheBytes;
    const before = db.stats.blockCacheMisses;
    for (let i = 0; i < 2000; i += 7) expect((await db.get(Buffer.from(`key${i}`)))?.equals(Buffer.alloc(100, i % 256))).toBe(true);
    expect(db.stats.blockCacheMisses).toBe(before);
    await db.close();
    // A cache smaller than one table: tables are opened as metadata, their blocks read on a miss.
    db = await Engine.open(dir, { env, blockCacheBytes: 16 * 1024, memtableBytes: 64 * 1024, sync: false });
    expect((await db.get(Buffer.from('key7')))?.equals(Buffer.alloc(100, 7))).toBe(true);
    expect(db.stats.blockCacheMisses).toBeGreaterThan(0);
    expect(db.stats.blockCacheBytes).toBeGreaterThan(0);
    expect(() => db.iterator()).toThrow(/block cache/);
    await db.close();
    // Reopened with room: it serves as soon as it has the tables' metadata, then caches them whole.
    db = await Engine.open(dir, { env, blockCacheBytes: 1 << 20, memtableBytes: 64 * 1024, sync: false, warmAfterMs: 0 });
    await until(() => db.stats.blockCacheBytes >= whole, 5_000);
    const misses = db.stats.blockCacheMisses;
    for (let i = 0; i < 2000; i += 7) expect((await db.get(Buffer.from(`key${i}`)))?.equals(Buffer.alloc(100, i % 256))).toBe(true);
    expect(db.stats.blockCacheMisses).toBe(misses);
    db.setMemoryBudget(64 * 1024); // opened without a budget: it keeps none
    expect(db.stats.memoryBudgetBytes).toBe(0);
    await db.close();
    // With a budget, a smaller one (its LTC took another range): the cache shrinks into it.
    db = await Engine.open(dir, { env, memoryBudgetBytes: 8 << 20, memtableBytes: 64 * 1024, sync: false, warmAfterMs: 0 });
    await until(() => db.stats.blockCacheBytes > 200_000, 5_000);
    const cached = db.stats.blockCacheBytes;
    db.setMemoryBudget(192 * 1024); // two 64 KiB memtables and the tables' metadata leave little
    expect(db.stats.memoryBudgetBytes).toBe(192 * 1024);
    expect(db.stats.blockCacheBytes).toBeLessThan(cached / 2);
    expect(() => db.setMemoryBudget(0)).toThrow(/positive integer/);
    await db.close();
  });

  it('a scan that misses loads the first block of every level it reads side by side, and reads what a whole-table scan reads', async () => {
    const dir = tempDir();
    const env = localEnv(dir);
    let inFlight = 0;
    let most = 0;
    env.store.readRange = async (file, _fragments, offset, length) => {
      most = Math.max(most, ++inFlight);
      await new Promise((r) => setTimeout(r, 5)); // a StoC's round trip
      inFlight--;
      return readFileSync(join(dir, tableName(file))).subarray(offset, offset + length);
    };
    let db = await Engine.open(dir, { env, memtableBytes: 64 * 1024, sync: false });
    // Three generations of the same keys, each pushed one level down by the next.
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 2000; i += 1 + round) await db.put(Buffer.from(`key${String(i).padStart(5, '0')}`), Buffer.alloc(100, round * 50 + (i % 50)));
      await db.flushMemtables();
      if (round < 2) await db.compactAll();
    }
    const expected = await db.scan(Buffer.from('key01000'), { limit: 20 });
    expect(db.stats.tablesPerLevel.filter((n) => n > 0).length).toBeGreaterThan(1);
    await db.close();
    // Reopened with a cache smaller than a table: every block is read on a miss.
    db = await Engine.open(dir, { env, blockCacheBytes: 16 * 1024, memtableBytes: 64 * 1024, sync: false });
    most = 0;
    const rows = await db.scan(Buffer.from('key01000'), { limit: 20 });
    expect(rows.map(([k, v]) => [k.toString(), v[0]])).toEqual(expected.map(([k, v]) => [k.toString(), v[0]]));
    expect(most).toBeGreaterThan(1); // the levels' first blocks went together, not one round trip each
    await db.close();
    // A block loaded on a guess that fails does not fail the scan: the scan loads it again when it reads it.
    db = await Engine.open(dir, { env, blockCacheBytes: 16 * 1024, memtableBytes: 64 * 1024, sync: false });
    const read = env.store.readRange;
    let calls = 0;
    env.store.readRange = (...a) => (calls++ === 0 ? Promise.reject(new Error('StoC 2: read failed')) : read(...a));
    const again = await db.scan(Buffer.from('key01000'), { limit: 20 });
    expect(again.map(([k, v]) => [k.toString(), v[0]])).toEqual(expected.map(([k, v]) => [k.toString(), v[0]]));
    expect(calls).toBeGreaterThan(2);
    env.store.readRange = read;
    await db.close();
  });
});
