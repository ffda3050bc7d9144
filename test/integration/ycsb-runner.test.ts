/**
 * The YCSB runner end to end: `--verify` catches a store that drops, corrupts, mixes up,
 * loses or serves stale values (and passes an honest one); a tiny run on every adapter;
 * the `nova bench run` command with its JSON.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { totalmem } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ENGINES, engineByName, type KvStore } from '../../bench/ycsb/engines.js';
import { keyNumber } from '../../bench/ycsb/generators.js';
import { runSession, type SessionOptions } from '../../bench/ycsb/session.js';
import { EngineMemory } from '../../bench/ycsb/engine-memory.js';
import { cgroupRoot } from '../../src/common/memory-limit.js';
import { parseWorkload } from '../../bench/ycsb/workload.js';
import { SECRET_FILE } from '../../src/common/cluster-secret.js';
import { down, up } from '../../src/control/cluster-control.js';
import { BIN } from '../helpers/cluster.js';
import { ROOT } from '../helpers/peer-process.js';
import { tempDirs } from '../helpers/temp.js';

const parent = tempDirs('nova-ycsb-test-', 'all')();
// Made at the file's level: a hook registered inside a test never runs, and its directory stayed.
const oomDir = tempDirs('nova-ycsb-oom-', 'all');

function options(o: Partial<SessionOptions>): SessionOptions {
  return {
    engines: ['nova-embedded'], workloads: [parseWorkload('A')], dists: ['uniform'], records: 300, duration: 1, operations: 3000,
    concurrency: 8, valueSize: 256, scanLength: 10, zipfianConstant: 0.99, verify: true, sync: false, seed: 1, rounds: 1,
    dir: parent, keep: false, ...o,
  };
}

type Fault = (s: KvStore) => KvStore;
const sometimes = (k: Buffer): boolean => keyNumber(k) % 5 === 0;

const FAULTS: Record<string, { wrap: Fault; expect: 'stale' | 'corrupt' | 'wrongKey' | 'missing' }> = {
  'drops writes': { expect: 'stale', wrap: (s) => ({ ...s, put: async (k, v) => { if (!sometimes(k)) await s.put(k, v); } }) },
  'corrupts values': {
    expect: 'corrupt',
    wrap: (s) => ({ ...s, get: async (k) => { const v = await s.get(k); if (v && sometimes(k)) { const c = Buffer.from(v); c[100] ^= 1; return c; } return v; } }),
  },
  'mixes up keys': {
    expect: 'wrongKey',
    wrap: (s) => ({ ...s, get: async (k) => (sometimes(k) ? s.get(Buffer.from(`user${String(keyNumber(k) + 1).padStart(12, '0')}`)) : s.get(k)) }),
  },
  'loses keys': { expect: 'missing', wrap: (s) => ({ ...s, get: async (k) => (sometimes(k) ? undefined : s.get(k)) }) },
  'returns older writes': {
    expect: 'stale',
    wrap: (s) => {
      const previous = new Map<string, Buffer>();
      return {
        ...s,
        put: async (k, v) => {
          const old = await s.get(k);
          if (old) previous.set(k.toString('latin1'), old);
          await s.put(k, v);
        },
        get: async (k) => (sometimes(k) ? previous.get(k.toString('latin1')) ?? s.get(k) : s.get(k)),
      };
    },
  },
};

describe('nova bench --verify', () => {
  it('passes an honest store with zero errors, checking every read and every key at the end', async () => {
    const r = await runSession(options({ workloads: [parseWorkload('A'), parseWorkload('E'), parseWorkload('F')] }));
    for (const run of r.runs) {
      expect(run.errors, run.workload).toBe(0);
      expect(run.verify?.errors, `${run.workload}: ${run.verify?.samples.join('; ')}`).toBe(0);
      expect(run.verify!.reads).toBeGreaterThan(300);
      expect(run.verify!.finalChecked).toBeGreaterThanOrEqual(300);
    }
  });

  it.each(Object.entries(FAULTS))('catches a store that %s', async (_name, fault) => {
    const r = await runSession(options({ wrap: (_e, s) => fault.wrap(s) }));
    const v = r.runs[0].verify!;
    expect(v[fault.expect], JSON.stringify(v)).toBeGreaterThan(0);
    expect(v.errors).toBeGreaterThan(0);
  });
});

describe('nova bench adapters', () => {
  it.each(ENGINES.map((e) => e.name))('%s: loads, runs reads, updates, inserts and scans, and verifies clean', async (name) => {
    const engine = ENGINES.find((e) => e.name === name)!;
    // The peers are optional dependencies that scripts/setup.sh installs: missing is a failure here.
    expect(await engine.available()).toBeUndefined();
    const r = await runSession(options({
      engines: [name], records: 500, operations: 2000, workloads: [parseWorkload('A'), parseWorkload('E')], dists: ['zipfian'],
    }));
    expect(r.loads[name].records).toBe(500);
    for (const run of r.runs) {
      expect(run.errors, `${run.workload}: ${run.errorSamples.join('; ')}`).toBe(0);
      expect(run.verify?.errors, `${run.workload}: ${run.verify?.samples.join('; ')}`).toBe(0);
      expect(run.ops).toBe(2000);
    }
  });
});

describe('nova bench sessions', () => {
  it('runs several client processes against one cluster and merges their figures', async () => {
    // A variant: the others join the cluster it started, whose knobs it set.
    const r = await runSession(options({ engines: ['nova:lookup-index-bytes=1048576'], clients: 2, verify: false, records: 500, operations: 1000 }));
    const run = r.runs[0];
    expect(run.engine).toBe('nova:lookup-index-bytes=1048576');
    expect(run.clients).toBe(2);
    expect(run.ops).toBe(2000);
    expect(run.errors, run.errorSamples.join('; ')).toBe(0);
    expect(run.latency.read!.ops + run.latency.update!.ops).toBe(2000);
    expect(r.notes.join(' ')).toMatch(/2 client processes per engine/);
    // The cluster's LTC and StoCs wrote its logs: counted once, not once per client.
    expect(run.diskWriteBytes).toBeGreaterThan(0);
  });

  it('an engine name may carry the nova engine\'s knobs; the cluster it starts has them', async () => {
    const spec = 'nova:active-memtables=2:memtable-bytes=65536:compaction-jobs=1';
    const r = await runSession(options({ engines: [spec], verify: false, records: 2000, operations: 500 }));
    expect(r.runs[0].engine).toBe(spec);
    expect(r.runs[0].errors).toBe(0);
    // Each run says what the cluster did during it, from its figures before and after.
    expect(r.runs[0].storeNote).toMatch(/^range 1: imbalance (\d\.\d{4}|-) over \d+ counted writes, \d+ minor and \d+ major reorganizations \(\d+ Dranges duplicated at the end\), \d+ merges instead of flush, \d+ flushes; LTC pauses over the last 10 s: event loop delay p99 [\d.]+ ms, max [\d.]+ ms; GC [\d.]+ ms in \d+ \(major [\d.]+ ms\), the longest [\d.]+ ms; LTC memory at the end: RSS \d+ MiB, heap \d+, outside the heap \d+, counted by its budget \d+$/);
    expect(r.notes.join(' ')).toMatch(/nova:active-memtables=2:memtable-bytes=65536:compaction-jobs=1 reports: range 1: 2 Dranges, \d+ duplicated \(imbalance \d\.\d{4}; \d+ minor, \d+ major reorganizations\)/);
    expect(() => engineByName('nova:no-such-knob=1')).toThrow(/nova takes the knobs of nova up .*not "no-such-knob"/);
    expect(() => engineByName('nova:sync=maybe')).toThrow(/sync is true or false/);
    expect(() => engineByName('nova:active-memtables')).toThrow(/a setting is flag=value/);
    expect(() => engineByName('leveldb:x=1')).toThrow(/leveldb takes cache-size=BYTES \(its block cache\) or max-open-files=N, not "x"/);
    expect(() => engineByName('leveldb:cache-size=lots')).toThrow(/cache-size is a whole number/);
    expect(() => engineByName('leveldb:max-open-files=0')).toThrow(/max-open-files is a whole number/);
    expect(() => engineByName('rocksdb9:max-open-files=10000')).toThrow(/rocksdb9 takes cache-size=BYTES \(its block cache\), not "max-open-files"/);
    expect(() => engineByName('lmdb:x=1')).toThrow(/engine lmdb takes no settings/);
  });

  it('gives LevelDB the block cache and open tables its name carries (leveldb:cache-size=BYTES:max-open-files=N)', async () => {
    const spec = 'leveldb:cache-size=16777216:max-open-files=5000';
    if (await engineByName(spec).available()) return expect(await engineByName(spec).available()).toMatch(/not installed/);
    const r = await runSession(options({ engines: [spec], records: 500, operations: 1000 }));
    expect(r.runs[0].engine).toBe(spec);
    expect(r.runs[0].errors).toBe(0);
    expect(r.runs[0].verify?.errors).toBe(0);
  });

  it('fails at once, saying so, when an engine\'s process dies mid-run', async () => {
    const session = runSession(options({ operations: undefined, duration: 60, verify: false }));
    // Find the engine worker (a child of this process) once it runs, and kill it.
    let killed = false;
    for (let i = 0; i < 200 && !killed; i++) {
      await new Promise((res) => setTimeout(res, 50));
      const ps = spawnSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' }).stdout;
      const line = ps.split('\n').find((l) => l.includes('engine-worker'));
      if (line) {
        process.kill(Number(line.trim().split(/\s+/)[0]), 'SIGKILL');
        killed = true;
      }
    }
    expect(killed).toBe(true);
    const started = Date.now();
    await expect(session).rejects.toThrow(/nova-embedded: its process exited \(signal SIGKILL\) with requests pending/);
    expect(Date.now() - started).toBeLessThan(10_000);
  });
});

describe('nova bench --engine-memory', () => {
  const memoryGroups = (): boolean => {
    try {
      new EngineMemory(2 ** 30, 'probe');
      return true;
    } catch {
      return false;
    }
  };
  /** The bench sessions' memory groups on this machine (v1's memory hierarchy or v2's). */
  const sessionGroups = (): string[] => {
    for (const base of [join(cgroupRoot(), 'memory', 'nova-bench'), join(cgroupRoot(), 'nova-bench')]) {
      if (existsSync(base)) return readdirSync(base, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
    }
    return [];
  };
  const running = (dir: string): string[] => spawnSync('pgrep', ['-f', dir], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean);

  it('holds each engine, a cluster\'s processes all together, to the same memory, and says what each used', async () => {
    if (!memoryGroups()) {
      await expect(runSession(options({ engineMemoryBytes: 2 ** 30 }))).rejects.toThrow(/--engine-memory: .*leave out --engine-memory/);
      return;
    }
    const before = sessionGroups();
    const r = await runSession(options({ engines: ['nova', 'nova-embedded'], engineMemoryBytes: 2 ** 30, verify: false, records: 2000, operations: 500 }));
    expect(sessionGroups().filter((g) => !before.includes(g))).toEqual([]);
    expect(r.runs.map((x) => x.errors)).toEqual([0, 0]);
    expect(r.runs.every((x) => x.warmedBytes === 0)).toBe(true);
    const notes = r.notes.join(' ');
    expect(notes).toMatch(/held to 1024 MiB together \(a memory cgroup each\); its files were not read before a run/);
    const m = /Peak memory of each engine's group, page cache included, against 1024 MiB: nova (\d+) MiB, nova-embedded (\d+) MiB\./.exec(notes);
    expect(m, notes).not.toBeNull();
    // The client process alone is under 150 MiB; the cluster's coordinator, LTC and three StoCs are in its group too.
    expect(Number(m![1])).toBeGreaterThan(150);
    expect(running(parent)).toEqual([]); // the cluster stopped with its session
    expect(Number(m![2])).toBeGreaterThan(0);
    expect(Number(m![1])).toBeLessThanOrEqual(1024);
  }, 120_000);

  it('an engine out of its memory fails the session, saying so, and the cluster it started is stopped', async () => {
    if (!memoryGroups()) return;
    const dir = oomDir();
    const before = sessionGroups();
    await expect(runSession(options({ engines: ['nova'], engineMemoryBytes: 64 * 2 ** 20, verify: false, dir })))
      .rejects.toThrow(/the OOM killer of --engine-memory 67108864 ran in nova's group \d+ time\(s\): give the engines more memory/);
    expect(running(dir)).toEqual([]);
    expect(sessionGroups().filter((g) => !before.includes(g))).toEqual([]); // its group went with it
  }, 180_000);

  it.each([
    [{ cluster: { coordinator: '127.0.0.1:1' } }, /not one given by --coordinator/],
    [{ cluster: { cap: 'ltc.cpu=0.5' } }, /--engine-memory with --cap is not implemented/],
    [{ wrap: (_e: string, s: KvStore) => s }, /wrapped stores run in-process/],
    [{ engines: ['nova', 'nova-embedded'], engineMemoryBytes: Math.ceil(totalmem() / 2) }, /for each of 2 engines is .* more than 85% of the .* GiB this bench runs in: .*the kernel would take memory from all of them/],
  ])('is refused where it cannot hold (%#)', async (o, why) => {
    await expect(runSession(options({ engines: ['nova'], engineMemoryBytes: 2 ** 30, ...o }))).rejects.toThrow(why);
  });
});

