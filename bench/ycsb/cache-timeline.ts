/**
 * A run through the Gemini cache over time (the paper's Figures 5.5–5.7): the hit ratio of
 * every interval, in all and per instance, from the client's counters; and for a schedule that
 * kills an instance and starts it again, its hit ratio before the kill and how long after its
 * return it took to get back to it. Pure: the runner samples, this reads the samples.
 */
import type { CacheCounters } from './kv-store.js';
import type { ScheduleEvent } from './schedule.js';

export interface CacheRun {
  /** Hit ratio of each interval's lookups (null: none). */
  hitRatio: Array<number | null>;
  /** The same, per instance, by id. */
  byInstance: Record<string, Array<number | null>>;
  /** The instance the schedule killed and started again, if one was. */
  failed?: number;
  /** Its hit ratio over the RESTORE_BEFORE_MS before the kill. */
  before?: number;
  /** From its return until an interval of its own hit ratio was within RESTORE_SLACK of `before` again; null if none was in the run. */
  restoreMs?: number | null;
  /** Entries the instances discarded during the run (configuration id below their fragment's floor). */
  discarded?: number;
}

/** The window before a kill whose hit ratio is the one to get back to. */
const RESTORE_BEFORE_MS = 10_000;
/** How close counts as restored (the paper's "some degree of variation"). */
export const RESTORE_SLACK = 0.02;

/** Per-interval samples of the counters as they grow from `last` (the run's start): call `tick` once per interval. */
export class CacheSampler {
  readonly run: CacheRun = { hitRatio: [], byInstance: {} };
  private intervals = 0;

  constructor(private last: CacheCounters) {}

  tick(now: CacheCounters): void {
    const ratio = (gets: number, hits: number): number | null => (gets > 0 ? hits / gets : null);
    this.run.hitRatio.push(ratio(now.gets - this.last.gets, now.hits - this.last.hits));
    for (const [id, x] of Object.entries(now.byInstance)) {
      const was = this.last.byInstance[Number(id)] ?? { gets: 0, hits: 0 };
      const series = this.run.byInstance[id] ??= Array.from({ length: this.intervals }, () => null);
      series.push(ratio(x.gets - was.gets, x.hits - was.hits));
    }
    for (const [id, series] of Object.entries(this.run.byInstance)) if (!(Number(id) in now.byInstance)) series.push(null);
    this.intervals++;
    this.last = { gets: now.gets, hits: now.hits, byInstance: Object.fromEntries(Object.entries(now.byInstance).map(([id, x]) => [id, { ...x }])) };
  }
}

/** Fills `run`'s failure figures from the schedule's `cache kill` and the `cache start` after it. */
export function recoveryOf(run: CacheRun, events: readonly ScheduleEvent[], timelineMs: number): CacheRun {
  const kill = events.find((e) => e.name === 'cache kill' && !e.error);
  if (!kill) return run;
  const id = kill.outcome?.cacheInstance ?? kill.args[0] ?? 1;
  const start = events.find((e) => e.name === 'cache start' && !e.error && e.startedMs > kill.startedMs && (e.outcome?.cacheInstance ?? e.args[0] ?? 1) === id);
  const series = run.byInstance[String(id)] ?? [];
  const end = (j: number): number => (j + 1) * timelineMs;
  // Intervals wholly inside the window before the kill, the first one (warming up) left out.
  const window = series.map((r, j) => ({ r, j })).filter(({ r, j }) => r !== null && j > 0 && end(j) <= kill.startedMs && end(j) > kill.startedMs - RESTORE_BEFORE_MS);
  const before = window.length > 0 ? window.reduce((n, x) => n + x.r!, 0) / window.length : undefined;
  const out: CacheRun = { ...run, failed: id, ...(before !== undefined ? { before } : {}) };
  if (!start || before === undefined) return out;
  const back = start.startedMs + start.tookMs;
  const j = series.findIndex((r, k) => r !== null && end(k) - timelineMs >= back && r >= before - RESTORE_SLACK);
  return { ...out, restoreMs: j < 0 ? null : Math.max(0, end(j) - back) };
}
