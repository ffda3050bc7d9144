/**
 * Adding and removing components of a running cluster, with real processes and a verified
 * workload through all of it (no acknowledged write lost, no read older than a write
 * acknowledged before it began): `nova ltc add` takes ranges by the rebalancing policy, a new
 * StoC takes new files at once, `nova ltc remove` moves the LTC's ranges away before it stops,
 * and `nova up --ltcs N --stocs M` adds or removes LTCs and StoCs (drained) to reach N and M. The CLI's answers and refusals.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NovaClient } from '../../src/client/nova-client.js';
import { afterEach, describe, expect, it } from 'vitest';
import { addComponent, componentDir, down, fetchStatus, isRunning, readClusterFile, rebalance, removeLtc, up } from '../../src/control/cluster-control.js';
import { BIN, startCluster, verifiedWorkload, writeKeys, type TestCluster } from '../helpers/cluster.js';
import { until } from '../helpers/until.js';

let cluster: TestCluster | undefined;
afterEach(async () => {
  await cluster?.destroy();
  cluster = undefined;
});

const ARGS = ['--memtable-bytes', String(64 * 1024), '--l0-trigger', '2', '--ranges', '4', '--bench-records', '4000'];

describe('elastic cluster', () => {
  it('LTCs and StoCs added and removed under a verified workload: ranges follow the policy, nothing is lost or stale', async () => {
    cluster = await startCluster({ ltcs: 1, stocs: 3, args: ARGS });
    const dir = cluster.dir;
    const coordinator = readClusterFile(dir)!.coordinator;
    const c = cluster.client;
    const load = verifiedWorkload(c, 3000, await writeKeys(c, 0, 3000, 16), Array.from({ length: 20 }, (_, i) => `over-${i}`));
    const on = async (ltc: number): Promise<number[]> => (await fetchStatus(coordinator)).config.ranges.filter((r) => r.ltc === ltc).map((r) => r.id);
    const base = { dir, host: '127.0.0.1', bin: BIN, timeoutMs: 60_000 };

    // A new LTC takes ranges as soon as it has joined.
    const two = await addComponent(base, 'ltc');
    expect(two.id).toBe(2);
    expect((await on(2)).length).toBeGreaterThan(0);
    expect((await on(1)).length).toBeGreaterThan(0);
    // Each LTC's memory is shared by the ranges it has now.
    const budgets = new Map(((await c.stats()) as Array<{ range: number; memoryBudgetBytes: number }>).map((r) => [r.range, r.memoryBudgetBytes]));
    const total = 2048 * 2 ** 20;
    for (const ltc of [1, 2]) for (const r of await on(ltc)) expect(budgets.get(r)).toBe(Math.floor(total / (await on(ltc)).length));
    // Each plan moves a range at most once, between live LTCs.
    for (const m of (await rebalance(coordinator, true)).plan) expect([m.from, m.to].sort()).toEqual([1, 2]);

    // A new StoC takes new files at once: logs and tables of the ranges land on it.
    const four = await addComponent(base, 'stoc');
    expect(four.id).toBe(4);
    await until(() => readdirSync(componentDir(dir, 'stoc', 4)).some((f) => /^r\d+-\d+\.(log|sst)$/.test(f)), 30_000);

    // Removing LTC 2 moves its ranges to LTC 1 first; its process ends and leaves cluster.json.
    const held = await on(2);
    const removed = await removeLtc(dir, coordinator, 2);
    expect(removed).toMatchObject({ ltc: 2, stopped: true });
    expect(removed.moves.map((m) => m.range).sort()).toEqual(held.sort());
    expect(await on(1)).toHaveLength(4);
    expect(isRunning(two.pid, componentDir(dir, 'ltc', 2))).toBe(false);
    expect(readClusterFile(dir)!.components.filter((x) => x.role === 'ltc').map((x) => x.id)).toEqual([1]);
    expect((await fetchStatus(coordinator)).members.some((m) => m.role === 'ltc' && m.id === 2)).toBe(false);

    // nova up --ltcs 3 adds two; --ltcs 2 removes the newest, whose ranges go to the others.
    await up({ ...base, ltcs: 3, coordinatorArgs: [] });
    await until(async () => (await fetchStatus(coordinator)).joining.length === 0 && !(await fetchStatus(coordinator)).reshaping, 30_000);
    expect((await on(2)).length + (await on(3)).length).toBeGreaterThan(0);
    await up({ ...base, ltcs: 2, coordinatorArgs: [] });
    expect(await on(3)).toEqual([]);
    expect(readClusterFile(dir)!.components.filter((x) => x.role === 'ltc').map((x) => x.id)).toEqual([1, 2]);
    // nova up --stocs 3 drains the newest StoC and removes it.
    await up({ ...base, stocs: 3, coordinatorArgs: [] });
    expect(readClusterFile(dir)!.components.filter((x) => x.role === 'stoc').map((x) => x.id)).toEqual([1, 2, 3]);
    expect((await fetchStatus(coordinator)).config.removedStocs).toEqual([4]);

    const check = await load.finish();
    expect(check).toMatchObject({ lost: [], stale: [] });
    expect(check.written).toBeGreaterThan(100); // writes went on (how many depends on the machine's load)
  }, 240_000);

  it('the CLI adds, rebalances and removes, and refuses what it cannot do with a reason', async () => {
    cluster = await startCluster({ ltcs: 1, stocs: 3, args: ARGS });
    const cli = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args, '--dir', cluster!.dir], { encoding: 'utf8', timeout: 90_000 });
    const only = cli('ltc', 'remove', '1');
    expect(only.status).not.toBe(0);
    expect(only.stderr).toContain('LTC 1 is the only live LTC');
    expect(cli('rebalance').stdout).toContain('balanced: nothing to move');
    const added = cli('ltc', 'add', '--json');
    expect(added.status, added.stderr).toBe(0);
    expect(JSON.parse(added.stdout)).toMatchObject({ role: 'ltc', id: 2, ranges: [expect.any(Number), expect.any(Number)] });
    const plan = cli('rebalance', '--dry-run', '--json');
    expect(JSON.parse(plan.stdout)).toEqual({ plan: [], moves: [] });
    const stoc = cli('stoc', 'remove', '7');
    expect(stoc.status).not.toBe(0);
    expect(stoc.stderr).toContain('there is no StoC 7 (StoCs: 1, 2, 3)');
    const removed = cli('ltc', 'remove', '2');
    expect(removed.status, removed.stderr).toBe(0);
    expect(removed.stdout).toMatch(/^ltc 2 removed and stopped; range \d+ to LTC 1 \(\d+ ms\), range \d+ to LTC 1 \(\d+ ms\)/);
    const unknown = cli('ltc', 'remove', '9');
    expect(unknown.stderr).toContain('there is no LTC 9');
    expect(cli('ltc', '--help').stdout).toMatch(/run \[options\][\s\S]*add \[options\][\s\S]*remove \[options\] <id>/);
  }, 180_000);

  it('listens on every interface with --host 0.0.0.0 and is reached at the advertised address; a wildcard alone is refused', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nova-wild-'));
    try {
      const file = await up({ dir, host: '0.0.0.0', bin: BIN, coordinatorArgs: [], timeoutMs: 60_000 });
      expect(file.coordinator).toMatch(/^127\.0\.0\.1:\d+$/);
      const s = await fetchStatus(file.coordinator);
      expect(s.members.find((m) => m.role === 'ltc')!.address).toMatch(/^127\.0\.0\.1:\d+$/);
      const c = await NovaClient.connect({ dir });
      await c.put(Buffer.from('k'), Buffer.from('v'));
      expect((await c.get(Buffer.from('k')))!.toString()).toBe('v');
      c.close();
      const alone = spawnSync(process.execPath, [BIN, 'ltc', 'run', '--id', '9', '--coordinator', file.coordinator, '--host', '0.0.0.0', '--dir', join(dir, 'x')], { encoding: 'utf8', timeout: 30_000 });
      expect(alone.status).not.toBe(0);
      expect(alone.stderr).toContain('--host 0.0.0.0 listens on every interface: give --advertise');
    } finally {
      await down(dir).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
