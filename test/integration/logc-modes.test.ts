/**
 * LogC's modes on StoCs: `memory` (logs in StoC memory), `memory+disk`, and `disk`'s appends (replicas, order, holes).
 * StocServers and LTC-side clients on separate fabrics in this process, over shared memory.
 */
import { describe, expect, it } from 'vitest';
import { LogFramer, readLog } from '../../src/log/log-format.js';
import { MemoryDiskLogStore, MemoryLogStore } from '../../src/logc/memory-log-store.js';
import { APPENDS_IN_FLIGHT, ReplicatedLog, StocLogStore } from '../../src/logc/stoc-log-store.js';
import { StocServer } from '../../src/stoc/stoc-server.js';
import { pattern } from '../fixtures/pattern.js';
import { until } from '../helpers/until.js';
import { stocHarness } from '../helpers/stocs.js';

const { servers, tempDir, startServer, config, makePool, connect } = stocHarness('nova-logc-modes-');
const KiB = 1024;
const REGION = 64 * KiB;

/** Records of assorted sizes: small ones, one past a region, one past a client slot (256 KiB). */
function records(n: number, seed: number): Buffer[] {
  const sizes = [10, 1000, 5000, REGION + 123, 40, 300 * KiB, 7, 33 * KiB];
  return Array.from({ length: n }, (_, i) => {
    const b = Buffer.alloc(sizes[i % sizes.length]);
    pattern(b, seed + i);
    return b;
  });
}

function recordsOf(bytes: Buffer | undefined): Buffer[] {
  if (!bytes) throw new Error('no log');
  return readLog(bytes, 'test log').records;
}

function expectRecords(bytes: Buffer | undefined, want: Buffer[]): void {
  const got = recordsOf(bytes);
  expect(got.map((r) => r.length)).toEqual(want.map((r) => r.length));
  expect(got.every((r, i) => r.equals(want[i]))).toBe(true);
}

function fetches(stocs: StocServer[]): number {
  return stocs.reduce((n, s) => n + s.stats().fetches, 0);
}

describe('LogC memory mode', () => {
  it('appends (pipelined) and reads back across region boundaries', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3)];
    const store = new MemoryLogStore(makePool(stocs), 4, 2, { regionBytes: REGION });
    const log = await store.create(5);
    const recs = records(16, 1);
    await Promise.all([log.append(recs.slice(0, 5), false), log.append(recs.slice(5, 6), true), log.append(recs.slice(6), false)]);
    expectRecords(await store.read(5), recs);
    expect(stocs.reduce((n, s) => n + s.stats().memoryFiles, 0)).toBe(2);
    expect(await store.list()).toEqual([5]);
    await log.close();
    expect(await store.read(6)).toEqual(Buffer.alloc(0)); // never made: read as lost, i.e. empty
  });

  it('drops a replica whose StoC closes and carries on with the others', async () => {
    const stocs = [await startServer(1), await startServer(2)];
    const lines: string[] = [];
    const pool = makePool(stocs);
    const store = new MemoryLogStore(pool, 1, 2, { regionBytes: REGION, onLog: (l) => lines.push(l) });
    const log = await store.create(1);
    const recs = records(4, 7);
    await log.append(recs, false);
    await servers.shift()!.close(); // StoC 1
    // Appends carry on (each one acknowledged) until the transport reports the loss.
    const more: Buffer[] = [];
    const end = Date.now() + 8000;
    while (!lines.some((l) => l.includes('dropped replica(s) on StoC 1'))) {
      const r = Buffer.from(`after ${more.length}`);
      more.push(r);
      await log.append([r], false);
      if (Date.now() > end) throw new Error(`no replica dropped: ${lines.join('; ')}`);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await log.append([Buffer.from('last')], false);
    pool.update(config(stocs.slice(1))); // the coordinator's view, so read does not wait on StoC 1
    expectRecords(await store.read(1), [...recs, ...more, Buffer.from('last')]);
    await log.close();
  });

  it('reads the replica with the most records', async () => {
    const stocs = [await startServer(1), await startServer(2)];
    const store = new MemoryLogStore(makePool(stocs), 1, 2, { regionBytes: REGION });
    const log = await store.create(3);
    const recs = records(3, 3);
    for (const r of recs) await log.append([r], false);
    const framer = new LogFramer(0);
    const twoRecords = Buffer.from(framer.frame(recs[0])).length + Buffer.from(framer.frame(recs[1])).length;
    // Cut StoC 1's replica (the first one read) back to two records, as a lost WRITE would.
    const c = await connect(stocs[0]);
    const f = (await c.openMemory('r1-000003.log'))!;
    await f.write(twoRecords, Buffer.alloc(f.length - twoRecords));
    f.close();
    expect(recordsOf(await c.readMemoryAll('r1-000003.log'))).toHaveLength(2);
    expectRecords(await store.read(3), recs);
    await store.remove(3);
    await until(() => stocs.every((s) => s.stats().memoryBytes === 0));
    expect(await store.list()).toEqual([]);
  });

  it('places a log on other StoCs when one is out of memory', async () => {
    const stocs = [await startServer(1, { memoryBytes: REGION }), await startServer(2), await startServer(3)];
    const c = await connect(stocs[0]);
    await c.createMemory('hog', REGION);
    const store = new MemoryLogStore(makePool(stocs), 1, 2, { regionBytes: REGION });
    for (let i = 0; i < 4; i++) await store.create(i); // whichever two are sampled, two can take it
    expect(stocs[1].stats().memoryFiles + stocs[2].stats().memoryFiles).toBe(8);
  });
});

