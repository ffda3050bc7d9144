/**
 * LTC failover (doc/decisions/ltc-failover.md), with real processes: an LTC of two killed for
 * good, and one paused past its lease, under a verified workload (no acknowledged write lost,
 * no read older than a write acknowledged before it began). The paused one, resumed, serves
 * nothing of the ranges it lost.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { fetchStatus, readClusterFile } from '../../src/control/cluster-control.js';
import { startCluster, verifiedWorkload, writeKeys, type TestCluster } from '../helpers/cluster.js';
import { until } from '../helpers/until.js';

let cluster: TestCluster | undefined;
afterEach(async () => {
  await cluster?.destroy();
  cluster = undefined;
});

const LEASE_MS = 2_000;
/** Small memtables, so flushes and log switches happen; a short lease, so the test is short. */
const ARGS = ['--memtable-bytes', String(64 * 1024), '--l0-trigger', '2', '--ltc-lease-ms', String(LEASE_MS), '--ranges', '2', '--bench-records', '4000'];

/** Keys in both ranges: "over-…" sorts before the split key (user000000002000), "user9…" after it. */
const KEYS = [...Array.from({ length: 20 }, (_, i) => `over-${i}`), ...Array.from({ length: 20 }, (_, i) => `user9-${i}`)];

describe('LTC failover', () => {
  it('an LTC of two killed for good: the other serves its range within the lease and recovery, and nothing acknowledged is lost', async () => {
    cluster = await startCluster({ ltcs: 2, stocs: 3, args: ARGS });
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    expect((await fetchStatus(coordinator)).config.ranges.map((r) => r.ltc)).toEqual([1, 2]);
    const c = cluster.client;
    const load = verifiedWorkload(c, 3000, await writeKeys(c, 0, 3000, 16), KEYS);
    await new Promise((r) => setTimeout(r, 500));
    const killedAt = Date.now();
    await cluster.kill('ltc', 1);
    await until(async () => (await fetchStatus(coordinator)).members.find((m) => m.role === 'ltc' && m.id === 2)!.serving.length === 2, 30_000);
    const servedAfterMs = Date.now() - killedAt;
    await new Promise((r) => setTimeout(r, 1_000));
    const check = await load.finish();
    expect(check).toMatchObject({ lost: [], stale: [] });
    expect(check.written).toBeGreaterThan(100);
    const status = await fetchStatus(coordinator);
    expect(status.config.ranges.map((r) => r.ltc)).toEqual([2, 2]);
    expect(status.config.ranges[0].epoch).toBeGreaterThan(1); // a new epoch fences the old LTC off
    process.stderr.write(`[failover] range 1 served by LTC 2 ${servedAfterMs} ms after LTC 1 was killed (lease ${LEASE_MS} ms)\n`);
  }, 180_000);

  it('an LTC paused past its lease loses its range; resumed, it serves none of it, and nothing acknowledged is lost or read stale', async () => {
    cluster = await startCluster({ ltcs: 2, stocs: 3, args: ARGS });
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    const c = cluster.client;
    const load = verifiedWorkload(c, 3000, await writeKeys(c, 0, 3000, 16), KEYS);
    await new Promise((r) => setTimeout(r, 500));
    cluster.pause('ltc', 1, true);
    try {
      await until(async () => (await fetchStatus(coordinator)).config.ranges[0].ltc === 2, 30_000);
      await until(async () => (await fetchStatus(coordinator)).members.find((m) => m.role === 'ltc' && m.id === 2)!.serving.length === 2, 30_000);
      await new Promise((r) => setTimeout(r, 500)); // writes go on at LTC 2 meanwhile
    } finally {
      cluster.pause('ltc', 1, false);
    }
    // Resumed, LTC 1 learns it lost the range and lets it go; it stays up, serving nothing.
    await until(async () => {
      const m = (await fetchStatus(coordinator)).members.find((x) => x.role === 'ltc' && x.id === 1)!;
      return m.alive && m.serving.length === 0;
    }, 30_000);
    await new Promise((r) => setTimeout(r, 1_000));
    const check = await load.finish();
    expect(check).toMatchObject({ lost: [], stale: [] });
    expect(check.written).toBeGreaterThan(100);
    const log = readFileSync(join(cluster.dir, 'logs', 'ltc-1.log'), 'utf8');
    expect(log).toMatch(/range 1: the configuration moved it away; letting it go/);
    expect((await fetchStatus(coordinator)).config.ranges.map((r) => r.ltc)).toEqual([2, 2]);
  }, 180_000);
});
