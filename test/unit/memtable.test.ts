/**
 * Memtable against a sorted oracle: random inserts (several versions per key, puts and
 * deletes), gets under random snapshots, ordered iteration, seeks, and iterators that keep
 * working while inserts continue; flush builds from a memtable in the thread and on the
 * flush worker.
 */
import { describe, expect, it } from 'vitest';
import {
  ValueType, compareInternalKeys, makeInternalKey, sequenceOf, typeOf, userKeyOf,
} from '../../src/common/internal-key.js';
import { Memtable } from '../../src/memtable/memtable.js';
import { buildTable, buildTableInSlices } from '../../src/compaction/flush.js';
import { buildOnWorker } from '../../src/compaction/worker-pool.js';
import { TableReader } from '../../src/sstable/table-reader.js';
import { rng } from '../helpers/rng.js';


// Key shapes: short distinct keys; keys with a long shared prefix (YCSB's), which the
// memtable abbreviates after the prefix, joined late by keys that break the prefix.
const SHAPES = [
  { name: 'distinct keys', key: (r: () => number, i: number) => `k${String(Math.floor(r() * 1e6)).padStart(6, '0')}-${i % 7 ? '' : 'x'.repeat(50)}`, late: [] as string[] },
  { name: 'a shared prefix, broken late', key: (r: () => number) => `user0000${String(Math.floor(r() * 1e6)).padStart(8, '0')}`, late: ['user00', 'use', '', 'a', 'user0000', 'user00009', 'zz', 'user0001'] },
];

describe.each(SHAPES)('memtable ($name)', ({ key, late }) => {
  it('matches a sorted oracle for gets under snapshots, iteration and seeks', () => {
    const r = rng(11);
    const m = new Memtable(7);
    const oracle: Array<{ key: Buffer; value: Buffer }> = [];
    const users = Array.from({ length: 500 }, (_, i) => Buffer.from(key(r, i)));
    for (let seq = 1; seq <= 5000; seq++) {
      if (seq === 3000) users.push(...late.map((k) => Buffer.from(k)));
      const user = seq > 3000 && r() < 0.1 && late.length > 0 ? users[500 + Math.floor(r() * late.length)] : users[Math.floor(r() * users.length)];
      const type = r() < 0.25 ? ValueType.Delete : ValueType.Put;
      const value = type === ValueType.Put ? Buffer.alloc(Math.floor(r() * (r() < 0.05 ? 5000 : 40)), seq & 0xff) : Buffer.alloc(0);
      m.add(seq, type, user, value);
      oracle.push({ key: makeInternalKey(user, seq, type), value });
    }
    oracle.sort((a, b) => compareInternalKeys(a.key, b.key));
    expect(m.entries).toBe(5000);

    const it = m.iterator();
    const seen: Array<{ key: Buffer; value: Buffer }> = [];
    for (it.first(); it.valid; it.next()) seen.push({ key: Buffer.from(it.key), value: Buffer.from(it.value) });
    expect(seen).toEqual(oracle);

    for (let i = 0; i < 3000; i++) {
      const user = users[Math.floor(r() * users.length)];
      const snapshot = Math.floor(r() * 5200);
      const want = oracle.find((e) => userKeyOf(e.key).equals(user) && sequenceOf(e.key) <= snapshot);
      const got = m.get(user, snapshot);
      if (!want) expect(got).toBeUndefined();
      else if (typeOf(want.key) === ValueType.Delete) expect(got).toEqual({ type: 'delete' });
      else expect(got).toEqual({ type: 'put', value: want.value });
    }
    expect(m.get(Buffer.from('absent'), 1e9)).toBeUndefined();

    for (let i = 0; i < 500; i++) {
      const e = oracle[Math.floor(r() * oracle.length)];
      it.seek(e.key);
      expect(it.valid && it.key.equals(e.key)).toBe(true);
    }
    it.seek(makeInternalKey(Buffer.from('zzz'), 1, ValueType.Put));
    expect(it.valid).toBe(false);
  });

});

