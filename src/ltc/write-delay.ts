/**
 * The write slowdown before L0's stop (RocksDB's delayed write rate, after LevelDB's 1 ms
 * delay): from `l0SlowdownTrigger` L0 tables, commit rounds pass at a rate in bytes per second.
 * It starts at the rate writes came in at, and each flush or compaction adjusts it: down while
 * L0 does not shrink, further near the stop, up once it shrinks; it ends when L0 is below the
 * trigger again. So a range whose compactions fall behind pays for them a little on every
 * write, instead of all at once at the stop. Pure: the caller passes the time
 * (doc/decisions/write-slowdown.md).
 */

/** The factors RocksDB uses (column_family.cc SetupDelay). */
const SLOWER = 0.8;
const FASTER = 1 / SLOWER;
const NEAR_STOP = 0.6;
/** Least rate: a range is never held to less (RocksDB's kMinWriteRate). */
export const MIN_RATE = 16 * 1024;
/** The first rate when nothing has been metered yet (RocksDB's default delayed_write_rate). */
export const FIRST_RATE = 16 * 1024 * 1024;
/** The window over which writes are metered for a slowdown's first rate: several flushes' worth, stalls included. */
const METER_MS = 5000;
/** The most a round waits for the bytes before it: one huge batch at a low rate holds back no write for minutes. */
export const MAX_WAIT_MS = 2000;

export interface Triggers {
  slowdown: number;
  stop: number;
}

export class WriteDelay {
  /** Bytes per second while writes are slowed; 0 while they are not. */
  rate = 0;
  private lastL0 = 0;
  /** When the bytes charged so far have passed at `rate` (ms, the caller's clock). */
  private freeAt = 0;
  /** The metering window: when it began (undefined before the first round), its bytes, and the last round's time. */
  private windowStart: number | undefined;
  private windowBytes = 0;
  private lastAt = 0;
  /** Bytes per second over the last whole metering window, stalls included: what a slowdown starts from. */
  private metered = 0;

  /**
   * After a flush or compaction left L0 with `l0` tables: starts, adjusts or ends the slowdown.
   * `stopped`: writes waited at the stop since the last call. A step that left L0 as it was (a
   * deeper compaction) changes nothing, unless L0 is near its stop.
   */
  adjust(l0: number, t: Triggers, stopped: boolean): void {
    const last = this.lastL0;
    this.lastL0 = l0;
    if (l0 < t.slowdown || t.slowdown >= t.stop) {
      this.rate = 0;
      this.freeAt = 0;
      return;
    }
    let rate = this.rate;
    if (this.rate === 0) rate = this.metered || FIRST_RATE;
    else if (stopped || l0 >= t.stop - 2) rate = this.rate * NEAR_STOP;
    else if (l0 > last) rate = this.rate * SLOWER;
    else if (l0 < last) rate = this.rate * FASTER;
    this.rate = Math.max(MIN_RATE, rate);
  }

  /** Milliseconds the next round waits at `now` for the bytes before it to pass. */
  waitMs(now: number): number {
    return this.rate > 0 ? Math.max(0, this.freeAt - now) : 0;
  }

  /**
   * Charges a round of `bytes` going out at `now`, which began (queued, then perhaps stalled or
   * slowed) at `began`. Time with no round at all, longer than the window, is a pause, not
   * the range's rate: the window starts again after it.
   */
  charge(bytes: number, now: number, began = now): void {
    if (this.windowStart === undefined || began - this.lastAt > METER_MS) {
      this.windowStart = began;
      this.windowBytes = 0;
    } else if (now - this.windowStart >= METER_MS) {
      this.metered = (this.windowBytes * 1000) / (now - this.windowStart);
      this.windowStart = now;
      this.windowBytes = 0;
    }
    this.windowBytes += bytes;
    this.lastAt = now;
    // Time unused before now is not credit: a burst after a pause is slowed like any other.
    if (this.rate > 0) this.freeAt = Math.min(Math.max(this.freeAt, now) + (bytes * 1000) / this.rate, now + MAX_WAIT_MS);
  }
}
