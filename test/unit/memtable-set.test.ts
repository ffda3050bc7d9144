/**
 * Memtables of a range: routing by Drange, what a flush must take together, and the engine
 * scenario that makes it matter (a batch spanning Dranges, then a reopen).
 */
import { describe, expect, it } from 'vitest';
import { boundsFromSample, drangeOf } from '../../src/ltc/dranges.js';
import { Engine } from '../../src/ltc/engine.js';
import { Memtable } from '../../src/memtable/memtable.js';
import { MemtableSet } from '../../src/ltc/memtable-set.js';
import { tempDirs } from '../helpers/temp.js';

const b = (s: string) => Buffer.from(s);
const ids = (ms: readonly Memtable[]) => ms.map((m) => m.id);

describe('dranges', () => {
  it('routes a key to the Drange whose interval holds it', () => {
    const bounds = [b('g'), b('p')];
    expect([b(''), b('a'), b('f\xff'), b('g'), b('h'), b('p'), b('zz')].map((k) => drangeOf(bounds, k))).toEqual([0, 0, 0, 1, 1, 2, 2]);
    expect(drangeOf([], b('x'))).toBe(0);
  });

  it('cuts a sample into about equal runs, never making an empty Drange', () => {
    const keys = Array.from({ length: 100 }, (_, i) => b(`k${String(i).padStart(3, '0')}`));
    expect(boundsFromSample(keys, 4).map(String)).toEqual(['k025', 'k050', 'k075']);
    expect(boundsFromSample([b('a'), b('a'), b('a'), b('b')], 4).map(String)).toEqual(['b']);
    expect(boundsFromSample([b('a')], 8)).toEqual([]);
    expect(boundsFromSample([], 8)).toEqual([]);
  });
});