describe('LogC memory+disk mode', () => {
  it('recovers from memory when it is whole, and from disk after the StoCs restart', async () => {
    const dirA = tempDir();
    const dirB = tempDir();
    let stocs = [await startServer(1, {}, dirA), await startServer(2, {}, dirB)];
    const lines: string[] = [];
    let pool = makePool(stocs);
    const store = new MemoryDiskLogStore(pool, 1, 2, { regionBytes: REGION, onLog: (l) => lines.push(l) });
    const log = await store.create(8);
    const recs = records(10, 5);
    await log.append(recs.slice(0, 4), true);
    await log.append(recs.slice(4), false);
    const before = fetches(stocs);
    expectRecords(await store.read(8), recs);
    expect(fetches(stocs)).toBe(before); // from memory: no disk read
    await log.close();

    // Every StoC restarts on its directory: the memory replicas are gone, the disk ones are not.
    for (const s of servers.splice(0)) await s.close();
    stocs = [await startServer(1, {}, dirA), await startServer(2, {}, dirB)];
    pool.update(config(stocs));
    expectRecords(await store.read(8), recs);
    expect(fetches(stocs)).toBeGreaterThan(0);
    expect(await store.list()).toEqual([8]);

    // The memory mode alone has lost that log, and says so.
    pool = makePool(stocs);
    const memoryOnly = new MemoryLogStore(pool, 1, 2, { onLog: (l) => lines.push(l) });
    expect(await memoryOnly.read(8)).toEqual(Buffer.alloc(0));
    expect(lines.some((l) => l.includes('r1-000008.log') && l.includes('lost'))).toBe(true);
  });

  it('reads the disk when the memory replicas fell behind', async () => {
    const stocs = [await startServer(1), await startServer(2)];
    const store = new MemoryDiskLogStore(makePool(stocs), 1, 2, { regionBytes: REGION });
    const log = await store.create(2);
    const recs = records(3, 11);
    await log.append(recs, false);
    await log.close();
    // Both memory replicas lose their last record, as if their WRITEs had failed.
    const framer = new LogFramer(0);
    const twoRecords = Buffer.from(framer.frame(recs[0])).length + Buffer.from(framer.frame(recs[1])).length;
    for (const s of stocs) {
      const f = (await (await connect(s)).openMemory('r1-000002.log'))!;
      await f.write(twoRecords, Buffer.alloc(f.length - twoRecords));
      f.close();
    }
    const before = fetches(stocs);
    expectRecords(await store.read(2), recs);
    expect(fetches(stocs)).toBeGreaterThan(before);
  });
});

