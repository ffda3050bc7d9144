/**
 * Removing StoCs from a running cluster, with real processes (doc/decisions/stoc-removal.md):
 * a drain under a verified workload copies every table, log and MANIFEST off the StoC before it
 * stops, so nothing is lost once it is gone; `--dead` for a StoC gone for good lets recovery go
 * on without it and names the tables that had no other copy; refusals say why.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { addComponent, componentDir, fetchStatus, isRunning, readClusterFile, removeStocFrom } from '../../src/control/cluster-control.js';
import { BIN, key, missing, startCluster, verifiedWorkload, writeKeys, type TestCluster } from '../helpers/cluster.js';
import { until } from '../helpers/until.js';

let cluster: TestCluster | undefined;
afterEach(async () => {
  await cluster?.destroy();
  cluster = undefined;
});

/** Small memtables and L0, so that the ranges have tables in several levels on every StoC. */
const SMALL = ['--memtable-bytes', String(64 * 1024), '--l0-trigger', '2', '--ranges', '2', '--bench-records', '4000'];

const tablesOn = (dir: string, stoc: number): string[] => readdirSync(componentDir(dir, 'stoc', stoc)).filter((f) => f.endsWith('.sst'));

/** Which of `ids` holds the most tables (placement may leave any one StoC with none after a compaction). */
function mostTables(dir: string, ids: number[]): number {
  const counts = ids.map((id) => ({ id, n: tablesOn(dir, id).length }));
  return counts.reduce((a, b) => (b.n > a.n ? b : a)).id;
}

