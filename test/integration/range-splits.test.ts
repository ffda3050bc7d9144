/**
 * Splitting and merging ranges while clients write and read (doc/decisions/range-splits.md),
 * with real processes: splits at a key and at the load's median, a move of the new range, and
 * merges back to one range under a verified workload (no acknowledged write lost, no read older
 * than a write acknowledged before it began); an LTC killed while it fills; refusals.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { componentDir, fetchStatus, mergeRanges, moveRange, readClusterFile, splitRange } from '../../src/control/cluster-control.js';
import { BIN, key, missing, startCluster, verifiedWorkload, writeKeys, type TestCluster } from '../helpers/cluster.js';
import { until } from '../helpers/until.js';

let cluster: TestCluster | undefined;
afterEach(async () => {
  await cluster?.destroy();
  cluster = undefined;
});

/** Small memtables, so that flushes and compactions happen during the fills. */
const SMALL = ['--memtable-bytes', String(64 * 1024), '--l0-trigger', '2'];

/** Names of the files of range `range` on the cluster's StoCs. */
function stocFiles(dir: string, stocs: number, range: number): string[] {
  return Array.from({ length: stocs }, (_, i) => readdirSync(componentDir(dir, 'stoc', i + 1)).filter((n) => n.startsWith(`r${range}-`))).flat();
}

