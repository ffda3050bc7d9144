/** The bench's reading of a run through the Gemini cache (bench/ycsb/cache-timeline.ts) and its schedule's cache actions. */
import { describe, expect, it } from 'vitest';
import { CacheSampler, recoveryOf } from '../../bench/ycsb/cache-timeline.js';
import { parseSchedule, type ScheduleEvent } from '../../bench/ycsb/schedule.js';

describe('cache timeline', () => {
  it('samples hit ratios per interval, in all and per instance, from growing counters', () => {
    const s = new CacheSampler({ gets: 100, hits: 50, byInstance: { 1: { gets: 100, hits: 50 } } });
    s.tick({ gets: 200, hits: 140, byInstance: { 1: { gets: 150, hits: 95 }, 2: { gets: 50, hits: 45 } } });
    s.tick({ gets: 200, hits: 140, byInstance: { 1: { gets: 150, hits: 95 }, 2: { gets: 50, hits: 45 } } });
    expect(s.run.hitRatio).toEqual([0.9, null]);
    expect(s.run.byInstance['1']).toEqual([0.9, null]);
    expect(s.run.byInstance['2']).toEqual([0.9, null]);
  });

  it('measures the failed instance\'s hit ratio before the kill and the time to get back within two points after its return', () => {
    // 1 s intervals: 0.9 until the kill at 10 s, nothing while down, 0.5 then climbing after its return at 20 s.
    const series = [...Array(10).fill(0.9), ...Array(10).fill(null), 0.5, 0.7, 0.85, 0.89, 0.9];
    const events: ScheduleEvent[] = [
      { atMs: 10_000, name: 'cache kill', args: [2], startedMs: 10_000, tookMs: 3_000, outcome: { detail: '', moves: [], cacheInstance: 2 } },
      { atMs: 18_000, name: 'cache start', args: [2], startedMs: 18_000, tookMs: 2_000, outcome: { detail: '', moves: [], cacheInstance: 2 } },
    ];
    const r = recoveryOf({ hitRatio: [], byInstance: { 2: series } }, events, 1000);
    expect(r.failed).toBe(2);
    expect(r.before).toBeCloseTo(0.9);
    expect(r.restoreMs).toBe(4_000); // the interval ending at 24 s is the first at 0.88 or more
    const never = recoveryOf({ hitRatio: [], byInstance: { 2: series.slice(0, 22) } }, events, 1000);
    expect(never.restoreMs).toBeNull();
    expect(recoveryOf({ hitRatio: [], byInstance: {} }, [], 1000).failed).toBeUndefined();
  });

  it('parses cache kill and cache start, with an instance id or without', () => {
    expect(parseSchedule('20s cache kill 2, 30s cache start 2, 40s cache kill')).toEqual([
      { atMs: 20_000, name: 'cache kill', args: [2] }, { atMs: 30_000, name: 'cache start', args: [2] }, { atMs: 40_000, name: 'cache kill', args: [] }]);
    expect(() => parseSchedule('20s cache kill 1 2')).toThrow(/at most a cache instance id/);
  });
});
