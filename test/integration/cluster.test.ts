/**
 * Nova as a cluster, with real processes started by `nova up`: a coordinator, StoCs and
 * LTCs. Routing across ranges and LTCs, scans across ranges, SIGKILL of an LTC or a StoC
 * under a workload, whole-cluster restarts, and malformed client input.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { join } from 'node:path';
import { Packr } from 'msgpackr';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeFrame } from '../../src/net/frames.js';
import { parseAddress, TcpRpcClient } from '../../src/net/tcp-rpc-client.js';
import { NODE_FLAGS, fetchStatus, readClusterFile } from '../../src/control/cluster-control.js';
import { BIN, key, missing, startCluster, value, writeKeys, type TestCluster } from '../helpers/cluster.js';
import { until } from '../helpers/until.js';

let cluster: TestCluster | undefined;
afterEach(async () => {
  await cluster?.destroy();
  cluster = undefined;
});

/** Small memtables, so that flushes, log switches and compactions happen in a short test. */
const SMALL = ['--memtable-bytes', String(64 * 1024), '--l0-trigger', '2'];

describe('nova cluster', () => {
  it('routes across two LTCs and four ranges; scans continue across ranges; the CLI reaches it', async () => {
    cluster = await startCluster({ ltcs: 2, stocs: 3, args: ['--ranges', '4', '--bench-records', '2000', ...SMALL] });
    // LTCs run with the young generation cluster-control.ts gives them; StoCs with Node's own.
    const cmdline = (pid: number): string[] => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    expect(cmdline(cluster.pid('ltc', 2))).toEqual(expect.arrayContaining(NODE_FLAGS.ltc));
    expect(cmdline(cluster.pid('stoc', 1)).some((a) => a.startsWith('--max-semi-space-size'))).toBe(false);
    const c = cluster.client;
    const acked = await writeKeys(c, 0, 2000, 32);
    expect(acked.size).toBe(2000);
    expect(await missing(c, acked)).toEqual([]);
    const rows = await c.scan(Buffer.alloc(0), { limit: 5000 });
    expect(rows.length).toBe(2000);
    rows.forEach(([k, v], i) => {
      expect(k.equals(key(i))).toBe(true);
      expect(v.equals(value(i))).toBe(true);
    });
    const mid = await c.scan(key(490), { end: key(1510), limit: 5000 });
    expect(mid.map(([k]) => k.toString())).toEqual(Array.from({ length: 1020 }, (_, i) => key(490 + i).toString()));
    await c.delete(key(7));
    expect(await c.get(key(7))).toBeUndefined();
    // A batch is atomic within a range and refused across ranges.
    await c.write(c.batch().put(key(1), Buffer.from('b1')).put(key(2), Buffer.from('b2')));
    expect((await c.get(key(2)))!.toString()).toBe('b2');
    await expect(c.write(c.batch().put(key(1), Buffer.from('x')).put(key(1999), Buffer.from('y')))).rejects.toMatchObject({ code: 'FAILED', reason: 'BAD_ARGUMENT' });

    const status = await fetchStatus(readClusterFile(cluster.dir)!.coordinator);
    const ltcs = status.members.filter((m) => m.role === 'ltc');
    expect(ltcs.map((m) => m.serving.sort())).toEqual([[1, 3], [2, 4]]);
    expect(status.members.filter((m) => m.role === 'stoc' && m.alive).length).toBe(3);

    const cli = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args, '--dir', cluster!.dir], { encoding: 'utf8', timeout: 30_000 });
    expect(cli('put', 'hello', 'world').status).toBe(0);
    const got = cli('get', 'hello');
    expect(got.status).toBe(0);
    expect(got.stdout).toBe('world');
    const absent = cli('get', 'nope');
    expect(absent.status).toBe(1);
    expect(absent.stderr).toContain('not found');
    const st = cli('status', '--json');
    const ranges = JSON.parse(st.stdout).ranges as Array<{ id: number; stats: { range: number; dranges: number; drangeShares: number[]; loadImbalance: number } | null }>;
    expect(ranges).toHaveLength(4);
    // Each range's figures from its LTC: Dranges with their shares, the imbalance.
    for (const r of ranges) expect(r.stats).toMatchObject({ range: r.id, dranges: 1, drangeShares: [expect.any(Number)], loadImbalance: 0 });
    const text = cli('status');
    expect(text.stdout).toMatch(/range 1: .*\n  1 Dranges .*, 0 duplicated, 0 minor and 0 major reorganizations; \d+ flushes.*; memory \d+\.\d MiB of 1024\.0 MiB; its LTC's resident memory \d+\.\d MiB/);
  });

  it('SIGKILL of the LTC during a workload: restarted, it has every acknowledged write', async () => {
    cluster = await startCluster({ args: SMALL });
    const c = cluster.client;
    const first = await writeKeys(c, 0, 1500, 16);
    let stop = false;
    // Writes in flight when the LTC dies are retried by the client until it is back.
    const writing = writeKeys(c, 1500, 1_000_000, 16, () => stop);
    await new Promise((r) => setTimeout(r, 400));
    await cluster.kill('ltc', 1);
    await new Promise((r) => setTimeout(r, 300));
    await cluster.up();
    await new Promise((r) => setTimeout(r, 300));
    stop = true;
    const during = await writing;
    const acked = new Set([...first, ...during]);
    expect(during.size).toBeGreaterThan(100);
    expect(await missing(c, acked)).toEqual([]);
    // And it takes writes again.
    expect((await writeKeys(c, 200_000, 200_100, 8)).size).toBe(100);
  });

  it('SIGKILL of one StoC of three: writes go on (3 log replicas); after an LTC kill nothing is lost; the StoC is used again', async () => {
    cluster = await startCluster({ args: SMALL });
    const c = cluster.client;
    const before = await writeKeys(c, 0, 1000, 16);
    await cluster.kill('stoc', 2);
    const after = await writeKeys(c, 1000, 3000, 16); // must all succeed: two replicas remain
    expect(after.size).toBe(2000);
    await cluster.kill('ltc', 1);
    await cluster.up(); // restarts StoC 2 and the LTC
    expect(await missing(c, [...before, ...after])).toEqual([]);
    // New logs and tables go to StoC 2 again once it is back: keep writing until one does.
    const stocDir = join(cluster.dir, 'stoc-2');
    const filesBefore = new Set(readdirSync(stocDir));
    const fresh = (): string[] => readdirSync(stocDir).filter((f) => !filesBefore.has(f));
    const until = Date.now() + 20_000;
    for (let at = 5000; fresh().length === 0 && Date.now() < until; at += 500) await writeKeys(c, at, at + 500, 16);
    expect(fresh().length).toBeGreaterThan(0);
  });

  it('SIGKILL of one StoC of four: once the LTC knows, no switch takes a log made ahead with a replica there', async () => {
    cluster = await startCluster({ stocs: 4, args: ['--ranges', '4', '--bench-records', '8000', ...SMALL] });
    const c = cluster.client;
    const ltcLog = join(cluster.dir, 'logs', 'ltc-1.log');
    // Each range switches memtables, so each has a log made ahead, on three of the four StoCs.
    const before = await writeKeys(c, 0, 8000, 16);
    await cluster.kill('stoc', 2);
    // A write to each range (none fills a memtable) waits on StoC 2 until the LTC learns it is lost.
    for (const i of [0, 2000, 4000, 6000]) await c.put(key(i), value(i, 1));
    await until(() => /StoC 2: .*was lost/.test(readFileSync(ltcLog, 'utf8')), 30_000);
    await new Promise((r) => setTimeout(r, 2000)); // what waited on it fails at once, and is logged
    const known = readFileSync(ltcLog, 'utf8').length;
    // Logs that lost the replica are renewed and memtables switch: neither may take a log made
    // ahead with a replica on StoC 2, whose first write would lose it again.
    const after = await writeKeys(c, 0, 8000, 16);
    expect(after.size).toBe(8000);
    expect(await missing(c, [...before])).toEqual([]);
    const since = readFileSync(ltcLog, 'utf8').slice(known);
    expect(since).not.toMatch(/log r\d+-\d+\.log: dropped replica\(s\) on StoC 2 /);
  });

  it('a StoC that registers and never comes up blocks no range: no file goes to it, and a restarted LTC opens without it', async () => {
    cluster = await startCluster({ args: SMALL });
    const c = cluster.client;
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    const before = await writeKeys(c, 0, 1000, 16);
    // A well-formed fabric address that nothing serves.
    const link = await TcpRpcClient.connect(coordinator);
    await link.call('register', ['stoc', 9, Buffer.alloc(48, 7).toString('base64'), 999_999, '127.0.0.1', 'feedfeed']);
    link.close();
    expect((await fetchStatus(coordinator)).config.members.find((m) => m.role === 'stoc' && m.id === 9)).toMatchObject({ fresh: true });
    const during = await writeKeys(c, 1000, 2000, 16);
    await cluster.kill('ltc', 1);
    await cluster.up();
    expect(await missing(c, [...before, ...during])).toEqual([]);
    expect((await writeKeys(c, 2000, 2500, 16)).size).toBe(500);
  });

  it('whole-cluster restart: after nova down, and after SIGKILL of every process', async () => {
    cluster = await startCluster({ args: SMALL });
    const c = cluster.client;
    const one = await writeKeys(c, 0, 1500, 16);
    await cluster.down();
    await cluster.up();
    expect(await missing(c, one)).toEqual([]);
    const two = await writeKeys(c, 1500, 3000, 16);
    for (const comp of readClusterFile(cluster.dir)!.components) await cluster.kill(comp.role, comp.id);
    await cluster.up();
    expect(await missing(c, [...one, ...two])).toEqual([]);
  });

  it.each([
    { also: 'the LTC (the client must ask the new coordinator where it went)', killLtc: true },
    { also: 'nothing else (the LTC and the StoCs must find the new coordinator)', killLtc: false },
  ])('a coordinator restarted on another port (its own taken) is followed; killed with it: $also', async ({ killLtc }) => {
    cluster = await startCluster({ args: SMALL });
    const c = cluster.client;
    const one = await writeKeys(c, 0, 500, 16);
    const before = readClusterFile(cluster.dir)!.coordinator;
    await cluster.kill('coordinator', 1);
    if (killLtc) await cluster.kill('ltc', 1);
    // Something else takes the old port, and answers nothing there. Right after the kill the
    // port may not be free yet (the coordinator's connections linger until their peers close
    // them: the very state that makes nova up move a coordinator), so keep trying.
    const squatter = createServer(() => undefined);
    for (let attempt = 1; ; attempt++) {
      const err = await new Promise<Error | undefined>((resolve) => {
        squatter.once('error', resolve);
        squatter.listen(parseAddress(before).port, '127.0.0.1', () => resolve(undefined));
      });
      squatter.removeAllListeners('error');
      if (!err) break;
      if (attempt >= 100) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
    try {
      await cluster.up(); // waits until the components that stayed up have found the new coordinator
      expect(readClusterFile(cluster.dir)!.coordinator).not.toBe(before);
      expect(await missing(c, one)).toEqual([]);
      const two = await writeKeys(c, 500, 1000, 16);
      expect(await missing(c, [...one, ...two])).toEqual([]);
    } finally {
      squatter.close();
    }
  });

  it.each([
    { mode: 'memory+disk', wholeCluster: true },
    { mode: 'memory', wholeCluster: false },
  ])('LogC $mode: SIGKILL of the LTC loses nothing; whole-cluster kill loses nothing: $wholeCluster', async ({ mode, wholeCluster }) => {
    cluster = await startCluster({ args: [...SMALL, '--log-mode', mode] });
    const c = cluster.client;
    const one = await writeKeys(c, 0, 1500, 16);
    await cluster.kill('ltc', 1);
    await cluster.up();
    expect(await missing(c, one)).toEqual([]);
    const two = await writeKeys(c, 1500, 3000, 16);
    await cluster.kill('stoc', 1); // one of three replicas
    const three = await writeKeys(c, 3000, 4000, 16);
    await cluster.up();
    expect(await missing(c, [...one, ...two, ...three])).toEqual([]);
    if (wholeCluster) {
      for (const comp of readClusterFile(cluster.dir)!.components) await cluster.kill(comp.role, comp.id);
      await cluster.up();
      expect(await missing(c, [...one, ...two, ...three])).toEqual([]);
    }
  });

  it('an LTC that lost its directory recovers its range from the StoCs alone (MANIFEST and logs)', async () => {
    cluster = await startCluster({ args: SMALL });
    const c = cluster.client;
    const acked = await writeKeys(c, 0, 3000, 32);
    await cluster.kill('ltc', 1);
    rmSync(join(cluster.dir, 'ltc-1'), { recursive: true, force: true }); // as if on a new machine
    await cluster.up();
    expect(await missing(c, acked)).toEqual([]);
    const more = await writeKeys(c, 3000, 3500, 32);
    expect(await missing(c, more)).toEqual([]);
  });

  it('compactions run on the StoCs; with a small LTC memory budget (blocks cached, the rest read from StoCs) every write is read back, also after an LTC kill', async () => {
    const budget = 256 * 1024;
    cluster = await startCluster({ args: [...SMALL, '--ltc-memory', String(budget)] });
    const c = cluster.client;
    const acked = await writeKeys(c, 0, 5000, 32);
    await c.flush();
    type Stats = { compactions: number; offloadedCompactions: number; compactionsDeclined: number; tablesPerLevel: number[]; blockCacheMisses: number; memoryBudgetBytes: number; memoryBytes: number; ltcRssBytes: number };
    const [stats] = (await c.stats()) as Stats[];
    // Memtables, filters and indexes, and cached blocks stay within the budget (but for a block or two a read has pinned).
    expect(stats.memoryBudgetBytes).toBe(budget);
    expect(stats.memoryBytes).toBeLessThanOrEqual(budget + 16 * 1024);
    expect(stats.ltcRssBytes).toBeGreaterThan(stats.memoryBytes); // the process: Node and the transport besides
    expect(stats.compactions).toBeGreaterThan(1);
    expect(stats.offloadedCompactions).toBe(stats.compactions);
    expect(stats.compactionsDeclined).toBe(0);
    expect(stats.tablesPerLevel.slice(1).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    expect(await missing(c, acked)).toEqual([]);
    const after = ((await c.stats()) as Stats[])[0];
    expect(after.blockCacheMisses).toBeGreaterThan(100); // blocks came from StoCs
    expect(after.memoryBytes).toBeLessThanOrEqual(budget + 16 * 1024);
    const rows = await c.scan(key(0), { limit: 10_000 });
    expect(rows.length).toBe(5000);
    // A manual full compaction (the bench's settle): nothing left above the deepest level.
    await c.compact();
    const levels = ((await c.stats()) as Stats[])[0].tablesPerLevel;
    const bottom = levels.length - 1 - [...levels].reverse().findIndex((n) => n > 0);
    expect(bottom).toBeGreaterThanOrEqual(1);
    expect(bottom).toBeLessThan(levels.length);
    expect(levels.slice(0, bottom).every((n) => n === 0)).toBe(true);
    expect(await missing(c, acked)).toEqual([]);
    await cluster.kill('ltc', 1);
    await cluster.up();
    expect(await missing(c, acked)).toEqual([]);
  });

  it('once writes pause, the LTC merges L0 below its trigger on a StoC (--idle-compaction-ms)', async () => {
    cluster = await startCluster({ args: ['--memtable-bytes', String(64 * 1024), '--l0-trigger', '8', '--idle-compaction-ms', '300'] });
    const c = cluster.client;
    const acked = await writeKeys(c, 0, 3000, 32);
    await c.flush();
    type Stats = { tablesPerLevel: number[]; idleCompactions: number; offloadedCompactions: number; compactions: number };
    const stats = async (): Promise<Stats> => ((await c.stats()) as Stats[])[0];
    const before = await stats();
    expect(before.tablesPerLevel[0]).toBeGreaterThan(0);
    expect(before.tablesPerLevel[0]).toBeLessThan(8);
    for (const deadline = Date.now() + 20_000; (await stats()).tablesPerLevel[0] > 0 && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 50));
    const after = await stats();
    expect(after.tablesPerLevel[0]).toBe(0);
    expect(after.idleCompactions).toBeGreaterThanOrEqual(1);
    expect(after.offloadedCompactions).toBe(after.compactions);
    expect(await missing(c, acked)).toEqual([]);
  });

  it('a scan longer than one LTC page (10,000 rows or 4 MiB) goes on to the next page', async () => {
    cluster = await startCluster({ stocs: 1, args: ['--log-replicas', '1'] });
    const acked = await writeKeys(cluster.client, 0, 10_050, 64);
    expect(acked.size).toBe(10_050);
    const rows = await cluster.client.scan(Buffer.alloc(0), { limit: 20_000 });
    expect(rows.length).toBe(10_050);
    expect(rows[10_049][0].equals(key(10_049))).toBe(true);
    // Pages are cut by bytes too (4 MiB): 70 MiB of values would not fit one 64 MiB frame.
    const big = Buffer.alloc(1024 * 1024, 9);
    for (let i = 0; i < 70; i += 10) {
      await Promise.all(Array.from({ length: 10 }, (_, j) => cluster!.client.put(Buffer.from(`zbig${String(i + j).padStart(2, '0')}`), big)));
    }
    const bigRows = await cluster.client.scan(Buffer.from('zbig'), { limit: 100 });
    expect(bigRows.length).toBe(70);
    expect(bigRows.every(([k, v], i) => k.toString() === `zbig${String(i).padStart(2, '0')}` && v.equals(big))).toBe(true);
  });

  it('malformed client input gets an error or a closed connection; the LTC serves everyone else', async () => {
    cluster = await startCluster({ args: SMALL });
    const c = cluster.client;
    await writeKeys(c, 0, 200, 8);
    const status = await fetchStatus(readClusterFile(cluster.dir)!.coordinator);
    const ltc = status.members.find((m) => m.role === 'ltc')!.address;
    const { host, port } = parseAddress(ltc);
    // Garbage bytes: the LTC closes that connection.
    const closed = await new Promise<boolean>((resolve) => {
      const s = connect({ host, port }, () => s.write(Buffer.from('GET / HTTP/1.1\r\n\r\n'.repeat(4))));
      s.resume(); // the greeting is read, so the close arrives
      s.on('close', () => resolve(true));
      s.on('error', () => undefined);
      setTimeout(() => resolve(false), 5000);
    });
    expect(closed).toBe(true);
    // A frame that is not a batch of requests: closed too.
    const packr = new Packr({ useRecords: false });
    const closed2 = await new Promise<boolean>((resolve) => {
      const s = connect({ host, port }, () => s.write(encodeFrame(packr.pack({ not: 'a batch' }))));
      s.resume();
      s.on('close', () => resolve(true));
      s.on('error', () => undefined);
      setTimeout(() => resolve(false), 5000);
    });
    expect(closed2).toBe(true);
    const id = c.configuration.id;
    // Without the cluster's secret (nova up made one), or with another, the LTC and the coordinator serve nothing.
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    for (const address of [ltc, coordinator]) {
      const stranger = await TcpRpcClient.connect(address, { secret: null });
      await expect(stranger.call('config', [])).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/did not prove it knows the cluster's secret/) });
      stranger.close();
      await expect(TcpRpcClient.connect(address, { secret: Buffer.alloc(32, 7) })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    }
    // Well-framed but wrong requests get errors.
    const raw = await TcpRpcClient.connect(ltc);
    await expect(raw.call('frobnicate', [])).rejects.toMatchObject({ code: 'UNKNOWN_METHOD' });
    await expect(raw.call('get', [id, 'not bytes'])).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    // A config id that is no id (NaN is neither older nor newer than any) is refused, not served as current.
    for (const bogus of [Number.NaN, -1, 1.5]) await expect(raw.call('get', [bogus, key(1)])).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/config id/) });
    await expect(raw.call('put', [id, Buffer.alloc(5000), Buffer.from('v')])).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await expect(raw.call('put', [id, key(1), Buffer.alloc(5 * 1024 * 1024)])).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await expect(raw.call('get', [id - 1, key(1)])).rejects.toMatchObject({ code: 'STALE_CONFIG' });
    await expect(raw.call('write', [id, 'nope'])).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    raw.close();
    // Everyone else is served, and nothing was lost; the LTC logged why it closed connections.
    expect(await missing(c, Array.from({ length: 200 }, (_, i) => i))).toEqual([]);
    const log = readFileSync(join(cluster.dir, 'logs', 'ltc-1.log'), 'utf8');
    expect(log).toMatch(/closing connection: .*bad frame header/);
    expect(log).toMatch(/closing connection: .*not a batch of requests/);
    expect(log).toMatch(/refused .*: its first request \(config\) did not prove it knows the cluster's secret/);
    expect(readFileSync(join(cluster.dir, 'logs', 'coordinator.log'), 'utf8')).toMatch(/refused .*did not prove it knows the cluster's secret/);
    expect(statSync(join(cluster.dir, 'secret')).mode & 0o777).toBe(0o600);
  });
});
