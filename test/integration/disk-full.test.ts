/**
 * A StoC whose disk fills, with real processes: its directory is a small tmpfs mount. Placement
 * stops choosing it once it reports ENOSPC, flushes and compactions go to the other StoCs, the
 * range never fails, and nothing acknowledged is lost. Needs mount(8) and the right to mount
 * (root): without them the test fails, saying so.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { componentDir } from '../../src/control/cluster-control.js';
import { until } from '../helpers/until.js';
import { startCluster, verifiedWorkload, writeKeys, type TestCluster } from '../helpers/cluster.js';

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
});
