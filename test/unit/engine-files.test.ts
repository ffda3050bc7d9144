/**
 * The engine's files under damage: a corrupted table or MANIFEST is reported with its file
 * and offset, never read as data; a torn log tail is truncated with a warning. Iterators.
 */
import { closeSync, openSync, readdirSync, readFileSync, writeFileSync, appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { loadAddon } from '../../src/common/addon.js';
import { tempDirs } from '../helpers/temp.js';
import { until } from '../helpers/until.js';

const tempDir = tempDirs('nova-files-');

async function filled(): Promise<string> {
  const dir = tempDir();
  const db = await Engine.open(dir, { memtableBytes: 8 * 1024, sync: false });
  for (let i = 0; i < 300; i++) await db.put(Buffer.from(`k${String(i).padStart(4, '0')}`), Buffer.alloc(100, i & 0xff));
  await db.flush();
  await db.close();
  return dir;
}

const only = (dir: string, re: RegExp): string => {
  const names = readdirSync(dir).filter((n) => re.test(n));
  return join(dir, names[0]);
};

describe('engine files', () => {
  it('reports a corrupted table with its path and offset, on open or when the block is read', async () => {
    const dir = await filled();
    const table = only(dir, /\.sst$/);
    const bytes = readFileSync(table);
    const pattern = new RegExp(`${table.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}.*offset \\d+`);
    for (const at of [100, bytes.length - 10]) { // a data block (read lazily), the footer (read on open)
      const bad = Buffer.from(bytes);
      bad[at] ^= 0xff;
      writeFileSync(table, bad);
      let error: unknown;
      try {
        const db = await Engine.open(dir);
        try {
          await db.scan(Buffer.from(''));
        } finally {
          await db.close();
        }
      } catch (err) {
        error = err;
      }
      expect(error, `byte ${at}`).toMatchObject({ code: 'CORRUPTION' });
      expect((error as Error).message).toMatch(pattern);
    }
  });

  it('reports a corrupted MANIFEST with its path and offset', async () => {
    const dir = await filled();
    const manifest = only(dir, /^MANIFEST-/);
    const bytes = readFileSync(manifest);
    bytes[10] ^= 0x01; // inside the first edit; the flush's edits follow it, so this is not a torn tail
    writeFileSync(manifest, bytes);
    const error = await Engine.open(dir).then(() => undefined, (e: unknown) => e);
    expect(error).toMatchObject({ code: 'CORRUPTION' });
    expect((error as Error).message).toMatch(/MANIFEST-\d+: fragment checksum mismatch at offset 0/);
  });

  it('truncates a torn log tail with a warning and keeps what was before it', async () => {
    const dir = tempDir();
    const db = await Engine.open(dir, { sync: false });
    await db.put(Buffer.from('a'), Buffer.from('1'));
    await db.put(Buffer.from('b'), Buffer.from('2'));
    await db.close(); // the memtable stays in its log
    // Simulate a crash mid-append: half a record at the end of the log.
    appendFileSync(only(dir, /\.log$/), Buffer.from([1, 2, 3, 4, 200, 0, 1, 9, 9]));
    const warnings: string[] = [];
    const again = await Engine.open(dir, { onWarning: (w) => warnings.push(w) });
    expect(warnings.length).toBe(1);
    expect(warnings[0]).toMatch(/\.log: torn tail at offset \d+ truncated/);
    expect((await again.get(Buffer.from('a')))?.toString()).toBe('1');
    expect((await again.get(Buffer.from('b')))?.toString()).toBe('2');
    await again.close();
  });

  it('removes what a crash leaves behind once open, and nothing else', async () => {
    const dir = await filled();
    const before = readdirSync(dir).sort();
    // A table whose edit never landed, a log never bound, a MANIFEST CURRENT never named,
    // a half-replaced CURRENT; and files that are not the engine's.
    const leftovers = ['999990.sst', '999991.log', 'MANIFEST-999989', 'CURRENT.tmp'];
    const foreign = ['notes.txt', '12.sst.bak', 'LOCK.old'];
    for (const name of [...leftovers, ...foreign]) writeFileSync(join(dir, name), 'x');
    const db = await Engine.open(dir);
    // Deleted while the engine serves: the numbers it gives out are above them.
    await until(() => leftovers.every((name) => !readdirSync(dir).includes(name)), 10_000);
    const after = readdirSync(dir);
    for (const name of leftovers) expect(after, name).not.toContain(name);
    await db.put(Buffer.from('new'), Buffer.from('v'));
    await db.flush();
    expect(readdirSync(dir).filter((n) => n.endsWith('.sst')).map((n) => Number(n.slice(0, -4))).every((n) => n < 999990 || n > 999991)).toBe(true);
    for (const name of foreign) expect(after, name).toContain(name);
    // Every table that was there is still there (and named by the new MANIFEST).
    for (const name of before.filter((n) => n.endsWith('.sst'))) expect(after).toContain(name);
    for (let i = 0; i < 300; i++) expect(await db.get(Buffer.from(`k${String(i).padStart(4, '0')}`)), `k${i}`).toEqual(Buffer.alloc(100, i & 0xff));
    await db.close();
  });

  it('refuses a second open of a directory until the first closes; a lock ends with its holder, whatever pid it names', async () => {
    const dir = tempDir();
    const db = await Engine.open(dir, { sync: false });
    await expect(Engine.open(dir)).rejects.toMatchObject({ code: 'BUSY', message: expect.stringMatching(/in use by this process/) });
    await db.close();
    const again = await Engine.open(dir);
    await again.close();
    // The kernel's lock refuses, naming its holder as the kernel records it, not the pid the file
    // names: here another open file of this process takes it, as another process would.
    const fd = openSync(join(dir, 'LOCK'), 'r+');
    try {
      expect(loadAddon().lockFile(fd)).toBe(0);
      writeFileSync(join(dir, 'LOCK'), '4242\n');
      await expect(Engine.open(dir)).rejects.toMatchObject({ code: 'BUSY', message: expect.stringMatching(new RegExp(`in use by process ${process.pid}:`)) });
    } finally {
      closeSync(fd);
    }
    // A LOCK file left by a process that is gone names a pid that any live process may have
    // now (PID 1 here, or this process): no kernel lock is held, so the open goes ahead.
    for (const pid of [1, process.pid, 4194303]) {
      writeFileSync(join(dir, 'LOCK'), `${pid}\n`);
      const third = await Engine.open(dir);
      expect(readFileSync(join(dir, 'LOCK'), 'utf8')).toBe(`${process.pid}\n`);
      await third.close();
    }
  });

  it('close waits for every write accepted before it, even past a group commit\'s size cap', async () => {
    const dir = tempDir();
    const db = await Engine.open(dir, { memtableBytes: 64 * 1024, sync: false });
    const writes = Array.from({ length: 40 }, (_, i) => db.put(Buffer.from(`c${i}`), Buffer.alloc(4000, i)));
    await db.close();
    await Promise.all(writes); // every one acknowledged, none failed by closed files
    const again = await Engine.open(dir);
    for (let i = 0; i < 40; i++) expect(await again.get(Buffer.from(`c${i}`)), `c${i}`).toEqual(Buffer.alloc(4000, i));
    await again.close();
  });

  it('reopens a tree cut into more Dranges than the α it is opened with', async () => {
    const dir = tempDir();
    const value = Buffer.alloc(200, 3);
    const db = await Engine.open(dir, { memtableBytes: 4096, activeMemtables: 4, sync: false });
    for (let i = 0; db.stats.dranges < 3; i++) await db.put(Buffer.from(`k${i % 500}`), value);
    await db.close();
    const again = await Engine.open(dir, { memtableBytes: 4096 }); // α 1, δ 2
    expect(again.stats.dranges).toBeGreaterThanOrEqual(3);
    for (let i = 0; i < 2000; i++) await again.put(Buffer.from(`k${i % 500}`), Buffer.from(`v${i}`));
    for (let i = 1500; i < 2000; i++) expect((await again.get(Buffer.from(`k${i % 500}`)))?.toString()).toBe(`v${i}`);
    await again.close();
  });

  it('refuses memtables too small to hold an entry', async () => {
    const dir = tempDir();
    await expect(Engine.open(dir, { memtableBytes: 64 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/memtableBytes/) });
    await expect(Engine.open(dir, { activeMemtables: 4, maxMemtables: 4 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/maxMemtables/) });
  });

  it('group-commits concurrent synced writes: one fdatasync for many', async () => {
    const dir = tempDir();
    const db = await Engine.open(dir, { sync: true });
    await Promise.all(Array.from({ length: 200 }, (_, i) => db.put(Buffer.from(`g${i}`), Buffer.from(`v${i}`))));
    const s = db.stats;
    expect(s.writes).toBe(200);
    expect(s.syncs).toBeLessThan(20);
    expect(s.syncs).toBeGreaterThan(0);
    await db.close();
    const again = await Engine.open(dir);
    for (let i = 0; i < 200; i++) expect((await again.get(Buffer.from(`g${i}`)))?.toString()).toBe(`v${i}`);
    await again.close();
  });

  it('iterates at a snapshot while writes, flushes and compactions go on', async () => {
    const dir = tempDir();
    const db = await Engine.open(dir, { memtableBytes: 4 * 1024, sync: false });
    for (let i = 0; i < 200; i++) await db.put(Buffer.from(`k${String(i).padStart(3, '0')}`), Buffer.from(`v${i}`));
    const it = db.iterator();
    it.seek(Buffer.from('k100'));
    const seen: string[] = [];
    for (; it.valid; it.next()) {
      seen.push(`${it.key.toString()}=${it.value.toString()}`);
      await db.put(Buffer.from(`k${String(seen.length + 150).padStart(3, '0')}`), Buffer.from('changed'));
      await db.delete(Buffer.from('k199'));
    }
    expect(seen).toEqual(Array.from({ length: 100 }, (_, i) => `k${100 + i}=v${100 + i}`));
    expect(db.stats.compactions + db.stats.tablesPerLevel.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    await db.close();
  });
});

describe('manual full compaction (compactAll)', () => {
  it('merges the whole tree into its deepest level: newest values kept, deleted keys absent, writes meanwhile kept, the same after a reopen', async () => {
    const dir = tempDir();
    const key = (i: number) => Buffer.from(`k${String((i * 7919) % 4000).padStart(5, '0')}`); // scattered order
    // No idle compactions: the tree's shape is compared across a reopen.
    const o = { memtableBytes: 8 * 1024, l1Bytes: 32 * 1024, l0Trigger: 4, sync: false, idleCompactionMs: 0 };
    const db = await Engine.open(dir, o);
    for (let i = 0; i < 4000; i++) await db.put(key(i), Buffer.alloc(100, i & 0xff));
    for (let i = 0; i < 4000; i += 5) await db.put(key(i), Buffer.from(`new ${i}`));
    for (let i = 1; i < 4000; i += 5) await db.delete(key(i));
    await db.flush();
    const before = db.stats.tablesPerLevel;
    const bottom = before.length - 1 - [...before].reverse().findIndex((n) => n > 0);
    expect(bottom).toBeGreaterThanOrEqual(2);
    expect(before.slice(0, bottom).some((n) => n > 0)).toBe(true);
    await db.put(key(2), Buffer.from('in a memtable')); // flushed first
    const compacting = db.compactAll();
    // A write while it runs waits at most for the flush, and lands above what is merged.
    await db.put(key(7), Buffer.from('during'));
    await compacting;
    const after = db.stats.tablesPerLevel;
    expect(after.slice(0, bottom).every((n) => n === 0)).toBe(true);
    expect(after[bottom]).toBeGreaterThan(0);
    const want = (i: number): Buffer | undefined =>
      i === 2 ? Buffer.from('in a memtable') : i === 7 ? Buffer.from('during') : i % 5 === 0 ? Buffer.from(`new ${i}`) : i % 5 === 1 ? undefined : Buffer.alloc(100, i & 0xff);
    const check = async (e: Engine) => {
      for (let i = 0; i < 4000; i++) {
        const got = await e.get(key(i));
        expect(got === undefined ? undefined : got.toString('hex')).toBe(want(i)?.toString('hex'));
      }
    };
    await check(db);
    // Writes go on after it, and background compactions with them.
    await db.put(key(3), Buffer.from('after'));
    expect((await db.get(key(3)))?.toString()).toBe('after');
    await db.put(key(3), Buffer.alloc(100, 3));
    const merged = db.stats.compactions;
    for (let i = 0; i < 4000; i += 5) await db.put(key(i), Buffer.from(`new ${i}`));
    await db.flush();
    expect(db.stats.compactions).toBeGreaterThan(merged);
    const tree = db.stats.tablesPerLevel;
    await db.close();
    const again = await Engine.open(dir, o);
    expect(again.stats.tablesPerLevel.slice(1)).toEqual(tree.slice(1));
    await check(again);
    await again.close();
  });

  it('a flush does not wait for it, a close stops it between jobs; nothing is lost', async () => {
    const dir = tempDir();
    const key = (i: number) => Buffer.from(`k${String((i * 7919) % 4000).padStart(5, '0')}`);
    const o = { memtableBytes: 8 * 1024, l1Bytes: 32 * 1024, sync: false };
    const db = await Engine.open(dir, o);
    for (let i = 0; i < 4000; i++) await db.put(key(i), Buffer.alloc(100, i & 0xff));
    let compacted = false;
    const compacting = db.compactAll().then(() => { compacted = true; });
    await new Promise((r) => setTimeout(r, 20));
    // A flush (as a shutdown does first) does not wait for the whole compaction.
    await db.put(key(0), Buffer.alloc(100, 0));
    await db.flush();
    expect(compacted).toBe(false);
    await db.close();
    await compacting;
    const again = await Engine.open(dir, o);
    for (let i = 0; i < 4000; i++) expect((await again.get(key(i)))?.equals(Buffer.alloc(100, i & 0xff))).toBe(true);
    await again.close();
  });
});

describe('write batches', () => {
  it('snapshots a batch at write(): reusing it before the commit does not change the first write', async () => {
    const dir = tempDir();
    const db = await Engine.open(dir, { sync: false });
    const b = db.newBatch().put(Buffer.from('k1'), Buffer.from('v1'));
    const first = db.write(b);
    b.clear();
    b.put(Buffer.from('k2'), Buffer.from('v2'));
    await Promise.all([first, db.write(b)]);
    expect((await db.get(Buffer.from('k1')))?.toString()).toBe('v1');
    expect((await db.get(Buffer.from('k2')))?.toString()).toBe('v2');
    await db.close();
    await expect(db.flush()).rejects.toMatchObject({ code: 'CLOSED' });
  });
});

describe('the L0 trigger and scans', () => {
  it('L0 waits for l0Trigger tables while nothing scans, and is compacted at l0ScanTrigger once scans use up the oldest table\'s allowance', async () => {
    const dir = tempDir('nova-l0-');
    const db = await Engine.open(dir, { memtableBytes: 8 * 1024, l0Trigger: 6, l0ScanTrigger: 2, sync: false, mergeInWorker: false, idleCompactionMs: 0 });
    let n = 0;
    for (let t = 0; t < 3; t++) { // three L0 tables, each a memtable of 20 puts flushed
      for (let j = 0; j < 20; j++, n++) await db.put(Buffer.from(`k${String((n * 37) % 1000).padStart(4, '0')}`), Buffer.alloc(200, n & 0xff));
      await db.flush();
    }
    expect(db.stats.tablesPerLevel[0]).toBe(3);
    for (let s = 0; s < 99; s++) await db.scan(Buffer.from('k0500'), { limit: 3 }); // a small table allows 100 scans
    await db.flush(); // runs whatever compaction is due: none yet
    expect(db.stats.tablesPerLevel[0]).toBe(3);
    await db.scan(Buffer.from('k0500'), { limit: 3 }); // the 100th starts the compaction itself
    for (const deadline = Date.now() + 5000; db.stats.tablesPerLevel[0] > 0 && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 10));
    expect(db.stats.tablesPerLevel[0]).toBe(0);
    expect(db.stats.tablesPerLevel[1]).toBeGreaterThan(0);
    // Tables flushed now start with a fresh allowance: L0 waits again for 100 scans.
    for (let t = 0; t < 2; t++) {
      for (let j = 0; j < 20; j++, n++) await db.put(Buffer.from(`k${String((n * 37) % 1000).padStart(4, '0')}`), Buffer.alloc(200, n & 0xff));
      await db.flush();
    }
    for (let s = 0; s < 98; s++) await db.scan(Buffer.from('k0500'), { limit: 3 }); // the 100th is the second below
    await db.flush();
    expect(db.stats.tablesPerLevel[0]).toBe(2);
    for (let s = 0; s < 2; s++) await db.scan(Buffer.from('k0500'), { limit: 3 });
    for (const deadline = Date.now() + 5000; db.stats.tablesPerLevel[0] > 0 && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 10));
    expect(db.stats.tablesPerLevel[0]).toBe(0);
    expect((await db.scan(Buffer.from(''))).length).toBe(100); // 100 distinct keys, none lost
    await db.close();
  });

  it('refuses triggers that are not positive integers', async () => {
    const dir = tempDir('nova-l0-');
    for (const o of [{ l0Trigger: 0 }, { l0ScanTrigger: 0 }, { l0ScanTrigger: 1.5 }]) {
      await expect(Engine.open(dir, { ...o, sync: false })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/l0(Scan)?Trigger/) });
    }
    // The slowdown trigger lies above the compaction trigger and at most at the stop.
    for (const o of [{ l0SlowdownTrigger: 8 }, { l0SlowdownTrigger: 25 }, { l0SlowdownTrigger: 16.5 }, { l0Trigger: 4, l0StopTrigger: 10, l0SlowdownTrigger: 11 }]) {
      await expect(Engine.open(dir, { ...o, sync: false })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/^l0SlowdownTrigger must be an integer above l0Trigger/) });
    }
    for (const idleCompactionMs of [-1, 1.5]) {
      await expect(Engine.open(dir, { idleCompactionMs, sync: false })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/idleCompactionMs/) });
    }
  });

  it('by default L0 holds up to 8 tables before a compaction when nothing scans', async () => {
    const dir = tempDir('nova-l0-');
    // Idle compactions off: a slow flush here would look like a pause in writes.
    const db = await Engine.open(dir, { memtableBytes: 8 * 1024, sync: false, mergeInWorker: false, idleCompactionMs: 0 });
    for (let t = 0; t < 7; t++) {
      await db.put(Buffer.from(`k${t}`), Buffer.alloc(200, t));
      await db.flush();
    }
    expect(db.stats.tablesPerLevel[0]).toBe(7);
    await db.put(Buffer.from('k7'), Buffer.alloc(200, 7));
    await db.flush();
    expect(db.stats.tablesPerLevel[0]).toBe(0);
    await db.close();
  });
});

