/**
 * A Gemini cache instance's persistent storage (src/stoc/cache-store.ts, cache-log.ts): what
 * a reopen restores, invalidations that outlive evictions, LRU order, rewrites, torn tails
 * against corruption, and a model-based random test against a Map.
 */
import { existsSync, readFileSync, readdirSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checksum32 } from '../../src/common/checksum.js';
import { NovaError } from '../../src/common/errors.js';
import {
  CACHE_FRAME, CACHE_LOG, CACHE_LOG_HEADER, cacheLogHeader, encodeCacheRecord, readCacheLog, type CacheRecord,
} from '../../src/stoc/cache-log.js';
import { CacheStore, type CacheStoreOptions } from '../../src/stoc/cache-store.js';
import { rng } from '../helpers/rng.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-cache-store-');
const B = (s: string): Buffer => Buffer.from(s);
const str = (b: Buffer[]): string[] => b.map((x) => x.toString());

function options(dir: string | undefined, logs: string[] = [], over: Partial<CacheStoreOptions> = {}): CacheStoreOptions {
  return { dir, memoryBytes: 1 << 20, diskBytes: 4 << 20, sync: false, maxDirtyKeys: 100, onLog: (l) => logs.push(l), ...over };
}

function open(o: CacheStoreOptions): CacheStore {
  const s = CacheStore.open(o);
  s.checkInvariants();
  return s;
}

function expectCode(f: () => unknown, code: string): void {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(NovaError);
    expect((err as NovaError).code).toBe(code);
    return;
  }
  expect.fail(`expected ${code}`);
}

describe('cache log format', () => {
  it('reads back what it encodes, and tells a torn tail from corruption', () => {
    const records: CacheRecord[] = [
      { type: 'set', fragment: 3, configId: 2 ** 40 + 5, key: B('k'), value: B('value') },
      { type: 'delete', key: B('gone') },
      { type: 'dirtyInit', fragment: 0xffff_ffff, configId: 9 },
      { type: 'dirtyAdd', fragment: 1, key: B('') },
      { type: 'dirtyDrop', fragment: 1 },
      { type: 'dirtyDone', fragment: 2 },
    ];
    const bytes = Buffer.concat([cacheLogHeader(), ...records.map(encodeCacheRecord)]);
    const read = readCacheLog(bytes, 'f');
    expect(read).toEqual({ version: 2, records, validBytes: bytes.length });

    const lastStart = bytes.length - encodeCacheRecord(records[5]).length;
    // Cut short anywhere in the last record, or garbled there: a torn tail at its start.
    for (let cut = lastStart + 1; cut < bytes.length; cut++) {
      const t = readCacheLog(bytes.subarray(0, cut), 'f');
      expect(t.validBytes).toBe(lastStart);
      expect(t.tornTail).toContain(`f: offset ${lastStart}`);
      expect(t.records.length).toBe(5);
    }
    const garbled = Buffer.from(bytes);
    garbled[bytes.length - 1] ^= 1;
    expect(readCacheLog(garbled, 'f')).toMatchObject({ validBytes: lastStart, records: records.slice(0, 5) });
    // Zeros after the last whole record (space extended, never written): a torn tail too.
    expect(readCacheLog(Buffer.concat([bytes, Buffer.alloc(100)]), 'f')).toMatchObject({ validBytes: bytes.length });

    // The same damage with a record after it: corruption naming the file and offset.
    const early = Buffer.from(bytes);
    early[CACHE_LOG_HEADER + 9] ^= 1;
    expect(() => readCacheLog(early, 'f')).toThrow(`f: offset ${CACHE_LOG_HEADER}:`);
    expectCode(() => readCacheLog(early, 'f'), 'CORRUPTION');
    const badType = Buffer.concat([cacheLogHeader(), frame(Buffer.from([7, 1, 2])), encodeCacheRecord(records[1])]);
    expect(() => readCacheLog(badType, 'f')).toThrow(/offset 16: unknown record type 7/);
    // A length (checked) past the end: the last append cut short, torn.
    const huge = Buffer.concat([cacheLogHeader(), frame(Buffer.alloc(300), 1000)]);
    expect(readCacheLog(huge, 'f').tornTail).toMatch(/offset 16: a record of 1000 bytes runs past the end/);
    // A damaged length with records after it, though it points past the end: corruption, not a torn tail that would drop them.
    const damagedLength = Buffer.from(bytes);
    damagedLength[CACHE_LOG_HEADER + 2] ^= 0x7f;
    expect(() => readCacheLog(damagedLength, 'f')).toThrow(/f: offset 16: record length checksum mismatch/);
    const longKey = frame(Buffer.concat([Buffer.from([2]), Buffer.alloc(64 * 1024 + 1)]));
    expect(() => readCacheLog(Buffer.concat([cacheLogHeader(), longKey, encodeCacheRecord(records[1])]), 'f')).toThrow(/a key of 65537 bytes/);

    // Headers.
    expect(() => readCacheLog(Buffer.from('NOVACACH'), 'f')).toThrow(/f: offset 0: a header of 8 bytes/);
    const magic = cacheLogHeader();
    magic[0] = 0x41;
    expect(() => readCacheLog(magic, 'f')).toThrow(/offset 0: not a cache log/);
    const version = cacheLogHeader();
    version.writeUInt32LE(3, 8);
    expect(() => readCacheLog(version, 'f')).toThrow(/offset 8: format version 3/);
    const sum = cacheLogHeader();
    sum[13] ^= 1;
    expect(() => readCacheLog(sum, 'f')).toThrow(/offset 12: header checksum mismatch/);

    expectCode(() => encodeCacheRecord({ type: 'delete', key: Buffer.alloc(64 * 1024 + 1) }), 'BAD_ARGUMENT');
    expectCode(() => encodeCacheRecord({ type: 'dirtyInit', fragment: 1, configId: -1 }), 'BAD_ARGUMENT');
  });
});