describe('nova bench run', () => {
  const nova = (...args: string[]) => spawnSync(process.execPath, [join(ROOT, 'bin', 'nova.js'), ...args], { encoding: 'utf8', timeout: 60_000 });

  it('writes a JSON with the figures a run must report, and an HTML report', () => {
    const json = join(parent, 'run.json');
    const html = join(parent, 'run.html');
    const r = nova('bench', 'run', '--engine', 'nova-embedded', '--workload', 'SW50', '--dist', 'uniform', '--records', '400',
      '--operations', '1000', '--value-size', '128', '--verify', '--dir', parent, '--json', json, '--html', html);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/nova-embedded\s+SW50\s+uniform/);
    const out = JSON.parse(readFileSync(json, 'utf8')) as { runs: Array<Record<string, unknown>> };
    const run = out.runs[0] as { diskWriteBytes: number; engine: string; workload: string; dist: string; records: number; ops: number; seconds: number; opsPerSec: number; errors: number; latency: Record<string, { p50Us: number; p99Us: number; p999Us: number }>; verify: { errors: number } };
    expect(run).toMatchObject({ engine: 'nova-embedded', workload: 'SW50', dist: 'uniform', records: 400, ops: 1000, errors: 0 });
    expect(run.opsPerSec).toBeGreaterThan(0);
    for (const op of ['scan', 'update']) {
      expect(run.latency[op].p50Us).toBeGreaterThan(0);
      expect(run.latency[op].p999Us).toBeGreaterThanOrEqual(run.latency[op].p99Us);
    }
    expect(run.verify.errors).toBe(0);
    // ~500 updates reached the engine's log: storage writes were counted, and shown.
    expect(run.diskWriteBytes).toBeGreaterThan(0);
    expect((out as unknown as { loads: Record<string, { diskWriteBytes: number }> }).loads['nova-embedded'].diskWriteBytes).toBeGreaterThan(0);
    expect(r.stdout).toMatch(/KB written\/op/);
    const page = readFileSync(html, 'utf8');
    expect(page).toMatch(/<svg/);
    expect(page).not.toMatch(/<script|https?:\/\//);
  });

  it('runs against a running cluster given its coordinator and, for the cluster to let it in, its secret file', async () => {
    const dir = join(parent, 'running');
    const file = await up({ dir, host: '127.0.0.1', bin: BIN, coordinatorArgs: [], timeoutMs: 60_000 });
    try {
      const args = ['bench', 'run', '--engine', 'nova', '--coordinator', file.coordinator, '--workload', 'RW50', '--records', '500', '--operations', '500',
        '--quiet-wait', '0', '--dir', parent];
      const refused = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, NOVA_SECRET_FILE: undefined } });
      expect(refused.status).not.toBe(0);
      expect(refused.stderr).toMatch(/secret/);
      const r = nova(...args, '--secret-file', join(dir, SECRET_FILE));
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/nova\s+RW50\s+/);
    } finally {
      await down(dir);
    }
  }, 120_000);

  it('says what is wrong with a bad engine, workload or distribution', () => {
    expect(nova('bench', 'run', '--engine', 'nope').stderr).toMatch(/unknown engine "nope": use one of nova, nova-embedded, leveldb/);
    expect(nova('bench', 'run', '--workload', 'Z').stderr).toMatch(/unknown workload "Z"/);
    expect(nova('bench', 'run', '--dist', 'pareto').stderr).toMatch(/unknown distribution "pareto"/);
    expect(nova('bench', 'run', '--value-size', '8', '--records', '10').stderr).toMatch(/value size 8/);
    expect(nova('bench', 'run', '--clients', '4').stderr).toMatch(/--clients 4: nova-embedded run inside one process/);
    expect(nova('bench', 'run', '--engine', 'nova', '--clients', '2', '--verify').stderr).toMatch(/--verify needs --clients 1/);
  });
});
