/**
 * `nova bench faults`: a local cluster (`nova up`) under concurrent clients and injected
 * faults, the history of every operation recorded and checked for linearizability (history.ts).
 *
 * Clients (NovaClients in this process, each its own session) read and write a few keys; every
 * write writes a value no other write writes, so a read names the write it saw. Each client
 * alternates between phases with one request outstanding and phases with `depth` outstanding.
 * A fault comes every `faultEveryMs`, one at a time, the kinds in rounds (each once per round,
 * in a random order):
 * - ltc-kill, stoc-kill, coordinator-kill: SIGKILL, then `nova up` brings it back;
 * - ltc-stop, stoc-stop, coordinator-stop: SIGSTOP for `stopMs`, then SIGCONT;
 * - log-split: SIGSTOP two StoCs so that log appends reach only the third, SIGKILL the LTC,
 *   SIGCONT the StoCs, `nova up` (a write then reaches one log replica, is replayed at
 *   recovery, and its client retries it: the history that made writes apply twice);
 * - range-move (with two LTCs or more): `nova range move` of the keys' range to another LTC;
 * - ltc-failover (with two LTCs or more): SIGSTOP the LTC past its lease, so the coordinator
 *   gives the range to another, then SIGCONT (a paused LTC that must be fenced off);
 * - range-split: `nova range split` of the keys' range at their middle key, or, once split,
 *   `nova range merge` of the two halves (after moving one to the other's LTC if need be).
 * The LTC faults hit the LTC that holds the keys' range.
 * At the end every key is read once more, the cluster is stopped, and each key's history is
 * checked. The seed fixes the schedule of faults and the clients' choices; the processes'
 * timing is the machine's, so a replay takes the same steps at slightly different moments.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { NovaClient } from '../../src/client/nova-client.js';
import { NovaError } from '../../src/common/errors.js';
import { NOVA_BIN, componentDir, down, fetchStatus, isRunning, mergeRanges, moveRange, readClusterFile, splitRange, up, type ComponentRole } from '../../src/control/cluster-control.js';
import { History, type HistoryCheck } from './history.js';

export const FAULT_KINDS = ['ltc-kill', 'ltc-stop', 'stoc-kill', 'stoc-stop', 'coordinator-kill', 'coordinator-stop', 'log-split', 'range-move', 'ltc-failover', 'range-split'] as const;
/** Fault kinds that need two LTCs or more. */
export const MULTI_LTC_FAULTS: readonly FaultKind[] = ['range-move', 'ltc-failover'];
export type FaultKind = typeof FAULT_KINDS[number];

export interface FaultRunOptions {
  seed: number;
  durationMs: number;
  /** Client sessions (default 8) and keys they share (default 20). */
  clients?: number;
  keys?: number;
  /** Requests outstanding per client in its pipelined phases (default 64). */
  depth?: number;
  /** Share of the time a client is in a pipelined phase (default 0.5); phases last `phaseMs` (default 5000). */
  pipelinedShare?: number;
  phaseMs?: number;
  faults?: readonly FaultKind[];
  /** A fault every so many ms, uniform in [min, max] (default 3000–6000). */
  faultEveryMs?: [number, number];
  /** How long a SIGSTOP lasts, uniform in [min, max] (default 2000–15000). */
  stopMs?: [number, number];
  /** StoCs and LTCs of the cluster (default 3 and 1; range-move needs two LTCs). */
  stocs?: number;
  ltcs?: number;
  /** Coordinator flags of the cluster (default: 1 MiB memtables and an L0 trigger of 4, so flushes delete logs often). */
  clusterArgs?: string[];
  /** Each client's deadline per operation (default 30 000, NovaClient's): shorter ones give writes of unknown outcome under long stops. */
  clientTimeoutMs?: number;
  /** Bytes of each value (default 100). */
  valueBytes?: number;
  /** Where the cluster runs (default: a new temporary directory, removed at the end unless `keep`, or the run failed or found a violation). */
  dir?: string;
  keep?: boolean;
  bin?: string;
  progress?: (line: string) => void;
  /** Given the history's JSON lines (History.lines) before it is checked. */
  onHistory?: (lines: Iterable<string>) => void;
}

export interface FaultEvent {
  kind: FaultKind;
  /** Component ids it hit (StoC numbers for stoc-* and log-split). */
  targets: number[];
  atMs: number;
  /** From the fault's start until the cluster served again. */
  tookMs: number;
}

export interface FaultRunResult {
  seed: number;
  durationMs: number;
  clients: number;
  keys: number;
  depth: number;
  operations: { total: number; reads: number; writes: number; unknown: number; failed: number };
  faults: Record<FaultKind, number>;
  events: FaultEvent[];
  /** Operations answered per second of the run. */
  perSecond: number[];
  /** How long each range-move fault's range refused requests (ms). */
  moves: number[];
  /** Sessions the clients started (one each, plus one per SESSION_EXPIRED). */
  sessions: number;
  check: HistoryCheck;
  checkMs: number;
  dir: string;
}

