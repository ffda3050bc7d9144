/**
 * The YCSB-style runner: load N records (batched), settle, then run a workload for a duration
 * or an operation count with `concurrency` requests outstanding, recording per-operation
 * latency histograms and throughput over time. With `verify`, every value read is checked
 * (verifier.ts) and a final pass reads every key back.
 *
 * One client: this process, with `concurrency` loops. The embedded stores cannot be shared
 * across processes, so several client processes arrive with the cluster client (`nova`).
 */
import { closeSync, openSync, readSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { diskWriteBytes, writtenBetween } from './disk-writes.js';
import { Histogram } from './histogram.js';
import { Random, keyNumber, keyOf, makeChooser, type Distribution, type KeyChooser } from './generators.js';
import type { KvStore } from './engines.js';
import { KeySpace, verifyErrors, type VerifyCounts } from './verifier.js';
import { makeValue } from './values.js';
import { OP_KINDS, OpChooser, type OpKind, type Workload } from './workload.js';
import type { ScheduleEvent, ScheduledAction } from './schedule.js';
import { CacheSampler, recoveryOf, type CacheRun } from './cache-timeline.js';
import { peaks, resetPeaks, type PeakRss } from './peak-memory.js';
import { processPauses, type Pauses } from '../../src/common/pauses.js';

/** How each run goes, whatever the workload and distribution. */
export interface RunSettings {
  /** Seconds to run (ignored when `operations` is set). */
  duration: number;
  operations?: number;
  concurrency: number;
  valueSize: number;
  scanLength: number;
  zipfianConstant: number;
  verify: boolean;
  seed: number;
  /** Cluster actions at given times of the run (schedule.ts; the nova engine only). */
  schedule?: ScheduledAction[];
  /** The interval of the timelines: throughput, p99 and cache hit ratio per interval (default 1000 ms). */
  intervalMs?: number;
}

export interface RunSpec extends RunSettings {
  workload: Workload;
  dist: Distribution;
  /** Read the store's files before the run (default); extra client processes skip it. */
  warm?: boolean;
}

export interface LatencyStats {
  ops: number;
  meanUs: number;
  p50Us: number;
  p99Us: number;
  p999Us: number;
  maxUs: number;
}

export interface RunResult {
  engine: string;
  workload: string;
  mix: Record<OpKind, number>;
  dist: Distribution;
  records: number;
  valueSize: number;
  scanLength: number;
  concurrency: number;
  sync: boolean;
  ops: number;
  seconds: number;
  opsPerSec: number;
  latency: Partial<Record<OpKind, LatencyStats>>;
  /** Completed operations per second, one point per `timelineMs`. */
  timeline: number[];
  /** The p99 latency (µs) of the operations completed in each of those intervals. */
  timelineP99: number[];
  timelineMs: number;
  /** What the schedule's actions did, in order (runs with a schedule). */
  events?: ScheduleEvent[];
  /** Through a Gemini cache: its hit ratio over time, and how a killed instance recovered. */
  cache?: CacheRun;
  /** Each of the store's processes' peak resident memory during the run (Linux, local processes). */
  peakRss?: PeakRss[];
  /** Latency distribution per operation: [bucket upper bound µs, count]. */
  histograms: Partial<Record<OpKind, Array<[number, number]>>>;
  errors: number;
  errorSamples: string[];
  verify?: VerifyCounts & { errors: number; samples: string[] };
  warmedBytes: number;
  /**
   * Bytes the store's processes wrote to storage during the run (/proc/PID/io write_bytes:
   * logs, flushes and compactions, every replica), when it could be read (Linux, local processes).
   */
  diskWriteBytes?: number;
  /** What the store said it did during the run (KvStore.watchRun), when it says. */
  storeNote?: string;
  /** This client process's event-loop delays and GC pauses over the run's last seconds (pauses.ts): its share of the latencies. */
  clientPauses?: Pauses;
  /** Client processes that ran it together (mergeRuns); absent means one. */
  clients?: number;
  /** How long the session waited for the machine to go quiet before it (quiet.ts), when it did. */
  quietWait?: { waitedMs: number; quiet: boolean; measured: boolean };
}

export interface LoadResult {
  records: number;
  seconds: number;
  opsPerSec: number;
  settleSeconds: number;
  /** Records per putMany. */
  batch: number;
  /** What settling did (a full compaction, or why none). */
  settled: string;
  /** Bytes the store's processes wrote to storage while loading and settling (see RunResult). */
  diskWriteBytes?: number;
}

/** A store opened by the runner, with what it knows about the keys. */
export interface Target {
  engine: string;
  dir: string;
  store: KvStore;
  sync: boolean;
  keys: KeySpace;
  records: number;
}

export type Progress = (line: string, final: boolean) => void;

/** Loads keys 0…records−1 (version 1), `batch` per write, a few batches in flight. */
export async function load(t: Target, valueSize: number, verify: boolean, batch = 1000, progress?: Progress): Promise<LoadResult> {
  const writtenBefore = storeWrites(t);
  const start = performance.now();
  let next = 0;
  let lastReport = start;
  const worker = async (): Promise<void> => {
    while (next < t.records) {
      const from = next;
      const to = Math.min(t.records, from + batch);
      next = to;
      const entries: Array<[Buffer, Buffer]> = [];
      for (let k = from; k < to; k++) entries.push([keyOf(k), makeValue(k, 1, valueSize, verify)]);
      await t.store.putMany(entries);
      const now = performance.now();
      if (progress && now - lastReport > 1000) {
        lastReport = now;
        progress(`[${t.engine}] load ${Math.min(next, t.records).toLocaleString('en-US')}/${t.records.toLocaleString('en-US')} records, ${fmt(next / ((now - start) / 1000))} records/s`, false);
      }
    }
  };
  await Promise.all(Array.from({ length: 4 }, worker));
  t.keys.loaded(t.records);
  const loaded = performance.now();
  const settled = await t.store.settle();
  const seconds = (loaded - start) / 1000;
  const result: LoadResult = {
    records: t.records, batch, seconds, opsPerSec: t.records / seconds, settleSeconds: (performance.now() - loaded) / 1000, settled,
    diskWriteBytes: writtenBetween(writtenBefore, storeWrites(t)),
  };
  progress?.(`[${t.engine}] loaded ${t.records.toLocaleString('en-US')} records in ${seconds.toFixed(1)} s (${fmt(result.opsPerSec)}/s), settled in ${result.settleSeconds.toFixed(1)} s (${settled})${result.diskWriteBytes === undefined ? '' : `; ${(result.diskWriteBytes / t.records / 1024).toFixed(1)} KB written per record`}`, true);
  return result;
}

/** Reads file `path` through once, a piece at a time (a store's file may be larger than a Buffer can be); its bytes. */
function readThrough(path: string): number {
  const piece = Buffer.allocUnsafe(4 * 1024 * 1024);
  const fd = openSync(path, 'r');
  try {
    let bytes = 0;
    for (let n; (n = readSync(fd, piece, 0, piece.length, bytes)) > 0;) bytes += n;
    return bytes;
  } finally {
    closeSync(fd);
  }
}

/** Reads every file of the store once, so every engine starts with its data in the page cache. */
export function warmPageCache(dir: string): number {
  let bytes = 0;
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      try {
        const s = statSync(p);
        if (s.isDirectory()) walk(p);
        else if (s.isFile()) bytes += readThrough(p);
      } catch (err) {
        // The engine's background work may delete a file between the listing and the read.
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
  };
  walk(dir);
  return bytes;
}

/** Runs one workload against a loaded target. */
export async function run(t: Target, spec: RunSpec, progress?: Progress): Promise<RunResult> {
  const timelineMs = spec.intervalMs ?? 1000;
  const warmedBytes = spec.warm === false ? 0 : warmPageCache(t.dir);
  t.keys.resetCounts(); // each run reports its own verify counts
  const r = new Random(spec.seed);
  const ops = new OpChooser(spec.workload.mix, r);
  const chooser: KeyChooser = makeChooser(spec.dist, new Random(spec.seed ^ 0x5bd1e995), t.keys.readable, spec.zipfianConstant);
  const keys = t.keys;
  const hist = new Map<OpKind, Histogram>(OP_KINDS.map((k) => [k, new Histogram()]));
  const timeline: number[] = [];
  const timelineP99: number[] = [];
  let interval = new Histogram();
  const errorSamples: string[] = [];
  let errors = 0;
  let done = 0;
  let issued = 0;
  let stop = false;
  const limit = spec.operations ?? Infinity;
  const { valueSize, verify } = spec;

  const write = async (k: number): Promise<void> => {
    const unlock = verify ? await keys.lock(k) : undefined; // one write per key at a time
    try {
      const version = keys.nextVersion(k);
      await t.store.put(keyOf(k), makeValue(k, version, valueSize, verify));
      keys.written(k, version);
    } finally {
      unlock?.();
    }
  };
  const read = async (k: number): Promise<void> => {
    const min = keys.minVersion(k);
    const mustExist = k < keys.readable;
    const v = await t.store.get(keyOf(k));
    if (verify) keys.checkRead(k, v, min, valueSize, mustExist);
  };
  const execute = async (op: OpKind): Promise<void> => {
    switch (op) {
      case 'read': return read(chooser.next(keys.readable));
      case 'update': return write(chooser.next(keys.readable));
      case 'rmw': {
        const k = chooser.next(keys.readable);
        await read(k);
        return write(k);
      }
      case 'insert': {
        const k = keys.nextInsert++;
        await write(k);
        keys.inserted(k);
        return;
      }
      case 'scan': {
        const start = chooser.next(keys.readable);
        const since = keys.now;
        const readableThen = keys.readable;
        const rows = await t.store.scan(keyOf(start), spec.scanLength);
        if (verify) keys.checkScan(start, rows.map(([k, v]) => [keyNumber(k), v]), since, readableThen, spec.scanLength, valueSize);
        return;
      }
    }
  };
  const loop = async (): Promise<void> => {
    for (let mine = 1; ; mine++) {
      // A store that answers from memory settles promises without ever leaving the microtask
      // queue; yield now and then so timers (the clock, the progress line) get their turn.
      if ((mine & 63) === 0) await new Promise<void>((resolve) => setImmediate(resolve));
      if (stop || issued >= limit) break;
      issued++;
      const op = ops.next();
      const t0 = performance.now();
      try {
        await execute(op);
      } catch (err) {
        errors++;
        if (errorSamples.length < 10) errorSamples.push(`${op}: ${(err as Error).message}`);
      }
      const took = (performance.now() - t0) * 1000;
      hist.get(op)!.record(took);
      interval.record(took);
      done++;
    }
  };

  const writtenBefore = storeWrites(t);
  const named = t.store.namedProcesses?.() ?? [{ pid: process.pid, name: t.engine }];
  const peaksReset = resetPeaks(named);
  processPauses(); // watched from here on (the first run starts the watcher)
  const watched = await t.store.watchRun?.();
  const sampler = t.store.cacheCounters ? new CacheSampler(t.store.cacheCounters()) : undefined;
  const discardedBefore = await t.store.cacheDiscarded?.();
  const start = performance.now();
  let lastTick = start;
  let lastDone = 0;
  const label = `[${t.engine} ${spec.workload.name} ${spec.dist}]`;
  const ticker = setInterval(() => {
    const now = performance.now();
    timeline.push(((done - lastDone) * 1000) / (now - lastTick));
    timelineP99.push(interval.total > 0 ? interval.percentile(0.99) : 0);
    if (sampler) sampler.tick(t.store.cacheCounters!());
    interval = new Histogram();
    lastTick = now;
    lastDone = done;
    if (progress) {
      const all = mergedHistogram(hist);
      progress(`${label} ${((now - start) / 1000).toFixed(0)} s  ${fmt(done / ((now - start) / 1000))} ops/s  p99 ${fmt(all.percentile(0.99))} µs  errors ${errors}`, false);
    }
  }, timelineMs);
  const timer = spec.operations === undefined ? setTimeout(() => { stop = true; }, spec.duration * 1000) : undefined;
  const acting = spec.schedule?.length ? act(t, spec.schedule, start, () => stop, (line) => progress?.(`${label} ${line}`, true)) : undefined;
  let events: ScheduleEvent[] | undefined;
  let ended = start;
  try {
    await Promise.all(Array.from({ length: spec.concurrency }, loop));
  } finally {
    ended = performance.now(); // before an action still running is waited for
    stop = true;
    clearInterval(ticker);
    if (timer) clearTimeout(timer);
    events = await acting;
  }
  const seconds = (ended - start) / 1000;
  const written = writtenBetween(writtenBefore, storeWrites(t)); // before the verify pass, which only reads
  const peakRss = peaksReset ? peaks(named) : undefined; // a process started during the run (a schedule's) is not among them
  const storeNote = await watched?.();
  const clientPauses = processPauses();
  let cache: CacheRun | undefined;
  if (sampler) {
    const discarded = await t.store.cacheDiscarded?.();
    cache = recoveryOf({ ...sampler.run, ...(discarded !== undefined && discardedBefore !== undefined ? { discarded: discarded - discardedBefore } : {}) }, events ?? [], timelineMs);
  }

  let verifyOut: RunResult['verify'];
  if (verify) {
    progress?.(`${label} final pass: reading ${keys.readable.toLocaleString('en-US')} keys back`, false);
    await finalPass(t, valueSize);
    verifyOut = { ...keys.counts, errors: verifyErrors(keys.counts), samples: [...keys.samples] };
  }

  const latency: RunResult['latency'] = {};
  const histograms: RunResult['histograms'] = {};
  for (const [k, h] of hist) {
    if (h.total === 0) continue;
    latency[k] = { ops: h.total, meanUs: h.mean, p50Us: h.percentile(0.5), p99Us: h.percentile(0.99), p999Us: h.percentile(0.999), maxUs: h.max };
    histograms[k] = h.buckets();
  }
  const result: RunResult = {
    engine: t.engine, workload: spec.workload.name, mix: spec.workload.mix, dist: spec.dist, records: t.records,
    valueSize, scanLength: spec.scanLength, concurrency: spec.concurrency, sync: t.sync,
    ops: done, seconds, opsPerSec: done / seconds, latency, timeline, timelineP99, timelineMs, histograms, ...(events ? { events } : {}),
    errors, errorSamples, verify: verifyOut, warmedBytes, diskWriteBytes: written, storeNote, clientPauses, ...(cache ? { cache } : {}), ...(peakRss ? { peakRss } : {}),
  };
  const v = verifyOut ? `, verify: ${verifyOut.errors} errors in ${verifyOut.reads.toLocaleString('en-US')} values` : '';
  progress?.(`${label} ${fmt(result.opsPerSec)} ops/s over ${seconds.toFixed(1)} s, ${errors} errors${v}${storeNote ? `; ${storeNote}` : ''}`, true);
  return result;
}

/**
 * Carries out `schedule` against the store while a run goes (one action at a time, each at its
 * time or when the one before it ends); actions not begun when the run stops are skipped.
 */
async function act(t: Target, schedule: ScheduledAction[], start: number, stopped: () => boolean, say: (line: string) => void): Promise<ScheduleEvent[]> {
  const store = t.store;
  if (!store.act) throw new Error(`engine ${t.engine} cannot carry out a schedule (only nova can)`);
  const events: ScheduleEvent[] = [];
  for (const a of schedule) {
    // Waits in short steps, so a run that ends first is not held until the action's time.
    while (!stopped() && performance.now() < start + a.atMs) {
      await new Promise((r) => setTimeout(r, Math.min(200, start + a.atMs - performance.now())));
    }
    if (stopped()) break;
    const began = performance.now();
    const e: ScheduleEvent = { ...a, startedMs: began - start, tookMs: 0 };
    try {
      e.outcome = await store.act(a);
      say(`${a.name} at ${(e.startedMs / 1000).toFixed(1)} s: ${e.outcome.detail}`);
    } catch (err) {
      e.error = (err as Error).message;
      say(`${a.name} at ${(e.startedMs / 1000).toFixed(1)} s failed: ${e.error}`);
    }
    e.tookMs = performance.now() - began;
    events.push(e);
  }
  return events;
}

/**
 * One result from the results of several client processes that ran the same spec at the
 * same time: operations and throughputs add up, latencies come from the merged histograms.
 */
export function mergeRuns(rs: RunResult[]): RunResult {
  if (rs.length === 1) return rs[0];
  const latency: RunResult['latency'] = {};
  const histograms: RunResult['histograms'] = {};
  for (const k of OP_KINDS) {
    const parts = rs.filter((r) => r.latency[k] && r.histograms[k]);
    if (parts.length === 0) continue;
    const h = new Histogram();
    for (const r of parts) {
      const l = r.latency[k]!;
      h.merge(Histogram.fromBuckets(r.histograms[k]!, l.meanUs * l.ops, l.maxUs));
    }
    latency[k] = { ops: h.total, meanUs: h.mean, p50Us: h.percentile(0.5), p99Us: h.percentile(0.99), p999Us: h.percentile(0.999), maxUs: h.max };
    histograms[k] = h.buckets();
  }
  const points = Math.max(...rs.map((r) => r.timeline.length));
  const ops = rs.reduce((n, r) => n + r.ops, 0);
  const seconds = Math.max(...rs.map((r) => r.seconds));
  return {
    ...rs[0],
    concurrency: rs.reduce((n, r) => n + r.concurrency, 0),
    ops, seconds, opsPerSec: rs.reduce((n, r) => n + r.opsPerSec, 0),
    latency, histograms,
    timeline: Array.from({ length: points }, (_, i) => rs.reduce((n, r) => n + (r.timeline[i] ?? 0), 0)),
    // The worst client's p99 in each interval: an upper bound of the merged one.
    timelineP99: Array.from({ length: points }, (_, i) => Math.max(...rs.map((r) => r.timelineP99?.[i] ?? 0))),
    ...(rs[0].events ? { events: rs[0].events } : {}),
    errors: rs.reduce((n, r) => n + r.errors, 0),
    errorSamples: rs.flatMap((r) => r.errorSamples).slice(0, 10),
    // Each client read the same processes' counters over nearly the same window: the
    // widest window, not the sum (which would count every byte once per client).
    diskWriteBytes: rs.some((r) => r.diskWriteBytes === undefined) ? undefined : Math.max(...rs.map((r) => r.diskWriteBytes!)),
    clients: rs.length,
  };
}

/** The store's processes' storage writes so far (undefined where they cannot be read). */
function storeWrites(t: Target): number | undefined {
  return diskWriteBytes(t.store.processes?.() ?? [process.pid]);
}

async function finalPass(t: Target, valueSize: number): Promise<void> {
  const n = t.keys.readable;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < n) {
      const k = next++;
      t.keys.checkFinal(k, await t.store.get(keyOf(k)), valueSize);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
}

function mergedHistogram(hist: Map<OpKind, Histogram>): Histogram {
  const all = new Histogram();
  for (const h of hist.values()) if (h.total > 0) all.merge(h);
  return all;
}

export function fmt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}
