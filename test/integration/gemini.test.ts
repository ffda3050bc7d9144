/**
 * The Gemini cache with real processes: a cluster (`nova up`), cache instances (`nova cache
 * run`) killed with SIGKILL and started again on their directories, and clients reading
 * through the cache (NovaClient's `cache` option) under a verified read-heavy workload.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { NovaClient } from '../../src/client/nova-client.js';
import { down, fetchStatus, readClusterFile } from '../../src/control/cluster-control.js';
import { fragmentOf, routeOf } from '../../src/cluster/gemini.js';
import { TcpRpcClient } from '../../src/net/tcp-rpc-client.js';
import type { CacheServerStats } from '../../src/stoc/cache-server.js';
import { BIN, startCluster, type TestCluster } from '../helpers/cluster.js';
import { until } from '../helpers/until.js';

const LEASE_MS = 1_500;

interface Caches {
  start(id: number): Promise<void>;
  kill(id: number): Promise<void>;
  stats(id: number): Promise<CacheServerStats>;
  stopAll(): void;
}

function caches(c: TestCluster): Caches {
  const procs = new Map<number, ChildProcess>();
  const coordinator = readClusterFile(c.dir)!.coordinator;
  const address = async (id: number): Promise<string> => (await fetchStatus(coordinator)).config.members.find((m) => m.role === 'cache' && m.id === id)!.address;
  return {
    start: async (id) => {
      const log = createWriteStream(join(c.dir, 'logs', `cache-${id}.log`), { flags: 'a' });
      const p = spawn(process.execPath, [BIN, 'cache', 'run', '--id', String(id), '--coordinator', coordinator, '--dir', join(c.dir, `cache-${id}`),
        '--secret-file', join(c.dir, 'secret'), '--memory-bytes', String(64 * 2 ** 20), '--disk-bytes', String(256 * 2 ** 20)], { stdio: ['ignore', 'pipe', 'pipe'] });
      p.stdout!.pipe(log);
      p.stderr!.pipe(log);
      procs.set(id, p);
      const pid = p.pid;
      await until(async () => (await fetchStatus(coordinator)).cache?.instances.some((i) => i.id === id && i.alive) === true &&
        (await fetchStatus(coordinator)).members.some((m) => m.role === 'cache' && m.id === id && m.pid === pid), 20_000);
    },
    kill: async (id) => {
      const p = procs.get(id)!;
      const gone = new Promise((resolve) => p.once('exit', resolve));
      p.kill('SIGKILL');
      await gone;
    },
    stats: async (id) => {
      const link = await TcpRpcClient.connect(await address(id), { timeoutMs: 3_000 });
      try {
        return await link.call<CacheServerStats>('stats', [], 3_000);
      } finally {
        link.close();
      }
    },
    stopAll: () => {
      for (const p of procs.values()) if (p.exitCode === null) p.kill('SIGKILL');
    },
  };
}

const key = (i: number): Buffer => Buffer.from(`user${String(i).padStart(8, '0')}`);

/**
 * Reads (90%) and overwrites (10%) keys 0..n-1, skewed, with `depth` calls at once until
 * `stop()`. Versions grow per key and one write per key is in flight at a time, so a read that
 * returns a version below the one acknowledged before it began is stale.
 */
async function readHeavy(c: NovaClient, n: number, depth: number, stop: () => boolean): Promise<{ reads: number; writes: number; stale: string[] }> {
  const acked = new Array<number>(n).fill(0);
  const next = new Array<number>(n).fill(1);
  const writing = new Set<number>();
  const stale: string[] = [];
  let reads = 0;
  let writes = 0;
  let seed = 7;
  const random = (): number => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const worker = async (): Promise<void> => {
    while (!stop()) {
      const k = Math.floor(random() * random() * n);
      if (random() < 0.1 && !writing.has(k)) {
        writing.add(k);
        const v = next[k]++;
        try {
          await c.put(key(k), Buffer.from(`${v}:`.padEnd(200, 'x')));
          acked[k] = v;
          writes++;
        } finally {
          writing.delete(k);
        }
      } else {
        const floor = acked[k];
        const got = await c.get(key(k));
        const v = got === undefined ? 0 : Number(got.toString().split(':')[0]);
        reads++;
        if (v < floor) stale.push(`${key(k).toString()}: read ${v}, ${floor} acknowledged before`);
      }
    }
  };
  await Promise.all(Array.from({ length: depth }, worker));
  return { reads, writes, stale };
}

