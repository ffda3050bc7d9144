/**
 * Moving ranges between LTCs while clients write and read (doc/decisions/range-moves.md), with
 * real processes: a range moved back and forth twenty times under a verified workload (no
 * acknowledged write lost, no read older than a write acknowledged before it began); a move
 * whose old LTC dies while letting go; the CLI; and moves the coordinator refuses.
 */
import { spawnSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { fetchStatus, moveRange, readClusterFile } from '../../src/control/cluster-control.js';
import type { MoveReport } from '../../src/coordinator/coordinator.js';
import { BIN, key, missing, startCluster, verifiedWorkload, writeKeys, type TestCluster } from '../helpers/cluster.js';
import { until } from '../helpers/until.js';

let cluster: TestCluster | undefined;
afterEach(async () => {
  await cluster?.destroy();
  cluster = undefined;
});

/** Small memtables, so that flushes, log switches and compactions happen during the moves. */
const SMALL = ['--memtable-bytes', String(64 * 1024), '--l0-trigger', '2'];

describe('range moves', () => {
  it('a range moved back and forth twenty times under writes and reads loses nothing and serves nothing stale', async () => {
    cluster = await startCluster({ ltcs: 2, stocs: 3, args: SMALL });
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    const c = cluster.client;
    const load = verifiedWorkload(c, 2000, await writeKeys(c, 0, 2000, 16), Array.from({ length: 50 }, (_, i) => `over-${i}`));
    const reports: MoveReport[] = [];
    for (let i = 0; i < 20; i++) {
      await new Promise((r) => setTimeout(r, 150));
      reports.push(await moveRange(coordinator, 1, i % 2 === 0 ? 2 : 1));
    }
    const check = await load.finish();
    expect(check).toMatchObject({ lost: [], stale: [] });
    expect(check.written).toBeGreaterThan(100); // writes went on through the moves
    // Each move ended with the range on its new LTC, in a newer configuration than the last.
    reports.forEach((r, i) => expect(r).toMatchObject({ range: 1, from: i % 2 === 0 ? 1 : 2, to: i % 2 === 0 ? 2 : 1 }));
    for (let i = 1; i < reports.length; i++) expect(reports[i].configId).toBeGreaterThan(reports[i - 1].configId);
    for (const r of reports) expect(r.unavailableMs).toBeGreaterThanOrEqual(r.releaseMs);
    const status = await fetchStatus(coordinator);
    expect(status.config.ranges[0]).toMatchObject({ id: 1, ltc: 1 });
    expect(status.config.ranges[0].from).toBeUndefined();
    process.stderr.write(`[moves] refused requests (ms): ${reports.map((r) => r.unavailableMs).join(' ')}\n`);
  }, 240_000);

  it('an old LTC killed while it lets go: restarted, it holds nothing, and the move completes', async () => {
    // A lease longer than the pause: the move, not a failover, must end this.
    cluster = await startCluster({ ltcs: 2, stocs: 3, args: [...SMALL, '--ltc-lease-ms', '30000'] });
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    const c = cluster.client;
    const acked = await writeKeys(c, 0, 1000, 16);
    cluster.pause('ltc', 1, true); // it cannot flush before the move (that times out) nor answer release
    const moving = moveRange(coordinator, 1, 2);
    await until(async () => (await fetchStatus(coordinator)).config.ranges[0].from === 1, 10_000);
    await cluster.kill('ltc', 1);
    await cluster.up(); // LTC 1 again: with the newest configuration it holds nothing, which ends the move
    const r = await moving;
    expect(r).toMatchObject({ range: 1, from: 1, to: 2 });
    expect(await missing(c, acked)).toEqual([]);
    const status = await fetchStatus(coordinator);
    expect(status.config.ranges[0]).toMatchObject({ ltc: 2 });
    expect(status.members.find((m) => m.role === 'ltc' && m.id === 1)!.serving).toEqual([]);
  }, 180_000);

  it('refuses moves it cannot make, with errors that say why; the CLI lists and moves', async () => {
    cluster = await startCluster({ ltcs: 2, stocs: 3, args: ['--ranges', '2', ...SMALL] });
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    await cluster.client.put(key(1), Buffer.from('one'));
    await expect(moveRange(coordinator, 9, 1)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/no range 9 \(ranges: 1, 2\)/) });
    await expect(moveRange(coordinator, 1, 7)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/no LTC 7 \(LTCs: 1, 2\)/) });
    await expect(moveRange(coordinator, 1, 1)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/on LTC 1 already/) });
    // Two moves of one range at once: one goes, the other is told it is moving.
    const both = await Promise.allSettled([moveRange(coordinator, 2, 1), moveRange(coordinator, 2, 1)]);
    expect(both.filter((x) => x.status === 'fulfilled')).toHaveLength(1);
    expect(both.find((x) => x.status === 'rejected')).toMatchObject({ reason: { code: expect.stringMatching(/BUSY|BAD_ARGUMENT/) } });
    // A dead LTC cannot let go: refused until failover exists.
    await cluster.kill('ltc', 2);
    await until(async () => !(await fetchStatus(coordinator)).members.find((m) => m.role === 'ltc' && m.id === 2)!.alive, 10_000);
    await expect(moveRange(coordinator, 2, 2)).rejects.toMatchObject({ code: 'UNAVAILABLE', message: expect.stringMatching(/LTC 2 is down: start it first/) });
    await cluster.up();

    const cli = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args, '--dir', cluster!.dir], { encoding: 'utf8', timeout: 60_000 });
    const moved = cli('range', 'move', '1', '--to', '2', '--json');
    expect(moved.status, moved.stderr).toBe(0);
    expect(JSON.parse(moved.stdout)).toMatchObject({ range: 1, from: 1, to: 2, unavailableMs: expect.any(Number) });
    const list = cli('range', 'list', '--json');
    expect(JSON.parse(list.stdout).ranges).toMatchObject([{ id: 1, ltc: 2 }, { id: 2, ltc: 1 }]);
    expect(cli('range', 'list').stdout).toMatch(/range 1: \[.*\) on LTC 2; \d+ requests\/s, [\d.]+ KiB\/s written/);
    const bad = cli('range', 'move', '1', '--to', '9');
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain('there is no LTC 9');
    expect((await cluster.client.get(key(1)))!.toString()).toBe('one');
  }, 180_000);
});