const DEFAULT_CLUSTER_ARGS = ['--memtable-bytes', String(1024 * 1024), '--l0-trigger', '4', '--ltc-lease-ms', '2000'];
/** The lease of DEFAULT_CLUSTER_ARGS; ltc-failover stops an LTC longer. */
const LEASE_MS = 2000;

/** Runs clients and faults against a fresh cluster, then checks the history. */
export async function runFaults(o: FaultRunOptions): Promise<FaultRunResult> {
  const clients = o.clients ?? 8;
  const keys = o.keys ?? 20;
  const depth = o.depth ?? 64;
  const ltcs = o.ltcs ?? 1;
  const kinds = o.faults ?? FAULT_KINDS.filter((k) => !MULTI_LTC_FAULTS.includes(k) || ltcs > 1);
  const needs = kinds.filter((k) => MULTI_LTC_FAULTS.includes(k));
  if (needs.length > 0 && ltcs < 2) throw new NovaError('BAD_ARGUMENT', `the ${needs.join(' and ')} fault${needs.length > 1 ? 's need' : ' needs'} two LTCs or more`);
  const [everyMin, everyMax] = o.faultEveryMs ?? [3000, 6000];
  const [stopMin, stopMax] = o.stopMs ?? [2000, 15000];
  const stocs = o.stocs ?? 3;
  const progress = o.progress ?? (() => undefined);
  const valueBytes = o.valueBytes ?? 100;
  const phaseMs = o.phaseMs ?? 5000;
  const pipelinedShare = o.pipelinedShare ?? 0.5;
  const rand = seeded(o.seed);
  const dir = o.dir ?? mkdtempSync(join(tmpdir(), 'nova-faults-'));
  const bin = o.bin ?? NOVA_BIN;
  const start = (): Promise<unknown> => up({ dir, stocs, ltcs, host: '127.0.0.1', bin, coordinatorArgs: o.clusterArgs ?? DEFAULT_CLUSTER_ARGS, timeoutMs: 120_000 });
  /** The LTC holding the keys' range (they all fall in range 1: "key-" sorts before the bench's split keys). */
  const holder = async (): Promise<number> => (await fetchStatus(readClusterFile(dir)!.coordinator)).config.ranges[0].ltc;
  const pid = (role: ComponentRole, id: number): number | undefined =>
    readClusterFile(dir)?.components.find((c) => c.role === role && c.id === id && isRunning(c.pid, componentDir(dir, role, id)))?.pid;
  const signal = (role: ComponentRole, id: number, sig: NodeJS.Signals): void => {
    const p = pid(role, id);
    if (p !== undefined) process.kill(p, sig);
  };
  const stopped = new Set<string>(); // role:id under SIGSTOP, to SIGCONT whatever happens
  /** SIGKILL, and wait until the process is gone (its locks and ports with it). */
  const kill = async (role: ComponentRole, id: number): Promise<void> => {
    const p = pid(role, id);
    if (p === undefined) return;
    process.kill(p, 'SIGKILL');
    for (let i = 0; i < 1000 && isRunning(p, componentDir(dir, role, id)); i++) await new Promise((r) => setTimeout(r, 10));
  };

  progress(`seed ${o.seed}: starting a cluster in ${dir}`);
  await start().catch((err: unknown) => { throw withContext(err, `seed ${o.seed}, before any fault; the cluster's directory is kept: ${dir}`); });
  const history = new History();
  const novas: NovaClient[] = [];
  const t0 = performance.now();
  const perSecond: number[] = [];
  const answered = (): void => {
    const s = Math.floor((performance.now() - t0) / 1000);
    while (perSecond.length <= s) perSecond.push(0);
    perSecond[s]++;
  };
  const events: FaultEvent[] = [];
  /** Each range move's unavailability (ms). */
  const moves: number[] = [];
  const faults = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  let running = true;
  let nextValue = 1;
  let durationMs = 0;
  let current = 'none'; // the fault under way
  try {
    for (let c = 0; c < clients; c++) novas.push(await NovaClient.connect({ dir, timeoutMs: o.clientTimeoutMs }));
    const keyOf = (k: number): Buffer => Buffer.from(`key-${String(k).padStart(4, '0')}`);
    const valueOf = (v: number): Buffer => Buffer.from(`v${v}:`.padEnd(valueBytes, '.'));
    const parse = (b: Buffer | undefined): number => (b === undefined ? 0 : Number(b.toString('latin1', 1, b.indexOf(0x3a))));

    /** One operation of client `c`, recorded. */
    const operate = async (c: number, r: () => number): Promise<void> => {
      const db = novas[c];
      const k = Math.floor(r() * keys);
      const dice = r();
      if (dice < 0.5) {
        const op = history.invoke(c, k, 'read', 0, performance.now());
        try {
          const v = await db.get(keyOf(k));
          history.ok(op, performance.now(), parse(v));
        } catch {
          history.fail(op);
        }
        answered();
        return;
      }
      // Writes: a put (most), a delete, or a batch of two puts (atomic; checked key by key).
      const writes: Array<[number, number]> = dice < 0.97 ? [[k, nextValue++]] : dice < 0.985 ? [[k, 0]] : [[k, nextValue++], [(k + 1) % keys, nextValue++]];
      const now = performance.now();
      const ops = writes.map(([key, v]) => history.invoke(c, key, 'write', v, now));
      try {
        if (writes.length === 2) await db.write(db.batch().put(keyOf(writes[0][0]), valueOf(writes[0][1])).put(keyOf(writes[1][0]), valueOf(writes[1][1])));
        else if (writes[0][1] === 0) await db.delete(keyOf(k));
        else await db.put(keyOf(k), valueOf(writes[0][1]));
        const at = performance.now();
        for (const op of ops) history.ok(op, at);
      } catch (err) {
        const code = (err as NovaError).code;
        for (const op of ops) (code === 'UNKNOWN_OUTCOME' ? history.unknown(op) : history.fail(op));
      }
      answered();
    };

    // Each client: `depth` workers; in a sequential phase only the first runs.
    const phases = Array.from({ length: clients }, () => ({ pipelined: false, change: Promise.resolve(), wake: () => undefined as void }));
    const workers: Array<Promise<void>> = [];
    for (let c = 0; c < clients; c++) {
      const r = seeded(o.seed * 1000 + c + 1);
      for (let w = 0; w < depth; w++) {
        workers.push((async () => {
          while (running) {
            if (w > 0 && !phases[c].pipelined) {
              await phases[c].change;
              continue;
            }
            await operate(c, r);
          }
        })());
      }
    }
    // Its own generator: the phaser's ticks fall between fault draws as the machine's timing has it.
    const phaseRand = seeded(Math.imul(o.seed ^ 0x5bd1e995, 0x9e3779b1));
    const phaser = setInterval(() => {
      for (const p of phases) {
        p.pipelined = phaseRand() < pipelinedShare;
        p.wake();
        p.change = new Promise<void>((resolve) => { p.wake = resolve; });
      }
    }, phaseMs);
    for (const p of phases) p.change = new Promise<void>((resolve) => { p.wake = resolve; });

    // Faults, one at a time, until the run's time is up.
    const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
    const between = (lo: number, hi: number): number => Math.round(lo + rand() * (hi - lo));
    const pause = (role: ComponentRole, id: number, on: boolean): void => {
      signal(role, id, on ? 'SIGSTOP' : 'SIGCONT');
      if (on) stopped.add(`${role}:${id}`);
      else stopped.delete(`${role}:${id}`);
    };
    let lastReport = t0;
    let round: FaultKind[] = []; // each kind once per round, in a random order
    const report = (): void => {
      const done = history.size;
      const secs = (performance.now() - t0) / 1000;
      progress(`${secs.toFixed(0)} s: ${done} operations (${Math.round(done / secs)}/s); faults: ${FAULT_KINDS.filter((k) => faults[k] > 0).map((k) => `${k} ${faults[k]}`).join(', ') || 'none yet'}`);
    };
    try {
      while (performance.now() - t0 < o.durationMs) {
        await sleep(Math.min(between(everyMin, everyMax), Math.max(0, o.durationMs - (performance.now() - t0))));
        if (performance.now() - t0 >= o.durationMs) break;
        if (performance.now() - lastReport > 5000) {
          report();
          lastReport = performance.now();
        }
        if (round.length === 0) round = shuffle([...kinds], rand);
        const kind = round.pop()!;
        const at = performance.now();
        const stoc = 1 + Math.floor(rand() * stocs);
        current = `${((at - t0) / 1000).toFixed(1)} s ${kind}`;
        const targets: number[] = [];
        switch (kind) {
          case 'ltc-kill': case 'stoc-kill': case 'coordinator-kill': {
            const role = kind.slice(0, kind.indexOf('-')) as ComponentRole;
            const id = role === 'stoc' ? stoc : role === 'ltc' ? await holder() : 1;
            targets.push(id);
            await kill(role, id);
            await sleep(between(0, 1000));
            await start();
            break;
          }
          case 'ltc-stop': case 'stoc-stop': case 'coordinator-stop': {
            const role = kind.slice(0, kind.indexOf('-')) as ComponentRole;
            const id = role === 'stoc' ? stoc : role === 'ltc' ? await holder() : 1;
            targets.push(id);
            pause(role, id, true);
            await sleep(between(stopMin, stopMax));
            pause(role, id, false);
            break;
          }
          case 'log-split': {
            const others = Array.from({ length: stocs }, (_, i) => i + 1).filter((i) => i !== stoc).slice(0, Math.max(1, stocs - 1));
            targets.push(...others);
            const ltc = await holder();
            for (const s of others) pause('stoc', s, true);
            await sleep(between(200, 600));
            await kill('ltc', ltc);
            for (const s of others) pause('stoc', s, false);
            await start();
            break;
          }
          case 'ltc-failover': {
            const ltc = await holder();
            targets.push(ltc);
            pause('ltc', ltc, true);
            await sleep(LEASE_MS + between(500, 2000));
            pause('ltc', ltc, false);
            break;
          }
          case 'range-move': {
            const from = await holder();
            const to = from % ltcs + 1;
            targets.push(to);
            const r = await moveRange(readClusterFile(dir)!.coordinator, 1, to);
            moves.push(r.unavailableMs);
            break;
          }
          case 'range-split': {
            const coordinator = readClusterFile(dir)!.coordinator;
            const ranges = (await fetchStatus(coordinator)).config.ranges;
            targets.push(ranges[0].ltc);
            if (ranges.length === 1) {
              await splitRange(coordinator, 1, keyOf(keys >> 1));
            } else {
              if (ranges[1].ltc !== ranges[0].ltc) await moveRange(coordinator, ranges[1].id, ranges[0].ltc);
              await mergeRanges(coordinator, 1, ranges[1].id);
            }
            break;
          }
        }
        faults[kind]++;
        events.push({ kind, targets, atMs: at - t0, tookMs: performance.now() - at });
        current = 'none';
      }
    } finally {
      for (const s of stopped) {
        const [role, id] = s.split(':');
        signal(role as ComponentRole, Number(id), 'SIGCONT');
      }
      running = false;
      clearInterval(phaser);
      for (const p of phases) p.wake();
    }
    durationMs = performance.now() - t0;
    report();
    progress('faults over; waiting for the operations in flight');
    await Promise.all(workers);
    // A last read of every key, after everything else.
    await Promise.all(Array.from({ length: keys }, async (_, k) => {
      const op = history.invoke(-1, k, 'read', 0, performance.now());
      try {
        history.ok(op, performance.now(), parse(await novas[0].get(keyOf(k))));
      } catch {
        history.fail(op);
      }
    }));
  } catch (err) {
    // The faults before the failure, so a rerun of the seed can be checked against them.
    const done = events.map((e) => `${(e.atMs / 1000).toFixed(1)} s ${e.kind} ${e.targets.join('+')}`).join(', ');
    throw withContext(err, `seed ${o.seed}, faults done: ${done || 'none'}; under way: ${current}; the cluster's directory is kept: ${dir}`);
  } finally {
    running = false;
    for (const c of novas) c.close();
    await down(dir).catch(() => killAll(dir));
  }
  history.close();
  o.onHistory?.(history.lines());
  progress(`checking ${history.size} operations on ${keys} keys`);
  const c0 = performance.now();
  const check = history.check();
  const counts = history.counts;
  if (!o.keep && o.dir === undefined) {
    // A run that failed or found a violation keeps its directory: the logs there say what happened.
    if (check.violations.length === 0 && check.undecided.length === 0) rmSync(dir, { recursive: true, force: true });
    else progress(`the cluster's directory is kept: ${dir}`);
  }
  return {
    seed: o.seed, durationMs, clients, keys, depth,
    operations: { total: history.size, ...counts },
    faults, events, perSecond, moves,
    sessions: novas.reduce((n, c) => n + c.sessionInfo.started, 0),
    check, checkMs: performance.now() - c0, dir,
  };
}

function killAll(dir: string): void {
  for (const c of readClusterFile(dir)?.components ?? []) {
    if (isRunning(c.pid, componentDir(dir, c.role, c.id))) process.kill(c.pid, 'SIGKILL');
  }
}

function shuffle<T>(a: T[], rand: () => number): T[] {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

/** `err` with `context` after its message (an Error's message, or what was thrown, in a new Error). */
function withContext(err: unknown, context: string): Error {
  if (err instanceof Error) {
    err.message += `; ${context}`;
    return err;
  }
  return new Error(`${String(err)}; ${context}`);
}

/** A seeded xorshift32 in [0, 1). */
function seeded(seed: number): () => number {
  let x = (seed >>> 0) ^ 0x5bd1e995 || 1;
  return () => {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    return x / 0x1_0000_0000;
  };
}