describe('range splits and merges', () => {
  it('splits under writes and reads, moves a half, merges back: nothing lost or stale, merged ranges leave no files', async () => {
    cluster = await startCluster({ ltcs: 2, stocs: 3, args: SMALL });
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    const c = cluster.client;
    const load = verifiedWorkload(c, 3000, await writeKeys(c, 0, 3000, 16), Array.from({ length: 50 }, (_, i) => `over-${i}`));
    await new Promise((r) => setTimeout(r, 300));

    const first = await splitRange(coordinator, 1, key(1500));
    expect(first).toMatchObject({ range: 1, other: 2, ltc: 1, at: key(1500) });
    expect(first.keys).toBeGreaterThanOrEqual(1500); // keys 1500.. at least, and what the workload wrote after
    await new Promise((r) => setTimeout(r, 300));
    const second = await splitRange(coordinator, 2, undefined); // at the median of its load
    expect(second).toMatchObject({ range: 2, other: 3, ltc: 1 });
    expect(Buffer.compare(second.at!, key(1500))).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 300));
    await moveRange(coordinator, 3, 2);
    await new Promise((r) => setTimeout(r, 300));
    let s = await fetchStatus(coordinator);
    expect(s.config.ranges.map((r) => [r.id, r.ltc, r.fill])).toEqual([[1, 1, undefined], [2, 1, undefined], [3, 2, undefined]]);

    // A merge needs both on one LTC.
    await expect(mergeRanges(coordinator, 2, 3)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/on LTCs 1 and 2: move one first/) });
    await moveRange(coordinator, 3, 1);
    const m1 = await mergeRanges(coordinator, 2, 3);
    expect(m1).toMatchObject({ range: 2, other: 3, ltc: 1 });
    await new Promise((r) => setTimeout(r, 300));
    const m2 = await mergeRanges(coordinator, 1, 2);
    expect(m2.keys).toBeGreaterThanOrEqual(1500);

    const check = await load.finish();
    expect(check).toMatchObject({ lost: [], stale: [] });
    expect(check.written).toBeGreaterThan(100); // writes went on through it all (how many depends on the machine's load)
    process.stderr.write(`[splits] keys copied, writes refused (ms): ${[first, second, m1, m2].map((r) => `${r.keys}, ${r.unavailableMs}`).join('; ')}\n`);
    s = await fetchStatus(coordinator);
    expect(s.config.ranges).toHaveLength(1);
    expect(s.config.ranges[0]).toMatchObject({ id: 1, ltc: 1 });
    expect(s.config.ranges[0].end).toBeUndefined();
    expect(s.config.lastRange).toBe(3);
    await until(async () => stocFiles(cluster!.dir, 3, 2).length + stocFiles(cluster!.dir, 3, 3).length === 0, 10_000);
    // A scan across the old split points sees every key once, in order.
    const rows = await c.scan(key(1400), { end: key(1700), limit: 1000 });
    expect(rows.map(([k]) => k.toString())).toEqual(Array.from({ length: 300 }, (_, i) => key(1400 + i).toString()));
    // Range 1 deleted the keys it gave away at the first split, before it took them back.
    expect(readFileSync(join(cluster.dir, 'logs', 'ltc-1.log'), 'utf8')).toMatch(/range 1: deleted \d+ key\(s\) outside its interval/);
  }, 240_000);

  it('an LTC killed while it fills: restarted, it fills again and the split completes with nothing lost', async () => {
    // A lease longer than the pause: the restarted LTC, not a failover, must finish this.
    cluster = await startCluster({ ltcs: 1, stocs: 3, args: [...SMALL, '--ltc-lease-ms', '30000'] });
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    const c = cluster.client;
    const acked = await writeKeys(c, 0, 3000, 16);
    cluster.pause('ltc', 1, true); // it cannot fill, nor answer
    const splitting = splitRange(coordinator, 1, key(1000)).then(() => undefined, (err: Error) => err); // it fails while we kill
    await until(async () => (await fetchStatus(coordinator)).config.ranges.some((r) => r.fill !== undefined), 10_000);
    await cluster.kill('ltc', 1);
    expect(await splitting).toMatchObject({ message: expect.stringMatching(/it goes on, and its LTC \(or the one it fails over to\) ends it/) });
    await cluster.up();
    await until(async () => (await fetchStatus(coordinator)).config.ranges.every((r) => r.fill === undefined), 30_000);
    const s = await fetchStatus(coordinator);
    expect(s.config.ranges.map((r) => r.id)).toEqual([1, 2]);
    expect(await missing(c, acked)).toEqual([]);
    await c.put(key(2000), Buffer.from('after'));
    expect((await c.get(key(2000)))?.toString()).toBe('after');
  }, 180_000);

  it('refuses splits and merges it cannot make, with errors that say why', async () => {
    cluster = await startCluster({ ltcs: 1, stocs: 3, args: ['--ranges', '3', ...SMALL] });
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    const s = await fetchStatus(coordinator);
    await expect(splitRange(coordinator, 9, key(1))).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/no range 9/) });
    await expect(splitRange(coordinator, 2, s.config.ranges[1].start)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/strictly inside range 2/) });
    await expect(splitRange(coordinator, 1, undefined)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/holds no key to split at: give one/) });
    await expect(mergeRanges(coordinator, 1, 3)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/not adjacent/) });
    await expect(mergeRanges(coordinator, 2, 2)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/with itself/) });
    // The later range merged into the earlier one, and the other way round.
    await mergeRanges(coordinator, 3, 2);
    await mergeRanges(coordinator, 1, 3);
    expect((await fetchStatus(coordinator)).config.ranges.map((r) => [r.id, r.start.length, r.end])).toEqual([[1, 0, undefined]]);
    // The CLI splits and merges, and says what it did.
    const cli = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args, '--dir', cluster!.dir], { encoding: 'utf8', timeout: 60_000 });
    const split = cli('range', 'split', '1', '--at', 'm', '--json');
    expect(split.status, split.stderr).toBe(0);
    expect(JSON.parse(split.stdout)).toMatchObject({ range: 1, other: 4, ltc: 1, at: 'm', keys: 0 });
    expect(cli('range', 'list').stdout).toMatch(/range 4: \["m", ∞\) on LTC 1/);
    const merged = cli('range', 'merge', '1', '4');
    expect(merged.status, merged.stderr).toBe(0);
    expect(merged.stdout).toMatch(/^range 4 merged into range 1 on LTC 1: 0 key\(s\), 0 bytes copied in \d+ ms/);
  }, 120_000);
});
