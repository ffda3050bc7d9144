/**
 * How long this process's event loop could not run, over the last seconds: its delays
 * (monitorEventLoopDelay) and V8's garbage collections (PerformanceObserver 'gc'). A request
 * that arrives during a pause waits for it, so these bound what a server adds to a client's
 * tail latency; `nova status` and the bench report them beside the requests' own p99.
 */
import { PerformanceObserver, constants, monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';

/** Seconds the figures cover. */
export const PAUSE_WINDOW_S = 10;

export interface Pauses {
  /** Over the window: the event loop's delay at the 99th percentile of its worst second, and its longest, in ms. */
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
  /** Garbage collection over the window: total pause, the longest one (ms), and how many. */
  gcMs: number;
  gcMaxMs: number;
  gcCount: number;
  /** Of it, the major (mark-sweep-compact) collections' total pause, in ms. */
  gcMajorMs: number;
}

interface Second { p99: number; max: number; gcMs: number; gcMax: number; gcCount: number; gcMajor: number }

/** Watches this process from its first call on (one watcher per process); the last window's pauses. */
export function processPauses(): Pauses {
  watcher ??= new Watcher();
  return watcher.pauses();
}

/** Major (mark-sweep-compact) collections since this process's first call here: memory dropped before one may not be freed yet. */
export function majorCollections(): number {
  watcher ??= new Watcher();
  return watcher.majors;
}

let watcher: Watcher | undefined;

class Watcher {
  private readonly delay: IntervalHistogram = monitorEventLoopDelay({ resolution: 10 });
  private readonly seconds: Second[] = [];
  private current: Second = { p99: 0, max: 0, gcMs: 0, gcMax: 0, gcCount: 0, gcMajor: 0 };
  majors = 0;

  constructor() {
    this.delay.enable();
    const gc = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        this.current.gcMs += e.duration;
        this.current.gcMax = Math.max(this.current.gcMax, e.duration);
        this.current.gcCount++;
        if (((e as { detail?: { kind?: number } }).detail)?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) {
          this.current.gcMajor += e.duration;
          this.majors++;
        }
      }
    });
    gc.observe({ entryTypes: ['gc'] });
    setInterval(() => this.tick(), 1000).unref();
  }

  private tick(): void {
    // Nanoseconds; a histogram that saw nothing reports 0.
    this.current.p99 = this.delay.percentile(99) / 1e6;
    this.current.max = this.delay.max / 1e6;
    this.delay.reset();
    this.seconds.push(this.current);
    if (this.seconds.length > PAUSE_WINDOW_S) this.seconds.shift();
    this.current = { p99: 0, max: 0, gcMs: 0, gcMax: 0, gcCount: 0, gcMajor: 0 };
  }

  pauses(): Pauses {
    const s = this.seconds;
    const round = (x: number): number => Math.round(x * 10) / 10;
    return {
      loopDelayP99Ms: round(Math.max(0, ...s.map((x) => x.p99))),
      loopDelayMaxMs: round(Math.max(0, ...s.map((x) => x.max))),
      gcMs: round(s.reduce((n, x) => n + x.gcMs, 0)),
      gcMaxMs: round(Math.max(0, ...s.map((x) => x.gcMax))),
      gcCount: s.reduce((n, x) => n + x.gcCount, 0),
      gcMajorMs: round(s.reduce((n, x) => n + x.gcMajor, 0)),
    };
  }
}
