/**
 * The lookup index (src/ltc/lookup-index.ts): where each key's newest version is, through the
 * memtable → table indirection; merges, flushes and compactions move slots, not keys; a full
 * index stops being complete, and becomes so again once nothing it lacks can be in memtables
 * or L0; swept slots take their keys along.
 */
import { describe, expect, it } from 'vitest';
import { LookupIndex } from '../../src/ltc/lookup-index.js';
import { Memtable } from '../../src/memtable/memtable.js';

const k = (s: string) => Buffer.from(s);

describe('lookup index', () => {
  it('follows a key from its memtable to a merged one, to its L0 table, to deeper levels', () => {
    const ix = new LookupIndex(100);
    const [m1, m2, m9] = [new Memtable(1), new Memtable(2), new Memtable(9)];
    ix.opened(m1);
    ix.opened(m2);
    ix.wrote(k('a'), 1);
    ix.wrote(k('b'), 1);
    ix.wrote(k('b'), 2); // a newer write
    expect(ix.find(k('a'))).toEqual({ kind: 'memtable', memtable: m1 });
    expect(ix.find(k('b'))).toEqual({ kind: 'memtable', memtable: m2 });
    expect(ix.find(k('zz'))).toBeUndefined();
    ix.opened(m9);
    ix.merged([1], 9);
    expect(ix.find(k('a'))).toEqual({ kind: 'memtable', memtable: m9 });
    ix.flushed(9, 40);
    ix.flushed(2, 41);
    expect(ix.find(k('a'))).toEqual({ kind: 'table', file: 40 });
    expect(ix.find(k('b'))).toEqual({ kind: 'table', file: 41 });
    ix.compacted(new Set([40]));
    expect(ix.find(k('a'))).toEqual({ kind: 'deeper' });
    expect(ix.find(k('b'))).toEqual({ kind: 'table', file: 41 });
    expect(ix.counters.hits).toBe(7);
    expect(ix.counters.misses).toBe(1);
    expect(ix.complete).toBe(true);
  });

  it('a key left in memtables merged again and again still points at the newest of them', () => {
    const ix = new LookupIndex(100);
    ix.opened(new Memtable(1));
    ix.wrote(k('a'), 1);
    let last = new Memtable(1);
    for (let id = 2; id < 200; id++) {
      last = new Memtable(id);
      ix.opened(last);
      ix.merged([id - 1], id); // each merge takes the one before it
    }
    expect(ix.find(k('a'))).toEqual({ kind: 'memtable', memtable: last });
  });

  it('full, it stops taking keys and is not complete until L0 is empty and every memtable is newer than its refusals', () => {
    const ix = new LookupIndex(2);
    ix.wrote(k('a'), 1);
    ix.wrote(k('b'), 1);
    ix.wrote(k('a'), 3); // a key it has: still taken
    expect(ix.complete).toBe(true);
    ix.wrote(k('c'), 3); // refused
    expect(ix.complete).toBe(false);
    expect(ix.find(k('c'))).toBeUndefined();
    ix.refreshed(false, 5);
    expect(ix.complete).toBe(false); // L0 may hold it
    ix.refreshed(true, 3);
    expect(ix.complete).toBe(false); // memtable 3 holds it
    ix.merged([3], 7);
    ix.refreshed(true, 7);
    expect(ix.complete).toBe(false); // merged into 7
    ix.refreshed(true, 8);
    expect(ix.complete).toBe(true);
    ix.lacks(20);
    expect(ix.complete).toBe(false);
  });

  it('a merge of refused writes does not hide refusals in a memtable numbered after the merge\'s', () => {
    const ix = new LookupIndex(1);
    ix.wrote(k('a'), 3);
    ix.wrote(k('b'), 3); // refused in 3
    // A merge of 3 is numbered 7; meanwhile memtable 8 took writes, one refused.
    ix.wrote(k('c'), 8);
    ix.merged([3], 7);
    ix.refreshed(true, 8);
    expect(ix.complete, 'memtable 8 holds a refused write').toBe(false);
    ix.refreshed(true, 9);
    expect(ix.complete).toBe(true);
  });

  it('sweeps the keys of tables compacted away, and the slots no key needs', () => {
    const ix = new LookupIndex(10_000);
    for (let t = 0; t < 100; t++) {
      ix.opened(new Memtable(t));
      for (let i = 0; i < 10; i++) ix.wrote(k(`t${t}-${i}`), t);
      ix.flushed(t, 1000 + t);
    }
    ix.wrote(k('t5-0'), 99); // its newest version moved on before the sweep
    expect(ix.size).toBe(1000);
    const before = ix.bytes;
    ix.compacted(new Set(Array.from({ length: 90 }, (_, t) => 1000 + t)));
    expect(ix.counters.sweeps).toBe(1);
    expect(ix.size).toBe(101); // ten tables' keys, and t5-0
    expect(ix.bytes).toBeLessThan(before / 5);
    expect(ix.find(k('t5-0'))).toEqual({ kind: 'table', file: 1099 });
    expect(ix.find(k('t95-3'))).toEqual({ kind: 'table', file: 1095 });
    expect(ix.find(k('t3-3'))).toBeUndefined(); // complete: a get goes to L1 and below
  });
});
