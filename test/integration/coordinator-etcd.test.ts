/**
 * Coordinators on etcd (doc/decisions/coordinator-on-etcd.md), with a real etcd and real
 * processes: one of three leads and the standbys name it; the leader SIGKILLed under a
 * verified workload, a standby takes over and the cluster goes on with nothing lost; a
 * deposed leader can never write the configuration.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterEach, describe, expect, it } from 'vitest';
import { NovaClient } from '../../src/client/nova-client.js';
import { fetchStatus } from '../../src/control/cluster-control.js';
import { EtcdConfigStore } from '../../src/coordinator/etcd-store.js';
import { makeRanges, type ClusterConfig } from '../../src/cluster/config.js';
import { newSettings } from '../../src/cluster/knobs.js';
import { TcpRpcClient } from '../../src/net/tcp-rpc-client.js';
import { BIN, verifiedWorkload, writeKeys } from '../helpers/cluster.js';
import { freePort, startEtcd, type TestEtcd } from '../helpers/etcd.js';
import { until } from '../helpers/until.js';

let etcd: TestEtcd | undefined;
let dir: string | undefined;
const children: ChildProcess[] = [];
const closers: Array<() => unknown> = [];

afterEach(async () => {
  for (const f of closers.splice(0)) await f();
  for (const c of children.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      c.kill('SIGKILL');
      await new Promise((r) => c.once('exit', r));
    }
  }
  await etcd?.stop();
  etcd = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

/** Starts `nova …args` with its output in `name`.log under the test's directory. */
function nova(name: string, args: string[]): ChildProcess {
  const log = openSync(join(dir!, `${name}.log`), 'a');
  const c = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', log, log] });
  children.push(c);
  return c;
}

function logOf(name: string): string {
  return readFileSync(join(dir!, `${name}.log`), 'utf8');
}

function config(id: number): ClusterConfig {
  const ranges = makeRanges([], 1);
  return { id, ranges, lastRange: ranges.length, members: [], settings: newSettings({}) };
}

