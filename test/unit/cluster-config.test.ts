/**
 * The cluster's configuration: ranges, routing, and its JSON form.
 */
import { describe, expect, it } from 'vitest';
import { TcpRpcClient } from '../../src/net/tcp-rpc-client.js';
import { abandonMove, configFromJson, configFromWire, configToJson, endFill, endMove, failOver, makeRanges, rangeOf, removeStoc, startDrain, startMerge, startMove, startSplit, DEFAULT_SETTINGS, type ClusterConfig } from '../../src/cluster/config.js';
import { splitKey, MIN_WRITE_SAMPLES } from '../../src/ltc/split-key.js';
import { LOAD_WINDOW_MS, RangeLoad } from '../../src/coordinator/range-load.js';
import { Packr } from 'msgpackr';
import { benchSplits } from '../../bench/ycsb/generators.js';
import { Coordinator } from '../../src/coordinator/coordinator.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-coord-');

describe('cluster configuration', () => {
  const config = (splits: string[], ltcs: number): ClusterConfig => ({
    id: 1, members: [], settings: DEFAULT_SETTINGS, ranges: makeRanges(splits.map((s) => Buffer.from(s)), ltcs), lastRange: splits.length + 1,
  });

  it('routes every key to the range holding it', () => {
    const c = config(['g', 'p', 'pz'], 2);
    expect(c.ranges.map((r) => r.ltc)).toEqual([1, 2, 1, 2]);
    const at = (k: string) => rangeOf(c, Buffer.from(k)).id;
    expect([at(''), at('a'), at('g'), at('gz'), at('p'), at('pa'), at('pz'), at('zzz')]).toEqual([1, 1, 2, 2, 3, 3, 4, 4]);
    expect(() => makeRanges([Buffer.from('b'), Buffer.from('a')], 1)).toThrow(/ascending/);
  });

  it('cuts the bench key space evenly and survives its JSON form', () => {
    expect(benchSplits(4, 1000).map(String)).toEqual(['user000000000250', 'user000000000500', 'user000000000750']);
    const c = config(['user000000000250', 'user000000000500'], 1);
    const back = configFromJson(JSON.parse(JSON.stringify(configToJson(c))), 'x');
    expect(back).toEqual(c);
    expect(() => configFromJson({ id: 'x' }, 'config.json')).toThrow(/config.json: not a cluster configuration/);
  });

  it('a move is two configurations: the range on its new LTC with the old one named, then without it', () => {
    const ltc = (id: number) => ({ role: 'ltc' as const, id, address: `127.0.0.1:${7000 + id}`, pid: id, host: '' });
    const c: ClusterConfig = { ...config(['m'], 2), members: [ltc(1), ltc(2)] };
    const moving = startMove(c, 1, 2);
    expect(moving.id).toBe(c.id + 1);
    expect(moving.ranges).toMatchObject([{ id: 1, ltc: 2, from: 1 }, { id: 2, ltc: 2 }]);
    expect(c.ranges[0].from).toBeUndefined(); // pure
    expect(() => startMove(moving, 1, 1)).toThrow(/range 1 is moving from LTC 1 to LTC 2/);
    expect(() => startMove(c, 3, 1)).toThrow(/there is no range 3 \(ranges: 1, 2\)/);
    expect(() => startMove(c, 1, 3)).toThrow(/there is no LTC 3 \(LTCs: 1, 2\)/);
    expect(() => startMove(c, 2, 2)).toThrow(/on LTC 2 already/);
    // The field survives the file and the wire.
    expect(configFromJson(JSON.parse(JSON.stringify(configToJson(moving))), 'x')).toEqual(moving);
    const packr = new Packr({ useRecords: false, moreTypes: false });
    expect(configFromWire(packr.unpack(packr.pack(moving))).ranges).toMatchObject([{ id: 1, ltc: 2, from: 1 }, { id: 2, ltc: 2 }]);
    const done = endMove(moving, 1)!;
    expect(done.id).toBe(moving.id + 1);
    expect(done.ranges[0]).toEqual({ ...c.ranges[0], ltc: 2, epoch: done.id }); // a new epoch: the new LTC fences the old off
    expect(moving.ranges[0].epoch).toBe(c.ranges[0].epoch); // the old LTC still holds it under its own
    expect('from' in done.ranges[0]).toBe(false);
    expect(endMove(done, 1)).toBeUndefined();
    // Given up: the range stays on the LTC it was leaving, under a new epoch; only while that move lasts.
    const back = abandonMove(moving, 1, 1)!;
    expect(back.id).toBe(moving.id + 1);
    expect(back.ranges[0]).toEqual({ ...c.ranges[0], ltc: 1, epoch: back.id });
    expect('from' in back.ranges[0]).toBe(false);
    expect(abandonMove(moving, 1, 2)).toBeUndefined(); // not moving away from LTC 2
    expect(abandonMove(done, 1, 1)).toBeUndefined(); // already over
    expect(configFromWire(packr.unpack(packr.pack(done))).ranges[0]).not.toHaveProperty('from');
  });

  it("gives knobs an older coordinator's configuration lacks their defaults, from the wire as from the file", () => {
    const c = { id: 3, ranges: makeRanges([], 1), lastRange: 1, members: [], settings: { memtableBytes: 1 << 20 } };
    const packr = new Packr({ useRecords: false, moreTypes: false });
    for (const read of [configFromWire(packr.unpack(packr.pack(c))), configFromJson(JSON.parse(JSON.stringify(configToJson(c as unknown as ClusterConfig))), 'x')]) {
      expect(read.settings).toEqual({ ...DEFAULT_SETTINGS, memtableBytes: 1 << 20 });
    }
  });

  it('fails over a dead LTC\'s ranges to the live LTCs with the fewest ranges, each under a new epoch', () => {
    const ltc = (id: number) => ({ role: 'ltc' as const, id, address: `127.0.0.1:${7000 + id}`, pid: id, host: '' });
    // Ranges 1..6 on LTCs 1, 2, 3, 1, 2, 3.
    const c: ClusterConfig = { ...config(['b', 'c', 'd', 'e', 'f'], 3), members: [ltc(1), ltc(2), ltc(3)] };
    expect(failOver(c, new Set([4]), [1, 2, 3])).toBeUndefined(); // holds nothing
    expect(failOver(c, new Set([1, 2, 3]), [])).toBeUndefined(); // nobody to take them
    const next = failOver(c, new Set([1]), [2, 3])!;
    expect(next.id).toBe(c.id + 1);
    expect(next.ranges.map((r) => [r.ltc, r.epoch])).toEqual([[2, 2], [2, 1], [3, 1], [3, 2], [2, 1], [3, 1]]);
    // A move away from the dead LTC ends; one into it goes back to the LTC it was leaving.
    const out = startMove(c, 1, 2);
    const into = startMove(out, 2, 1);
    const after = failOver(into, new Set([1]), [2, 3])!;
    expect(after.ranges[0]).toMatchObject({ id: 1, ltc: 2, epoch: after.id });
    expect(after.ranges[0].from).toBeUndefined();
    expect(after.ranges[1]).toMatchObject({ id: 2, ltc: 2, epoch: after.id });
    expect(after.ranges[1].from).toBeUndefined();
  });

  it('a split is two configurations: a new range filled from the old one, then filled; a merge the same the other way', () => {
    const ltc = (id: number) => ({ role: 'ltc' as const, id, address: `127.0.0.1:${7000 + id}`, pid: id, host: '' });
    const c: ClusterConfig = { ...config(['m'], 2), members: [ltc(1), ltc(2)] }; // [,m) on 1, [m,) on 2
    const b = (x: string): Buffer => Buffer.from(x);
    const split = startSplit(c, 2, b('t'));
    expect(split).toMatchObject({ id: c.id + 1, lastRange: 3 });
    expect(split.ranges).toEqual([c.ranges[0], { ...c.ranges[1], end: b('t') }, { id: 3, start: b('t'), end: undefined, ltc: 2, epoch: split.id, fill: { from: 2, start: b('t'), end: undefined } }]);
    expect(rangeOf(split, b('u')).id).toBe(3);
    // While it fills, neither range moves, splits or merges again; failover keeps them together.
    expect(() => startMove(split, 3, 1)).toThrow(/range 3 is taking in keys from range 2/);
    expect(() => startMove(split, 2, 1)).toThrow(/range 3 is taking in keys from range 2/);
    expect(() => startSplit(split, 2, b('p'))).toThrow(/BUSY|taking in keys/);
    const failed = failOver(split, new Set([2]), [1])!;
    expect(failed.ranges.map((r) => [r.id, r.ltc])).toEqual([[1, 1], [2, 1], [3, 1]]);
    // JSON and the wire carry the fill.
    expect(configFromJson(JSON.parse(JSON.stringify(configToJson(split))), 'test')).toEqual(split);
    const wire = new Packr({ useRecords: false, moreTypes: false });
    expect(configFromWire(wire.unpack(wire.pack(split)))).toEqual(split);
    expect(endFill(split, 3, { from: 2, start: b('u') })).toBeUndefined(); // a late answer about another fill
    const done = endFill(split, 3, split.ranges[2].fill)!;
    expect(done.ranges[2]).not.toHaveProperty('fill');
    expect(endFill(done, 3)).toBeUndefined();
    // Range ids are never used again, even once merged away.
    const merged = endFill(startMerge(done, 2, 3), 2)!;
    expect(merged.ranges.map((r) => [r.id, r.start.toString(), r.end])).toEqual([[1, '', b('m')], [2, 'm', undefined]]);
    expect(startSplit(merged, 2, b('x')).ranges[2].id).toBe(4);
    const before = startMerge(done, 3, 2); // the later range takes in the earlier
    expect(before.ranges[1]).toMatchObject({ id: 3, start: b('m'), end: undefined, fill: { from: 2, start: b('m'), end: b('t') } });
    // What it refuses.
    expect(() => startSplit(c, 2, b('m'))).toThrow(/strictly inside range 2/);
    expect(() => startSplit(c, 1, b('z'))).toThrow(/strictly inside range 1/);
    expect(() => startSplit(c, 9, b('z'))).toThrow(/no range 9/);
    expect(() => startMerge(c, 1, 2)).toThrow(/on LTCs 1 and 2: move one first/);
    expect(() => startMerge(done, 1, 3)).toThrow(/on LTCs|not adjacent/);
    expect(() => startMerge(startMove(c, 2, 1), 1, 2)).toThrow(/moving/);
    // A configuration from before range ids were kept takes its largest id.
    const { lastRange: _, ...old } = configToJson(done) as Record<string, unknown>;
    expect(configFromJson(old, 'test').lastRange).toBe(3);
  });

  it('a StoC drains, then leaves the configuration for good; the last one cannot', () => {
    const stoc = (id: number) => ({ role: 'stoc' as const, id, address: `a${id}`, pid: id, host: '' });
    const c: ClusterConfig = { ...config([], 1), members: [stoc(1), stoc(2)] };
    const draining = startDrain(c, 2);
    expect(draining.id).toBe(c.id + 1);
    expect(draining.members).toEqual([stoc(1), { ...stoc(2), draining: true }]);
    const removed = removeStoc(draining, 2, false);
    expect(removed.members).toEqual([stoc(1)]);
    expect(removed.removedStocs).toEqual([2]);
    expect(removed.deadStocs).toBeUndefined(); // drained: nothing of it is lost
    const dead = removeStoc({ ...c, members: [stoc(1), stoc(2), stoc(3)] }, 3, true);
    expect([dead.removedStocs, dead.deadStocs]).toEqual([[3], [3]]);
    expect(configFromJson(JSON.parse(JSON.stringify(configToJson(dead))), 'test')).toMatchObject({ removedStocs: [3], deadStocs: [3] });
    expect(() => removeStoc(removed, 2, false)).toThrow(/no StoC 2 \(it was removed already\) \(StoCs: 1\)/);
    expect(() => startDrain(removed, 1)).toThrow(/StoC 1 is the only StoC/);
    expect(() => removeStoc(c, 5, true)).toThrow(/no StoC 5 \(StoCs: 1, 2\)/);
  });

  it('splits by default at the median key of recent writes, or else where the tables\' bytes pass half', () => {
    const k = (i: number): Buffer => Buffer.from(`k${String(i).padStart(4, '0')}`);
    const writes = Array.from({ length: MIN_WRITE_SAMPLES }, (_, i) => k(100 + i)).reverse();
    expect(splitKey(writes, [], Buffer.alloc(0))).toEqual(k(100 + MIN_WRITE_SAMPLES / 2));
    const tables = [{ smallest: k(0), size: 10 }, { smallest: k(50), size: 10 }, { smallest: k(30), size: 100 }];
    expect(splitKey(writes.slice(1), tables, Buffer.alloc(0))).toEqual(k(30));
    expect(splitKey([], tables, k(30))).toEqual(k(50)); // only keys after the range's first qualify
    expect(splitKey([], [{ smallest: k(1), size: 5 }], k(1))).toBeUndefined();
    expect(splitKey([k(7)], [], Buffer.alloc(0))).toEqual(k(7));
    // Keys at or past the range's end (given away by a split, not yet deleted) do not count.
    expect(splitKey([], tables, Buffer.alloc(0), k(30))).toEqual(k(0));
    expect(splitKey(writes, [], Buffer.alloc(0), k(100 + 10))).toEqual(k(100 + 5));
  });

  it('turns an LTC\'s counters into rates over the window, and starts again when they go back or the range moves', () => {
    const load = new RangeLoad();
    expect(load.rate(1, 0)).toBeUndefined();
    load.sample(1, 1, 0, 0, 0);
    expect(load.rate(1, 0)).toEqual({ ltc: 1, requestsPerSec: 0, bytesWrittenPerSec: 0 });
    for (let t = 500; t <= 20_000; t += 500) load.sample(1, 1, t, t * 2, t * 100);
    expect(load.rate(1, 20_000)).toEqual({ ltc: 1, requestsPerSec: 2000, bytesWrittenPerSec: 100_000 });
    load.sample(1, 1, 20_500, 10, 10); // a restarted LTC counts from 0
    load.sample(1, 1, 21_500, 1010, 10);
    expect(load.rate(1, 21_500)).toEqual({ ltc: 1, requestsPerSec: 1000, bytesWrittenPerSec: 0 });
    load.sample(2, 1, 22_000, 5, 5); // moved to LTC 2
    expect(load.rate(1, 22_000)).toEqual({ ltc: 2, requestsPerSec: 0, bytesWrittenPerSec: 0 });
    load.sample(2, 1, 23_000, 505, 5);
    expect(load.rate(1, 23_000 + LOAD_WINDOW_MS + 1)).toEqual({ ltc: 2, requestsPerSec: 0, bytesWrittenPerSec: 0 }); // no longer reported
    load.forget(1);
    expect(load.rate(1, 0)).toBeUndefined();
  });

  it('the coordinator keeps its configuration across restarts and bumps the id on membership changes', async () => {
    const dir = tempDir();
    let c = await Coordinator.start({ dir, ltcs: 2, splits: [Buffer.from('m')] });
    const link = await TcpRpcClient.connect(c.address);
    const first = await link.call<ClusterConfig>('register', ['stoc', 1, 'addrA', 111, '']);
    const again = await link.call<ClusterConfig>('register', ['stoc', 1, 'addrA', 111, '']);
    expect(again.id).toBe(first.id); // nothing changed
    const moved = await link.call<ClusterConfig>('register', ['stoc', 1, 'addrB', 112, '']);
    expect(moved.id).toBe(first.id + 1);
    // A StoC is fresh (holds no file, blocks no open) until its first heartbeat; once heard from, a new process of it is not.
    expect(moved.members.find((m) => m.role === 'stoc' && m.id === 1)).toMatchObject({ fresh: true });
    expect(await link.call('heartbeat', ['stoc', 1, [], [], 0, [], undefined])).toBe(moved.id + 1);
    expect((await link.call<ClusterConfig>('config', [])).members.find((m) => m.role === 'stoc' && m.id === 1)!.fresh).toBeUndefined();
    const restarted = await link.call<ClusterConfig>('register', ['stoc', 1, 'addrC', 113, '']);
    expect(restarted.members.find((m) => m.role === 'stoc' && m.id === 1)!.fresh).toBeUndefined();
    await expect(link.call('register', ['nope', 1, 'a', 1])).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    // Another process of LTC 2: its range takes a new epoch (fencing off the old one), whose beats are refused.
    const l1 = await link.call<ClusterConfig>('register', ['ltc', 2, '127.0.0.1:1', 201, '', 'aaaa']);
    expect(l1.ranges[1]).toMatchObject({ ltc: 2, epoch: 1 });
    // The same pid (another machine, a container) is another process all the same: its incarnation differs.
    const l2 = await link.call<ClusterConfig>('register', ['ltc', 2, '127.0.0.1:1', 201, '', 'bbbb']);
    expect(l2.ranges[1]).toMatchObject({ ltc: 2, epoch: l2.id });
    expect(l2.ranges[0].epoch).toBe(1); // LTC 1's is untouched
    await expect(link.call('heartbeat', ['ltc', 2, [], [], l2.id, [], 'aaaa'])).rejects.toMatchObject({ code: 'BUSY', message: expect.stringMatching(/registered by another process \(pid 201\) since/) });
    expect(await link.call('heartbeat', ['ltc', 2, [], [], l2.id, [[2, 5, 5], [99, 1, 1], 'junk'], 'bbbb'])).toBe(l2.id);
    expect(await link.call('heartbeat', ['ltc', 2, 'junk', null, 'x', 7, 'bbbb'])).toBe(l2.id);
    // Why ranges are not open: the well-formed entries among the first 2 × ranges + 16 kept (messages cut).
    const unopened = [[2, 'x'.repeat(5000), 1500], [1, 42, 1], 'junk', [0, 'bad id', 1], [2, 'late', -5], ...Array.from({ length: 30 }, () => [1, 'again', 1])];
    await link.call('heartbeat', ['ltc', 2, [], [2], l2.id, [], 'bbbb', [], null, unopened]);
    const ltc2 = (await link.call<{ members: Array<{ role: string; id: number; unopened: Array<{ range: number; error: string; forMs: number }> }> }>('status', [])).members.find((m) => m.role === 'ltc' && m.id === 2)!;
    expect(ltc2.unopened).toEqual([{ range: 2, error: 'x'.repeat(400), forMs: 1500 }, ...Array.from({ length: 15 }, () => ({ range: 1, error: 'again', forMs: 1 }))]);
    await expect(link.call('register', ['ltc', 3, 'a', 1, '', 'x'.repeat(65)])).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    // Bogus registrations are refused before they reach the configuration every client fetches.
    const before = (await link.call<ClusterConfig>('config', [])).id;
    for (const bad of [['stoc', 9, 'x'.repeat(4097), 1, ''], ['stoc', 9, '', 1, ''], ['stoc', 9, 'a', -1, ''], ['stoc', 9, 'a', Number.NaN, ''], ['stoc', 9, 'a', 1, 'h'.repeat(256)]]) {
      await expect(link.call('register', bad)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/address \(1 to 4096 characters\)/) });
    }
    await expect(link.call('register', ['stoc', 1_000_001, 'a', 1, ''])).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/id \(1 to 1000000\)/) });
    await expect(link.call('register', ['ltc', 9, 'no port', 1, ''])).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/is not HOST:PORT/) });
    await expect(link.call('register', ['ltc', 9, '127.0.0.1:70000', 1, ''])).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/is not HOST:PORT/) });
    await expect(link.call('register', ['stoc', 9, 'not base64!', 1, ''])).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/is not a fabric address in base64/) });
    expect((await link.call<ClusterConfig>('config', [])).id).toBe(before);
    // An LTC that holds no range is removed even when it does not answer; that process may not come back.
    await link.call('register', ['ltc', 3, '127.0.0.1:9', 301, '', 'cccc']);
    await link.call('heartbeat', ['ltc', 3, [], [], 0, [], 'cccc']);
    expect(await link.call('removeLtc', [3])).toMatchObject({ ltc: 3, moves: [], stopped: false });
    await expect(link.call('register', ['ltc', 3, '127.0.0.1:9', 301, '', 'cccc'])).rejects.toMatchObject({ code: 'BUSY', message: expect.stringMatching(/removed from the cluster/) });
    await expect(link.call('heartbeat', ['ltc', 3, [], [], 0, [], 'cccc'])).rejects.toMatchObject({ code: 'BUSY' });
    await link.call('register', ['ltc', 3, '127.0.0.1:9', 302, '', 'dddd']); // a new process may
    await expect(link.call('removeLtc', [9])).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/no LTC 9/) });
    await expect(link.call('heartbeat', ['ltc', 9, []])).rejects.toMatchObject({ code: 'STALE_CONFIG' });
    link.close();
    await c.close();
    c = await Coordinator.start({ dir });
    expect(c.current().ranges.map((r) => [r.ltc, r.epoch])).toEqual([[1, 1], [2, l2.id]]);
    expect(c.current().members).toMatchObject([{ role: 'ltc', id: 2 }, { role: 'ltc', id: 3, incarnation: 'dddd' }, { role: 'stoc', id: 1, address: 'addrC' }]);
    await c.close();
    // A lease shorter than four heartbeats is refused for a new cluster.
    await expect(Coordinator.start({ dir: tempDir(), settings: { ltcLeaseMs: 1000 } })).rejects.toThrow(/--ltc-lease-ms 1000 is too short: a lease must span 4 heartbeats \(2000 ms\)/);
  });
});


