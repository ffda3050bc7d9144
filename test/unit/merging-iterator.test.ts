/**
 * Merging and visibility against an oracle: random versions spread over a memtable and
 * several tables; every snapshot sees, per user key, its newest version at or below the
 * snapshot unless that version is a delete.
 */
import { describe, expect, it } from 'vitest';
import { ValueType, compareInternalKeys, makeInternalKey, sequenceOf, typeOf, userKeyOf } from '../../src/common/internal-key.js';
import { Memtable } from '../../src/memtable/memtable.js';
import { MergingIterator, VisibleIterator, type InternalIterator } from '../../src/sstable/merging-iterator.js';
import { levelIterator } from '../../src/sstable/two-level-iterator.js';
import { TableBuilder } from '../../src/sstable/table-builder.js';
import { TableReader } from '../../src/sstable/table-reader.js';
import { rng } from '../helpers/rng.js';


type Entry = { key: Buffer; value: Buffer };

function setup(seed: number) {
  const r = rng(seed);
  const all: Entry[] = [];
  const parts: Entry[][] = [[], [], [], []]; // three tables and a memtable
  const users = Array.from({ length: 300 }, (_, i) => Buffer.from(`u${String(i * 7919 % 1000).padStart(4, '0')}`));
  for (let seq = 1; seq <= 3000; seq++) {
    const user = users[Math.floor(r() * users.length)];
    const type = r() < 0.3 ? ValueType.Delete : ValueType.Put;
    const e = { key: makeInternalKey(user, seq, type), value: type === ValueType.Put ? Buffer.from(`v${seq}`) : Buffer.alloc(0) };
    all.push(e);
    parts[Math.min(3, Math.floor(seq / 800))].push(e); // older versions in earlier tables, like levels
  }
  const children: InternalIterator[] = parts.slice(0, 3).map((p, i) => {
    const b = new TableBuilder({ blockSize: 512 });
    for (const e of [...p].sort((x, y) => compareInternalKeys(x.key, y.key))) b.add(e.key, e.value);
    return new TableReader(b.finish().bytes, `t${i}.sst`).iterator();
  });
  const m = new Memtable(1);
  for (const e of parts[3]) m.add(sequenceOf(e.key), typeOf(e.key) as ValueType, userKeyOf(e.key), e.value);
  children.push(m.iterator());
  all.sort((x, y) => compareInternalKeys(x.key, y.key));
  return { all, children, users };
}

function visibleOracle(all: Entry[], snapshot: number): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  let last = '';
  for (const e of all) {
    const u = userKeyOf(e.key).toString();
    if (sequenceOf(e.key) > snapshot || u === last) continue;
    last = u;
    if (typeOf(e.key) === ValueType.Put) out.push([u, e.value.toString()]);
  }
  return out;
}

describe('merging and visible iterators', () => {
  it('merge k sources into internal-key order', () => {
    const { all, children } = setup(1);
    const it = new MergingIterator(children);
    const got: Buffer[] = [];
    for (it.first(); it.valid; it.next()) got.push(Buffer.from(it.key));
    expect(got).toEqual(all.map((e) => e.key));
  });

  it('show each snapshot the newest visible version per key, hiding deletes', () => {
    const { all, children } = setup(2);
    for (const snapshot of [0, 1, 5, 100, 799, 800, 1500, 2999, 3000, 1e9]) {
      const it = new VisibleIterator(new MergingIterator(children), snapshot);
      const got: Array<[string, string]> = [];
      for (it.first(); it.valid; it.next()) got.push([it.key.toString(), it.value.toString()]);
      expect(got, `snapshot ${snapshot}`).toEqual(visibleOracle(all, snapshot));
    }
  });

  it('seek lands on the first visible key at or after the target', () => {
    const { all, children, users } = setup(3);
    const snapshot = 2000;
    const visible = visibleOracle(all, snapshot);
    const it = new VisibleIterator(new MergingIterator(children), snapshot);
    for (const u of users.slice(0, 100)) {
      it.seek(makeInternalKey(u, snapshot, ValueType.Put));
      const want = visible.find(([k]) => k >= u.toString());
      if (!want) expect(it.valid).toBe(false);
      else expect([it.key.toString(), it.value.toString()]).toEqual(want);
    }
  });

  it('a level iterator reads disjoint sorted tables as one, seeking into the one table that may hold the target', () => {
    const { all } = setup(4);
    const r = rng(44);
    // Cut the sorted entries into tables of random sizes (never between versions of one key, as compaction cuts).
    const tables: Array<{ largest: Buffer; bytes: Buffer }> = [];
    let b = new TableBuilder({ blockSize: 256 });
    let last: Buffer | undefined;
    let n = 0;
    for (const e of all) {
      const newUser = !last || !userKeyOf(last).equals(userKeyOf(e.key));
      if (newUser && n > 0 && r() < 0.1) {
        tables.push({ largest: last!, bytes: b.finish().bytes });
        b = new TableBuilder({ blockSize: 256 });
        n = 0;
      }
      b.add(e.key, e.value);
      last = e.key;
      n++;
    }
    tables.push({ largest: last!, bytes: b.finish().bytes });
    expect(tables.length).toBeGreaterThan(20);
    let opened = 0;
    const level = tables.map((t, i) => ({ largest: t.largest, iterator: () => { opened++; return new TableReader(t.bytes, `t${i}`).iterator(); } }));
    const it = levelIterator(level);
    const got: Buffer[] = [];
    for (it.first(); it.valid; it.next()) got.push(Buffer.from(it.key));
    expect(got).toEqual(all.map((e) => e.key));
    for (let i = 0; i < 300; i++) {
      // Targets at, between and beyond the keys (user keys u0000..u0999, sequences 0..3001).
      const target = makeInternalKey(Buffer.from(`u${String(Math.floor(r() * 1001)).padStart(4, '0')}`), Math.floor(r() * 3002), ValueType.Put);
      opened = 0;
      it.seek(target);
      const want = all.find((e) => compareInternalKeys(e.key, target) >= 0);
      if (!want) expect(it.valid).toBe(false);
      else expect(Buffer.from(it.key)).toEqual(want.key);
      expect(opened).toBeLessThanOrEqual(2); // the table that may hold it, and the next if it held nothing past it
    }
    const empty = levelIterator([]);
    empty.first();
    expect(empty.valid).toBe(false);
    empty.seek(makeInternalKey(Buffer.from('u0001'), 1, ValueType.Put));
    expect(empty.valid).toBe(false);
  });
});
