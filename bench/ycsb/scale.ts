/**
 * `nova bench scale`: throughput as StoCs (β) or LTCs (η) are added — the paper's Figures 4.10
 * and 4.11. Each count is a session of its own on a fresh cluster (loaded, settled, then capped
 * with --cap so that each component is a small machine), its cells run with the engines
 * interleaved; each point is set against the linear line through the smallest count.
 */
import { chart, COLORS, esc } from './report.js';
import { compareRows, runSession, type SessionOptions, type SessionResult } from './session.js';
import { textTable } from '../report.js';

export type ScaleAxis = 'stocs' | 'ltcs';

export interface ScaleOptions extends SessionOptions {
  vary: ScaleAxis;
  counts: number[];
  /** With `vary` ltcs: ranges per LTC (ω), so each count has ranges for every LTC. */
  rangesPerLtc: number;
  /** The count the linear line goes through (default: the smallest). */
  linearFrom?: number;
  /** Called as each count's session starts. */
  onCount?: (count: number) => void;
}

export interface ScalePoint {
  engine: string;
  workload: string;
  dist: string;
  count: number;
  opsPerSec: number;
  /** What the smallest count's throughput, scaled by count / that count, would give. */
  linearOpsPerSec: number;
  /** opsPerSec / linearOpsPerSec. */
  ofLinear: number;
  p99Us: number;
  /** Operations that failed (a deadline passed: the components are too small for the load). */
  errors: number;
}

export interface ScaleResult {
  startedAt: string;
  vary: ScaleAxis;
  counts: number[];
  engines: string[];
  cap?: string;
  /** The count the linear line goes through. */
  linearFrom: number;
  points: ScalePoint[];
  sessions: SessionResult[];
}

export async function runScale(o: ScaleOptions): Promise<ScaleResult> {
  const notNova = o.engines.filter((e) => e.split(':')[0] !== 'nova');
  if (notNova.length > 0) throw new Error(`bench scale adds nova's components: ${notNova.join(', ')} has none (use nova, or nova:flag=value variants)`);
  if (o.cluster?.coordinator) throw new Error('bench scale starts a cluster per count: not --coordinator');
  const counts = [...new Set(o.counts)].sort((a, b) => a - b);
  const { vary, counts: _c, rangesPerLtc, onCount, linearFrom, ...session } = o;
  if (linearFrom !== undefined && !counts.includes(linearFrom)) throw new Error(`--linear-from ${linearFrom} is not one of the counts (${counts.join(', ')})`);
  const sessions: SessionResult[] = [];
  for (const n of counts) {
    onCount?.(n);
    const cluster = { ...o.cluster, ...(vary === 'stocs' ? { stocs: n } : { ltcs: n, ranges: n * rangesPerLtc }) };
    sessions.push(await runSession({ ...session, cluster }));
  }
  return { startedAt: new Date().toISOString(), vary: o.vary, counts, engines: o.engines, cap: o.cluster?.cap, linearFrom: linearFrom ?? counts[0],
    points: scalePoints(counts, sessions, o.engines, linearFrom), sessions };
}

/**
 * Each engine's throughput per cell and count, against the line through its throughput at
 * count `base` (default: the smallest).
 */
export function scalePoints(counts: number[], sessions: Array<Pick<SessionResult, 'runs'>>, engines: string[], base = counts[0]): ScalePoint[] {
  const points: ScalePoint[] = [];
  const perComponent = new Map<string, number>();
  const rows = sessions.map((s) => compareRows(s.runs, engines, engines[0]));
  for (const row of rows[counts.indexOf(base)] ?? []) {
    for (const engine of engines) perComponent.set(`${engine}\u0000${row.workload}\u0000${row.dist}`, row.opsPerSec[engine] / base);
  }
  sessions.forEach((s, i) => {
    for (const row of rows[i]) {
      for (const engine of engines) {
        const key = `${engine}\u0000${row.workload}\u0000${row.dist}`;
        const ops = row.opsPerSec[engine];
        const linear = (perComponent.get(key) ?? NaN) * counts[i];
        const errors = s.runs.filter((r) => r.engine === engine && r.workload === row.workload && r.dist === row.dist).reduce((n, r) => n + (r.errors ?? 0), 0);
        points.push({ engine, workload: row.workload, dist: row.dist, count: counts[i], opsPerSec: ops, linearOpsPerSec: linear,
          ofLinear: ops / linear, p99Us: row.p99Us[engine], errors });
      }
    }
  });
  return points;
}

