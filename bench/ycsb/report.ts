/**
 * Reports of a bench session: a text table for the terminal, and one self-contained HTML
 * page (inline SVG, no scripts or network) with the comparison table, throughput over time
 * and the latency distribution of each cell, per engine.
 */
import { textTable, type Column } from '../report.js';
import { overBudget, type PeakRss } from './peak-memory.js';
import { fmt, type RunResult } from './runner.js';
import { compareRows, type CompareRow, type SessionResult } from './session.js';
import { OP_KINDS } from './workload.js';

const us = (n: number | undefined): string => (n === undefined ? '' : n >= 100 ? fmt(n) : n.toFixed(1));

/** Storage bytes written per operation, in KB (write amplification, replicas included). */
export function writtenPerOp(r: { diskWriteBytes?: number; ops: number }): string {
  return r.diskWriteBytes === undefined || r.ops === 0 ? '' : (r.diskWriteBytes / r.ops / 1024).toFixed(1);
}

const mib = (b: number): string => (b / 2 ** 20).toFixed(0);

/** A process's peak, "of" its budget when it has one. */
function peakOf(p: PeakRss): string {
  return p.budget === undefined ? mib(p.bytes) : `${mib(p.bytes)} of ${mib(p.budget)}`;
}

/**
 * A run's processes' peak resident memory: the largest, named (of its budget), the sum when
 * there are several, and every process over its budget.
 */
export function peakLine(r: { peakRss?: PeakRss[] }): string {
  if (!r.peakRss || r.peakRss.length === 0) return '';
  const top = r.peakRss.reduce((a, b) => (b.bytes > a.bytes ? b : a));
  if (r.peakRss.length === 1) return peakOf(top);
  const over = r.peakRss.filter(overBudget);
  return `${peakOf(top)} (${top.name}); ${mib(r.peakRss.reduce((n, p) => n + p.bytes, 0))} in all` +
    (over.length > 0 ? `; over budget: ${over.map((p) => `${p.name} ${peakOf(p)}`).join(', ')}` : '');
}

/** Every process's peak of its budget, for the HTML report. */
export function peaksLine(r: { peakRss?: PeakRss[] }): string {
  return (r.peakRss ?? []).map((p) => `${p.name} ${peakOf(p)}${overBudget(p) ? ' (over)' : ''}`).join(', ');
}

export function runTable(runs: RunResult[]): string {
  const cols: Column<RunResult>[] = [
    { title: 'engine', value: (r) => r.engine, align: 'left' },
    { title: 'workload', value: (r) => r.workload, align: 'left' },
    { title: 'dist', value: (r) => r.dist, align: 'left' },
    { title: 'ops/s', value: (r) => fmt(r.opsPerSec) },
    ...OP_KINDS.map((k): Column<RunResult> => ({
      title: `${k} p50/p99/p999 µs`,
      value: (r) => (r.latency[k] ? `${us(r.latency[k]!.p50Us)}/${us(r.latency[k]!.p99Us)}/${us(r.latency[k]!.p999Us)}` : ''),
    })),
    { title: 'KB written/op', value: (r) => writtenPerOp(r) },
    { title: 'peak RSS MiB', value: (r) => peakLine(r) },
    // The client process's own stalls: what it adds to every engine's latencies.
    { title: 'client loop p99/max, GC ms', value: (r) => (r.clientPauses ? `${r.clientPauses.loopDelayP99Ms}/${r.clientPauses.loopDelayMaxMs}, ${r.clientPauses.gcMs}` : '') },
    { title: 'errors', value: (r) => String(r.errors) },
    { title: 'verify', value: (r) => (r.verify ? `${r.verify.errors} bad of ${r.verify.reads}` : 'off') },
  ];
  return textTable(runs, cols.filter((c) => runs.some((r) => c.value(r) !== '')));
}

/** Mean of a run's timeline between two times (s), for the phases around a cache failure. */
function meanBetween(r: RunResult, series: Array<number | null>, from: number, to: number): number | undefined {
  const xs = series.filter((y, j) => y !== null && ((j + 1) * r.timelineMs) / 1000 > from && ((j + 1) * r.timelineMs) / 1000 <= to) as number[];
  return xs.length > 0 ? xs.reduce((a, b) => a + b, 0) / xs.length : undefined;
}

