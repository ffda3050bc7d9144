/**
 * Append order for one client connection at the StoC (see stoc-protocol.ts, "Appends").
 *
 * The client numbers its appends 0, 1, 2, ... in call order and may split one append into
 * parts whose RPCs arrive in any order. Append `seq` gets its bytes reserved at the end of its
 * file when its first part arrives, but only after every earlier seq was reserved or
 * cancelled; parts of later appends wait (bounded) until then.
 *
 * Contracts:
 *  - A reservation pins its file until all `total` bytes were consumed, it is cancelled, or
 *    the connection ends (`fail`).
 *  - After `fail`, every waiting and later `place` is rejected with the failure.
 */
import { NovaError } from '../common/errors.js';
import type { StoredFile } from './stored-files.js';

/** How far ahead of the next expected append a part may be (a client bug otherwise). */
const MAX_AHEAD = 1 << 20;

export interface Placement {
  file: StoredFile;
  base: number;
}

interface Reservation extends Placement {
  total: number;
  remaining: number;
}

interface Waiter {
  seq: number;
  wake: () => void;
  reject: (err: NovaError) => void;
}

export class AppendOrder {
  private next = 0;
  private readonly reserved = new Map<number, Reservation>();
  private readonly cancelled = new Set<number>();
  private waiters: Waiter[] = [];
  private failure: NovaError | undefined;

  constructor(private readonly maxWaiting: number) {}

  /** Where append `seq` of `total` bytes to `file` starts, once its turn has come. */
  async place(seq: number, file: StoredFile, total: number): Promise<Placement> {
    for (;;) {
      if (this.failure) throw this.failure;
      const r = this.reserved.get(seq);
      if (r) {
        if (r.file.name !== file.name || r.total !== total) {
          throw new NovaError('BAD_ARGUMENT',
            `append ${seq}: a part names ${file.name} (${total} bytes), the first named ${r.file.name} (${r.total} bytes)`);
        }
        return r;
      }
      if (seq < this.next) throw new NovaError('BAD_ARGUMENT', `append ${seq} to ${file.name} was already completed or cancelled`);
      if (seq === this.next) return this.reserve(seq, file, total);
      if (seq - this.next > MAX_AHEAD) {
        throw new NovaError('BAD_ARGUMENT', `append ${seq} is too far ahead of append ${this.next}, which has not arrived`);
      }
      await this.waitFor(seq);
    }
  }

  /** Counts `length` bytes of append `seq` as written; the last ones end its reservation. */
  consume(seq: number, length: number): void {
    const r = this.reserved.get(seq);
    if (!r) return;
    r.remaining -= length;
    if (r.remaining <= 0) this.end(seq, r);
  }

  /** Append `seq` sends no (more) parts: its unwritten bytes stay zeros. */
  cancel(seq: number): void {
    const r = this.reserved.get(seq);
    if (r) this.end(seq, r);
    else if (seq === this.next) this.advance();
    else if (seq > this.next && seq - this.next <= MAX_AHEAD) this.cancelled.add(seq);
  }

  /** The connection is gone: fail waiters, drop reservations. */
  fail(err: NovaError): void {
    this.failure ??= err;
    for (const w of this.waiters.splice(0)) w.reject(err);
    for (const [seq, r] of this.reserved) this.end(seq, r);
  }

  private reserve(seq: number, file: StoredFile, total: number): Placement {
    const r: Reservation = { file, base: file.reserve(total), total, remaining: total };
    if (total > 0) {
      file.pin();
      this.reserved.set(seq, r);
    }
    this.advance();
    return r;
  }

  private end(seq: number, r: Reservation): void {
    this.reserved.delete(seq);
    r.file.unpin();
  }

  private advance(): void {
    this.next++;
    while (this.cancelled.delete(this.next)) this.next++;
    const ready = this.waiters.filter((w) => w.seq <= this.next);
    if (ready.length === 0) return;
    this.waiters = this.waiters.filter((w) => w.seq > this.next);
    for (const w of ready) w.wake();
  }

  private waitFor(seq: number): Promise<void> {
    if (this.waiters.length >= this.maxWaiting) {
      return Promise.reject(new NovaError('BUSY',
        `${this.waiters.length} append parts already wait for append ${this.next}, which has not arrived`));
    }
    return new Promise<void>((wake, reject) => this.waiters.push({ seq, wake, reject }));
  }
}