describe('memtable set', () => {
  it('lists the memtables of a key newest first, and flushes the oldest first', () => {
    const set = new MemtableSet([b('m')], [[new Memtable(1)], [new Memtable(2)]]);
    set.retire(0, [new Memtable(3)]);
    set.retire(1, [new Memtable(4)]);
    set.retire(0, [new Memtable(5)]);
    expect(ids(set.forKey(b('a')))).toEqual([5, 3, 1]);
    expect(ids(set.forKey(b('x')))).toEqual([4, 2]);
    expect(set.size).toBe(5);
    expect(ids(set.nextFlush())).toEqual([1]);
    set.flushed(set.nextFlush());
    expect(ids(set.nextFlush())).toEqual([2]);
    expect(ids(set.all())).toEqual([2, 3, 4, 5]);
  });

  it('flushes memtables that share a record together, with what is older in their Dranges', () => {
    const a = new Memtable(1);
    const z = new Memtable(2);
    const set = new MemtableSet([b('m')], [[a], [z]]);
    set.retire(1, [new Memtable(3)]); // z is immutable; 3 is active in Drange 1
    set.link(a, set.actives(1)[0]); // a batch put keys in a and in 3
    set.retire(0, [new Memtable(4)]); // a retires after z
    // Flushing z alone is fine: it shares nothing.
    expect(ids(set.nextFlush())).toEqual([2]);
    set.flushed([z]);
    // a is next; it shares a record with 3, which is still active: they go together.
    const group = set.nextFlush();
    expect(ids(group)).toEqual([1, 3]);
    expect(set.isActive(group[1])).toBe(true);
  });

  it('after new Dranges, keeps the old memtables in every list, oldest to flush', () => {
    const old = new Memtable(1);
    const set = new MemtableSet([], [[old]]);
    set.reorganize([b('m')], new Map([[0, [new Memtable(2)]], [1, [new Memtable(3)]]]));
    expect(ids(set.forKey(b('a')))).toEqual([2, 1]);
    expect(ids(set.forKey(b('z')))).toEqual([3, 1]);
    set.retire(1, [new Memtable(4)]);
    // 3 is older than 4 in its Drange, but 1 is older still and in every Drange.
    expect(ids(set.nextFlush())).toEqual([1]);
  });

  it('a merged memtable is parked as its Drange\'s oldest: it starts no flush, and goes first with the next', () => {
    const m1 = new Memtable(1);
    const set = new MemtableSet([], [[m1]]);
    set.retire(0, [new Memtable(2)]);
    expect(ids(set.nextFlush())).toEqual([1]);
    set.replaceMerged([m1], 0, new Memtable(9)); // numbered after 2, older than it
    expect(set.parkedCount).toBe(1);
    expect(set.size).toBe(1); // parked ones do not count against δ
    expect(ids(set.nextFlush())).toEqual([]); // 2 is active: nothing to flush, 9 waits
    expect(ids(set.nextFlush(true))).toEqual([9]);
    set.retire(0, [new Memtable(3)]);
    expect(ids(set.forKey(b('k')))).toEqual([3, 2, 9]);
    // 2 goes, and 9, older than it in its Drange, goes first: its L0 table below 2's.
    const group = set.nextFlush();
    expect(ids(group)).toEqual([9, 2]);
    set.flushed(group);
    expect(set.parkedCount).toBe(0);
    // A reorganization lists it by age too, not by its number.
    const again = new MemtableSet([], [[new Memtable(4)]]);
    const m4 = again.activeAll()[0];
    again.retire(0, [new Memtable(5)]);
    again.replaceMerged([m4], 0, new Memtable(10));
    again.reorganize([b('m')], new Map([[0, [new Memtable(6)]], [1, [new Memtable(7)]]]));
    expect(ids(again.forKey(b('a')))).toEqual([6, 5, 10]);
  });

  it('a duplicated Drange (and nova-r, one Drange with α copies): writes take the copies in turn; twins retire, flush and make a table together', () => {
    const set = new MemtableSet([], [[new Memtable(1), new Memtable(2)]]);
    expect(set.dranges).toBe(1);
    expect(set.drangeCopies).toEqual([2]);
    expect(set.size).toBe(2);
    expect([set.pick(0), set.pick(0), set.pick(0)].map((m) => m.id)).toEqual([2, 1, 2]);
    expect(set.current(0).id).toBe(2);
    expect(set.mixed(0)).toBe(true);
    expect(ids(set.forKey(b('a'))).sort()).toEqual([1, 2]);
    expect(() => set.retire(0, [new Memtable(3)])).toThrow(/has 2 active memtables, not 1/);
    set.retire(0, [new Memtable(3), new Memtable(4)]);
    expect(ids(set.forKey(b('z'))).sort()).toEqual([1, 2, 3, 4]);
    expect(ids(set.nextFlush())).toEqual([1, 2]); // generation 1 whole, never half of it
    expect(set.flushUnits(set.nextFlush()).map(ids)).toEqual([[1, 2]]);
    set.retire(0, [new Memtable(5), new Memtable(6)]);
    const first = set.nextFlush();
    expect(ids(first)).toEqual([1, 2]);
    set.flushed(first);
    expect(ids(set.nextFlush())).toEqual([3, 4]);
    expect(() => new MemtableSet([b('m')], [[new Memtable(7)]])).toThrow(/active memtables for every Drange/);
  });

  it('duplicating a Drange and ending it: twins stay mixed in every list they join until flushed; other memtables flush alone', () => {
    // Dranges [-, k) and [k, k\0): the point k duplicated with copies 2 and 3.
    const set = new MemtableSet([b('k')], [[new Memtable(1)], [new Memtable(2)]]);
    const point = [b('k'), b('k\0')];
    set.reorganize(point, new Map([[1, [new Memtable(3), new Memtable(4)]], [2, [new Memtable(5)]]]));
    expect(set.drangeCopies).toEqual([1, 2, 1]);
    expect(set.unchanged(point, [1, 2, 1])).toEqual([0, 1, 2]);
    expect(set.unchanged(point, [1, 3, 1])).toEqual([0, -1, 2]);
    expect([set.mixed(0), set.mixed(1), set.mixed(2)]).toEqual([false, true, false]);
    expect(ids(set.actives(1))).toEqual([3, 4]);
    expect(set.isTwin(set.actives(1)[0])).toBe(true);
    expect(set.drangeOfActive(set.actives(1)[1])).toBe(1);
    // Back to one Drange over all: the twins are old memtables of it now, still mixed.
    set.reorganize([], new Map([[0, [new Memtable(6)]]]));
    expect(set.mixed(0)).toBe(true);
    const units = (): number[][] => {
      const group = set.nextFlush();
      const out = set.flushUnits(group).map(ids);
      set.flushed(group);
      return out;
    };
    expect(units()).toEqual([[1], [2]]);
    expect(set.mixed(0)).toBe(true);
    expect(units()).toEqual([[3, 4]]);
    expect(set.mixed(0)).toBe(false);
    expect(units()).toEqual([[5]]);
  });

  it('a reorganization keeps the Dranges it leaves alone, and lists old memtables only where their keys may be', () => {
    // Dranges [-, g) [g, p) [p, -) with memtables 1 2 3 active and 4 (of [g, p)) immutable.
    const set = new MemtableSet([b('g'), b('p')], [[new Memtable(1)], [new Memtable(4)], [new Memtable(3)]]);
    set.retire(1, [new Memtable(5)]);
    expect(ids(set.forKey(b('h')))).toEqual([5, 4]);
    // A minor move: the bound p moves to k; [-, g) stays as it was.
    set.reorganize([b('g'), b('k')], new Map([[1, [new Memtable(6)]], [2, [new Memtable(7)]]]));
    expect(ids(set.forKey(b('a')))).toEqual([1]); // untouched: still active, alone
    expect(ids(set.forKey(b('h')))).toEqual([6, 5, 4]);
    // [k, -) meets old [g, p) and [p, -); newest first by when each began taking writes
    // (3 and 4 hold keys of different Dranges: either order is right).
    expect(ids(set.forKey(b('m')))).toEqual([7, 5, 3, 4]);
    expect(ids(set.forKey(b('z')))).toEqual([7, 5, 3, 4]);
    expect(ids(set.activeAll())).toEqual([1, 6, 7]);
    expect(set.isActive(set.forKey(b('a'))[0])).toBe(true);
    // 4 goes first; then 5, with 3, older than it in [k, -); 1 never joined them.
    const first = set.nextFlush();
    expect(ids(first)).toEqual([4]);
    set.flushed(first);
    expect(ids(set.nextFlush())).toEqual([3, 5]);
    expect(() => set.reorganize([b('c')], new Map([[1, [new Memtable(8)]]]))).toThrow(/needs a fresh memtable/);
  });
});