/** What a run through the Gemini cache shows of a killed instance: phases, restore time, stale reads, discards. */
export interface CacheRow {
  engine: string; workload: string; dist: string;
  hitBefore?: number; hitDuring?: number; hitAfter?: number;
  /** The failed instance: hit ratio before, time to get it back (null: not in the run). */
  failed?: number; instanceBefore?: number; restoreMs?: number | null;
  opsBefore?: number; opsDuring?: number; opsAfter?: number;
  stale?: number; discarded?: number;
}

export function cacheRows(runs: RunResult[]): CacheRow[] {
  return runs.filter((r) => r.cache).map((r) => {
    const c = r.cache!;
    const kill = r.events?.find((e) => e.name === 'cache kill');
    const start = r.events?.find((e) => e.name === 'cache start');
    const k = kill ? kill.startedMs / 1000 : Infinity;
    const b = start ? (start.startedMs + start.tookMs) / 1000 : Infinity;
    const ops = r.timeline.map((y) => y as number | null);
    return {
      engine: r.engine, workload: r.workload, dist: r.dist,
      hitBefore: meanBetween(r, c.hitRatio, 1, k), hitDuring: meanBetween(r, c.hitRatio, k, b), hitAfter: meanBetween(r, c.hitRatio, b, Infinity),
      ...(c.failed !== undefined ? { failed: c.failed } : {}), instanceBefore: c.before, restoreMs: c.restoreMs,
      opsBefore: meanBetween(r, ops, 1, k), opsDuring: meanBetween(r, ops, k, b), opsAfter: meanBetween(r, ops, b, Infinity),
      stale: r.verify?.stale, discarded: c.discarded,
    };
  });
}

const pct = (x: number | undefined): string => (x === undefined ? '' : `${(x * 100).toFixed(1)}%`);
const restore = (x: number | null | undefined): string => (x === undefined ? '' : x === null ? 'not in the run' : `${(x / 1000).toFixed(1)} s`);

export function cacheTable(runs: RunResult[]): string {
  const cols: Column<CacheRow>[] = [
    { title: 'engine', value: (r) => r.engine, align: 'left' },
    { title: 'workload', value: (r) => `${r.workload}/${r.dist}`, align: 'left' },
    { title: 'hit before/during/after', value: (r) => `${pct(r.hitBefore)}/${pct(r.hitDuring)}/${pct(r.hitAfter)}` },
    { title: 'failed instance hit before', value: (r) => (r.failed === undefined ? '' : `${r.failed}: ${pct(r.instanceBefore)}`) },
    { title: 'restored after', value: (r) => restore(r.restoreMs) },
    { title: 'ops/s before/during/after', value: (r) => `${fmt(r.opsBefore ?? 0)}/${fmt(r.opsDuring ?? 0)}/${fmt(r.opsAfter ?? 0)}` },
    { title: 'stale reads', value: (r) => (r.stale === undefined ? 'no --verify' : String(r.stale)) },
    { title: 'discarded entries', value: (r) => (r.discarded === undefined ? '' : String(r.discarded)) },
  ];
  return textTable(cacheRows(runs), cols);
}

export function compareTable(rows: CompareRow[], engines: string[], baseline: string): string {
  const cols: Column<CompareRow>[] = [
    { title: 'workload', value: (r) => r.workload, align: 'left' },
    { title: 'dist', value: (r) => r.dist, align: 'left' },
    ...engines.map((e): Column<CompareRow> => ({
      title: e === baseline ? `${e} ops/s` : `${e} ops/s (×)`,
      value: (r) => (e === baseline ? fmt(r.opsPerSec[e]) : `${fmt(r.opsPerSec[e])} (${r.ratio[e].toFixed(2)})`),
    })),
    ...engines.map((e): Column<CompareRow> => ({ title: `${e} p99/p999 µs`, value: (r) => `${us(r.p99Us[e])}/${us(r.p999Us[e])}` })),
  ];
  return textTable(rows, cols);
}


export interface Series {
  name: string;
  color: string;
  points: Array<[number, number]>;
  /** Drawn dashed, as a reference line is. */
  dashed?: boolean;
}

