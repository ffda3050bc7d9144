/**
 * A history of concurrent reads and writes of keys, recorded as the operations run (times
 * from this process's clock, in ms), and its check for linearizability key by key
 * (linearizability.ts). Values are numbers: each write's own (the fault runner makes them
 * unique), 0 for absent. Stored in columns, about 30 bytes an operation, so a soak of
 * millions of operations fits.
 *
 * An operation is invoked, then ends one of three ways: ok (a read with the value it
 * returned), unknown (a write that may have been applied: it stays open for good), or failed
 * (certainly not applied, or a read that returned nothing; it leaves the history).
 */
import { checkRegister, type RegisterOp } from './linearizability.js';

const PENDING = -1;
const FAILED = -2;

export interface HistoryCounts {
  reads: number;
  writes: number;
  /** Writes of unknown outcome. */
  unknown: number;
  /** Operations that failed (writes certainly not applied, reads without an answer). */
  failed: number;
}

export interface KeyViolation {
  key: number;
  explanation: string;
}

export interface HistoryCheck {
  keys: number;
  operations: number;
  violations: KeyViolation[];
  /** Keys whose search ran out of its state budget. */
  undecided: number[];
  /** Search states explored over all keys. */
  states: number;
  /** The longest operation that completed (ms). */
  longestMs: number;
}

export class History {
  private n = 0;
  private keys = new Int32Array(1024);
  private clients = new Int32Array(1024);
  private writes = new Uint8Array(1024);
  private values = new Float64Array(1024);
  private invokes = new Float64Array(1024);
  private responds = new Float64Array(1024); // PENDING, FAILED, a time, or Infinity
  readonly counts: HistoryCounts = { reads: 0, writes: 0, unknown: 0, failed: 0 };

  get size(): number {
    return this.n;
  }

  /** Records an operation's start; returns its handle. `value`: a write's value (ignored for reads). */
  invoke(client: number, key: number, kind: 'read' | 'write', value: number, at: number): number {
    if (this.n === this.keys.length) this.grow();
    const i = this.n++;
    this.keys[i] = key;
    this.clients[i] = client;
    this.writes[i] = kind === 'write' ? 1 : 0;
    this.values[i] = kind === 'write' ? value : 0;
    this.invokes[i] = at;
    this.responds[i] = PENDING;
    return i;
  }

  /** The operation answered; a read with the value it returned. */
  ok(op: number, at: number, readValue = 0): void {
    if (this.writes[op]) this.counts.writes++;
    else {
      this.values[op] = readValue;
      this.counts.reads++;
    }
    this.responds[op] = at;
  }

  /** A write that may have been applied (or may be, any time later); a read: failed. */
  unknown(op: number): void {
    if (!this.writes[op]) return this.fail(op);
    this.counts.unknown++;
    this.responds[op] = Infinity;
  }

  /** Certainly not applied (a write), or not answered (a read): out of the history. */
  fail(op: number): void {
    this.counts.failed++;
    this.responds[op] = FAILED;
  }

  /** Operations still pending when the history ends: writes unknown, reads failed. */
  close(): void {
    for (let i = 0; i < this.n; i++) if (this.responds[i] === PENDING) this.unknown(i);
  }

  /** The keys with operations in the history, ascending. */
  keyList(): number[] {
    const keys = new Set<number>();
    for (let i = 0; i < this.n; i++) if (this.responds[i] !== FAILED && this.responds[i] !== PENDING) keys.add(this.keys[i]);
    return [...keys].sort((a, b) => a - b);
  }

  /** The operations of `key` that are in the history (answered, or of unknown outcome), in invocation order. */
  opsOf(key: number): RegisterOp[] {
    const list: RegisterOp[] = [];
    for (let i = 0; i < this.n; i++) {
      const respond = this.responds[i];
      if (this.keys[i] !== key || respond === FAILED || respond === PENDING) continue;
      list.push({ client: this.clients[i], kind: this.writes[i] ? 'write' : 'read', value: this.values[i], invoke: this.invokes[i], respond });
    }
    return list;
  }

  /**
   * Every key checked against a register starting absent, one key at a time (so only one
   * key's operations are objects at once); `progress` after each key.
   */
  check(progress: (done: number, keys: number) => void = () => undefined): HistoryCheck {
    const keys = this.keyList();
    const result: HistoryCheck = { keys: keys.length, operations: 0, violations: [], undecided: [], states: 0, longestMs: 0 };
    keys.forEach((key, done) => {
      const ops = this.opsOf(key);
      result.operations += ops.length;
      for (const o of ops) if (o.respond !== Infinity) result.longestMs = Math.max(result.longestMs, o.respond - o.invoke);
      const v = checkRegister(ops);
      result.states += v.states;
      if (v.result === 'violation') result.violations.push({ key, explanation: v.explanation });
      else if (v.result === 'undecided') result.undecided.push(key);
      progress(done + 1, keys.length);
    });
    return result;
  }

  /** The history as JSON lines, one operation each, for a look by hand. */
  *lines(): Generator<string> {
    for (const key of this.keyList()) {
      for (const o of this.opsOf(key)) yield JSON.stringify({ key, ...o, respond: o.respond === Infinity ? null : o.respond });
    }
  }

  private grow(): void {
    const size = this.keys.length * 2;
    const g = <T extends Int32Array | Uint8Array | Float64Array>(a: T, make: (n: number) => T): T => {
      const b = make(size);
      b.set(a);
      return b;
    };
    this.keys = g(this.keys, (k) => new Int32Array(k));
    this.clients = g(this.clients, (k) => new Int32Array(k));
    this.writes = g(this.writes, (k) => new Uint8Array(k));
    this.values = g(this.values, (k) => new Float64Array(k));
    this.invokes = g(this.invokes, (k) => new Float64Array(k));
    this.responds = g(this.responds, (k) => new Float64Array(k));
  }
}