describe('coordinators on etcd', () => {
  it('one of three leads and the standbys name it; the leader SIGKILLed under a verified workload, a standby takes over, components follow, and nothing is lost', async () => {
    etcd = await startEtcd();
    dir = mkdtempSync(join(tmpdir(), 'nova-etcd-cluster-'));
    const ports = [await freePort(), await freePort(), await freePort()];
    const addresses = ports.map((p) => `127.0.0.1:${p}`);
    const list = addresses.join(',');
    const coordinators = ports.map((p, i) => {
      mkdirSync(join(dir!, `coordinator-${i + 1}`));
      return nova(`coordinator-${i + 1}`, ['coordinator', '--dir', join(dir!, `coordinator-${i + 1}`), '--port', String(p), '--etcd', etcd!.endpoint,
        '--memtable-bytes', String(64 * 1024), '--ltc-lease-ms', '3000']);
    });
    await until(async () => fetchStatus(list).then(() => true, () => false), 30_000);
    // Every coordinator listening (a standby answers NOT_LEADER, once up).
    const answers = async (a: string): Promise<boolean> => {
      const link = await TcpRpcClient.connect(a, { timeoutMs: 1_000 }).catch(() => undefined);
      link?.close();
      return link !== undefined;
    };
    await until(async () => (await Promise.all(addresses.map(answers))).every(Boolean), 30_000);
    const first = await fetchStatus(list);
    const leader = coordinators.findIndex((c) => c.pid === first.pid);
    expect(leader).toBeGreaterThanOrEqual(0);

    // The standbys refuse, naming the leader (once their first campaign has seen it).
    const refusal = async (a: string): Promise<unknown> => {
      const link = await TcpRpcClient.connect(a, { timeoutMs: 5_000 });
      try {
        return await link.call('config', []).then(() => 'served', (err: unknown) => err);
      } finally {
        link.close();
      }
    };
    for (const [i, a] of addresses.entries()) {
      if (i === leader) continue;
      await until(async () => ((await refusal(a)) as { detail?: unknown }).detail !== null, 10_000);
      expect(await refusal(a)).toMatchObject({ code: 'NOT_LEADER', detail: addresses[leader] });
    }

    for (const id of [1, 2, 3]) nova(`stoc-${id}`, ['stoc', '--id', String(id), '--coordinator', list, '--dir', join(dir, `stoc-${id}`)]);
    nova('ltc-1', ['ltc', '--id', '1', '--coordinator', list, '--dir', join(dir, 'ltc-1')]);
    const client = await NovaClient.connect({ coordinator: list, timeoutMs: 30_000 });
    closers.push(() => client.close());
    const before = await writeKeys(client, 0, 2_000, 16);
    const load = verifiedWorkload(client, 2_000, before, Array.from({ length: 20 }, (_, i) => `over-${i}`));
    await new Promise((r) => setTimeout(r, 500));

    const killedAt = Date.now();
    coordinators[leader].kill('SIGKILL');
    await until(async () => (await fetchStatus(list).then((s) => s.pid, () => 0)) !== first.pid && (await fetchStatus(list).then((s) => s.pid, () => 0)) !== 0, 30_000);
    const takeoverMs = Date.now() - killedAt;
    const next = await fetchStatus(list);
    expect(coordinators.map((c) => c.pid)).toContain(next.pid);
    expect(next.config.id).toBeGreaterThanOrEqual(first.config.id);

    // The new leader changes the configuration: a fourth StoC joins through it.
    nova('stoc-4', ['stoc', '--id', '4', '--coordinator', list, '--dir', join(dir, 'stoc-4')]);
    await until(async () => (await fetchStatus(list)).members.some((m) => m.role === 'stoc' && m.id === 4 && m.alive), 30_000);
    await until(async () => (await fetchStatus(list)).members.every((m) => m.alive), 30_000);

    await new Promise((r) => setTimeout(r, 1_000));
    const check = await load.finish();
    expect(check).toMatchObject({ lost: [], stale: [] });
    expect(check.written).toBeGreaterThan(100);
    const standby = coordinators.find((c) => c.pid !== next.pid && c !== coordinators[leader])!;
    expect(logOf(`coordinator-${coordinators.indexOf(standby) + 1}`)).toMatch(/standing by/);
    process.stderr.write(`[coordinator-etcd] a standby led ${takeoverMs} ms after the leader was killed\n`);
  }, 180_000);

  it('a deposed leader cannot write the configuration: its save is refused, and it learns it lost', async () => {
    etcd = await startEtcd();
    const prefix = '/nova-fence';
    const a = new EtcdConfigStore({ endpoints: [`http://${etcd.endpoint}`], prefix });
    const b = new EtcdConfigStore({ endpoints: [`http://${etcd.endpoint}`], prefix });
    closers.push(() => a.close(), () => b.close());
    let lost: Error | undefined;
    a.onLost((err) => (lost = err));
    await a.lead('a:1');
    expect(await a.load()).toBeUndefined();
    await a.save(config(1));
    let bLeads = false;
    const bLeading = b.lead('b:1').then(() => (bLeads = true));
    await new Promise((r) => setTimeout(r, 600));
    expect(bLeads).toBe(false);
    expect(b.leader()).toBe('a:1');

    // A's lead ends behind its back (as when it is paused past its lease): B takes over.
    const raw = new Etcd3({ hosts: `http://${etcd.endpoint}` });
    closers.push(() => raw.close());
    await raw.delete().key(`${prefix}/leader`).exec();
    await bLeading;
    expect((await b.load())?.id).toBe(1);
    await b.save(config(2));
    await expect(a.save(config(2))).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    expect(lost?.message).toMatch(/another coordinator leads/);
    expect(JSON.parse((await raw.get(`${prefix}/config`).string())!).id).toBe(2);
    // B's writes go on in order.
    await Promise.all([b.save(config(3)), b.save(config(4))]);
    expect(JSON.parse((await raw.get(`${prefix}/config`).string())!).id).toBe(4);
  }, 60_000);

  it('a leader cut off from etcd stops acting before its lease could have run out there', async () => {
    etcd = await startEtcd();
    const a = new EtcdConfigStore({ endpoints: [`http://${etcd.endpoint}`], prefix: '/nova-cut' });
    closers.push(() => a.close());
    a.onLost(() => undefined);
    await a.lead('a:1');
    await new Promise((r) => setTimeout(r, 1_000)); // keepalives answered meanwhile
    expect(a.holds()).toBe(true);
    etcd.pause(true);
    try {
      await new Promise((r) => setTimeout(r, 2_100)); // past the lease's time: a standby could lead by now
      expect(a.holds()).toBe(false);
    } finally {
      etcd.pause(false);
    }
  }, 60_000);
});