describe('idle compaction (idleCompactionMs)', () => {
  const value = Buffer.alloc(200, 7);
  /** Three L0 tables, each one put and a flush; the keys of all three span the same range. */
  async function threeTables(db: Engine, round: number): Promise<void> {
    for (let t = 0; t < 3; t++) {
      await db.put(Buffer.from(`a${round}${t}`), value);
      await db.put(Buffer.from(`z${round}${t}`), value);
      await db.flush();
    }
  }
  const until = async (db: Engine, test: () => boolean, ms = 10_000): Promise<void> => {
    for (const deadline = Date.now() + ms; !test() && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 10));
  };

  it('merges L0 into L1 below its trigger once writes pause, not while they go on', async () => {
    const dir = tempDir('nova-idle-');
    const db = await Engine.open(dir, { memtableBytes: 8 * 1024, l0Trigger: 6, sync: false, mergeInWorker: false, idleCompactionMs: 1000 });
    await threeTables(db, 0);
    expect(db.stats.tablesPerLevel[0]).toBe(3);
    // Small writes every 20 ms for 2.5 s: never a second without one, and the memtable never fills.
    for (const end = Date.now() + 2500; Date.now() < end;) {
      await db.put(Buffer.from('m'), Buffer.from(String(Date.now())));
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(db.stats.tablesPerLevel[0]).toBe(3);
    expect(db.stats.idleCompactions).toBe(0);
    await until(db, () => db.stats.tablesPerLevel[0] === 0);
    expect(db.stats.tablesPerLevel[0]).toBe(0);
    expect(db.stats.tablesPerLevel[1]).toBeGreaterThan(0);
    expect(db.stats.idleCompactions).toBe(1);
    for (let t = 0; t < 3; t++) expect((await db.get(Buffer.from(`z0${t}`)))?.equals(value)).toBe(true);
    expect(await db.get(Buffer.from('m'))).toBeDefined(); // the memtable was left as it was
    expect(db.stats.memtables).toBeGreaterThan(0);
    await db.close();
  });

  it('after a reopen, merges the L0 it recovered when no writes come; with 0, never', async () => {
    const dir = tempDir('nova-idle-');
    const off = await Engine.open(dir, { memtableBytes: 8 * 1024, l0Trigger: 6, sync: false, mergeInWorker: false, idleCompactionMs: 0 });
    await threeTables(off, 0);
    await new Promise((r) => setTimeout(r, 400));
    expect(off.stats.tablesPerLevel[0]).toBe(3);
    await off.close();
    const on = await Engine.open(dir, { memtableBytes: 8 * 1024, l0Trigger: 6, sync: false, mergeInWorker: false, idleCompactionMs: 50 });
    await until(on, () => on.stats.tablesPerLevel[0] === 0);
    expect(on.stats.tablesPerLevel[0]).toBe(0);
    expect(on.stats.idleCompactions).toBe(1);
    for (let t = 0; t < 3; t++) expect((await on.get(Buffer.from(`a0${t}`)))?.equals(value)).toBe(true);
    await on.close();
  });
});
