/**
 * A local cluster's process control: a component known by its directory (a real child process).
 */
import { describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { componentDir, down, isRunning, readClusterFile, up } from '../../src/control/cluster-control.js';
import { loadAddon } from '../../src/common/addon.js';
import { processAlive, processExiting } from '../../src/common/files.js';
import { BIN } from '../helpers/cluster.js';
import { tempDirs } from '../helpers/temp.js';
import { until } from '../helpers/until.js';

const tempDir = tempDirs('nova-cluster-control-');

/** Pids of processes whose command line names `dir`. */
function processesIn(dir: string): number[] {
  return readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
    try {
      return readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').includes(dir);
    } catch {
      return false;
    }
  }).map(Number);
}

describe('isRunning', () => {
  it('knows a component by its directory, so a reused pid is not taken for it', async () => {
    const home = componentDir('/tmp/nova-cluster-test', 'stoc', 2);
    expect(home).toBe('/tmp/nova-cluster-test/stoc-2');
    expect(componentDir('/tmp/nova-cluster-test', 'coordinator', 1)).toBe('/tmp/nova-cluster-test/coordinator');
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 20000)', 'stoc', '--dir', home]);
    try {
      await new Promise((r) => child.once('spawn', r));
      expect(isRunning(child.pid!, home)).toBe(true);
      // Another component's directory (another cluster's, or a sibling's) is not this process.
      expect(isRunning(child.pid!, componentDir('/tmp/nova-cluster-other', 'stoc', 2))).toBe(false);
      expect(isRunning(child.pid!, componentDir('/tmp/nova-cluster-test', 'stoc', 1))).toBe(false);
    } finally {
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    }
    expect(isRunning(child.pid!, home)).toBe(false);
  });
});

describe('nova up', () => {
  it('stops a coordinator it gave up waiting for, so no component runs outside cluster.json', async () => {
    const dir = tempDir();
    await expect(up({ dir, host: '127.0.0.1', bin: BIN, coordinatorArgs: [], timeoutMs: 1 })).rejects.toMatchObject({ code: 'DEADLINE_EXCEEDED', message: expect.stringMatching(/so it was stopped/) });
    expect(readClusterFile(dir)).toBeUndefined();
    expect(processesIn(componentDir(dir, 'coordinator', 1))).toEqual([]);
  }, 30_000);

  it('names each range not served in time, with its LTC\'s last reason, and serves it once the reason is gone; restarts a killed LTC at once', async () => {
    const dir = tempDir();
    const opts = { dir, host: '127.0.0.1', bin: BIN, coordinatorArgs: [] };
    await up({ ...opts, timeoutMs: 60_000 });
    try {
      const ltc = readClusterFile(dir)!.components.find((c) => c.role === 'ltc')!;
      const home = componentDir(dir, 'ltc', ltc.id);
      process.kill(ltc.pid, 'SIGKILL');
      await until(() => !isRunning(ltc.pid, home), 10_000);
      // This process holds range 1's directory, as another engine would.
      const fd = openSync(join(home, 'range-1', 'LOCK'), 'r+');
      try {
        expect(loadAddon().lockFile(fd)).toBe(0);
        await expect(up({ ...opts, timeoutMs: 15_000 })).rejects.toMatchObject({
          code: 'DEADLINE_EXCEEDED',
          message: expect.stringMatching(new RegExp(`ranges not served yet: 1.*range 1 on ltc-${ltc.id}: .*in use by process ${process.pid}`)),
        });
        // The LTC reports it in its heartbeats: status shows it.
        const status = spawnSync(process.execPath, [BIN, 'status', '--dir', dir], { encoding: 'utf8', timeout: 30_000 });
        expect(status.stdout).toMatch(new RegExp(`not open on LTC ${ltc.id} for \\d+ s: .*in use by process ${process.pid}`));
      } finally {
        closeSync(fd);
      }
      await up({ ...opts, timeoutMs: 60_000 });
      // nova up once a SIGKILL has begun to take effect: the LTC still exiting (its locks held) is
      // waited for, then started again (taken for running, or restarted into its own lock, it
      // failed 2 of 6 rounds). Before the kill takes effect the LTC is running, as far as anyone can tell.
      for (let round = 0; round < 4; round++) {
        const pid = readClusterFile(dir)!.components.find((c) => c.role === 'ltc')!.pid;
        process.kill(pid, 'SIGKILL');
        for (const end = Date.now() + 10_000; processAlive(pid) && !processExiting(pid) && Date.now() < end;) await new Promise((r) => setImmediate(r));
        await up({ ...opts, timeoutMs: 60_000 });
      }
    } finally {
      await down(dir);
    }
  }, 120_000);

  it('nova up refuses knobs a new cluster\'s coordinator would refuse before it starts any process', () => {
    const dir = join(tempDir(), 'cluster');
    const r = spawnSync(process.execPath, [BIN, 'up', '--l0-trigger', '4', '--l0-slowdown-trigger', '13', '--dir', dir], { encoding: 'utf8', timeout: 30_000 });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('--l0-slowdown-trigger 13 must be above --l0-trigger (4) and at most 3 × it (12');
    expect(existsSync(dir)).toBe(false);
  });
});
