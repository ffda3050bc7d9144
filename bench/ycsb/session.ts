/**
 * `nova bench run` and `nova bench compare`: open each engine in a fresh directory, load it
 * once, settle it, then run the cells (workload × distribution) with the engines interleaved
 * in every cell — A B C, A B C, … — so that the machine's drift hits all of them alike.
 * Keys inserted by one cell stay for the next, as in YCSB's run-after-run practice. Each
 * engine runs in a process of its own (engine-worker.ts); tests that wrap stores run in-process.
 */
import { fork } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir, totalmem } from 'node:os';
import { dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { engineByName, type ClusterBenchOptions, type KvStore } from './engines.js';
import { coordinatorOf } from '../../src/client/nova-client.js';
import { SECRET_FILE } from '../../src/common/cluster-secret.js';
import { down, readClusterFile } from '../../src/control/cluster-control.js';
import { memoryLimitOfSelf } from '../../src/common/memory-limit.js';
import type { Distribution } from './generators.js';
import { load, mergeRuns, run, type LoadResult, type Progress, type RunResult, type RunSettings, type RunSpec, type Target } from './runner.js';
import type { WorkerCall, WorkerReply, WorkerRequest } from './engine-worker.js';
import { KeySpace } from './verifier.js';
import { QUIET_BUSY_CORES, awaitQuiet } from './quiet.js';
import { EngineMemory } from './engine-memory.js';
import { overBudgetNotes } from './peak-memory.js';
import { checkValueSize } from './values.js';
import type { Workload } from './workload.js';

export interface SessionOptions extends RunSettings {
  engines: string[];
  workloads: Workload[];
  /** undefined: each workload's own default (D: latest; others zipfian). */
  dists?: Distribution[];
  records: number;
  sync: boolean;
  /** Cells run this many times (engines interleaved each time). */
  rounds: number;
  /** Parent of the engines' directories (default: the OS temp dir); removed after unless `keep`. */
  dir?: string;
  keep: boolean;
  progress?: Progress;
  /** Tests wrap stores to inject faults. */
  wrap?: (engine: string, store: KvStore) => KvStore;
  /** The `nova` engine's cluster. */
  cluster?: ClusterBenchOptions;
  /** Client processes per engine (only `nova` can be shared by several). */
  clients?: number;
  /** Before each run, wait up to this long (ms) for the machine to go quiet (quiet.ts); 0 or absent: do not wait. */
  quietWaitMs?: number;
  /** Each engine's processes together, page cache included, get this much memory (engine-memory.ts); absent: unbounded. */
  engineMemoryBytes?: number;
}

/** The most of the machine's memory the engines' groups may be given together; the rest is the OS's and the bench's. */
const ENGINE_MEMORY_SHARE = 0.85;
const gib = (bytes: number): string => (bytes / 2 ** 30).toFixed(1);

export interface SessionResult {
  startedAt: string;
  node: string;
  options: Omit<SessionOptions, 'progress' | 'wrap' | 'workloads'> & { workloads: string[] };
  loads: Record<string, LoadResult>;
  runs: RunResult[];
  notes: string[];
}

export async function runSession(o: SessionOptions): Promise<SessionResult> {
  checkValueSize(o.valueSize);
  const adapters = o.engines.map(engineByName);
  for (const a of adapters) {
    const why = await a.available();
    if (why) throw new Error(`engine ${a.name} is not available: ${why}`);
  }
  const clients = o.clients ?? 1;
  if (clients > 1) {
    const local = o.engines.filter((e) => e.split(':')[0] !== 'nova');
    if (local.length > 0) {
      throw new Error(`--clients ${clients}: ${local.join(', ')} run inside one process and cannot be shared with other client processes; only the cluster engine "nova" (and its variants, nova:flag=value) can. Raise --concurrency instead, or run them separately.`);
    }
    if (o.verify) throw new Error(`--verify needs --clients 1: a client can judge staleness only against the writes it saw acknowledged, and with ${clients} clients the others' writes are invisible to it`);
    if (o.wrap) throw new Error('wrapped stores run in-process: --clients must be 1');
  }
  if (o.engineMemoryBytes !== undefined) {
    if (o.wrap) throw new Error('--engine-memory bounds engines in processes of their own, and wrapped stores run in-process');
    if (o.cluster?.coordinator) throw new Error('--engine-memory bounds the cluster the bench starts, not one given by --coordinator');
    // Under cgroup v2 a capped component would leave its engine's group; not implemented.
    if (o.cluster?.cap) throw new Error('--engine-memory with --cap is not implemented: cap the components\' memory with --cap role.memory=SIZE instead');
    // Each group keeps its page cache while the others run: past the machine's memory the kernel
    // takes it back from every group, and no engine has what it was given.
    const all = o.engineMemoryBytes * o.engines.length;
    const machine = Math.min(totalmem(), memoryLimitOfSelf() ?? Infinity);
    if (all > machine * ENGINE_MEMORY_SHARE) {
      throw new Error(`--engine-memory ${gib(o.engineMemoryBytes)} GiB for each of ${o.engines.length} engines is ${gib(all)} GiB, more than ${ENGINE_MEMORY_SHARE * 100}% of ` +
        `the ${gib(machine)} GiB this bench runs in: each engine keeps its page cache while the others run, so the kernel would take memory from all of them. Give less, or compare fewer engines at once`);
    }
  }
  const parent = o.dir ?? tmpdir();
  mkdirSync(parent, { recursive: true });
  const root = mkdtempSync(join(parent, 'nova-bench-'));
  const handles: EngineHandle[] = [];
  const loads: Record<string, LoadResult> = {};
  const runs: RunResult[] = [];
  const reports: string[] = [];
  let memory: EngineMemory | undefined;
  try {
    memory = o.engineMemoryBytes === undefined ? undefined : new EngineMemory(o.engineMemoryBytes, root);
    for (const [i, a] of adapters.entries()) {
      const dir = join(root, a.name);
      mkdirSync(dir, { recursive: true });
      const place = memory && ((pid: number) => memory!.place(i, a.name, pid));
      const h = o.wrap ? await inProcess(a.name, dir, o) : await inChild(a.name, dir, o, place);
      handles.push(h);
      loads[a.name] = await h.load();
      if (clients > 1) handles[handles.length - 1] = await several(h, a.name, dir, clients, o, place);
    }
    let seed = o.seed;
    for (let round = 0; round < o.rounds; round++) {
      for (const w of o.workloads) {
        for (const dist of o.dists ?? [w.defaultDist]) {
          seed++;
          const { progress: _p, wrap: _w, ...settings } = o;
          for (let i = 0; i < handles.length; i++) {
            const q = await awaitQuiet({
              maxMs: o.quietWaitMs ?? 0,
              onBusy: (cores, ms) => o.progress?.(`[${adapters[i].name} ${w.name} ${dist}] waiting for the machine to go quiet: ` +
                `${cores.toFixed(2)} CPUs busy, ${(ms / 1000).toFixed(1)} s`, false),
            });
            // Under a memory limit, what stays cached is the limit's to decide, not a read of every file.
            const r = await handles[i].run({ ...settings, workload: w, dist, seed, ...(memory ? { warm: false } : {}) });
            if (o.quietWaitMs) r.quietWait = q;
            runs.push(r);
          }
        }
      }
    }
    for (let i = 0; i < handles.length; i++) {
      const r = await handles[i].report();
      if (r) reports.push(`${adapters[i].name} reports: ${r}.`);
    }
    if (memory) reports.push(memoryNote(memory, adapters.map((a) => a.name)));
  } catch (err) {
    let killed: Array<readonly [string, number]> = [];
    try {
      if (memory) killed = adapters.map((a, i) => [a.name, memory!.use(i, a.name)?.oomKills ?? 0] as const).filter(([, n]) => n > 0);
    } catch {
      // the groups cannot be read: the error as it is
    }
    if (killed.length === 0) throw err;
    const why = Object.assign(new Error(`${(err as Error).message} (the OOM killer of --engine-memory ${o.engineMemoryBytes} ran in ` +
      `${killed.map(([e, n]) => `${e}'s group ${n} time(s)`).join(', ')}: give the engines more memory)`, { cause: err }), { code: (err as { code?: unknown }).code });
    throw why;
  } finally {
    for (const h of handles) await h.close().catch(() => undefined);
    // A client process that died (killed, out of memory) left the cluster it started running.
    for (const a of adapters) {
      const dir = join(root, a.name);
      if (o.cluster?.coordinator) continue;
      try {
        if (readClusterFile(dir)) await down(dir);
      } catch {
        // a cluster.json left torn, or a component that would not stop: nothing more to do here
      }
    }
    // What is still in a group (a cluster that died before it was written down) goes with it.
    await memory?.remove().catch(() => undefined);
    if (!o.keep) rmSync(root, { recursive: true, force: true });
  }
  const { progress: _p, wrap: _w, workloads, ...rest } = o;
  return {
    startedAt: new Date().toISOString(),
    node: process.version,
    options: { ...rest, workloads: workloads.map((w) => w.name), dir: o.keep ? root : o.dir },
    loads,
    runs,
    notes: [
      `Each engine in its own fresh directory under ${o.keep ? root : parent}; loaded once (${o.records.toLocaleString('en-US')} records of ${o.valueSize} B, ${batchesNote(loads)}), then settled (${Object.entries(loads).map(([e, l]) => `${e}: ${l.settled}`).join('; ')}).`,
      o.engineMemoryBytes === undefined ? 'Before each run the engine\'s files are read once, so each starts with its data in the page cache.'
        : `Each engine's processes (the bench's client, the engine, a cluster it starts) and the page cache of its files were held to ${(o.engineMemoryBytes / 2 ** 20).toFixed(0)} MiB together (a memory cgroup each); its files were not read before a run.`,
      quietNote(runs, o.quietWaitMs ?? 0),
      `Cells run with the engines interleaved (${o.engines.join(', ')}), ${o.rounds} round(s); keys inserted by a cell remain for the next.`,
      `${clients > 1 ? `${clients} client processes per engine, each with` : 'Each engine runs in a process of its own, with the client in it:'} ${o.concurrency} requests outstanding; writes ${o.sync ? 'synced (fdatasync before the ack)' : 'not synced (durable against a process crash, not a power loss)'}.`,
      ...overBudgetNotes(runs),
      ...reports,
    ],
  };
}

function memoryNote(memory: EngineMemory, engines: string[]): string {
  const parts = engines.map((e, i) => {
    const u = memory.use(i, e);
    return u ? `${e} ${Number.isNaN(u.peakBytes) ? '?' : (u.peakBytes / 2 ** 20).toFixed(0)} MiB${u.oomKills > 0 ? ` (${u.oomKills} OOM kill(s))` : ''}` : `${e} -`;
  });
  return `Peak memory of each engine's group, page cache included, against ${(memory.bytes / 2 ** 20).toFixed(0)} MiB: ${parts.join(', ')}.`;
}

function batchesNote(loads: Record<string, LoadResult>): string {
  const by = new Map<number, string[]>();
  for (const [e, l] of Object.entries(loads)) by.set(l.batch, [...(by.get(l.batch) ?? []), e]);
  return [...by].map(([n, es]) => `${es.join(', ')}: ${n.toLocaleString('en-US')} records per load write`).join('; ');
}

function quietNote(runs: RunResult[], maxMs: number): string {
  const measured = runs.filter((r) => r.quietWait?.measured);
  if (maxMs <= 0 || measured.length === 0) {
    return `Runs started without waiting for the machine to go quiet${maxMs > 0 ? ' (its CPU use could not be read)' : ''}: ` +
      'background work an engine left from its last cell (compactions), or another engine left, may run during a run.';
  }
  const waits = measured.map((r) => r.quietWait!.waitedMs).sort((a, b) => a - b);
  const busy = measured.filter((r) => !r.quietWait!.quiet).length;
  const unmeasured = runs.length - measured.length;
  const s = (ms: number): string => (ms / 1000).toFixed(1);
  const range = (lo: string, hi: string): string => (lo === hi ? lo : `${lo}–${hi}`);
  return `Before each run the machine's CPUs were let go quiet (under ${QUIET_BUSY_CORES} of a CPU busy over 0.5 s, at most ` +
    `${s(maxMs)} s), so CPU work an engine left from an earlier cell (compactions, its own or another's) does not run during it ` +
    `and is charged to no run: waited ${range(s(waits[0]), s(waits[waits.length - 1]))} s` +
    `${busy > 0 ? `; ${busy} run(s) started busy after the cap` : ''}${unmeasured > 0 ? `; ${unmeasured} run(s) could not measure CPU use and did not wait` : ''}. ` +
    'Only CPU is watched, not the kernel writing back dirty pages.';
}

/** An engine the session drives: in this process (tests that wrap stores) or in its own. */
interface EngineHandle {
  load(): Promise<LoadResult>;
  run(spec: RunSpec): Promise<RunResult>;
  /** What the store says about itself ('' if nothing). */
  report(): Promise<string>;
  close(): Promise<void>;
}

async function inProcess(engine: string, dir: string, o: SessionOptions): Promise<EngineHandle> {
  const opened = await engineByName(engine).open(dir, { sync: o.sync, records: o.records, cluster: o.cluster });
  const store = o.wrap ? o.wrap(engine, opened) : opened;
  const t: Target = { engine, dir, store, sync: o.sync, keys: new KeySpace(o.records), records: o.records };
  return {
    load: () => load(t, o.valueSize, o.verify, t.store.loadBatch ?? 1000, o.progress),
    run: (spec) => run(t, spec, o.progress),
    report: async () => (await store.report?.()) ?? '',
    close: () => store.close(),
  };
}

/**
 * `clients` processes driving one cluster: `main` loaded it; the others join it by its
 * coordinator, adopt the loaded key space, and run each spec at the same time with seeds of
 * their own. Their results merge into one (runner.ts mergeRuns).
 */
async function several(main: EngineHandle, engine: string, dir: string, clients: number, o: SessionOptions, place?: (pid: number) => void): Promise<EngineHandle> {
  const secretFile = o.cluster?.secretFile ?? (o.cluster?.coordinator ? undefined : join(dir, SECRET_FILE));
  // The others join the cluster the first started (its knobs and caps are the cluster's already).
  const joined = { ...o, cluster: { ...o.cluster, coordinator: o.cluster?.coordinator ?? coordinatorOf(dir), secretFile, cap: undefined } };
  const extras: ChildHandle[] = [];
  try {
    for (let i = 1; i < clients; i++) {
      const e = await inChild(engine.split(':')[0], dir, joined, place);
      extras.push(e);
      await e.adopt();
    }
  } catch (err) {
    for (const e of extras) await e.close().catch(() => undefined);
    throw err;
  }
  return {
    load: main.load,
    run: async (spec) => mergeRuns(await Promise.all([
      main.run(spec),
      ...extras.map((e, i) => e.run({ ...spec, seed: spec.seed + 7919 * (i + 1), warm: false, schedule: undefined })),
    ])),
    report: main.report,
    close: async () => {
      for (const e of extras) await e.close().catch(() => undefined);
      await main.close();
    },
  };
}

interface ChildHandle extends EngineHandle {
  /** Marks the records as loaded (another process loaded them). */
  adopt(): Promise<void>;
}

// Run from the TypeScript sources (the tests), the worker is still the built one in dist/.
const HERE = fileURLToPath(import.meta.url);
const WORKER = HERE.includes(`${sep}dist${sep}`)
  ? join(dirname(HERE), 'engine-worker.js')
  : join(dirname(HERE), '..', '..', 'dist', 'bench', 'ycsb', 'engine-worker.js');

/**
 * The engine in a child process (engine-worker.ts); its death fails what is pending. `place` puts
 * the process where it must run before it opens the engine.
 */
async function inChild(engine: string, dir: string, o: SessionOptions, place?: (pid: number) => void): Promise<ChildHandle> {
  const child = fork(WORKER, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], serialization: 'advanced' });
  try {
    if (place) {
      if (child.pid === undefined) throw new Error(`${engine}: its process did not start`);
      place(child.pid);
    }
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();
  let nextId = 1;
  let dead: Error | undefined;
  child.on('message', (m: WorkerReply) => {
    if ('op' in m) {
      o.progress?.(m.line, m.final);
      return;
    }
    const p = pending.get(m.id);
    if (!p) return;
    pending.delete(m.id);
    clearTimeout(p.timer);
    if (m.ok) p.resolve(m.result);
    else p.reject(new Error(`${engine}: ${m.error}`));
  });
  child.on('exit', (code, signal) => {
    dead = new Error(`${engine}: its process exited (${signal ? `signal ${signal}` : `code ${code}`}) with requests pending`);
    for (const p of pending.values()) {
      clearTimeout(p.timer);
      p.reject(dead);
    }
    pending.clear();
  });
  // Deadlines: generous, but a hung engine fails the session instead of hanging it.
  const call = <T>(req: WorkerCall, deadlineMs: number): Promise<T> => {
    if (dead) return Promise.reject(dead);
    const id = nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        pending.delete(id);
        child.kill('SIGKILL');
        reject(new Error(`${engine}: ${req.op} missed its deadline of ${Math.round(deadlineMs / 1000)} s`));
      }, deadlineMs);
      pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer });
      child.send({ ...req, id } as WorkerRequest);
    });
  };
  await call({ op: 'open', engine, dir, sync: o.sync, records: o.records, valueSize: o.valueSize, verify: o.verify, cluster: o.cluster }, 120_000);
  const runDeadline = (spec: RunSpec): number => 300_000 + (spec.operations ?? 0) * 10 + spec.duration * 3000 + o.records * (o.verify ? 2 : 0);
  return {
    load: () => call<LoadResult>({ op: 'load' }, 120_000 + o.records * 2),
    adopt: () => call<void>({ op: 'adopt' }, 10_000),
    run: (spec) => call<RunResult>({ op: 'run', spec }, runDeadline(spec)),
    report: () => call<string>({ op: 'report' }, 60_000),
    close: async () => {
      if (dead) return;
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      await call({ op: 'close' }, 60_000).catch(() => child.kill('SIGKILL'));
      await exited;
    },
  };
}

