/**
 * The order a StoC's fdatasyncs reach its disk in (doc/decisions/background-syncs.md): those a
 * write is waiting for (a flushed table, a synced log append, a MANIFEST) go at once; those of
 * compaction outputs, which nothing but a compaction waits for, go one at a time and only while
 * no other sync is under way. A throttled or slow disk then serves flushes first, and writes
 * keep their deadlines while compaction falls behind (L0 grows and the LTC stalls writes on it,
 * as it should). A background sync that has waited `maxWaitMs` goes anyway, so compactions
 * are never starved for good.
 *
 * Background writes are synced in pieces (BACKGROUND_SYNC_BYTES) by their writers, so a sync
 * that comes while one is under way waits for a piece, not for a table.
 */

/** Bytes of a background write synced at once: a foreground sync waits for at most this much. */
export const BACKGROUND_SYNC_BYTES = 1024 * 1024;

interface Waiter {
  since: number;
  go: () => void;
}

export class SyncGate {
  private foreground = 0;
  private background = false;
  private readonly waiting: Waiter[] = [];
  private timer: NodeJS.Timeout | undefined;
  readonly counters = { foregroundSyncs: 0, backgroundSyncs: 0, backgroundWaits: 0, backgroundOverdue: 0 };

  constructor(private readonly maxWaitMs = 1_000) {}

  /** Runs `sync` now (foreground), or once the disk is free of other syncs (background). */
  async run<T>(background: boolean, sync: () => Promise<T>): Promise<T> {
    if (!background) {
      this.foreground++;
      this.counters.foregroundSyncs++;
      try {
        return await sync();
      } finally {
        this.foreground--;
        this.next();
      }
    }
    if (this.background || this.foreground > 0 || this.waiting.length > 0) {
      this.counters.backgroundWaits++;
      await new Promise<void>((go) => {
        this.waiting.push({ since: performance.now(), go });
        this.next();
      });
    } else {
      this.background = true;
    }
    this.counters.backgroundSyncs++;
    try {
      return await sync();
    } finally {
      this.background = false;
      this.next();
    }
  }

  /**
   * Lets the first background waiter go if no sync is under way, or if it waited too long and
   * no background sync is; else keeps a timer for its deadline (none while a background sync
   * runs: its end calls this again).
   */
  private next(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const first = this.waiting[0];
    if (!first || this.background) return;
    const waited = performance.now() - first.since;
    if (this.foreground > 0 && waited < this.maxWaitMs) {
      this.timer = setTimeout(() => this.next(), this.maxWaitMs - waited);
      this.timer.unref();
      return;
    }
    if (this.foreground > 0) this.counters.backgroundOverdue++;
    this.waiting.shift();
    this.background = true;
    first.go();
  }
}
