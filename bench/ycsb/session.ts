/**
 * `nova bench run` and `nova bench compare`: open each engine in a fresh directory, load it
 * once, settle it, then run the cells (workload × distribution) with the engines interleaved
 * in every cell — A B C, A B C, … — so that the machine's drift hits all of them alike.
 * Keys inserted by one cell stay for the next, as in YCSB's run-after-run practice.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { engineByName } from './engines.js';
import type { Distribution } from './generators.js';
import { load, run, type LoadResult, type Progress, type RunResult, type RunSettings, type Target } from './runner.js';
import { KeySpace } from './verifier.js';
import { checkValueSize } from './values.js';
import type { Workload } from './workload.js';
import type { KvStore } from './engines.js';

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
}

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
  const parent = o.dir ?? tmpdir();
  mkdirSync(parent, { recursive: true });
  const root = mkdtempSync(join(parent, 'nova-bench-'));
  const targets: Target[] = [];
  const loads: Record<string, LoadResult> = {};
  const runs: RunResult[] = [];
  try {
    for (const a of adapters) {
      const dir = join(root, a.name);
      mkdirSync(dir, { recursive: true });
      const opened = await a.open(dir, { sync: o.sync });
      const store = o.wrap ? o.wrap(a.name, opened) : opened;
      const t: Target = { engine: a.name, dir, store, sync: o.sync, keys: new KeySpace(o.records), records: o.records };
      targets.push(t);
      loads[a.name] = await load(t, o.valueSize, o.verify, 1000, o.progress);
    }
    let seed = o.seed;
    for (let round = 0; round < o.rounds; round++) {
      for (const w of o.workloads) {
        for (const dist of o.dists ?? [w.defaultDist]) {
          seed++;
          for (const t of targets) {
            runs.push(await run(t, { ...o, workload: w, dist, seed }, o.progress));
          }
        }
      }
    }
  } finally {
    for (const t of targets) await t.store.close().catch(() => undefined);
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
      `Each engine in its own fresh directory under ${o.keep ? root : parent}; loaded once (${o.records.toLocaleString('en-US')} records of ${o.valueSize} B, batches of 1,000), then settled (a full compaction for the LSM stores).`,
      'Before each run the engine\'s files are read once, so each starts with its data in the page cache.',
      `Cells run with the engines interleaved (${o.engines.join(', ')}), ${o.rounds} round(s); keys inserted by a cell remain for the next.`,
      `${o.concurrency} requests outstanding from one client process; writes ${o.sync ? 'synced (fdatasync before the ack)' : 'not synced (durable against a process crash, not a power loss)'}.`,
    ],
  };
}

export interface CompareRow {
  workload: string;
  dist: string;
  /** engine -> median ops/s over rounds */
  opsPerSec: Record<string, number>;
  /** engine -> ratio to the baseline engine */
  ratio: Record<string, number>;
  p99Us: Record<string, number>;
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
    const row: CompareRow = { workload, dist, opsPerSec: {}, ratio: {}, p99Us: {} };
    for (const e of engines) {
      const mine = rs.filter((r) => r.engine === e);
      row.opsPerSec[e] = median(mine.map((r) => r.opsPerSec));
      row.p99Us[e] = median(mine.map((r) => Math.max(...Object.values(r.latency).map((l) => l.p99Us))));
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