describe('the bench schedule', () => {
  it('parses actions in time order and refuses what it cannot do, saying why', async () => {
    const { parseSchedule } = await import('../../bench/ycsb/schedule.js');
    expect(parseSchedule('20s ltc add, 40s stoc add, 60s rebalance, 80s ltc remove, 85.5s ltc kill 2, 90s range move 3 1')).toEqual([
      { atMs: 20_000, name: 'ltc add', args: [] }, { atMs: 40_000, name: 'stoc add', args: [] }, { atMs: 60_000, name: 'rebalance', args: [] },
      { atMs: 80_000, name: 'ltc remove', args: [] }, { atMs: 85_500, name: 'ltc kill', args: [2] }, { atMs: 90_000, name: 'range move', args: [3, 1] },
    ]);
    expect(parseSchedule('')).toEqual([]);
    expect(() => parseSchedule('20 ltc add')).toThrow(/"20 ltc add" is not "<seconds>s <action>"/);
    expect(() => parseSchedule('20s ltc grow')).toThrow(/unknown action "ltc grow": use ltc add/);
    expect(parseSchedule('100s stoc remove, 110s stoc remove 4')).toEqual([{ atMs: 100_000, name: 'stoc remove', args: [] }, { atMs: 110_000, name: 'stoc remove', args: [4] }]);
    expect(() => parseSchedule('20s stoc remove 1 2')).toThrow(/stoc remove takes at most a StoC id/);
    expect(() => parseSchedule('20s range move 3')).toThrow(/range move takes a range and an LTC/);
    expect(() => parseSchedule('20s rebalance 2')).toThrow(/rebalance takes no arguments/);
    expect(() => parseSchedule('20s ltc kill x')).toThrow(/"x" is not an id/);
    expect(() => parseSchedule('40s ltc add, 20s ltc remove')).toThrow(/list them in time order/);
  });
});
