/**
 * LogC on StoCs — in-memory files and the `memory` and `memory+disk` modes, `disk` mode's
 * append joining, and MANIFESTs on StoCs: StocServers and an LTC-side StocPool on separate
 * fabrics in this process, over shared memory.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_SETTINGS, type ClusterConfig } from '../../src/cluster/config.js';
import { LogFramer, readLog } from '../../src/log/log-format.js';
import { MemoryDiskLogStore, MemoryLogStore } from '../../src/logc/memory-log-store.js';
import { APPENDS_IN_FLIGHT, ReplicatedLog, StocLogStore } from '../../src/logc/stoc-log-store.js';
import { StocManifestStore } from '../../src/logc/stoc-manifest-store.js';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv } from '../../src/ltc/local-store.js';
import { LocalManifestStore } from '../../src/ltc/local-store.js';
import { StocBlockStore } from '../../src/ltc/stoc-block-store.js';
import { table } from '../fixtures/tables.js';
import { StocPool } from '../../src/stoc/stoc-pool.js';
import { StocClient } from '../../src/stoc/stoc-client.js';
import { StocServer, type StocServerOptions } from '../../src/stoc/stoc-server.js';
import { Fabric } from '../../src/transport/fabric.js';
import { Rpc } from '../../src/transport/rpc.js';
import { pattern } from '../fixtures/pattern.js';
import { useTls } from '../helpers/peer-process.js';
import { until } from '../helpers/until.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const REGION = 64 * KiB;

const dirs: string[] = [];
const servers: StocServer[] = [];
const fabrics: Fabric[] = [];
const pools: StocPool[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'nova-memlog-'));
  dirs.push(d);
  return d;
}

async function startServer(id: number, extra: Partial<StocServerOptions> = {}, dir = tempDir()): Promise<StocServer> {
  useTls('sm');
  const s = await StocServer.start({ dir, id, bufferBytes: 8 * MiB, windowBytes: 2 * MiB, memoryGraceMs: 50, ...extra });
  servers.push(s);
  return s;
}

function openFabric(): { fabric: Fabric; rpc: Rpc } {
  useTls('sm');
  const fabric = Fabric.open();
  fabrics.push(fabric);
  return { fabric, rpc: new Rpc(fabric) };
}

function config(stocs: StocServer[]): ClusterConfig {
  return {
    id: 1, ranges: [], settings: DEFAULT_SETTINGS,
    members: stocs.map((s) => ({ role: 'stoc' as const, id: s.id, address: s.address.toString('base64'), pid: 0, host: 'local' })),
  };
}

function makePool(stocs: StocServer[]): StocPool {
  const { fabric, rpc } = openFabric();
  const pool = new StocPool(fabric, rpc);
  pool.update(config(stocs));
  pools.push(pool);
  return pool;
}

async function connect(s: StocServer): Promise<StocClient> {
  const { fabric, rpc } = openFabric();
  return StocClient.connect(fabric, rpc, s.address);
}

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

/** The log's records are `want` (compared with Buffer.equals: a deep toEqual of MiBs takes seconds). */
function expectRecords(bytes: Buffer | undefined, want: Buffer[]): void {
  const got = recordsOf(bytes);
  expect(got.map((r) => r.length)).toEqual(want.map((r) => r.length));
  expect(got.every((r, i) => r.equals(want[i]))).toBe(true);
}

function fetches(stocs: StocServer[]): number {
  return stocs.reduce((n, s) => n + s.stats().fetches, 0);
}