describe('engine with several active memtables', () => {
  const tempDir = tempDirs('nova-dranges-');

  it('never replays half of a batch that spans Dranges after the other half was flushed', async () => {
    const dir = tempDir();
    const open = () => Engine.open(dir, { memtableBytes: 4096, activeMemtables: 2, sync: false });
    let db = await open();
    const value = Buffer.alloc(100, 1);
    // The first memtable to fill cuts the keys into two Dranges, between the a… and z… keys.
    for (let i = 0; db.stats.dranges < 2; i++) {
      await db.put(b(`a${i % 30}`), value);
      await db.put(b(`z${i % 30}`), value);
    }
    // One batch, one record in the a… memtable's log, with a key in the z… memtable.
    await db.write(db.newBatch().put(b('a-batch'), b('old')).put(b('z-batch'), b('old')));
    await db.put(b('z-batch'), b('new'));
    // Fill the z… Drange until its memtables (and the new z-batch) are in tables.
    for (let i = 0; i < 200; i++) await db.put(b(`z${i % 30}`), value);
    expect(db.stats.flushes).toBeGreaterThan(1);
    await db.close(); // the a… memtable may still be unflushed: its log is replayed
    db = await open();
    expect((await db.get(b('z-batch')))?.toString()).toBe('new');
    expect((await db.get(b('a-batch')))?.toString()).toBe('old');
    await db.close();
  });

  it('several hot keys among cold ones: never more than α memtables active, writes never stall for good', async () => {
    const dir = tempDir();
    const db = await Engine.open(dir, { memtableBytes: 4096, activeMemtables: 4, maxMemtables: 5, sync: false });
    const value = Buffer.alloc(60, 2);
    // Three keys of about 27% each, cold keys before, between and after them.
    const keyOf = (i: number): string => (i % 11 < 3 ? 'd' : i % 11 < 6 ? 'h' : i % 11 < 9 ? 'm' : `${'bfkp'[i % 4]}${i}`);
    for (let i = 0; i < 3000; i++) {
      await db.put(b(keyOf(i)), value);
      expect(db.stats.drangeCopies.reduce((x, y) => x + y, 0)).toBeLessThanOrEqual(4);
    }
    expect(db.stats.dranges).toBeGreaterThan(1);
    await db.close();
  });
});
