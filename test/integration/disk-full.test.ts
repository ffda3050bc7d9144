/**
 * StoCs whose disks fill, with real processes: their directories are small tmpfs mounts. One
 * full: placement stops choosing it once it reports ENOSPC, flushes and compactions go to the
 * other StoCs, the range never fails, and nothing acknowledged is lost. All full: writes are
 * refused naming the cause while reads go on, and resume once there is room. Needs mount(8) and the right to mount
 * (root): without them the test fails, saying so.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { componentDir } from '../../src/control/cluster-control.js';
import { until } from '../helpers/until.js';
import { key, missing, startCluster, value, verifiedWorkload, writeKeys, type TestCluster } from '../helpers/cluster.js';

let cluster: TestCluster | undefined;
afterEach(async () => {
  await cluster?.destroy();
  cluster = undefined;
});

/** Mounts a tmpfs of `mib` MiB at `dir`; throws saying why it could not. */
function mountSmall(dir: string, mib: number): void {
  mkdirSync(dir, { recursive: true });
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${mib}m`, 'tmpfs', dir], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`this test needs to mount a small tmpfs (run it as root): mount said ${r.stderr || r.error?.message}`);
}

describe('a StoC whose disk fills', () => {
  it('is given no new files once it reports ENOSPC; the range keeps serving, its engine never fails, nothing is lost', async () => {
    const full = (dir: string) => componentDir(dir, 'stoc', 3);
    cluster = await startCluster({
      ltcs: 1, stocs: 3, args: ['--memtable-bytes', String(256 * 1024), '--l0-trigger', '2', '--ranges', '1'],
      prepare: (dir) => mountSmall(full(dir), 3),
      release: (dir) => { spawnSync('umount', ['-l', full(dir)]); },
    });
    const c = cluster.client;
    const before = await writeKeys(c, 0, 2000, 16);
    // Far more than 3 MiB goes to the StoCs (two copies of every table, three of every log): written until StoC 3 is full, and on after.
    const load = verifiedWorkload(c, 2000, before, Array.from({ length: 20 }, (_, i) => `over-${i}`));
    const ltcLogPath = join(cluster.dir, 'logs', 'ltc-1.log');
    await until(() => /StoC 3: .*(ENOSPC|No space left on device)/.test(readFileSync(ltcLogPath, 'utf8')), 120_000);
    await new Promise((r) => setTimeout(r, 4_000));
    const check = await load.finish();
    expect(check).toMatchObject({ lost: [], stale: [] });
    expect(check.written).toBeGreaterThan(100);
    const ltcLog = readFileSync(ltcLogPath, 'utf8');
    expect(ltcLog).not.toMatch(/reopen the engine to recover/);
    expect(ltcLog.match(/range 1 open in/g)).toHaveLength(1); // opened once: never reopened
  }, 240_000);

  it('every StoC full: writes are refused naming the cause, reads go on, and writes resume by themselves once there is room', async () => {
    const stocs = [1, 2, 3];
    cluster = await startCluster({
      // Each disk 24 MiB, 12 of them kept for logs and MANIFESTs (--stoc-reserve).
      ltcs: 1, stocs: 3, clientTimeoutMs: 5_000, args: ['--memtable-bytes', String(256 * 1024), '--l0-trigger', '2', '--ranges', '1', '--stoc-reserve', String(12 * 2 ** 20)],
      prepare: (dir) => { for (const s of stocs) mountSmall(componentDir(dir, 'stoc', s), 24); },
      release: (dir) => { for (const s of stocs) spawnSync('umount', ['-l', componentDir(dir, 'stoc', s)]); },
    });
    const c = cluster.client;
    const acked: number[] = [];
    let refused: { code?: string; message: string } | undefined;
    for (let i = 0; i < 1_000_000 && !refused; i += 64) {
      const results = await Promise.allSettled(Array.from({ length: 64 }, (_, j) => c.put(key(i + j), value(i + j)).then(() => i + j)));
      for (const r of results) {
        if (r.status === 'fulfilled') acked.push(r.value);
        else refused ??= r.reason as { code?: string; message: string };
      }
    }
    const ltcLogPath = join(cluster.dir, 'logs', 'ltc-1.log');
    const why = (): string => readFileSync(ltcLogPath, 'utf8').split('\n').filter((l) => /fail|reopen|ENOSPC/.test(l)).slice(0, 8).join('\n');
    expect(refused?.message, why()).toMatch(/no StoC can take table .*ENOSPC/);
    expect(refused?.code).toBe('FAILED'); // refused before its log: certainly not applied
    // Reads go on: every acknowledged write reads back while the disks are full.
    expect(await missing(c, acked)).toEqual([]);
    // Room again: writes resume by themselves.
    for (const s of stocs) {
      const r = spawnSync('mount', ['-o', 'remount,size=256m', componentDir(cluster.dir, 'stoc', s)], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
    }
    const start = acked.reduce((a, b) => Math.max(a, b), 0) + 1000;
    await until(async () => c.put(key(start), value(start)).then(() => true, () => false), 60_000);
    const later = await writeKeys(c, start + 1, start + 2001, 16);
    expect(later.size).toBe(2000);
    expect(await missing(c, [...acked, ...later])).toEqual([]);
    // Never through a failed engine: the range opened once and was never reopened.
    const ltcLog = readFileSync(ltcLogPath, 'utf8');
    expect(ltcLog).not.toMatch(/reopen the engine to recover/);
    expect(ltcLog.match(/range 1 open in/g)).toHaveLength(1);
  }, 300_000);
});