describe('StoC removal', () => {
  it('a StoC drained under a verified workload: its files move off it, it stops, and with it gone nothing is lost', async () => {
    cluster = await startCluster({ ltcs: 2, stocs: 4, args: SMALL });
    const dir = cluster.dir;
    const coordinator = readClusterFile(dir)!.coordinator;
    const c = cluster.client;
    const before = await writeKeys(c, 0, 3000, 16);
    await c.compact(); // tables in deeper levels, copied one by one
    const load = verifiedWorkload(c, 3000, before, Array.from({ length: 20 }, (_, i) => `over-${i}`));
    await until(() => tablesOn(dir, 2).length > 0, 30_000);
    // An LTC that died and whose ranges failed over has nothing to take off the StoC: the drain goes on without it.
    await cluster.kill('ltc', 2);
    await until(async () => (await fetchStatus(coordinator)).config.ranges.every((r) => r.ltc === 1), 30_000);
    await new Promise((r) => setTimeout(r, 1500)); // writes go on again before the drain
    const pid = readClusterFile(dir)!.components.find((x) => x.role === 'stoc' && x.id === 2)!.pid;

    const r = await removeStocFrom(dir, coordinator, 2, false);
    expect(r).toMatchObject({ stoc: 2, dead: false, silent: [] });
    expect(r.ltcs).toHaveLength(1);
    expect(r.ltcs[0].lost).toEqual([]);
    expect(r.ltcs[0].tablesCopied + r.ltcs[0].l0Merged).toBeGreaterThan(0);
    // It stopped on its own, left cluster.json and the configuration, and its id is not used again.
    expect(isRunning(pid, componentDir(dir, 'stoc', 2))).toBe(false);
    expect(readClusterFile(dir)!.components.filter((x) => x.role === 'stoc').map((x) => x.id)).toEqual([1, 3, 4]);
    const s = await fetchStatus(coordinator);
    expect(s.config.members.filter((m) => m.role === 'stoc').map((m) => m.id)).toEqual([1, 3, 4]);
    expect(s.config.removedStocs).toEqual([2]);
    // Every table, log and MANIFEST of the ranges left it: what was copied away, and what was released meanwhile.
    expect(readdirSync(componentDir(dir, 'stoc', 2)).filter((f) => /^r\d+-/.test(f))).toEqual([]);

    const check = await load.finish();
    expect(check).toMatchObject({ lost: [], stale: [] });
    expect(check.written).toBeGreaterThan(100); // writes went on around the failover and through the drain
    // The LTC restarted without StoC 2 opens every range and reads every key. (nova up, asked
    // for 4 StoCs, starts a new one: with a new id.)
    await cluster.kill('ltc', 1);
    await cluster.up();
    expect(await missing(c, before)).toEqual([]);
    expect(readClusterFile(dir)!.components.filter((x) => x.role === 'stoc').map((x) => x.id)).toEqual([1, 3, 4, 5]);
    const six = await addComponent({ dir, host: '127.0.0.1', bin: BIN, timeoutMs: 60_000 }, 'stoc');
    expect(six.id).toBe(6);
  }, 240_000);

  it('--dead: a StoC gone for good leaves at once, ranges open without it, and the tables only it held are named', async () => {
    cluster = await startCluster({ ltcs: 1, stocs: 3, args: [...SMALL, '--table-replicas', '1'] });
    const dir = cluster.dir;
    const coordinator = readClusterFile(dir)!.coordinator;
    const c = cluster.client;
    const acked = await writeKeys(c, 0, 3000, 16);
    await c.compact();
    await until(() => tablesOn(dir, 3).length > 0, 30_000);
    await cluster.kill('stoc', 3);
    await until(async () => !(await fetchStatus(coordinator)).members.find((m) => m.role === 'stoc' && m.id === 3)!.alive, 10_000);
    const later = await writeKeys(c, 5000, 5300, 16); // with StoC 3 dead: on the others only
    const cli = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args, '--dir', dir], { encoding: 'utf8', timeout: 120_000 });

    // A drain needs the StoC; --dead needs it gone; an unknown one is refused.
    const drain = cli('stoc', 'remove', '3');
    expect(drain.status).not.toBe(0);
    expect(drain.stderr).toContain('StoC 3 is down: draining it copies what it holds');
    expect(cli('stoc', 'remove', '1', '--dead').stderr).toContain('StoC 1 is alive: drain it');
    expect(cli('stoc', 'remove', '9').stderr).toContain('there is no StoC 9');

    const dead = cli('stoc', 'remove', '3', '--dead', '--json');
    const report = JSON.parse(dead.stdout) as { ltcs: Array<{ lost: string[] }> };
    const lost = report.ltcs.flatMap((l) => l.lost);
    expect(lost.length).toBeGreaterThan(0); // ρ = 1, no table replicas: what was on StoC 3 is gone
    for (const t of lost) expect(t).toMatch(/^range \d+: table \d+ of level \d+ \(\d+ entries, \d+ bytes, user keys "user\d+" to "user\d+"\)$/);
    expect(dead.status).toBe(1);
    expect((await fetchStatus(coordinator)).config.removedStocs).toEqual([3]);

    // The ranges serve without it, and reopen without waiting for it.
    await c.put(key(9999), Buffer.from('after'));
    await cluster.kill('ltc', 1);
    await cluster.up();
    expect((await c.get(key(9999)))?.toString()).toBe('after');
    const gone = await missing(c, acked);
    expect(gone.length).toBeGreaterThan(0);
    // Only keys of the tables named lost are gone (which tables had a fragment there is placement's choice).
    const spans = lost.map((t) => /user keys "(user\d+)" to "(user\d+)"/.exec(t)!).map((m) => [m[1], m[2]]);
    const inLost = (i: number): boolean => spans.some(([a, b]) => key(i).toString() >= a && key(i).toString() <= b);
    expect(gone.filter((i) => !inLost(i))).toEqual([]);
    expect(await missing(c, later)).toEqual([]);
    expect(tablesOn(dir, 1).length + tablesOn(dir, 2).length).toBeGreaterThan(0);
  }, 240_000);

  /**
   * A StoC killed and its directory deleted under a verified workload, then removed as dead:
   * no read fails meanwhile, nothing is lost, every table is whole again, and a reopen reads all.
   */
  async function loseStoc(stocs: number, args: string[], victimOf: (dir: string) => number, layout?: (dir: string) => void): Promise<void> {
    // A small LTC memory, so reads fetch blocks from the StoCs rather than from tables held whole.
    cluster = await startCluster({ ltcs: 1, stocs, args: [...SMALL, ...args, '--ltc-memory', String(16 * 2 ** 20)] });
    const dir = cluster.dir;
    const coordinator = readClusterFile(dir)!.coordinator;
    const c = cluster.client;
    const before = await writeKeys(c, 0, 3000, 16);
    await c.compact();
    layout?.(dir);
    const victim = victimOf(dir);
    await until(() => tablesOn(dir, victim).length > 0, 30_000);
    const load = verifiedWorkload(c, 3000, before, Array.from({ length: 20 }, (_, i) => `over-${i}`));
    await new Promise((r) => setTimeout(r, 500));
    await cluster.kill('stoc', victim);
    rmSync(componentDir(dir, 'stoc', victim), { recursive: true, force: true });
    await until(async () => !(await fetchStatus(coordinator)).members.find((m) => m.role === 'stoc' && m.id === victim)!.alive, 10_000);
    expect(await missing(c, before)).toEqual([]); // read from the other copies, or rebuilt from parity

    const dead = spawnSync(process.execPath, [BIN, 'stoc', 'remove', String(victim), '--dead', '--json', '--dir', dir], { encoding: 'utf8', timeout: 120_000 });
    expect(dead.stderr).toBe('');
    expect(dead.status).toBe(0);
    const report = JSON.parse(dead.stdout) as { ltcs: Array<{ lost: string[]; tablesCopied: number; l0Merged: number }> };
    expect(report.ltcs.flatMap((l) => l.lost)).toEqual([]);
    expect(report.ltcs.reduce((n, l) => n + l.tablesCopied + l.l0Merged, 0)).toBeGreaterThan(0);

    const check = await load.finish();
    expect(check).toMatchObject({ lost: [], stale: [] });
    expect(check.written).toBeGreaterThan(100);
    // Every table whole again on the StoCs left (files the LTC deleted while a StoC was briefly
    // shunned may linger there until the range's next open: orphans, not copies).
    const stats = (await c.stats()) as Array<{ tablesToRepair: number }>;
    expect(stats.map((r) => r.tablesToRepair)).toEqual(stats.map(() => 0));
    // Reopened from the MANIFEST alone, every range reads every key.
    await cluster.kill('ltc', 1);
    await cluster.up();
    expect(await missing(c, before)).toEqual([]);
  }

  it('two copies of each table (the default): a StoC killed and its directory deleted under a verified workload loses nothing; no read fails; --dead stores its copies again', async () => {
    await loseStoc(3, [], () => 3);
  }, 240_000);

  it('parity (ρ = 2): a StoC killed and its directory deleted under a verified workload loses nothing; data is rebuilt from parity for reads, then stored again', async () => {
    const ids = [1, 2, 3, 4, 5, 6];
    await loseStoc(6, ['--scatter', '2', '--parity'], (dir) => mostTables(dir, ids), (dir) => {
      // Each table on five StoCs: two data fragments, two copies of its metadata, its parity (copies would take six).
      const holders = new Map<string, number>();
      for (const s of ids) for (const f of tablesOn(dir, s)) holders.set(f, (holders.get(f) ?? 0) + 1);
      expect(holders.size).toBeGreaterThan(0);
      expect([...holders.values()].every((n) => n === 5)).toBe(true);
    });
  }, 240_000);

  it('a StoC silent for --stoc-dead-ms is removed as dead on its own, and its copies are stored again', async () => {
    cluster = await startCluster({ ltcs: 1, stocs: 3, args: [...SMALL, '--stoc-dead-ms', '3000'] });
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    const c = cluster.client;
    const acked = await writeKeys(c, 0, 2000, 16);
    await c.compact();
    const victim = mostTables(cluster.dir, [1, 2, 3]);
    expect(tablesOn(cluster.dir, victim).length).toBeGreaterThan(0);
    await cluster.kill('stoc', victim);
    await until(async () => ((await fetchStatus(coordinator)).config.removedStocs ?? []).includes(victim), 30_000);
    await until(async () => ((await c.stats()) as Array<{ tablesToRepair: number }>).every((r) => r.tablesToRepair === 0), 30_000);
    expect(await missing(c, acked)).toEqual([]);
  }, 120_000);
});