export interface CompareRow {
  workload: string;
  dist: string;
  /** engine -> median ops/s over rounds */
  opsPerSec: Record<string, number>;
  /** engine -> ratio to the baseline engine */
  ratio: Record<string, number>;
  /** engine -> median over rounds of the worst operation kind's p99 and p999 */
  p99Us: Record<string, number>;
  p999Us: Record<string, number>;
  /** engine -> median storage KB written per operation, where the engine's writes could be read */
  writtenKbPerOp: Record<string, number | undefined>;
}

/** One row per cell: each engine's median throughput over rounds, and its ratio to the baseline. */
export function compareRows(runs: RunResult[], engines: string[], baseline: string): CompareRow[] {
  const cells = new Map<string, RunResult[]>();
  for (const r of runs) {
    const key = `${r.workload}\u0000${r.dist}`;
    if (!cells.has(key)) cells.set(key, []);
    cells.get(key)!.push(r);
  }
  const rows: CompareRow[] = [];
  for (const [key, rs] of cells) {
    const [workload, dist] = key.split('\u0000');
    const row: CompareRow = { workload, dist, opsPerSec: {}, ratio: {}, p99Us: {}, p999Us: {}, writtenKbPerOp: {} };
    for (const e of engines) {
      const mine = rs.filter((r) => r.engine === e);
      row.opsPerSec[e] = median(mine.map((r) => r.opsPerSec));
      row.p99Us[e] = median(mine.map((r) => Math.max(...Object.values(r.latency).map((l) => l.p99Us))));
      row.p999Us[e] = median(mine.map((r) => Math.max(...Object.values(r.latency).map((l) => l.p999Us))));
      const written = mine.filter((r) => r.diskWriteBytes !== undefined && r.ops > 0);
      row.writtenKbPerOp[e] = written.length === mine.length && mine.length > 0
        ? median(written.map((r) => r.diskWriteBytes! / r.ops / 1024)) : undefined;
    }
    for (const e of engines) row.ratio[e] = row.opsPerSec[e] / row.opsPerSec[baseline];
    rows.push(row);
  }
  return rows;
}

function median(xs: number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}
