/**
 * Calls awaiting their answers, by id: the table the fabric's RPC and the TCP RPC share. It
 * gives ids, keeps each call's deadline (one sweeping timer for all of them, not a timer per
 * call) and settles each call exactly once: by its answer (take), by its deadline
 * (DEADLINE_EXCEEDED), or by a failure of its connection (failWhere, failAll).
 */
import { NovaError } from './errors.js';

/** How often deadlines are checked: a call fails at most this late. */
const SWEEP_MS = 20;
/**
 * A sweep this late means the process did not run meanwhile (paused, or starved): the answers
 * may be waiting unread, so deadlines move by the time lost instead of expiring unseen.
 */
const LATE_SWEEP_MS = 1_000;

export interface PendingCall<M> {
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  deadline: number;
  /** What the call was (its method, its peer): for messages. */
  meta: M;
}

export class PendingCalls<M> {
  private readonly calls = new Map<number, PendingCall<M>>();
  private nextId = 1;
  private sweeper: NodeJS.Timeout | undefined;
  private sweptAt = 0;

  /**
   * @param expired the message of a call that passed its deadline.
   * @param unref whether the sweeping timer lets the process exit.
   */
  constructor(private readonly expired: (meta: M) => string, private readonly unref = false) {}

  get size(): number {
    return this.calls.size;
  }

  /** A new call's id (1 … 2^31 − 1, then around again), registered until it is settled. */
  add(meta: M, timeoutMs: number, resolve: (value: unknown) => void, reject: (error: Error) => void): number {
    const id = this.nextId;
    this.nextId = id === 0x7fffffff ? 1 : id + 1;
    this.calls.set(id, { resolve, reject, deadline: Date.now() + timeoutMs, meta });
    this.arm();
    return id;
  }

  /** Call `id`, removed: its answer came (undefined if it was settled already). */
  take(id: number): PendingCall<M> | undefined {
    const call = this.calls.get(id);
    if (call) this.calls.delete(id);
    return call;
  }

  /** Fails call `id` with `error`, if it is still pending. */
  fail(id: number, error: Error): void {
    this.take(id)?.reject(error);
  }

  /** Fails every pending call whose meta `which` picks, with the error `why` gives it. */
  failWhere(which: (meta: M) => boolean, why: (meta: M) => Error): void {
    for (const [id, call] of this.calls) {
      if (which(call.meta)) {
        this.calls.delete(id);
        call.reject(why(call.meta));
      }
    }
  }

  /** Fails every pending call with `error` and stops the timer. */
  failAll(error: Error): void {
    const all = [...this.calls.values()];
    this.calls.clear();
    this.stop();
    for (const call of all) call.reject(error);
  }

  private arm(): void {
    if (this.sweeper) return;
    this.sweptAt = Date.now();
    this.sweeper = setInterval(() => {
      const now = Date.now();
      const lost = now - this.sweptAt - SWEEP_MS;
      this.sweptAt = now;
      if (lost > LATE_SWEEP_MS) {
        for (const call of this.calls.values()) call.deadline += lost;
        return;
      }
      for (const [id, call] of this.calls) {
        if (call.deadline <= now) {
          this.calls.delete(id);
          call.reject(new NovaError('DEADLINE_EXCEEDED', this.expired(call.meta)));
        }
      }
      if (this.calls.size === 0) this.stop();
    }, SWEEP_MS);
    if (this.unref) this.sweeper.unref();
  }

  private stop(): void {
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = undefined;
  }
}