describe('Gemini cache, real processes', () => {
  let cluster: TestCluster | undefined;
  let cs: Caches | undefined;
  afterEach(async () => {
    cs?.stopAll();
    await cluster?.destroy();
    cluster = undefined;
    cs = undefined;
  });

  async function setUp(mode: string): Promise<{ client: NovaClient; coordinator: string }> {
    cluster = await startCluster({ stocs: 1, args: ['--cache-mode', mode, '--cache-lease-ms', String(LEASE_MS), '--cache-fragments', '16'] });
    cs = caches(cluster);
    await cs.start(1);
    await cs.start(2);
    const coordinator = readClusterFile(cluster.dir)!.coordinator;
    await until(async () => (await fetchStatus(coordinator)).config.cache?.fragments.some((f) => f.primary === 2) === true, 20_000);
    const client = await NovaClient.connect({ dir: cluster.dir, cache: mode as 'gemini-o', timeoutMs: 20_000 });
    return { client, coordinator };
  }

  it('SIGKILL of an instance during a read-heavy workload: no stale read, and its entries are reused once it is back', async () => {
    const { client, coordinator } = await setUp('gemini-o');
    try {
      const n = 400;
      for (let i = 0; i < n; i++) await client.put(key(i), Buffer.from('0:'));
      for (let i = 0; i < n; i++) await client.get(key(i)); // warm: every key cached
      let stop = false;
      const work = readHeavy(client, n, 8, () => stop);
      await new Promise((r) => setTimeout(r, 1_000));
      await cs!.kill(2);
      await until(async () => ((await fetchStatus(coordinator)).cache?.fragments.transient ?? 0) > 0, 10_000);
      await new Promise((r) => setTimeout(r, 1_500));
      await cs!.start(2);
      await until(async () => ((await fetchStatus(coordinator)).cache?.fragments.transient ?? 1) === 0, 15_000);
      const back = await cs!.stats(2);
      expect(back.store.loaded).toBeGreaterThan(50); // what it had on disk
      await new Promise((r) => setTimeout(r, 2_000));
      stop = true;
      const r = await work;
      expect(r.stale).toEqual([]);
      expect(r.writes).toBeGreaterThan(20);
      const after = await cs!.stats(2);
      expect(after.counters.hits).toBeGreaterThan(100); // served from what survived
      const s = await fetchStatus(coordinator);
      expect(s.cache!.discards).toBe(0);
      // Every key reads through the cache what the LTCs hold.
      const plain = await NovaClient.connect({ dir: cluster!.dir, timeoutMs: 20_000 });
      try {
        for (let i = 0; i < n; i += 3) expect((await client.get(key(i)))?.toString()).toBe((await plain.get(key(i)))?.toString());
      } finally {
        plain.close();
      }
    } finally {
      client.close();
    }
  }, 120_000);

  it('a dirty list lost with its secondary: the primary\'s entries for the fragment are discarded, never served', async () => {
    const { client, coordinator } = await setUp('gemini-o');
    const plain = await NovaClient.connect({ dir: cluster!.dir, timeoutMs: 20_000 });
    try {
      const config = (await fetchStatus(coordinator)).config;
      const keys = Array.from({ length: 200 }, (_, i) => key(i)).filter((k) => routeOf(config.cache!, k).primary?.id === 2).slice(0, 40);
      expect(keys.length).toBeGreaterThan(10);
      for (const k of keys) await client.put(k, Buffer.from('1:'));
      for (const k of keys) expect((await client.get(k))?.toString()).toBe('1:'); // cached on instance 2
      await cs!.kill(2);
      await until(async () => ((await fetchStatus(coordinator)).cache?.fragments.transient ?? 0) > 0, 10_000);
      for (const k of keys) await client.put(k, Buffer.from('2:')); // on instance 1's dirty lists
      await cs!.kill(1); // and the dirty lists with it
      await new Promise((r) => setTimeout(r, LEASE_MS + 1_000));
      await cs!.start(2);
      await until(async () => {
        const s = await fetchStatus(coordinator);
        return s.config.cache!.fragments.filter((f) => keys.some((k) => fragmentOf(k, 16) === f.id)).every((f) => f.mode === 'normal' && f.primary === 2);
      }, 15_000);
      const s = await fetchStatus(coordinator);
      expect(s.cache!.discards).toBeGreaterThan(0);
      for (const k of keys) expect((await client.get(k))?.toString()).toBe('2:');
      expect((await cs!.stats(2)).counters.discarded).toBeGreaterThan(0); // its old entries were dropped, not served
      for (const k of keys) expect((await plain.get(k))?.toString()).toBe('2:');
    } finally {
      client.close();
      plain.close();
    }
  }, 120_000);

  it('leases of a client that stops midway expire: an I lease lets another reader fill the entry, a Q lease deletes it', async () => {
    const { client, coordinator } = await setUp('gemini-o');
    try {
      const s = await fetchStatus(coordinator);
      const k = key(5);
      const route = routeOf(s.config.cache!, k);
      const at = s.config.members.find((m) => m.role === 'cache' && m.id === route.primary!.id)!.address;
      const link = await TcpRpcClient.connect(at, { timeoutMs: 3_000 });
      try {
        const cfg = (await fetchStatus(coordinator)).config.id;
        const floor = route.primary!.floor;
        const first = await link.call<{ token?: number }>('iqget', [cfg, k, floor]);
        expect(first.token).toBeGreaterThan(0); // the paused client's I lease: it never fills
        expect(await link.call<{ backoff?: boolean }>('iqget', [cfg, k, floor])).toEqual({ backoff: true });
        await new Promise((r) => setTimeout(r, 5_500)); // the lease's lifetime
        const second = await link.call<{ token?: number }>('iqget', [cfg, k, floor]);
        expect(second.token).toBeGreaterThan(first.token!);
        expect(await link.call('iqset', [cfg, k, Buffer.from('0:'), first.token, route.fragment])).toBe(false); // too late
        expect(await link.call('iqset', [cfg, k, Buffer.from('9:'), second.token, route.fragment])).toBe(true);
        // A writer that takes its Q lease and stops: no reader fills the key meanwhile, and the entry stays deleted after.
        await link.call('qareg', [cfg, k, null]);
        expect(await link.call('iqget', [cfg, k, floor])).toEqual({});
        await new Promise((r) => setTimeout(r, 6_500));
        const later = await link.call<{ value?: Uint8Array; token?: number }>('iqget', [cfg, k, floor]);
        expect(later.value).toBeUndefined();
        expect(later.token).toBeGreaterThan(0);
      } finally {
        link.close();
      }
      expect((await client.get(k))?.toString()).toBeUndefined(); // never written to the LTCs
    } finally {
      client.close();
    }
  }, 120_000);

  it('nova up --caches starts cache instances; the client commands go through them; status and cache stats show them; down stops them', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nova-cache-cli-'));
    const nova = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 120_000 });
    try {
      const started = nova('up', '--dir', dir, '--stocs', '1', '--caches', '2', '--cache-mode', 'gemini-i', '--cache-memory', String(16 * 2 ** 20));
      expect(started.status, started.stderr).toBe(0);
      expect(started.stdout).toContain('--cache gemini-i');
      expect(readClusterFile(dir)!.components.filter((c) => c.role === 'cache').map((c) => c.id)).toEqual([1, 2]);
      // The memory knobs reach the processes: each instance's entries, the coordinator's heap (its default).
      const cmdline = (pid: number): string[] => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      for (const c of readClusterFile(dir)!.components) {
        if (c.role === 'cache') expect(cmdline(c.pid).join(' ')).toContain(`--memory-bytes ${16 * 2 ** 20}`);
        if (c.role === 'coordinator') expect(cmdline(c.pid)).toContain('--max-old-space-size=256');
      }
      expect(nova('put', 'k', 'v1', '--dir', dir, '--cache', 'gemini-i').status).toBe(0);
      for (let i = 0; i < 2; i++) expect(nova('get', 'k', '--dir', dir, '--cache', 'gemini-i').stdout).toBe('v1');
      const wrong = nova('get', 'k', '--dir', dir, '--cache', 'gemini-o');
      expect(wrong.status).not.toBe(0);
      expect(wrong.stderr).toContain('the cluster\'s cache runs gemini-i, not gemini-o');
      const status = nova('status', '--dir', dir);
      expect(status.stdout).toMatch(/cache \(gemini-i\): fragments 64 normal, 0 transient, 0 recovery/);
      expect(status.stdout).toMatch(/instance 1 up/);
      const stats = JSON.parse(nova('cache', 'stats', '--dir', dir, '--json').stdout) as { instances: CacheServerStats[] };
      expect(stats.instances.map((i) => i.id)).toEqual([1, 2]);
      expect(stats.instances.reduce((n, i) => n + i.counters.hits, 0)).toBe(1); // the second get
      const fewer = nova('up', '--dir', dir, '--caches', '1');
      expect(fewer.status).not.toBe(0);
      expect(fewer.stderr).toContain('removing cache instances is not implemented yet');
      expect(nova('down', '--dir', dir).stdout).toMatch(/stopped 5 process/);
    } finally {
      await down(dir).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