const fmt = (n: number): string => Math.round(n).toLocaleString('en-US');
const axisName = (a: ScaleAxis): string => (a === 'stocs' ? 'StoCs (β)' : 'LTCs (η)');

function cells(points: ScalePoint[]): Array<{ engine: string; workload: string; dist: string; points: ScalePoint[] }> {
  const out = new Map<string, { engine: string; workload: string; dist: string; points: ScalePoint[] }>();
  for (const p of points) {
    const key = `${p.workload}\u0000${p.dist}\u0000${p.engine}`;
    if (!out.has(key)) out.set(key, { engine: p.engine, workload: p.workload, dist: p.dist, points: [] });
    out.get(key)!.points.push(p);
  }
  return [...out.values()];
}

/** One row per engine and cell: ops/s at each count, with its fraction of linear. */
export function scaleTable(r: Pick<ScaleResult, 'vary' | 'counts' | 'points'>): string {
  const rows = cells(r.points);
  return textTable(rows, [
    { title: 'workload', value: (x) => x.workload },
    { title: 'dist', value: (x) => x.dist },
    { title: 'engine', value: (x) => x.engine },
    ...r.counts.map((n) => ({
      title: `${n} ${r.vary === 'stocs' ? 'StoC' : 'LTC'}${n > 1 ? 's' : ''} ops/s (of linear)`,
      value: (x: (typeof rows)[number]) => {
        const p = x.points.find((q) => q.count === n);
        return p ? `${fmt(p.opsPerSec)} (${(p.ofLinear * 100).toFixed(0)}%)${p.errors > 0 ? ` ${p.errors} errors` : ''}` : '';
      },
    })),
  ]);
}

export function scaleHtml(r: ScaleResult): string {
  const byCell = new Map<string, ReturnType<typeof cells>>();
  for (const c of cells(r.points)) {
    const key = `${c.workload} / ${c.dist}`;
    if (!byCell.has(key)) byCell.set(key, []);
    byCell.get(key)!.push(c);
  }
  const color = (e: string): string => COLORS[r.engines.indexOf(e) % COLORS.length];
  const charts = [...byCell].map(([title, cs]) => chart(`${title}: throughput against ${axisName(r.vary)}, dashed: linear through ${r.linearFrom}`, axisName(r.vary), 'ops/s', [
    ...cs.map((c) => ({ name: c.engine, color: color(c.engine), points: c.points.map((p): [number, number] => [p.count, p.opsPerSec]) })),
    ...cs.map((c) => ({ name: 'linear (dashed)', color: color(c.engine), dashed: true, points: c.points.map((p): [number, number] => [p.count, p.linearOpsPerSec]) })),
  ])).join('\n');
  const s0 = r.sessions[0]?.options;
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>nova bench scale: ${esc(axisName(r.vary))}</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 2em; color: #222 } pre { background: #f6f6f6; padding: 1em }
.charts { display: flex; flex-wrap: wrap; gap: 1em } figure { margin: 0 } figcaption { font-size: 12px; color: #555 }
</style></head><body>
<h1>nova bench scale: ${esc(axisName(r.vary))}</h1>
<p>${esc(r.startedAt)}. ${esc(axisName(r.vary))} ${r.counts.join(', ')}; each count a fresh cluster${s0 ? ` (${s0.records.toLocaleString('en-US')} records of ${s0.valueSize} B, ${s0.duration} s per run, ${s0.concurrency} outstanding × ${s0.clients ?? 1} client process(es))` : ''}; caps: ${esc(r.cap ?? 'none')}, applied after the load. Dashed: the linear line through ${r.linearFrom}.</p>
<div class="charts">${charts}</div>
<h2>Points</h2>
<pre>${esc(scaleTable(r))}</pre>
</body></html>
`;
}