describe('memtable', () => {
  it('keeps iterators valid while inserts continue, and sees later inserts ahead of them', () => {
    const m = new Memtable(1);
    for (let i = 0; i < 1000; i += 2) m.add(i + 1, ValueType.Put, Buffer.from(String(i).padStart(5, '0')), Buffer.from('v'));
    const it = m.iterator();
    it.first();
    const seen: string[] = [];
    let seq = 10_000;
    while (it.valid) {
      const k = userKeyOf(Buffer.from(it.key)).toString();
      seen.push(k);
      const n = Number(k);
      // Insert the odd key right after the current one, and one far ahead; both must be seen.
      if (n % 2 === 0 && n + 1 < 1000) m.add(seq++, ValueType.Put, Buffer.from(String(n + 1).padStart(5, '0')), Buffer.from('w'));
      it.next();
    }
    expect(seen).toEqual(Array.from({ length: 1000 }, (_, i) => String(i).padStart(5, '0')));
    expect(m.entries).toBe(1000);
  });

  it('refuses a reused sequence for the same key, and grows past its first arena', () => {
    const m = new Memtable(2);
    m.add(5, ValueType.Put, Buffer.from('a'), Buffer.from('1'));
    expect(() => m.add(5, ValueType.Put, Buffer.from('a'), Buffer.from('2'))).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
    const big = Buffer.alloc(3 << 20, 9);
    m.add(6, ValueType.Put, Buffer.from('b'), big);
    expect(m.get(Buffer.from('a'), 10)).toEqual({ type: 'put', value: Buffer.from('1') });
    const got = m.get(Buffer.from('b'), 10);
    // Buffer.equals, not toEqual: deep equality walks megabytes element by element (15 s).
    expect(got?.type === 'put' && got.value.equals(big)).toBe(true);
    expect(m.approximateBytes).toBeGreaterThan(3 << 20);
  });
});

describe('flush builds', () => {
  const r = rng(7);
  const m = new Memtable(3, 64 * 1024); // small: it grows (and moves its shared memory) several times
  const keys = new Set<string>();
  for (let seq = 1; seq <= 20_000; seq++) {
    const k = `user${String(Math.floor(r() * 5000)).padStart(12, '0')}`;
    keys.add(k);
    m.add(seq, r() < 0.1 ? ValueType.Delete : ValueType.Put, Buffer.from(k), Buffer.alloc(Math.floor(r() * 300), seq & 0xff));
  }

  it('build the same table in the thread, in slices, and on the flush worker from the memtable shared in place', async () => {
    const here = buildTable(m, m.approximateBytes, 12_345);
    expect((await buildTableInSlices(m, 4096, 12_345)).bytes.equals(here.bytes)).toBe(true);
    const onWorker = await buildOnWorker(m.frozen(), m.approximateBytes, 12_345);
    expect(onWorker.bytes.equals(here.bytes)).toBe(true);
    expect([onWorker.entries, onWorker.smallest, onWorker.largest]).toEqual([here.entries, here.smallest, here.largest]);
    // The memtable still serves reads after sharing its memory.
    const it = new TableReader(here.bytes, 'flushed').iterator();
    it.first();
    expect(m.get(userKeyOf(it.key), 1 << 30)).toBeDefined();
    // An empty memtable builds an empty table, wherever it is built.
    expect((await buildOnWorker(new Memtable(4).frozen(), 4096, 0)).entries).toBe(0);
  });

  it('leave out only versions no reader at or after the oldest snapshot can see, tombstones kept', () => {
    const seen = (table: TableReader, key: Buffer, seq: number): string => {
      const got = table.get(key, seq);
      return got === undefined ? 'none' : got.type === 'delete' ? 'delete' : got.value.toString('hex');
    };
    const inMemtable = (key: Buffer, seq: number): string => {
      const got = m.get(key, seq);
      return got === undefined ? 'none' : got.type === 'delete' ? 'delete' : got.value.toString('hex');
    };
    let previous = 0;
    for (const oldest of [20_000, 10_000, 1]) {
      const built = buildTable(m, m.approximateBytes, oldest);
      const table = new TableReader(built.bytes, 'flushed');
      // More entries the older the oldest snapshot; the present alone leaves one per key.
      expect(built.entries).toBeGreaterThan(previous);
      previous = built.entries;
      if (oldest === 20_000) expect(built.entries).toBe(keys.size);
      for (const k of keys) {
        const key = Buffer.from(k);
        for (const seq of [oldest, oldest + 777, 20_000]) expect(seen(table, key, seq)).toBe(inMemtable(key, seq));
      }
    }
    // With the oldest snapshot before every write, nothing goes.
    expect(previous).toBe(20_000);
  });
});