afterEach(async () => {
  for (const p of pools.splice(0)) p.close();
  for (const f of fabrics.splice(0)) await f.close();
  for (const s of servers.splice(0)) await s.close();
});
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('StoC in-memory files', () => {
  it('round-trip across regions; extend is idempotent; list and remove', async () => {
    const s = await startServer(1);
    const c = await connect(s);
    const f = await c.createMemory('m.log', REGION);
    expect(f.length).toBe(REGION);
    const data = Buffer.alloc(3 * REGION + 5);
    pattern(data, 9);
    await f.write(100, data);
    expect(f.length).toBe(4 * REGION);
    expect(s.stats()).toMatchObject({ memoryFiles: 1, memoryRegions: 4, memoryBytes: 4 * REGION });
    const again = (await c.openMemory('m.log'))!;
    expect(again.length).toBe(4 * REGION);
    const back = await again.read(0, again.length);
    expect(back.subarray(100, 100 + data.length).equals(data)).toBe(true);
    expect(back.subarray(0, 100).every((b) => b === 0)).toBe(true);
    expect(back.subarray(100 + data.length).every((b) => b === 0)).toBe(true);
    expect(await c.listMemory('m')).toEqual([{ name: 'm.log', size: 4 * REGION }]);
    expect(await c.list('m')).toEqual([]); // a namespace apart from disk files
    await expect(again.read(0, again.length + 1)).rejects.toMatchObject({ code: 'CORRUPTION' });
    again.close();
    f.close();
    await c.removeMemory('m.log');
    expect(await c.openMemory('m.log')).toBeUndefined();
    expect(await c.readMemoryAll('m.log')).toBeUndefined();
    await until(() => s.stats().memoryBytes === 0); // after the grace period
    await c.removeMemory('m.log'); // a missing file is not an error
  });

  it('refuses memory beyond its limit with BUSY', async () => {
    const s = await startServer(1, { memoryBytes: 3 * REGION });
    const c = await connect(s);
    const a = await c.createMemory('a', REGION);
    await c.createMemory('b', REGION);
    await a.write(0, Buffer.alloc(REGION + 1, 1)); // a takes its second region: the limit
    await expect(c.createMemory('c', REGION)).rejects.toMatchObject({ code: 'BUSY', message: expect.stringContaining('memory limit') });
    await expect(a.write(2 * REGION, Buffer.from('x'))).rejects.toMatchObject({ code: 'BUSY' });
    await expect(c.createMemory('tiny', 100)).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    a.close();
    await c.removeMemory('a');
    await until(() => s.stats().memoryBytes === REGION);
    await c.createMemory('c', REGION);
  });
});

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
    const clients = await Promise.all(stocs.map(connect));
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