/** `body` framed with a valid length and checksum. */
/** A version 2 frame around `body`, as encodeCacheRecord makes it, for bodies it would refuse. */
function frame(body: Buffer, length = body.length): Buffer {
  const head = Buffer.alloc(CACHE_FRAME);
  head.writeUInt32LE(length, 0);
  head.writeUInt32LE(checksum32(head.subarray(0, 4)), 4);
  head.writeUInt32LE(checksum32(body), 8);
  return Buffer.concat([head, body]);
}

describe('cache store', () => {
  it('reopens with its entries, configIds, fragments and dirty lists', async () => {
    const dir = tempDir();
    const s = open(options(dir, [], { maxDirtyKeys: 3, sync: true }));
    s.set(B('a'), B('A'), 7, 1);
    s.set(B('b'), B('B'), 2 ** 50, 0xffff_ffff);
    s.set(B('a'), B('A2'), 8, 2); // replaces
    s.dirtyInit(1, 40); // with marker
    s.dirtyAdd(1, B('x'));
    s.dirtyAdd(1, B('y'));
    s.dirtyAdd(1, B('x')); // once only
    s.dirtyInit(2, 41); // overflows below: dropped, restarted without marker
    for (const k of ['p', 'q', 'r', 's', 't']) s.dirtyAdd(2, B(k));
    s.dirtyInit(3, 42); // processed: a done tombstone
    s.dirtyAdd(3, B('z'));
    s.dirtyDone(3);
    s.dirtyAdd(4, B('w')); // no list: starts one without marker
    s.dirtyDone(5); // no list: a done tombstone without marker
    await s.durable();
    s.close();

    const r = open(options(dir, [], { maxDirtyKeys: 3 }));
    expect(r.get(B('a'))).toEqual({ value: B('A2'), configId: 8, fragment: 2 });
    expect(r.get(B('b'))).toEqual({ value: B('B'), configId: 2 ** 50, fragment: 0xffff_ffff });
    expect(r.dirty(1)).toEqual({ marker: true, done: false, configId: 40, keys: 2 });
    expect(str(r.dirtyKeys(1, 0, 10))).toEqual(['x', 'y']);
    expect(r.dirty(2)).toEqual({ marker: false, done: false, configId: 0, keys: 2 });
    expect(str(r.dirtyKeys(2, 0, 10))).toEqual(['s', 't']);
    expect(str(r.dirtyKeys(2, 1, 1))).toEqual(['t']);
    expect(r.dirty(3)).toEqual({ marker: true, done: true, configId: 42, keys: 0 });
    expect(r.dirty(4)).toEqual({ marker: false, done: false, configId: 0, keys: 1 });
    expect(r.dirty(5)).toEqual({ marker: false, done: true, configId: 0, keys: 0 });
    expect(r.dirty(6)).toBeUndefined();
    expect(r.stats()).toMatchObject({ entries: 2, loaded: 2, dirtyLists: 5 });
    // An append to a done list starts a new one without marker.
    r.dirtyAdd(3, B('n'));
    expect(r.dirty(3)).toEqual({ marker: false, done: false, configId: 0, keys: 1 });
    r.dirtyDrop(1);
    r.close();
    const again = open(options(dir, [], { maxDirtyKeys: 3 }));
    expect(again.dirty(1)).toBeUndefined();
    expect(str(again.dirtyKeys(3, 0, 10))).toEqual(['n']);
    again.close();
  });

  it('keeps a delete of an evicted key over the SET that is still in the log', () => {
    const value = Buffer.alloc(100, 1);
    for (const withDelete of [false, true]) {
      const dir = tempDir();
      const s = open(options(dir, [], { memoryBytes: 300 }));
      s.set(B('a'), value, 1, 0);
      s.set(B('b'), value, 1, 0); // evicts a: 2 × (1 + 100 + 64) > 300
      expect(s.peek(B('a'))).toBeUndefined();
      expect(s.stats().evicted).toBe(1);
      if (withDelete) expect(s.delete(B('a'))).toBe(false);
      s.close();
      // With room for both, the replay keeps a's SET unless a later DELETE undoes it.
      const r = open(options(dir, [], { memoryBytes: 1 << 20 }));
      expect(r.peek(B('a'))?.value).toEqual(withDelete ? undefined : value);
      expect(r.peek(B('b'))?.value).toEqual(value);
      r.close();
    }
  });

  it('evicts the least recently set or got entry; peek does not touch', () => {
    const s = open(options(undefined, [], { memoryBytes: 3 * (1 + 10 + 64) }));
    const v = Buffer.alloc(10);
    for (const k of ['a', 'b', 'c']) s.set(B(k), v, 1, 0);
    s.get(B('a'));
    s.peek(B('b'));
    s.set(B('d'), v, 1, 0); // b is the oldest
    expect(['a', 'b', 'c', 'd'].map((k) => s.peek(B(k)) !== undefined)).toEqual([true, false, true, true]);
    s.set(B('c'), v, 2, 0); // a re-set touches too: a is the oldest now
    s.set(B('e'), v, 1, 0);
    expect(['a', 'c', 'd', 'e'].map((k) => s.peek(B(k)) !== undefined)).toEqual([false, true, true, true]);
    expect(s.stats()).toMatchObject({ entries: 3, evicted: 2, bytes: 3 * 75 });
    s.checkInvariants();
  });

  it('copies the buffers it is given', () => {
    const s = open(options(undefined));
    const k = B('key');
    const v = B('value');
    s.set(k, v, 1, 0);
    s.dirtyAdd(0, k);
    k.write('KEY');
    v.write('VALUE');
    expect(s.get(B('key'))?.value).toEqual(B('value'));
    expect(str(s.dirtyKeys(0, 0, 1))).toEqual(['key']);
  });

  it('rewrites the log to its live content: the file shrinks and everything reads back', () => {
    const dir = tempDir();
    const path = join(dir, CACHE_LOG);
    const o = options(dir, [], { memoryBytes: 256 * 1024, diskBytes: 1024 * 1024 });
    const s = open(o);
    s.dirtyInit(1, 5);
    s.dirtyAdd(1, B('m1'));
    s.dirtyAdd(2, B('n1'));
    s.dirtyInit(3, 6);
    s.dirtyDone(3);
    s.dirtyDone(4);
    let written = 0;
    for (let round = 0; round < 300; round++) {
      for (let i = 0; i < 10; i++) {
        const value = Buffer.alloc(1000, round);
        s.set(B(`k${i}`), value, round, i);
        written += value.length;
      }
    }
    s.get(B('k3')); // most recent at the rewrite below
    const before = s.stats();
    expect(before.rewrites).toBeGreaterThan(0);
    expect(before.logBytes).toBeLessThanOrEqual(1024 * 1024 + 2000);
    expect(statSync(path).size).toBe(before.logBytes);
    expect(before.logBytes).toBeLessThan(written / 2);
    s.checkInvariants();
    s.close();

    const r = open(o);
    for (let i = 0; i < 10; i++) expect(r.peek(B(`k${i}`))).toEqual({ value: Buffer.alloc(1000, 299), configId: 299, fragment: i });
    expect(r.dirty(1)).toEqual({ marker: true, done: false, configId: 5, keys: 1 });
    expect(str(r.dirtyKeys(1, 0, 9))).toEqual(['m1']);
    expect(r.dirty(2)).toEqual({ marker: false, done: false, configId: 0, keys: 1 });
    expect(r.dirty(3)).toEqual({ marker: true, done: true, configId: 6, keys: 0 });
    expect(r.dirty(4)).toEqual({ marker: false, done: true, configId: 0, keys: 0 });
    expect(existsSync(`${path}.tmp`)).toBe(false);
    r.close();
  });

  it('truncates a torn tail and appends after the last whole record', () => {
    const dir = tempDir();
    const path = join(dir, CACHE_LOG);
    const s = open(options(dir));
    s.set(B('a'), B('1'), 1, 0);
    s.dirtyAdd(0, B('d'));
    s.set(B('b'), B('22222222'), 1, 0);
    s.close();
    const size = statSync(path).size;
    const lastStart = size - (CACHE_FRAME + 17 + 1 + 8);
    truncateSync(path, size - 3);

    const logs: string[] = [];
    const r = open(options(dir, logs));
    expect(logs.join('\n')).toContain(`${path}: offset ${lastStart}:`);
    expect(logs.join('\n')).toMatch(/torn tail/);
    expect(r.peek(B('a'))?.value).toEqual(B('1'));
    expect(r.peek(B('b'))).toBeUndefined();
    expect(statSync(path).size).toBe(lastStart);
    r.set(B('c'), B('3'), 2, 0);
    r.delete(B('a'));
    r.close();

    const logs2: string[] = [];
    const again = open(options(dir, logs2));
    expect(logs2).toEqual([]);
    expect(again.peek(B('a'))).toBeUndefined();
    expect(again.peek(B('c'))?.value).toEqual(B('3'));
    expect(str(again.dirtyKeys(0, 0, 9))).toEqual(['d']);
    again.close();
    expect(readCacheLog(readFileSync(path), path).tornTail).toBeUndefined();
  });

  it('sets a file corrupt in the middle aside, never deleting it, and starts empty', () => {
    for (const [what, at] of [['an early record', CACHE_LOG_HEADER + 12], ['the header', 3]] as const) {
      const dir = tempDir();
      const path = join(dir, CACHE_LOG);
      const s = open(options(dir));
      s.set(B('a'), B('1'), 1, 0);
      s.set(B('b'), B('2'), 1, 0);
      s.dirtyInit(1, 1);
      s.close();
      const bytes = readFileSync(path);
      bytes[at] ^= 0x10;
      writeFileSync(path, bytes);

      const logs: string[] = [];
      const r = open(options(dir, logs));
      expect(r.stats().entries, what).toBe(0);
      expect(r.dirty(1)).toBeUndefined();
      expect(logs.join('\n')).toMatch(new RegExp(`${path}: offset \\d+: .*moved to .*corrupt-\\d+`));
      const aside = readdirSync(dir).filter((n) => n.startsWith(`${CACHE_LOG}.corrupt-`));
      expect(aside.length).toBe(1);
      expect(readFileSync(join(dir, aside[0]))).toEqual(bytes);
      r.set(B('c'), B('3'), 1, 0);
      r.close();
      const again = open(options(dir));
      expect(again.peek(B('c'))?.value).toEqual(B('3'));
      expect(again.stats().entries).toBe(1);
      again.close();
    }
  });

  it('starts empty when volatile, replacing the old file', () => {
    const dir = tempDir();
    const s = open(options(dir));
    s.set(B('a'), B('1'), 1, 0);
    s.dirtyInit(1, 1);
    s.close();
    const v = open(options(dir, [], { volatile: true }));
    expect(v.stats()).toMatchObject({ entries: 0, dirtyLists: 0, logBytes: CACHE_LOG_HEADER });
    v.set(B('b'), B('2'), 1, 0);
    v.close();
    expect(readdirSync(dir)).toEqual([CACHE_LOG]);
    const r = open(options(dir));
    expect(r.peek(B('a'))).toBeUndefined();
    expect(r.peek(B('b'))?.value).toEqual(B('2'));
    r.close();
  });

  it('refuses bad options and arguments', () => {
    expectCode(() => CacheStore.open(options(undefined, [], { memoryBytes: 1001, diskBytes: 2000 })), 'BAD_ARGUMENT');
    expect(() => CacheStore.open(options(undefined, [], { memoryBytes: 1000, diskBytes: 2000 }))).not.toThrow();
    expectCode(() => CacheStore.open(options(undefined, [], { maxDirtyKeys: 0 })), 'BAD_ARGUMENT');
    const s = CacheStore.open(options(undefined));
    expectCode(() => s.set(Buffer.alloc(64 * 1024 + 1), B('v'), 1, 0), 'BAD_ARGUMENT');
    expectCode(() => s.set(B('k'), B('v'), 1.5, 0), 'BAD_ARGUMENT');
    expectCode(() => s.dirtyInit(-1, 0), 'BAD_ARGUMENT');
    s.close();
    expectCode(() => s.get(B('k')), 'CLOSED');
  });

  it('group-commits durable(): callers during an fdatasync share the next one', async () => {
    const dir = tempDir();
    const s = open(options(dir, [], { sync: true }));
    s.set(B('a'), B('1'), 1, 0);
    await s.durable(); // a SET is no invalidation: nothing to wait for
    s.delete(B('a'));
    const first = s.durable();
    s.delete(B('b'));
    const second = s.durable();
    s.dirtyAdd(1, B('c'));
    const third = s.durable();
    expect(third).toBe(second);
    await Promise.all([first, second, third]);
    s.delete(B('d'));
    const pending = s.durable();
    s.close(); // syncs what is pending
    await pending;
    await expect(s.durable()).rejects.toMatchObject({ code: 'CLOSED' });
    const m = open(options(undefined, [], { sync: true }));
    m.delete(B('x'));
    await m.durable();
  });

  it('loses nothing a call returned when the process dies without close', () => {
    const dir = tempDir();
    const s = open(options(dir));
    s.set(B('a'), B('1'), 1, 0);
    s.delete(B('a'));
    s.set(B('b'), B('2'), 3, 4);
    s.dirtyInit(9, 1);
    const r = open(options(dir)); // s is never closed, as if killed
    expect(r.peek(B('a'))).toBeUndefined();
    expect(r.peek(B('b'))).toEqual({ value: B('2'), configId: 3, fragment: 4 });
    expect(r.dirty(9)).toMatchObject({ marker: true });
    r.close();
    s.close();
  });

  it('matches a Map through random sets, deletes, dirty-list changes and reopens', () => {
    const dir = tempDir();
    const random = rng(20240611);
    const pick = (n: number): number => Math.floor(random() * n);
    const MAX_DIRTY = 5;
    const o = options(dir, [], { memoryBytes: 256 * 1024, diskBytes: 512 * 1024, maxDirtyKeys: MAX_DIRTY });
    let s = open(o);
    const entries = new Map<string, { value: Buffer; configId: number; fragment: number }>();
    const lists = new Map<number, { marker: boolean; done: boolean; configId: number; keys: string[] }>();
    let rewrites = 0;
    let reopens = 0;
    const check = (): void => {
      expect(s.stats().entries).toBe(entries.size);
      for (const [k, e] of entries) expect(s.peek(B(k))).toEqual(e);
      for (let f = 0; f < 6; f++) {
        const l = lists.get(f);
        expect(s.dirty(f)).toEqual(l && { marker: l.marker, done: l.done, configId: l.configId, keys: l.keys.length });
        expect(str(s.dirtyKeys(f, 0, 100))).toEqual(l?.keys ?? []);
      }
      s.checkInvariants();
    };
    for (let step = 0; step < 6000; step++) {
      const key = `key${pick(40)}`;
      const fragment = pick(6);
      const op = pick(100);
      if (op < 45) {
        const value = Buffer.alloc(pick(300), step % 251);
        const configId = pick(1000);
        s.set(B(key), value, configId, fragment);
        entries.set(key, { value, configId, fragment });
      } else if (op < 60) {
        expect(s.delete(B(key))).toBe(entries.delete(key));
      } else if (op < 65) {
        expect(s.get(B(key))).toEqual(entries.get(key));
      } else if (op < 67) {
        if (entries.has(key)) s.discard(B(key));
        entries.delete(key);
      } else if (op < 71) {
        const configId = pick(1000);
        s.dirtyInit(fragment, configId);
        lists.set(fragment, { marker: true, done: false, configId, keys: [] });
      } else if (op < 90) {
        s.dirtyAdd(fragment, B(key));
        let l = lists.get(fragment);
        if (l && !l.done && !l.keys.includes(key) && l.keys.length >= MAX_DIRTY) l = undefined;
        if (!l || l.done) lists.set(fragment, (l = { marker: false, done: false, configId: 0, keys: [] }));
        if (!l.keys.includes(key)) l.keys.push(key);
      } else if (op < 93) {
        s.dirtyDrop(fragment);
        lists.delete(fragment);
      } else if (op < 96) {
        s.dirtyDone(fragment);
        const l = lists.get(fragment);
        lists.set(fragment, { marker: l?.marker ?? false, done: true, configId: l?.configId ?? 0, keys: [] });
      } else if (op < 98) {
        rewrites += s.stats().rewrites;
        reopens++;
        if (pick(2) === 0) {
          s.close();
          s = open(o);
        } else {
          const dead = s; // as if killed: the next open comes before its close
          s = open(o);
          dead.close();
        }
        check();
      }
      if (step % 500 === 0) check();
    }
    check();
    rewrites += s.stats().rewrites;
    s.close();
    expect(reopens).toBeGreaterThan(50);
    expect(rewrites).toBeGreaterThan(0); // the test went through rewrites
  });
});

describe('cache store, older format', () => {
  it('opens a version 1 log and writes it anew as version 2 before appending', () => {
    const dir = tempDir();
    const path = join(dir, CACHE_LOG);
    writeFileSync(path, readFileSync(join(import.meta.dirname, '..', 'fixtures', 'format', 'v1', 'cache-v1.log')));
    const s = open(options(dir));
    expect(s.peek(B('user1'))?.value).toEqual(B('Ann'));
    expect(s.dirty(3)).toMatchObject({ marker: true, done: true, configId: 8 });
    s.set(B('user3'), B('Cy'), 9, 1);
    s.close();
    expect(readFileSync(path).readUInt32LE(8)).toBe(2);
    const r = open(options(dir));
    expect(r.peek(B('user3'))?.value).toEqual(B('Cy'));
    expect(r.peek(B('user1'))?.value).toEqual(B('Ann'));
    r.close();
  });
});
