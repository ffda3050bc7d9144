/**
 * Merge instead of flush (src/ltc/merge-job.ts): immutable memtables of one Drange holding few
 * unique keys become a new memtable and log, not an L0 table; reads, snapshots, flushes and
 * reopens see exactly what they would have seen.
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-merge-');
const hot = (i: number): Buffer => Buffer.from(`hot-${i % 20}`);
const value = (i: number): Buffer => Buffer.from(`v${i}-`.padEnd(300, '.'));

describe('merge instead of flush', () => {
  it('a memtable of few keys is merged, not flushed; gets, scans, snapshots and a reopen see every write', async () => {
    const dir = tempDir();
    const open = (mergeUnderKeys = 100) => Engine.open(dir, { memtableBytes: 16 * 1024, sync: false, mergeUnderKeys, idleCompactionMs: 0 });
    let db = await open();
    const last = new Map<string, number>();
    let snapAt = -1;
    let snap: ReturnType<Engine['snapshot']> | undefined;
    const atSnap = new Map<string, number>();
    for (let i = 0; i < 3000; i++) {
      await db.put(hot(i), value(i));
      last.set(hot(i).toString(), i);
      if (i === 2990) {
        snap = db.snapshot();
        snapAt = i;
        for (const [k, v] of last) atSnap.set(k, v);
      }
    }
    const s = db.stats;
    expect(s.mergesInsteadOfFlush).toBeGreaterThan(5);
    expect(s.flushes).toBe(0); // twenty keys never reach L0
    expect(s.tablesPerLevel[0]).toBe(0);
    for (const [k, i] of last) expect((await db.get(Buffer.from(k)))?.equals(value(i)), k).toBe(true);
    // The snapshot still reads what it saw: merges keep the versions it needs.
    for (const [k, i] of atSnap) expect((await db.get(Buffer.from(k), { snapshot: snap }))?.equals(value(i)), `${k} at ${snapAt}`).toBe(true);
    snap!.release();
    expect((await db.scan(Buffer.from('hot-'))).length).toBe(20);
    await db.close(); // the merged memtable's log is replayed
    db = await open();
    for (const [k, i] of last) expect((await db.get(Buffer.from(k)))?.equals(value(i)), `${k} after reopen`).toBe(true);
    // A flush takes the merged memtable too.
    await db.flush();
    expect(db.stats.parkedMemtables).toBe(0);
    expect(db.stats.tablesPerLevel.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    for (const [k, i] of last) expect((await db.get(Buffer.from(k)))?.equals(value(i)), `${k} after flush`).toBe(true);
    await db.close();

    // Off (0): the same writes flush to L0.
    const dir2 = tempDir();
    const off = await Engine.open(dir2, { memtableBytes: 16 * 1024, sync: false, mergeUnderKeys: 0, idleCompactionMs: 0 });
    for (let i = 0; i < 3000; i++) await off.put(hot(i), value(i));
    expect(off.stats.mergesInsteadOfFlush).toBe(0);
    expect(off.stats.flushes).toBeGreaterThan(5);
    await off.close();
  });

  it('with a snapshot held, merged memtables stop growing at a memtable\'s bytes and are flushed', async () => {
    const dir = tempDir();
    const db = await Engine.open(dir, { memtableBytes: 16 * 1024, sync: false, idleCompactionMs: 0 });
    const snap = db.snapshot(); // every version after it must be kept
    for (let i = 0; i < 3000; i++) await db.put(hot(i), value(i));
    expect(db.stats.mergesInsteadOfFlush).toBeGreaterThan(0);
    expect(db.stats.flushes).toBeGreaterThan(0);
    expect(db.stats.memtableBytes).toBeLessThan(5 * 16 * 1024); // active, immutable, parked (< 2 τ)
    for (let i = 2980; i < 3000; i++) expect((await db.get(hot(i)))?.equals(value(i))).toBe(true);
    expect(await db.get(hot(0), { snapshot: snap })).toBeUndefined();
    snap.release();
    await db.close();
  });

  it('hot keys, then new keys: merged and flushed memtables keep every key\'s newest version', async () => {
    const dir = tempDir();
    const db = await Engine.open(dir, { memtableBytes: 16 * 1024, sync: false, idleCompactionMs: 0, l0Trigger: 100, l0StopTrigger: 200, mergeUnderKeys: 40 });
    for (let i = 0; i < 1000; i++) await db.put(hot(i), value(i));
    expect(db.stats.parkedMemtables).toBe(1);
    expect(db.stats.flushes).toBe(0);
    // The newest version of each hot key, then new keys: a memtable of too many keys to merge
    // goes to L0 with the merged one before it.
    for (let i = 1000; i < 1020; i++) await db.put(hot(i), value(i));
    for (let i = 1020; db.stats.flushes === 0; i++) await db.put(Buffer.from(`many-${i}`), value(i));
    expect(db.stats.tablesPerLevel[0]).toBe(2);
    for (let i = 1000; i < 1020; i++) expect((await db.get(hot(i)))?.equals(value(i)), `hot ${i % 20}`).toBe(true);
    await db.close();
  });

  it('with Dranges, the hot Drange merges while the others flush; keys spread over many stay correct', async () => {
    const dir = tempDir();
    const db = await Engine.open(dir, { memtableBytes: 16 * 1024, activeMemtables: 2, maxMemtables: 4, sync: false, idleCompactionMs: 0 });
    const oracle = new Map<string, number>();
    for (let i = 0; i < 6000; i++) {
      // "a…" keys: a few, written often; "z…" keys: each new.
      const k = i % 2 === 0 ? `a${i % 30}` : `z${String(i).padStart(6, '0')}`;
      await db.put(Buffer.from(k), value(i));
      oracle.set(k, i);
    }
    expect(db.stats.dranges).toBe(2);
    expect(db.stats.mergesInsteadOfFlush).toBeGreaterThan(0);
    expect(db.stats.flushes).toBeGreaterThan(0);
    for (const [k, i] of oracle) expect((await db.get(Buffer.from(k)))?.equals(value(i)), k).toBe(true);
    await db.close();
  });
});
