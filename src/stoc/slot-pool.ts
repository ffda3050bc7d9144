/**
 * Fixed-size slots over a StoC window, handed out first come, first served.
 *
 * Contracts:
 *  - Slots are granted in the order `acquire` was called. StocClient relies on this: it asks
 *    for all of an operation's slots at once, in call order, so a later append never holds a
 *    slot an earlier one is waiting for.
 *  - The wait queue is bounded (BUSY beyond it) and every waiter has a deadline.
 *  - A retired slot is never handed out again: its last request got no answer, so the StoC
 *    may still be reading or writing it. When every slot is retired, acquire fails at once.
 *  - After `fail`, every waiter and every later acquire is rejected with that error.
 */
import { NovaError } from '../common/errors.js';

interface Waiter {
  grant: (slot: number) => void;
  reject: (err: NovaError) => void;
  timer: NodeJS.Timeout;
}

export class SlotPool {
  private readonly free: number[] = [];
  private readonly waiters: Waiter[] = [];
  private retired = 0;
  private failure: NovaError | undefined;

  constructor(
    readonly slotBytes: number,
    readonly count: number,
    private readonly maxWaiters: number,
    /** The window's slot this pool's first one is: pools may share a window, each its own slots. */
    readonly first = 0,
  ) {
    for (let i = first + count - 1; i >= first; i--) this.free.push(i);
  }

  /** Window offset of a slot. */
  offset(slot: number): number {
    return slot * this.slotBytes;
  }

  get retiredSlots(): number {
    return this.retired;
  }

  /** Resolves with a slot; rejects DEADLINE_EXCEEDED at `deadline` (ms since the epoch). */
  acquire(deadline: number): Promise<number> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.retired === this.count) {
      return Promise.reject(new NovaError('UNAVAILABLE',
        `all ${this.count} window slots were retired after requests that got no answer: reconnect`));
    }
    if (this.waiters.length === 0 && this.free.length > 0) return Promise.resolve(this.free.pop()!);
    if (this.waiters.length >= this.maxWaiters) {
      return Promise.reject(new NovaError('BUSY', `${this.waiters.length} requests already wait for a window slot`));
    }
    return new Promise<number>((grant, reject) => {
      const waiter: Waiter = {
        grant,
        reject,
        timer: setTimeout(() => {
          this.drop(waiter);
          reject(new NovaError('DEADLINE_EXCEEDED', `no window slot free by the deadline (${this.count} slots)`));
        }, Math.max(0, deadline - Date.now())),
      };
      this.waiters.push(waiter);
    });
  }

  release(slot: number): void {
    const next = this.waiters.shift();
    if (next) {
      clearTimeout(next.timer);
      next.grant(slot);
    } else {
      this.free.push(slot);
    }
  }

  /** Takes a slot out of use for good (see the contract above). */
  retire(): void {
    this.retired++;
    if (this.retired === this.count) {
      this.rejectAll(new NovaError('UNAVAILABLE', `all ${this.count} window slots were retired: reconnect`));
    }
  }

  fail(err: NovaError): void {
    this.failure ??= err;
    this.rejectAll(this.failure);
  }

  private rejectAll(err: NovaError): void {
    for (const w of this.waiters.splice(0)) {
      clearTimeout(w.timer);
      w.reject(err);
    }
  }

  private drop(waiter: Waiter): void {
    const i = this.waiters.indexOf(waiter);
    if (i >= 0) this.waiters.splice(i, 1);
  }
}
