/**
 * One cache instance's protocol (cache-instance.ts) over a memory store: the IQ lease table
 * (paper Table 5.2), configuration ids, floors, Redleases, and the discarding of entries no
 * fragment uses.
 */
import { describe, expect, it } from 'vitest';
import { newLayer, type CacheLayer } from '../../src/cluster/gemini.js';
import { CacheInstance } from '../../src/stoc/cache-instance.js';
import { CacheStore } from '../../src/stoc/cache-store.js';

const B = (s: string): Buffer => Buffer.from(s);

function instance(now = { t: 0 }): CacheInstance {
  const store = CacheStore.open({ memoryBytes: 1 << 20, diskBytes: 4 << 20, sync: false, maxDirtyKeys: 100 });
  const i = new CacheInstance(store, { leaseMs: 1_000, redleaseMs: 1_000, now: () => now.t });
  i.learn(5);
  return i;
}

describe('cache instance', () => {
  it('grants I leases one at a time; a Q lease voids them and blocks new ones; Q leases coexist (Table 5.2)', async () => {
    const i = instance();
    const first = i.iqget(5, B('k'), 0);
    expect(first.token).toBeGreaterThan(0);
    expect(i.iqget(5, B('k'), 0)).toEqual({ backoff: true }); // I then I: back off
    const q1 = await i.qareg(5, B('k'));
    const q2 = await i.qareg(5, B('k')); // Q then Q: granted
    expect(q2).not.toBe(q1);
    expect(i.iqset(5, B('k'), B('old'), first.token!, 0)).toBe(false); // the Q lease voided the I lease
    expect(i.iqget(5, B('k'), 0)).toEqual({}); // Q held: a miss without a lease (read the LTCs, insert nothing)
    await i.dar(5, B('k'), q1);
    expect(i.iqget(5, B('k'), 0)).toEqual({}); // the other Q lease still held
    await i.dar(5, B('k'), q2);
    const again = i.iqget(5, B('k'), 0);
    expect(i.iqset(5, B('k'), B('new'), again.token!, 0)).toBe(true);
    expect(i.iqget(5, B('k'), 0)).toEqual({ value: B('new') });
    expect(i.counters).toMatchObject({ gets: 6, hits: 1, refusedInserts: 1, inserts: 1 });
  });

  it('a lease expires; a timed-out Q lease leaves its entry deleted', async () => {
    const now = { t: 0 };
    const i = instance(now);
    const a = i.iqget(5, B('k'), 0);
    now.t = 1_001;
    const b = i.iqget(5, B('k'), 0);
    expect(b.token).toBeGreaterThan(a.token!);
    expect(i.iqset(5, B('k'), B('v'), a.token!, 0)).toBe(false);
    expect(i.iqset(5, B('k'), B('v'), b.token!, 0)).toBe(true);
    await i.qareg(5, B('k'));
    now.t = 2_500;
    i.sweep();
    expect(i.leases()).toEqual({ i: 0, q: 0, red: 0 });
    expect(i.store.peek(B('k'))).toBeUndefined();
  });

  it('refuses older configurations, adopts newer ones, refuses bogus ones; hides entries under their floor', () => {
    const i = instance();
    expect(() => i.iqget(4, B('k'), 0)).toThrow(/configuration 4 is older than 5/);
    i.iqget(6, B('x'), 0);
    expect(i.configId).toBe(6);
    expect(() => i.iqget(6 + 2_000_000, B('k'), 0)).toThrow(/not one the coordinator made/);
    i.store.set(B('k'), B('v'), 3, 0);
    expect(i.iqget(6, B('k'), 3)).toEqual({ value: B('v') });
    expect(i.iqget(6, B('k'), 4).value).toBeUndefined(); // written under 3, floor 4: discarded
    expect(i.store.peek(B('k'))).toBeUndefined();
    expect(i.counters.discarded).toBe(1);
  });

  it('one Redlease per dirty list; its holder renews it and marks the list done', async () => {
    const now = { t: 0 };
    const i = instance(now);
    await i.dirtyInit(5, 2);
    await i.qareg(5, B('a'), 2);
    const t = i.redlease(5, 2)!;
    expect(i.redlease(5, 2)).toBeUndefined();
    expect(i.redlease(5, 2, t)).toBe(t);
    expect(i.dirtyFetch(5, 2, 0, 10)).toEqual({ state: 'whole', keys: [B('a')], total: 1 });
    expect(await i.dirtyDone(5, 2, t + 1)).toBe(false);
    expect(await i.dirtyDone(5, 2, t)).toBe(true);
    expect(i.dirtyFetch(5, 2, 0, 10).state).toBe('done');
    await i.delete(5, B('b'), 3); // an append to a fragment without a list: one without marker
    expect(i.dirtyFetch(5, 3, 0, 10).state).toBe('partial');
  });

  it('discards the entries of fragments it no longer serves and those under their role floor', () => {
    const i = instance();
    const layer: CacheLayer = newLayer('gemini-o', 4, [1, 2], 10); // 1: fragments 0, 2; 2: fragments 1, 3
    layer.fragments[1] = { ...layer.fragments[1]!, mode: 'transient', secondary: 1, secondaryFloor: 12 };
    const put = (k: string, cfg: number, f: number): void => i.store.set(B(k), B('v'), cfg, f);
    put('own', 10, 0); // primary of 0, at its floor: kept
    put('old', 9, 2); // primary of 2, under its floor: dropped
    put('second', 12, 1); // secondary of 1 from its floor: kept
    put('second-old', 11, 1); // from an earlier stint as secondary: dropped
    put('other', 20, 3); // not this instance's: dropped
    put('nowhere', 20, 9); // a fragment the layer lacks: dropped
    expect(i.collect(layer, 1)).toEqual({ dropped: 4, more: false });
    expect(['own', 'old', 'second', 'second-old', 'other', 'nowhere'].filter((k) => i.store.peek(B(k)))).toEqual(['own', 'second']);
    expect(i.counters.discarded).toBe(4);
    put('a', 1, 3);
    put('b', 1, 3);
    expect(i.collect(layer, 1, 1)).toEqual({ dropped: 1, more: true });
  });
});
