/**
 * The fault runner's result as text lines and as a standalone HTML page (operations answered
 * per second, with the faults marked where they began).
 */
import { htmlReport } from '../report.js';
import { FAULT_KINDS, type FaultRunResult } from './runner.js';

export function faultSummary(r: FaultRunResult): string[] {
  const ops = r.operations;
  const c = r.check;
  const faults = FAULT_KINDS.filter((k) => r.faults[k] > 0).map((k) => `${k} ${r.faults[k]}`).join(', ') || 'none';
  const lines = [
    `seed ${r.seed}: ${(r.durationMs / 1000).toFixed(0)} s, ${r.clients} clients (up to ${r.depth} requests outstanding each), ${r.keys} keys`,
    `operations: ${ops.total} (${ops.reads} reads, ${ops.writes} writes acknowledged, ${ops.unknown} of unknown outcome, ${ops.failed} failed)`,
    `faults: ${faults}`,
    `client sessions: ${r.sessions}`,
    ...(r.moves.length > 0 ? [`range moves: ${r.moves.length}; refused requests for median ${median(r.moves)} ms, max ${Math.max(...r.moves)} ms`] : []),
    `checked ${c.operations} operations on ${c.keys} keys in ${(r.checkMs / 1000).toFixed(1)} s (${c.states} search states); longest operation ${(c.longestMs / 1000).toFixed(2)} s`,
  ];
  if (c.violations.length === 0 && c.undecided.length === 0) lines.push('linearizable: every key');
  for (const v of c.violations) lines.push(`NOT LINEARIZABLE: key ${v.key}: ${v.explanation}`);
  if (c.undecided.length > 0) lines.push(`undecided (the search ran out of states): keys ${c.undecided.join(', ')}`);
  return lines;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

export function faultHtml(r: FaultRunResult): string {
  const w = 900;
  const h = 240;
  const max = Math.max(1, ...r.perSecond);
  const x = (s: number): number => (s / Math.max(1, r.perSecond.length)) * w;
  const y = (v: number): number => h - (v / max) * h;
  const line = r.perSecond.map((v, s) => `${s === 0 ? 'M' : 'L'}${x(s + 0.5).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
  const marks = r.events.map((e) => `<line x1="${x(e.atMs / 1000)}" x2="${x(e.atMs / 1000)}" y1="0" y2="${h}" stroke="#c33" stroke-dasharray="3,3"><title>${e.kind} ${e.targets.join(',')} at ${(e.atMs / 1000).toFixed(1)} s, ${(e.tookMs / 1000).toFixed(1)} s until served</title></line>`).join('');
  const chart = `<svg width="${w}" height="${h + 20}" style="border:1px solid #ddd"><path d="${line}" fill="none" stroke="#36c"/>${marks}` +
    `<text x="4" y="14" font-size="12">${max} ops/s</text><text x="4" y="${h + 16}" font-size="12">0 s</text><text x="${w - 60}" y="${h + 16}" font-size="12">${r.perSecond.length} s</text></svg>`;
  const page = htmlReport(`nova bench faults, seed ${r.seed}`, faultSummary(r), r.events, [
    { title: 'at (s)', value: (e) => (e.atMs / 1000).toFixed(1) },
    { title: 'fault', value: (e) => e.kind, align: 'left' },
    { title: 'targets', value: (e) => e.targets.join(','), align: 'left' },
    { title: 'until served (s)', value: (e) => (e.tookMs / 1000).toFixed(1) },
  ]);
  return page.replace('<table>', `<h2>Operations answered per second (faults dashed)</h2>${chart}<h2>Faults</h2><table>`);
}
