/**
 * `nova up --cap`: every component in a cgroup of its own with its role's limits (real
 * processes, the machine's cgroups). Where this machine cannot apply them (no root, no cgroups),
 * the same command must be refused before anything starts.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { NovaClient } from '../../src/client/nova-client.js';
import { addComponent, down, readClusterFile, up } from '../../src/control/cluster-control.js';
import { parseCaps } from '../../src/control/caps.js';
import { cgroupRoot, groupsOf } from '../../src/common/memory-limit.js';
import { cgroupHost, groupOf } from '../../src/control/cgroups.js';
import { BIN, key } from '../helpers/cluster.js';
import { until } from '../helpers/until.js';
import type { RangeStats } from '../../src/ltc/ltc-server.js';
import { capsApplicable } from '../helpers/caps.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-caps-');
const CAPS = parseCaps('ltc.cpu=0.05,stoc.cpu=0.5,stoc.memory=1GiB,stoc.disk=8MB/s');

describe('nova up --cap', () => {
  it('puts each component in its cgroup with its limits, later ones too, and nova down removes them', async () => {
    const dir = tempDir();
    if (!(await capsApplicable(dir, CAPS))) return;
    const host = cgroupHost(CAPS);
    const v1 = (ctl: string, ...p: string[]): string => (host.version === 1 ? join(cgroupRoot(), ctl, ...p) : join(cgroupRoot(), ...p));
    try {
      const file = await up({ dir, host: '127.0.0.1', bin: BIN, coordinatorArgs: ['--memtable-bytes', String(256 * 1024)], caps: CAPS, timeoutMs: 60_000 });
      const pid = (role: string, id: number): number => file.components.find((c) => c.role === role && c.id === id)!.pid;
      const cpuCtl = host.version === 1 ? 'cpu' : '';
      const ltc = groupOf(dir, 'ltc-1');
      expect(groupsOf(pid('ltc', 1)).get(cpuCtl)).toBe(`/${ltc}`);
      expect(groupsOf(pid('stoc', 2)).get(host.version === 1 ? 'blkio' : '')).toBe(`/${groupOf(dir, 'stoc-2')}`);
      expect(groupsOf(pid('stoc', 2)).get(host.version === 1 ? 'memory' : '')).toBe(`/${groupOf(dir, 'stoc-2')}`);
      expect(Number(readFileSync(v1('memory', groupOf(dir, 'stoc-2'), host.version === 1 ? 'memory.limit_in_bytes' : 'memory.max'), 'utf8'))).toBe(2 ** 30);
      expect(groupsOf(pid('coordinator', 1)).get(cpuCtl)).not.toContain('nova/'); // no cap for it: left where it was
      if (host.version === 1) {
        expect(readFileSync(v1('cpu', ltc, 'cpu.cfs_quota_us'), 'utf8').trim()).toBe('5000');
        expect(readFileSync(v1('blkio', groupOf(dir, 'stoc-1'), 'blkio.throttle.write_bps_device'), 'utf8')).toMatch(/^\d+:\d+ 8000000$/m);
      } else {
        expect(readFileSync(v1('', ltc, 'cpu.max'), 'utf8').trim()).toBe('5000 100000');
      }
      // The LTC's quota bites: writes keep it busier than 5% of a CPU.
      const client = await NovaClient.connect({ dir, timeoutMs: 30_000 });
      try {
        const value = Buffer.alloc(1024, 7);
        for (let i = 0; i < 4; i++) await Promise.all(Array.from({ length: 200 }, (_, j) => client.put(Buffer.from(`k${i}-${j}`), value)));
        const stat = readFileSync(v1('cpu', ltc, 'cpu.stat'), 'utf8');
        expect(Number(/nr_throttled (\d+)/.exec(stat)?.[1])).toBeGreaterThan(0);
      } finally {
        client.close();
      }
      // A StoC added later is capped as the others.
      const added = await addComponent({ dir, host: '127.0.0.1', bin: BIN }, 'stoc');
      expect(groupsOf(added.pid).get(cpuCtl)).toBe(`/${groupOf(dir, `stoc-${added.id}`)}`);
    } finally {
      await down(dir);
    }
    for (const ctl of host.version === 1 ? ['cpu', 'memory', 'blkio'] : ['']) expect(existsSync(v1(ctl, dirname(groupOf(dir, 'ltc-1'))))).toBe(false);
  }, 120_000);

  // Eight ranges fill a memtable each at once; their flushes queue 4 MiB of syncs on a disk of 512 KB/s, so
  // the last waits past the StoC connection's 5 s deadline, which took the StoC for lost and failed every
  // range (doc/decisions/slow-stocs.md).
  it('one StoC on a disk slower than its flushes: they wait for it, and no write fails nor any range reopens', async () => {
    const dir = tempDir();
    const caps = parseCaps('stoc.disk=512KB/s');
    if (!(await capsApplicable(dir, caps))) return;
    const records = 6400; // 800 KB a range: one memtable of 512 KiB each to flush
    try {
      await up({
        dir, host: '127.0.0.1', bin: BIN, stocs: 1, caps, timeoutMs: 60_000,
        coordinatorArgs: ['--ranges', '8', '--bench-records', String(records), '--memtable-bytes', String(512 * 1024),
          '--log-mode', 'none', '--table-replicas', '1'],
      });
      const client = await NovaClient.connect({ dir, timeoutMs: 60_000 });
      try {
        const value = Buffer.alloc(1024, 7);
        let next = 0;
        const writer = async (): Promise<void> => {
          for (let i = next++; i < records; i = next++) await client.put(key((i * 7919) % records), value);
        };
        await Promise.all(Array.from({ length: 64 }, writer));
        await until(async () => ((await client.stats()) as RangeStats[]).every((r) => r.tablesToStocs > 0), 60_000);
        const stats = (await client.stats()) as RangeStats[];
        // The slowest range's flush waited longer than a request to a StoC may.
        expect(Math.max(...stats.map((r) => r.msToStocs / r.tablesToStocs))).toBeGreaterThan(5_000);
        expect((await client.get(key(records - 1)))?.equals(value)).toBe(true);
      } finally {
        client.close();
      }
      // The StoC was never taken for lost: no flush refused for want of it, no range failed.
      expect(readFileSync(join(dir, 'logs', 'ltc-1.log'), 'utf8')).not.toMatch(/no StoC can take|reopening it|every replica failed/);
      process.kill(readClusterFile(dir)!.components.find((c) => c.role === 'ltc')!.pid, 'SIGKILL'); // not to flush the rest at 512 KB/s
    } finally {
      await down(dir);
    }
  }, 120_000);

  it('is refused, saying why, for a user who cannot create cgroups, before anything starts', () => {
    const dir = tempDir();
    chmodSync(dir, 0o777);
    // As root, the refusal is shown as nobody (uid 65534); as anyone else, as that user.
    const asNobody = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : {};
    const r = spawnSync(process.execPath, [BIN, 'up', '--dir', join(dir, 'c'), '--cap', 'ltc.cpu=0.5'], { encoding: 'utf8', timeout: 60_000, ...asNobody });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/--cap: .*(caps need root|no cgroups|no cgroup v1 cpu|has no cpu controller).*leave out --cap/);
    expect(existsSync(join(dir, 'c', 'cluster.json'))).toBe(false);
  }, 60_000);
});
