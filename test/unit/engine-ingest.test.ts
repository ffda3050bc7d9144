/**
 * Ingest (ltc/ingest.ts): a run of sorted puts installed as one table off the write path, in the
 * deepest level it may go to, and refused wherever a read could then see an older version
 * before it or it before a newer one. The random mix of ingests with every other operation is
 * in engine-model.test.ts; these are the cases one at a time.
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv } from '../../src/ltc/local-store.js';
import type { EngineEnv } from '../../src/ltc/engine-env.js';
import type { ClientId, SessionRef } from '../../src/common/write-id.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-ingest-');
const b = (s: string): Buffer => Buffer.from(s);
const entries = (...kv: string[]): [Buffer[], Buffer[]] => [kv.filter((_, i) => i % 2 === 0).map(b), kv.filter((_, i) => i % 2 === 1).map(b)];
const A: ClientId = { idHigh: 0xa1a1, idLow: 1 };
const ref = (seq: number, open = true): SessionRef => ({ ...A, seq, floor: 1, open });

/** The local environment; with `hold()`, the next table write waits until `release()`. */
function holdOne(dir: string): { env: EngineEnv; hold: () => Promise<void>; release: () => void } {
  const base = localEnv(dir);
  let armed = false;
  let started: () => void = () => undefined;
  let gate: Promise<void> | undefined;
  let open: () => void = () => undefined;
  return {
    hold: () => {
      armed = true;
      gate = new Promise((r) => { open = r; });
      return new Promise((r) => { started = r; });
    },
    release: () => open(),
    env: {
      ...base,
      store: {
        readTable: (file, fragments) => base.store.readTable(file, fragments),
        deleteTable: (file) => base.store.deleteTable(file),
        listTables: () => base.store.listTables(),
        writeTable: async (file, bytes) => {
          if (armed) {
            armed = false;
            started();
            await gate;
          }
          return base.store.writeTable(file, bytes);
        },
      },
    },
  };
}

describe('Engine.ingest', () => {
  it('puts a table into an empty tree at the bottom, readable at once and after a reopen', async () => {
    const dir = tempDir();
    let db = await Engine.open(dir, {});
    expect(await db.ingest(...entries('a', '1', 'b', '2', 'c', '3'))).toMatchObject({ level: 6 });
    // Disjoint from it: at the bottom too; overlapping it: just above.
    expect(await db.ingest(...entries('x', '9'))).toMatchObject({ level: 6 });
    expect(await db.ingest(...entries('b', 'B', 'bb', 'BB'))).toMatchObject({ level: 5 });
    const check = async (): Promise<void> => {
      expect((await db.get(b('b')))?.toString()).toBe('B');
      expect((await db.scan(b(''))).map(([k, v]) => `${k}=${v}`)).toEqual(['a=1', 'b=B', 'bb=BB', 'c=3', 'x=9']);
    };
    await check();
    expect(db.stats).toMatchObject({ ingests: 3, ingestedEntries: 6, tablesPerLevel: [0, 0, 0, 0, 0, 1, 2] });
    await db.close();
    db = await Engine.open(dir, {});
    await check();
    // Writes after it are newer, through flushes and a full compaction.
    await db.put(b('a'), b('new'));
    await db.delete(b('c'));
    await db.compactAll();
    expect((await db.get(b('a')))?.toString()).toBe('new');
    expect(await db.get(b('c'))).toBeUndefined();
    await db.close();
  });

  it('is invisible to a snapshot taken before it', async () => {
    const db = await Engine.open(tempDir(), {});
    await db.put(b('k'), b('old'));
    await db.compactAll();
    const snap = db.snapshot();
    expect(await db.ingest(...entries('a', '1', 'j', '2'))).not.toHaveProperty('refused');
    expect(await db.get(b('a'), { snapshot: snap })).toBeUndefined();
    expect((await db.get(b('a')))?.toString()).toBe('1');
    snap.release();
    await db.close();
  });

  it('is refused, applying nothing, where a memtable or L0 holds a key of its span', async () => {
    const db = await Engine.open(tempDir(), {});
    await db.put(b('m'), b('mem'));
    expect(await db.ingest(...entries('a', '1', 'z', '2'))).toEqual({ refused: 'a memtable holds keys of its span' });
    expect(await db.get(b('a'))).toBeUndefined();
    await db.flush(); // m now in L0 (one table is under the trigger)
    expect(db.stats.tablesPerLevel[0]).toBe(1);
    expect(await db.ingest(...entries('l', '1', 'n', '2'))).toEqual({ refused: 'L0 holds keys of its span' });
    expect(await db.ingest(...entries('m', 'ingested'))).toEqual({ refused: 'L0 holds keys of its span' });
    expect((await db.get(b('m')))?.toString()).toBe('mem');
    // Outside the span of what is there, it goes in.
    expect(await db.ingest(...entries('x', '1'))).toMatchObject({ level: 6 });
    await db.close();
  });

  it('is refused when a version written after it began has gone below where it would go', async () => {
    const dir = tempDir();
    const gated = holdOne(dir);
    const db = await Engine.open(dir, { env: gated.env });
    expect(await db.ingest(...entries('z', 'bottom'))).toMatchObject({ level: 6 });
    const started = gated.hold();
    const ingest = db.ingest(...entries('a', 'ingested', 'b', 'ingested'));
    await started; // its sequence is taken, its table waits to be stored
    await db.put(b('a'), b('newer'));
    await db.compactAll(); // a's newer version goes down to L6, beside z
    expect(db.stats.tablesPerLevel[6]).toBeGreaterThan(1);
    gated.release();
    expect(await ingest).toMatchObject({ refused: expect.stringMatching(/was made since the ingest began/) });
    expect((await db.get(b('a')))?.toString()).toBe('newer');
    expect(await db.get(b('b'))).toBeUndefined();
    await db.close();
  });

  it('is applied once per session number, a retry answered, after a reopen too', async () => {
    const dir = tempDir();
    let db = await Engine.open(dir, {});
    expect(await db.ingest(...entries('a', '1'), { session: ref(1) })).toMatchObject({ level: 6 });
    await db.put(b('a'), b('2'), { session: ref(2, false) });
    expect(await db.ingest(...entries('a', '1'), { session: ref(1, false) })).toEqual({ level: undefined });
    expect((await db.get(b('a')))?.toString()).toBe('2');
    await db.close();
    db = await Engine.open(dir, {});
    expect(await db.ingest(...entries('a', '1'), { session: ref(1, false) })).toEqual({ level: undefined });
    expect((await db.get(b('a')))?.toString()).toBe('2');
    await db.close();
  });

  it.each([
    [[[], []], /one or more keys/],
    [entries('b', '1', 'a', '2'), /key 1 does not sort after key 0/],
    [entries('a', '1', 'a', '2'), /key 1 does not sort after key 0/],
    [[[b('a')], [b('1'), b('2')]], /1 keys and 2 values/],
    [[[Buffer.alloc(20)], [b('1')]], /exceeds the limit of 16 bytes/],
    [[[b('a')], [Buffer.alloc(65)]], /exceeds the limit of 64 bytes/],
  ] as Array<[[Buffer[], Buffer[]], RegExp]>)('refuses bad input with BAD_ARGUMENT (%#)', async ([keys, values], why) => {
    const db = await Engine.open(tempDir(), { limits: { maxKeyBytes: 16, maxValueBytes: 64 } });
    await expect(db.ingest(keys, values)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(why) });
    expect(db.stats.ingests).toBe(0);
    await db.close();
  });
});