describe('MANIFESTs on StoCs', () => {
  const key = (i: number): Buffer => Buffer.from(`k${String(i).padStart(5, '0')}`);
  const value = (i: number): Buffer => Buffer.from(`v${i}`.padEnd(200, '.'));

  it('moves a MANIFEST from the LTC directory to the StoCs, and reopens from them alone', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3)];
    const pool = makePool(stocs);
    const dir = tempDir();
    const options = { memtableBytes: 16 * KiB, sync: false, mergeInWorker: false };
    let db = await Engine.open(dir, options); // the old way: MANIFEST and CURRENT in dir
    for (let i = 0; i < 500; i++) await db.put(key(i), value(i));
    await db.close();
    const onStocs = () => ({ ...localEnv(dir), manifests: new StocManifestStore(pool, 4, 3, () => undefined, new LocalManifestStore(dir)) });
    db = await Engine.open(dir, { ...options, env: onStocs() });
    for (let i = 0; i < 500; i++) expect((await db.get(key(i)))?.equals(value(i))).toBe(true);
    for (let i = 500; i < 700; i++) await db.put(key(i), value(i));
    await db.close();
    expect(readdirSync(dir).filter((n) => /^MANIFEST|^CURRENT/.test(n))).toEqual([]);
    const manifests = await Promise.all(stocs.map(async (s) => (await (await connect(s)).list('r4-')).map((f) => f.name).filter((n) => n.endsWith('.manifest'))));
    expect(manifests.map((m) => m.length)).toEqual([1, 1, 1]); // one live MANIFEST, 3 replicas
    db = await Engine.open(dir, { ...options, env: onStocs() });
    for (let i = 0; i < 700; i++) expect((await db.get(key(i)))?.equals(value(i))).toBe(true);
    await db.close();
  });

  it('takes the newest MANIFEST whose first edit is whole; refuses to start empty while tables exist or a StoC is silent', async () => {
    const stocs = [await startServer(1), await startServer(2)];
    const pool = makePool(stocs);
    const store = new StocManifestStore(pool, 5, 2, () => undefined);
    expect(await store.readCurrent()).toBeUndefined(); // a new range: every StoC says so
    const c = await connect(stocs[0]);
    // A first open that died before its first edit was whole leaves a MANIFEST of no record:
    // the range is still new (else it could never open again).
    await c.write('r5-000001.manifest', 0, Buffer.from([9, 9]), true);
    expect(await store.readCurrent()).toBeUndefined();
    const old = await store.create(10);
    await old.append([Buffer.from('edit one'), Buffer.from('edit two')], true);
    await store.install(10);
    // An open that died writing its first edit leaves a newer MANIFEST without one.
    await c.write('r5-000020.manifest', 0, Buffer.from([1, 2, 3]), true);
    const current = await store.readCurrent();
    expect(current?.name).toContain('r5-000010.manifest');
    expect(recordsOf(current!.bytes).map((r) => r.toString())).toEqual(['edit one', 'edit two']);
    // The next open reuses number 20: it starts from an empty file, not after those bytes.
    const next = await store.create(20);
    await next.append([Buffer.from('the whole tree')], true);
    expect(recordsOf((await store.readCurrent())!.bytes).map((r) => r.toString())).toEqual(['the whole tree']);
    await store.install(20);
    // Tables but no MANIFEST: not opened empty.
    await store.install(99); // removes every MANIFEST but (absent) 99
    await c.write('r5-000030.sst', 0, Buffer.from('a table'), true);
    await expect(store.readCurrent()).rejects.toMatchObject({ code: 'UNAVAILABLE', message: expect.stringContaining('not opening it empty') });
    await c.remove('r5-000030.sst');
    await servers.pop()!.close(); // StoC 2 goes silent
    await expect(store.readCurrent()).rejects.toMatchObject({ code: 'UNAVAILABLE', message: expect.stringContaining('did not answer') });
  });

  it('moves the MANIFEST to a new file on live StoCs when a StoC holding a replica dies', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3), await startServer(4)];
    const pool = makePool(stocs);
    const dir = tempDir();
    const warnings: string[] = [];
    const options = { memtableBytes: 16 * KiB, sync: false, mergeInWorker: false, onWarning: (w: string) => warnings.push(w) };
    const env = () => ({ ...localEnv(dir), manifests: new StocManifestStore(pool, 6, 3, () => undefined) });
    const manifestsOn = async (s: StocServer) => (await (await connect(s)).list('r6-')).map((f) => f.name).filter((n) => n.endsWith('.manifest'));
    let db = await Engine.open(dir, { ...options, env: env() });
    for (let i = 0; i < 300; i++) await db.put(key(i), value(i));
    await db.flush();
    const holders: StocServer[] = [];
    for (const s of stocs) if ((await manifestsOn(s)).length > 0) holders.push(s);
    expect(holders).toHaveLength(3);
    const first = (await manifestsOn(holders[0]))[0];
    servers.splice(servers.indexOf(holders[0]), 1);
    await holders[0].close(); // a StoC holding a replica dies
    for (let i = 300; i < 600; i++) await db.put(key(i), value(i));
    await db.flush();
    expect(db.stats.manifestRolls).toBe(1);
    expect(warnings.join('\n')).toMatch(/MANIFEST moved to \d+/);
    const live = stocs.filter((s) => s !== holders[0]);
    const now = await Promise.all(live.map(manifestsOn));
    expect(now.map((m) => m.length)).toEqual([1, 1, 1]); // the new one on the three live StoCs, the old one gone
    expect(new Set(now.flat()).size).toBe(1);
    expect(now[0][0] > first).toBe(true);
    await db.close();
    // The other two StoCs of the first MANIFEST die too: the range opens from the new one's last
    // replica (the coordinator no longer lists the dead).
    for (const s of holders.slice(1)) {
      servers.splice(servers.indexOf(s), 1);
      await s.close();
    }
    pool.update(config(stocs.filter((s) => !holders.includes(s))));
    db = await Engine.open(dir, { ...options, env: env() });
    for (let i = 0; i < 600; i++) expect((await db.get(key(i)))?.equals(value(i))).toBe(true);
    await db.close();
  });

  it('keeps its MANIFEST when a new one would have no more replicas (a dead StoC that looks healthy again)', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3)];
    const pool = makePool(stocs);
    const dir = tempDir();
    const warnings: string[] = [];
    const options = { memtableBytes: 16 * KiB, sync: false, mergeInWorker: false, onWarning: (w: string) => warnings.push(w) };
    const db = await Engine.open(dir, { ...options, env: { ...localEnv(dir), manifests: new StocManifestStore(pool, 7, 3, () => undefined) } });
    for (let i = 0; i < 100; i++) await db.put(key(i), value(i));
    const dead = servers.splice(servers.indexOf(stocs[2]), 1)[0];
    await dead.close();
    await db.flush(); // drops the dead replica; it is shunned, so no roll yet
    await new Promise((resolve) => setTimeout(resolve, 2_200)); // the shun ends: it looks healthy
    for (let i = 100; i < 200; i++) await db.put(key(i), value(i));
    await db.flush(); // a new MANIFEST would get only the two live StoCs: not moved
    expect(db.stats.manifestRolls).toBe(0);
    expect(warnings.filter((w) => w.includes('MANIFEST'))).toEqual([]);
    for (let i = 0; i < 200; i++) expect((await db.get(key(i)))?.equals(value(i))).toBe(true);
    await db.close();
  });
});

describe('tables on StoCs', () => {
  it('a table whose StoC is lost while it is written is placed again on StoCs that are up', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3)];
    const pool = makePool(stocs);
    const store = new StocBlockStore(pool, 7, 1, 'round-robin');
    await servers.shift()!.close(); // StoC 1, which round-robin picks first; the pool does not know yet
    const bytes = table(2000, 1, 5);
    const fragments = await store.writeTable(5, bytes);
    expect(fragments.map((f) => f.stoc)).not.toContain(1);
    expect(fragments).toHaveLength(2); // data, and metadata on a StoC of its own
    expect((await store.readTable(5, fragments)).equals(bytes)).toBe(true);
  });
});