export const esc = (s: string): string => s.replace(/[&<>"]/g, (ch) => `&#${ch.charCodeAt(0)};`);
export const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2'];

/** A line chart as inline SVG; `logX` for latency; `marks`: labelled vertical lines at x. */
export function chart(title: string, xLabel: string, yLabel: string, series: Series[], logX = false, marks: Array<[number, string]> = []): string {
  const W = 520;
  const H = 240;
  const L = 64;
  const B = 36;
  const pts = series.flatMap((s) => s.points);
  if (pts.length === 0) return '';
  const fx = (x: number): number => (logX ? Math.log10(Math.max(x, 0.1)) : x);
  const xs = pts.map(([x]) => fx(x));
  const x0 = Math.min(...xs);
  const x1 = Math.max(...xs, x0 + 1e-9);
  const y1 = Math.max(...pts.map(([, y]) => y), 1e-9);
  const px = (x: number): number => L + ((fx(x) - x0) / (x1 - x0)) * (W - L - 10);
  const py = (y: number): number => H - B - (y / y1) * (H - B - 20);
  const lines = series.map((s) => `<polyline fill="none" stroke="${s.color}" stroke-width="1.5"${s.dashed ? ' stroke-dasharray="5,4"' : ''} points="${s.points.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(' ')}"/>`).join('');
  const ticks = [0, 0.5, 1].map((f) => `<text x="${L - 6}" y="${py(y1 * f) + 4}" text-anchor="end">${esc(fmtShort(y1 * f))}</text>`).join('');
  const xt = [0, 0.5, 1].map((f) => {
    const v = x0 + (x1 - x0) * f;
    const label = logX ? fmtShort(10 ** v) : fmtShort(v);
    return `<text x="${(L + f * (W - L - 10)).toFixed(1)}" y="${H - B + 16}" text-anchor="middle">${esc(label)}</text>`;
  }).join('');
  // Each name after the last, at about 6 px a character: long engine names do not overlap.
  const at = series.map((_, i) => L + 8 + series.slice(0, i).reduce((x, t) => x + Math.max(110, t.name.length * 6 + 14), 0));
  const legend = series.map((s, i) => `<text x="${at[i]}" y="14" fill="${s.color}">${esc(s.name)}</text>`).join('');
  const marked = marks.map(([x, label]) => `<line x1="${px(x).toFixed(1)}" x2="${px(x).toFixed(1)}" y1="20" y2="${H - B}" stroke="#c33" stroke-dasharray="3,3"><title>${esc(label)}</title></line>` +
    `<text x="${(px(x) + 2).toFixed(1)}" y="30" fill="#c33" font-size="9">${esc(label)}</text>`).join('');
  return `<figure><figcaption>${esc(title)}</figcaption><svg width="${W}" height="${H}" font-size="11">
<line x1="${L}" y1="${H - B}" x2="${W - 10}" y2="${H - B}" stroke="#999"/><line x1="${L}" y1="20" x2="${L}" y2="${H - B}" stroke="#999"/>
${ticks}${xt}${legend}${lines}${marked}
<text x="${(W + L) / 2}" y="${H - 4}" text-anchor="middle">${esc(xLabel)}</text>
<text x="12" y="${H / 2}" transform="rotate(-90 12 ${H / 2})" text-anchor="middle">${esc(yLabel)}</text>
</svg></figure>`;
}

function fmtShort(n: number): string {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return n >= 10 ? n.toFixed(0) : n.toFixed(1);
}

/** Cumulative distribution of one run's latencies (all operations), as [µs, fraction]. */
function cdf(r: RunResult): Array<[number, number]> {
  const merged = new Map<number, number>();
  for (const h of Object.values(r.histograms)) for (const [b, c] of h) merged.set(b, (merged.get(b) ?? 0) + c);
  const sorted = [...merged.entries()].sort((a, b) => a[0] - b[0]);
  const total = sorted.reduce((n, [, c]) => n + c, 0);
  let seen = 0;
  return sorted.map(([b, c]) => { seen += c; return [b, seen / total]; });
}

/** A run's schedule as text lines: each action, what it did, and the range moves' unavailability. */
export function scheduleLines(runs: RunResult[]): string[] {
  const out: string[] = [];
  for (const r of runs.filter((x) => x.events)) {
    out.push(`schedule of ${r.engine} ${r.workload}/${r.dist}:`);
    for (const e of r.events!) {
      out.push(`  ${(e.startedMs / 1000).toFixed(1)} s ${e.name}${e.args.length ? ` ${e.args.join(' ')}` : ''} (${(e.tookMs / 1000).toFixed(1)} s): ${e.error ? `FAILED: ${e.error}` : e.outcome!.detail}`);
    }
    const moves = r.events!.flatMap((e) => e.outcome?.moves ?? []).map((m) => m.unavailableMs).sort((a, b) => a - b);
    if (moves.length > 0) out.push(`  ${moves.length} range move(s): unavailable median ${moves[Math.floor((moves.length - 1) / 2)]} ms, max ${moves[moves.length - 1]} ms`);
    for (const e of r.events!.filter((x) => x.outcome?.failoverMs !== undefined)) out.push(`  failover after ${e.name}: ${e.outcome!.failoverMs} ms`);
  }
  return out;
}

/** A run's schedule in the HTML report: throughput and p99 over time with each action marked, and its tables. */
function scheduleHtml(r: RunResult): string {
  const secs = (j: number): number => ((j + 1) * r.timelineMs) / 1000;
  const marks = r.events!.map((e) => [e.startedMs / 1000, e.name] as [number, string]);
  const tput = chart(`${r.engine} ${r.workload} / ${r.dist}: throughput over time, actions marked`, 'seconds', 'ops/s',
    [{ name: r.engine, color: COLORS[0], points: r.timeline.map((y, j) => [secs(j), y]) }], false, marks);
  const p99 = chart(`${r.engine} ${r.workload} / ${r.dist}: p99 latency per interval, actions marked`, 'seconds', 'p99 µs',
    [{ name: 'p99', color: COLORS[1], points: (r.timelineP99 ?? []).map((y, j) => [secs(j), y]) }], false, marks);
  const rows = r.events!.map((e) => `<tr><td class="r">${(e.startedMs / 1000).toFixed(1)}</td><td>${esc(e.name)}${e.args.length ? ` ${e.args.join(' ')}` : ''}</td>` +
    `<td class="r">${(e.tookMs / 1000).toFixed(1)}</td><td>${esc(e.error ? `FAILED: ${e.error}` : e.outcome!.detail)}</td></tr>`).join('');
  const moves = r.events!.flatMap((e) => (e.outcome?.moves ?? []).map((m) => `<tr><td>${esc(e.name)}</td><td class="r">${m.range}</td><td class="r">${m.from}</td><td class="r">${m.to}</td><td class="r">${m.unavailableMs}</td><td class="r">${m.releaseMs ?? ''}</td><td class="r">${m.engineOpenMs ?? ''}</td></tr>`)).join('');
  return `<section><h3>Schedule: ${esc(r.workload)} / ${esc(r.dist)}</h3><div class="charts">${tput}${p99}</div>
<table><thead><tr><th>at s</th><th>action</th><th>took s</th><th>what it did</th></tr></thead><tbody>${rows}</tbody></table>
${moves ? `<table><thead><tr><th>by</th><th>range</th><th>from LTC</th><th>to LTC</th><th>unavailable ms</th><th>of it, letting go ms</th><th>engine open ms</th></tr></thead><tbody>${moves}</tbody></table>` : ''}</section>`;
}

/** Runs through the Gemini cache: per cell, the failed instance's hit ratio and the throughput of every engine over time, and the table of cacheRows. */
function cacheHtml(runs: RunResult[], engines: string[], color: (e: string) => string): string {
  const cached = runs.filter((r) => r.cache);
  if (cached.length === 0) return '';
  const cells = [...new Set(cached.map((r) => `${r.workload}\u0000${r.dist}`))].map((cell) => {
    const [workload, dist] = cell.split('\u0000');
    const rs = engines.map((e) => cached.find((r) => r.engine === e && r.workload === workload && r.dist === dist)).filter((r): r is RunResult => r !== undefined);
    const secs = (r: RunResult, j: number): number => ((j + 1) * r.timelineMs) / 1000;
    const marks = (rs[0]?.events ?? []).map((e) => [e.startedMs / 1000, e.name] as [number, string]);
    const failedSeries = (r: RunResult): Array<number | null> => r.cache!.byInstance[String(r.cache!.failed ?? '')] ?? r.cache!.hitRatio;
    const hit = chart(`${workload} / ${dist}: hit ratio of the failed instance (all lookups without a failure) over time`, 'seconds', 'hit ratio',
      rs.map((r) => ({ name: r.engine, color: color(r.engine), points: failedSeries(r).flatMap((y, j) => (y === null ? [] : [[secs(r, j), y] as [number, number]])) })), false, marks);
    const all = chart(`${workload} / ${dist}: hit ratio of all lookups over time`, 'seconds', 'hit ratio',
      rs.map((r) => ({ name: r.engine, color: color(r.engine), points: r.cache!.hitRatio.flatMap((y, j) => (y === null ? [] : [[secs(r, j), y] as [number, number]])) })), false, marks);
    const tput = chart(`${workload} / ${dist}: throughput over time`, 'seconds', 'ops/s',
      rs.map((r) => ({ name: r.engine, color: color(r.engine), points: r.timeline.map((y, j) => [secs(r, j), y] as [number, number]) })), false, marks);
    return `<section><h3>${esc(workload)} / ${esc(dist)}</h3><div class="charts">${hit}${all}${tput}</div></section>`;
  }).join('\n');
  const rows = cacheRows(cached).map((r) => `<tr><td>${esc(r.engine)}</td><td>${esc(r.workload)}/${esc(r.dist)}</td><td class="r">${pct(r.hitBefore)}</td><td class="r">${pct(r.hitDuring)}</td><td class="r">${pct(r.hitAfter)}</td>` +
    `<td class="r">${r.failed ?? ''}</td><td class="r">${pct(r.instanceBefore)}</td><td class="r">${esc(restore(r.restoreMs))}</td><td class="r">${fmt(r.opsBefore ?? 0)}</td><td class="r">${fmt(r.opsDuring ?? 0)}</td><td class="r">${fmt(r.opsAfter ?? 0)}</td>` +
    `<td class="r">${r.stale ?? 'no --verify'}</td><td class="r">${r.discarded ?? ''}</td></tr>`).join('');
  return `<h2>Gemini cache</h2>
<p>Hit ratios are the client's (lookups that found their entry), per ${cached[0]!.timelineMs} ms interval; "restored after" is the time from the failed instance's return until an interval of its own hit ratio is within 2 points of what it was over the 10 s before the kill (interval resolution). Stale reads are those --verify found older than a write acknowledged before the read began.</p>
<table><thead><tr><th>engine</th><th>cell</th><th>hit before</th><th>hit during</th><th>hit after</th><th>failed</th><th>its hit before</th><th>restored after</th><th>ops/s before</th><th>during</th><th>after</th><th>stale reads</th><th>discarded entries</th></tr></thead><tbody>${rows}</tbody></table>
${cells}`;
}

export function sessionHtml(s: SessionResult, baseline: string): string {
  const engines = s.options.engines;
  const rows = compareRows(s.runs, engines, baseline);
  const color = (e: string): string => COLORS[engines.indexOf(e) % COLORS.length];
  const kb = (v: number | undefined): string => (v === undefined ? '' : v.toFixed(1));
  const head = ['workload', 'dist', ...engines.map((e) => (e === baseline ? `${e} ops/s` : `${e} ops/s (× ${baseline})`)), ...engines.map((e) => `${e} p99/p999 µs`),
    ...engines.map((e) => `${e} KB written/op`)];
  const table = `<table><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join('')}</tr></thead><tbody>${rows.map((r) => `<tr><td>${esc(r.workload)}</td><td>${esc(r.dist)}</td>${engines.map((e) => `<td class="r">${fmt(r.opsPerSec[e])}${e === baseline ? '' : ` (${r.ratio[e].toFixed(2)})`}</td>`).join('')}${engines.map((e) => `<td class="r">${esc(us(r.p99Us[e]))}/${esc(us(r.p999Us[e]))}</td>`).join('')}${engines.map((e) => `<td class="r">${kb(r.writtenKbPerOp[e])}</td>`).join('')}</tr>`).join('\n')}</tbody></table>`;
  const loads = `<table><thead><tr><th>engine</th><th>load records/s</th><th>load s</th><th>settle s</th><th>KB written/record</th><th>settled by</th></tr></thead><tbody>${engines.map((e) => {
    const l = s.loads[e];
    return `<tr><td>${esc(e)}</td><td class="r">${fmt(l.opsPerSec)}</td><td class="r">${l.seconds.toFixed(1)}</td><td class="r">${l.settleSeconds.toFixed(1)}</td><td class="r">${kb(l.diskWriteBytes === undefined ? undefined : l.diskWriteBytes / l.records / 1024)}</td><td>${esc(l.settled)}</td></tr>`;
  }).join('')}</tbody></table>`;
  const withPeaks = s.runs.filter((r) => r.peakRss?.length);
  const memory = withPeaks.length === 0 ? '' : `<h2>Peak memory</h2>
<p>Each process's peak resident memory in each run, in MiB, of the memory its knobs give it (a component's budget; the runtime under it comes on top).</p>
<table><thead><tr><th>engine</th><th>workload</th><th>dist</th><th>processes</th></tr></thead><tbody>${withPeaks.map((r) =>
    `<tr><td>${esc(r.engine)}</td><td>${esc(r.workload)}</td><td>${esc(r.dist)}</td><td>${esc(peaksLine(r))}</td></tr>`).join('')}</tbody></table>`;
  const cells = rows.map((row) => {
    const rs = s.runs.filter((r) => r.workload === row.workload && r.dist === row.dist);
    const byEngine = engines.map((e) => rs.filter((r) => r.engine === e));
    const tput = chart(`${row.workload} / ${row.dist}: throughput over time (first round)`, 'seconds', 'ops/s',
      byEngine.map((runs, i) => ({ name: engines[i], color: color(engines[i]), points: (runs[0]?.timeline ?? []).map((y, j) => [((j + 1) * (runs[0]?.timelineMs ?? 1000)) / 1000, y] as [number, number]) })));
    const lat = chart(`${row.workload} / ${row.dist}: latency distribution (first round, all operations)`, 'µs (log scale)', 'fraction ≤',
      byEngine.map((runs, i) => ({ name: engines[i], color: color(engines[i]), points: runs[0] ? cdf(runs[0]) : [] })), true);
    return `<section><h3>${esc(row.workload)} / ${esc(row.dist)}</h3><div class="charts">${tput}${lat}</div></section>`;
  }).join('\n');
  const verify = s.runs.some((r) => r.verify)
    ? `<p>Verify: ${s.runs.map((r) => `${esc(r.engine)} ${esc(r.workload)}/${esc(r.dist)}: ${r.verify ? `${r.verify.errors} errors in ${r.verify.reads} values` : 'off'}`).join('; ')}.</p>`
    : '';
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>nova bench: ${esc(engines.join(', '))}</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 2em; color: #222 }
table { border-collapse: collapse; margin-bottom: 1em } th, td { padding: 4px 10px; border-bottom: 1px solid #ddd }
th { text-align: left; background: #f4f4f4 } td.r { text-align: right; font-variant-numeric: tabular-nums }
.charts { display: flex; flex-wrap: wrap; gap: 1em } figure { margin: 0 } figcaption { font-size: 12px; color: #555 }
</style></head><body>
<h1>nova bench</h1>
<p>${esc(s.startedAt)}, Node ${esc(s.node)}. Records ${s.options.records.toLocaleString('en-US')}, values ${s.options.valueSize} B, scans of ${s.options.scanLength}, ${s.options.operations ? `${s.options.operations} operations` : `${s.options.duration} s`} per run. Ratios are to ${esc(baseline)}; throughput is the median over ${s.options.rounds} round(s).</p>
${s.notes.map((n) => `<p>${esc(n)}</p>`).join('\n')}
${verify}
<h2>Throughput</h2>
${table}
<h2>Load</h2>
${loads}
${memory}
<h2>Cells</h2>
${cells}
${cacheHtml(s.runs, engines, color)}
${s.runs.filter((r) => r.events).map(scheduleHtml).join('\n')}
</body></html>
`;
}
