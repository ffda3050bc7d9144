/**
 * What an LTC under a memory limit (its cgroup's: `nova up --cap ltc.memory`, a container's)
 * gives its ranges, so that its resident memory stays under the limit whatever `--ltc-memory`
 * says. Two bounds, the lower wins:
 *
 * - Ahead of need: the limit, less a margin for bursts, less the runtime (what the process holds
 *   beside what the ranges count and what the C heap holds free: Node and its heap, buffers in
 *   flight), the most seen over the last samples. This holds from the first tick, before a load
 *   fills the cache faster than a tick.
 * - By result: while the process stays above the limit less the margin, a ceiling falls by the
 *   excess each tick; while it stays well below, it rises by a quarter of the room. glibc keeps
 *   freed memory resident for reuse, so after a shrink the governor waits for a major
 *   collection (dropped blocks are freed only then), asks for the C heap's free pages to be
 *   handed back (heap-free.ts trimHeap), and samples again from the next tick.
 *
 * Leaving the heap's free memory out of the runtime keeps each shrink from reading as runtime
 * grown by as much, which would shrink the ranges again, toward nothing. Without a limit, the
 * ranges get the budget.
 */

/** Samples the runtime is the most of (one per tick when the governor is not waiting: a minute or more at the LTC's one per second). */
export const RUNTIME_WINDOW = 60;

/** Ticks a shrink waits for a major collection at most; an idle process may run none for long. */
export const GC_WAIT_TICKS = 10;

/** What the governor keeps free under the limit, for bursts between ticks (a load's chunks in flight): an eighth of it, at least 128 MiB. */
export function marginOf(limit: number): number {
  return Math.max(128 * 2 ** 20, Math.floor(limit / 8));
}

export interface MemorySample {
  /** The LTC's memory knob (ltcMemoryBytes): what the ranges get without a limit. */
  budget: number;
  /** The process's resident memory. */
  rss: number;
  /** What its ranges count of it (EngineStats.memoryBytes, all ranges). */
  counted: number;
  /** What the C heap holds free (heap-free.ts heapFreeBytes). */
  free: number;
  /** Major collections so far (pauses.ts majorCollections). */
  majorGcs: number;
  /** The limit the process runs under now; undefined for none. */
  limit: number | undefined;
}

export interface MemoryDecision {
  /** What the ranges get together. */
  share: number;
  /** Whether to hand the C heap's free pages back now (heap-free.ts trimHeap). */
  trim: boolean;
}

export class MemoryGovernor {
  private readonly samples: number[] = [];
  /** What the ranges get under the limit; undefined without one (they get the budget). */
  private current: number | undefined;
  /** The bound by result: lowered while the process is above the limit less its margin, raised while it is well below. */
  private ceiling = Infinity;
  /** Set after a shrink until a major collection has run (or GC_WAIT_TICKS have passed): majors then, ticks waited. */
  private waiting: { majors: number; ticks: number } | undefined;
  /** Free memory handed back by the last trim: still counted free, no longer resident; less as malloc reuses it. */
  private trimmedFree = 0;
  private trimmedAt: number | undefined;
  private justTrimmed = false;

  /** What the ranges get together now, of `budget`. */
  share(budget: number): number {
    return Math.min(budget, this.current ?? budget);
  }

  /** The runtime learned: the most of the recent samples (0 before any). */
  get runtime(): number {
    return Math.max(0, ...this.samples);
  }

  /** Takes a sample (once a tick) and says what the ranges get together now, and whether to trim. */
  tick(s: MemorySample): MemoryDecision {
    if (s.limit === undefined) {
      this.samples.length = 0;
      this.waiting = undefined;
      this.current = undefined;
      this.ceiling = Infinity;
      return { share: s.budget, trim: false };
    }
    const now = this.share(s.budget);
    const high = s.limit - marginOf(s.limit);
    const step = Math.floor(s.limit / 50);
    // Above the mark, the ceiling falls below what the ranges hold by the excess, waiting or not.
    if (s.rss > high) this.ceiling = Math.max(0, Math.min(this.ceiling, now, s.counted) - (s.rss - high) - step);
    if (this.waiting) {
      // No runtime sample: what a shrink dropped is still resident.
      this.current = Math.min(now, this.ceiling);
      if (s.majorGcs <= this.waiting.majors && ++this.waiting.ticks < GC_WAIT_TICKS) return { share: this.share(s.budget), trim: false };
      this.waiting = undefined;
      this.noteTrim(s);
      return { share: this.share(s.budget), trim: true }; // the next tick samples what the trim left
    }
    if (this.justTrimmed) this.trimmedFree = s.free;
    this.justTrimmed = false;
    this.trimmedFree = Math.min(this.trimmedFree, s.free);
    this.samples.push(Math.max(0, s.rss - s.counted - (s.free - this.trimmedFree)));
    if (this.samples.length > RUNTIME_WINDOW) this.samples.shift();
    if (s.rss < high - 3 * step) this.ceiling = Math.min(s.budget, this.ceiling + Math.floor((high - s.rss) / 4));
    const target = Math.max(0, Math.min(s.budget, this.ceiling, high - this.runtime));
    // Changes under 1% of the limit are noise (each one resizes every range's cache), but the budget itself is always given back.
    if (Math.abs(target - now) >= s.limit / 100 || (target === s.budget && now !== s.budget)) {
      if (target < now) this.waiting = { majors: s.majorGcs, ticks: 0 };
      this.current = target;
    }
    // Above the mark with nothing left to shrink, only handing free pages back can bring the process down.
    const trim = s.rss > high && this.waiting === undefined && s.free - this.trimmedFree >= step && this.trimmedAt !== s.majorGcs;
    if (trim) this.noteTrim(s);
    return { share: this.share(s.budget), trim };
  }

  /** Notes a trim asked for now: its free memory is read at the next sample. */
  private noteTrim(s: MemorySample): void {
    this.trimmedAt = s.majorGcs;
    this.justTrimmed = true;
  }
}