describe('LogC disk mode', () => {
  it('overlaps up to APPENDS_IN_FLIGHT appends and joins the rest into the next, in call order', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3)];
    const store = new StocLogStore(makePool(stocs), 9, 3);
    const log = await store.create(1);
    // Writes reach a StoC as direct writes (its progress thread), or as persists if it lacked them.
    const persists = (): number => stocs.reduce((n, s) => n + s.stats().persists + s.stats().directWrites, 0);
    const before = persists();
    const recs = Array.from({ length: 40 }, (_, i) => Buffer.from(`record ${i} `.repeat(i + 1)));
    const order: number[] = [];
    await Promise.all(recs.map((r, i) => log.append([r], i % 7 === 0).then(() => order.push(i))));
    await (log as ReplicatedLog).drained(); // acknowledged by two of three: wait for the third too
    // The first APPENDS_IN_FLIGHT go at once, alone; the rest, made meanwhile, leave as one.
    expect(persists() - before).toBe((APPENDS_IN_FLIGHT + 1) * 3);
    expect(order).toEqual(recs.map((_, i) => i)); // acknowledged in call order
    for (const s of stocs) expectRecords(await (await connect(s)).readAll('r9-000001.log'), recs);
    expectRecords(await store.read(1), recs);
    // Removed once every replica answered; remove() itself never waits on a slow one.
    await log.append([Buffer.from('last')], false);
    await store.remove(1);
    const clients = await Promise.all(stocs.map((s) => connect(s)));
    const present = async () => (await Promise.all(clients.map((c) => c.size('r9-000001.log')))).filter((n) => n !== undefined).length;
    const end = Date.now() + 5000;
    while (await present() > 0) {
      if (Date.now() > end) throw new Error('the removed log is still on a StoC');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  });

  it('will not choose a log while more StoCs are silent than R minus a majority (they may hold its last writes)', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3)];
    const store = new StocLogStore(makePool(stocs), 9, 3); // strictUntil 0: no wait for every StoC
    const log = await store.create(3);
    await log.append([Buffer.from('acknowledged')], false);
    await log.close();
    await servers.splice(servers.indexOf(stocs[0]), 1)[0].close();
    expectRecords(await store.read(3), [Buffer.from('acknowledged')]); // one of three silent: chosen
    await servers.splice(servers.indexOf(stocs[1]), 1)[0].close();
    await expect(store.read(3)).rejects.toMatchObject({ code: 'UNAVAILABLE', message: expect.stringContaining('waiting') });
  });

  it('recovers the longest whole prefix when replicas hold holes left by appends in flight', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3)];
    const lines: string[] = [];
    const store = new StocLogStore(makePool(stocs), 9, 3, (l) => lines.push(l));
    const recs = records(6, 11);
    const framer = new LogFramer(0);
    const framed = recs.map((r) => Buffer.from(framer.frame(r)));
    const ends = framed.map((_, i) => framed.slice(0, i + 1).reduce((n, b) => n + b.length, 0));
    const whole = Buffer.concat(framed);
    // Each replica lost a different append in flight: StoC 1 record 3, StoC 2 record 1; StoC 3
    // had not received the last two. A hole is zeros, as an append the StoC reserved but never got.
    const holed = (from: number, to: number): Buffer => Buffer.concat([whole.subarray(0, from), Buffer.alloc(to - from), whole.subarray(to)]);
    const copies = [holed(ends[2], ends[3]), holed(ends[0], ends[1]), whole.subarray(0, ends[3])];
    for (const [i, s] of stocs.entries()) await (await connect(s)).write('r9-000002.log', 0, copies[i], true);
    expect(() => readLog(copies[0], 'replica 1')).toThrow(/CORRUPTION|zeroed|checksum/);
    // StoC 3's four whole records beat StoC 1's three before its hole.
    expectRecords(await store.read(2), recs.slice(0, 4));
    expect(lines).toEqual([]);
    // Without StoC 3's replica, StoC 1's three records are kept and the hole is logged.
    await (await connect(stocs[2])).remove('r9-000002.log');
    expectRecords(await store.read(2), recs.slice(0, 3));
    expect(lines.join('\n')).toMatch(new RegExp(`r9-000002\\.log: .* at offset ${ends[2]} .*kept the 3 records`));
  });
});

