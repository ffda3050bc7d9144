/**
 * A Fabric's operations in flight, by op id (slot + 1): what to call when each one's single
 * completion event comes. A slot is reused only after that event.
 */
import { NovaError } from '../common/errors.js';
import { Status, errorCodeOf } from './codes.js';

/** The error of an operation that completed with native `status`. */
export function failure(status: number, what: string): NovaError {
  return new NovaError(errorCodeOf(status), `${what} failed: ${errorCodeOf(status)}`);
}

export class PendingOps {
  private readonly resolvers: Array<(() => void) | undefined> = [];
  private readonly rejecters: Array<((e: NovaError) => void) | undefined> = [];
  private readonly whats: Array<string | undefined> = [];
  private readonly free: number[] = [];

  /** A slot for an operation named `what`; its op id is the slot + 1. */
  take(what: string, resolve: () => void, reject: (e: NovaError) => void): number {
    const slot = this.free.length > 0 ? this.free.pop()! : this.resolvers.length;
    this.resolvers[slot] = resolve;
    this.rejecters[slot] = reject;
    this.whats[slot] = what;
    return slot;
  }

  /** Frees `slot` without settling it (its operation was never handed over). */
  release(slot: number): void {
    this.resolvers[slot] = undefined;
    this.rejecters[slot] = undefined;
    this.whats[slot] = undefined;
    this.free.push(slot);
  }

  /** Settles operation `opId` with native `status`; an unknown or settled id is ignored. */
  complete(opId: number, status: number): void {
    const slot = opId - 1;
    const resolve = this.resolvers[slot];
    const reject = this.rejecters[slot];
    if (!resolve || !reject) return;
    const what = this.whats[slot] ?? 'operation';
    this.release(slot);
    if (status === Status.Ok) resolve();
    else reject(failure(status, what));
  }

  /** Fails every operation still pending with `err`. */
  failAll(err: NovaError): void {
    for (let slot = 0; slot < this.rejecters.length; slot++) {
      const reject = this.rejecters[slot];
      if (reject) {
        this.release(slot);
        reject(err);
      }
    }
  }
}
