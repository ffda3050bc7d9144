/**
 * `nova bench scale`'s points: each engine's throughput per count against the line through its
 * smallest count, and the table and report drawn from them.
 */
import { describe, expect, it } from 'vitest';
import { scaleHtml, scalePoints, scaleTable } from '../../bench/ycsb/scale.js';
import type { RunResult } from '../../bench/ycsb/runner.js';

function run(engine: string, workload: string, opsPerSec: number, p99Us = 1000): RunResult {
  return { engine, workload, dist: 'uniform', opsPerSec, latency: { update: { ops: 1, meanUs: 1, p50Us: 1, p99Us, p999Us: p99Us, maxUs: p99Us } } } as unknown as RunResult;
}

describe('scalePoints', () => {
  const engines = ['nova', 'nova:placement=random'];
  const sessions = [
    { runs: [run('nova', 'W100', 1000), run('nova:placement=random', 'W100', 800), run('nova', 'RW50', 3000), run('nova:placement=random', 'RW50', 3000)] },
    { runs: [run('nova', 'W100', 1900), run('nova:placement=random', 'W100', 1200), run('nova', 'RW50', 3000), run('nova:placement=random', 'RW50', 3100)] },
    { runs: [run('nova', 'W100', 3000, 5000), run('nova', 'W100', 3400, 7000), run('nova', 'W100', 3200, 6000),
      run('nova:placement=random', 'W100', 2000), run('nova', 'RW50', 3000), run('nova:placement=random', 'RW50', 3000)] },
  ];
  const points = scalePoints([1, 2, 4], sessions, engines);

  it('sets each engine and cell against the line through its own smallest count', () => {
    const w100 = points.filter((p) => p.engine === 'nova' && p.workload === 'W100');
    expect(w100.map((p) => [p.count, p.linearOpsPerSec])).toEqual([[1, 1000], [2, 2000], [4, 4000]]);
    expect(w100.map((p) => p.ofLinear)).toEqual([1, 0.95, 0.8]); // 4: the median of three rounds, 3,200
    expect(w100[2].p99Us).toBe(6000);
    const random = points.filter((p) => p.engine === 'nova:placement=random' && p.workload === 'W100');
    expect(random.map((p) => p.linearOpsPerSec)).toEqual([800, 1600, 3200]);
    const flat = points.filter((p) => p.engine === 'nova' && p.workload === 'RW50');
    expect(flat.map((p) => p.ofLinear)).toEqual([1, 0.5, 0.25]);
  });

  it('draws the line through another count when asked (a smallest count that collapsed)', () => {
    const from2 = scalePoints([1, 2, 4], sessions, engines, 2).filter((p) => p.engine === 'nova' && p.workload === 'W100');
    expect(from2.map((p) => p.linearOpsPerSec)).toEqual([950, 1900, 3800]);
    expect(from2[2].ofLinear).toBeCloseTo(3200 / 3800);
  });

  it('tables and draws them, one column per count, a dashed linear line per engine', () => {
    const table = scaleTable({ vary: 'stocs', counts: [1, 2, 4], points });
    expect(table).toContain('4 StoCs ops/s (of linear)');
    expect(table).toMatch(/W100 .*uniform .*nova .*1,000 \(100%\) .*1,900 \(95%\) .*3,200 \(80%\)/);
    const html = scaleHtml({ startedAt: 'now', vary: 'stocs', counts: [1, 2, 4], engines, points, sessions: [], linearFrom: 1 });
    expect(html.match(/<figure>/g)).toHaveLength(2); // W100, RW50
    expect(html.match(/stroke-dasharray="5,4"/g)).toHaveLength(4); // two engines' linear lines in each
  });
});
