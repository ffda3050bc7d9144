/**
 * What the runner knows about every key, and the checks `--verify` makes with it.
 *
 * Per key: the last version written (issued) and the newest acknowledged one, with the ack's
 * epoch (a counter bumped by every ack). A read that began after a version was acknowledged
 * must not return an older one (stale). Writes to one key are kept one at a time in verify
 * mode, so "newest" is well defined. Inserted keys become readable once acknowledged, in
 * order (YCSB's acknowledged counter): `readable` is the count of keys 0…readable−1 that
 * all exist.
 */
import { decodeValue } from './values.js';

export interface VerifyCounts {
  reads: number; // values checked
  corrupt: number;
  wrongKey: number;
  missing: number;
  stale: number;
  finalChecked: number;
}

export function emptyCounts(): VerifyCounts {
  return { reads: 0, corrupt: 0, wrongKey: 0, missing: 0, stale: 0, finalChecked: 0 };
}

export function verifyErrors(c: VerifyCounts): number {
  return c.corrupt + c.wrongKey + c.missing + c.stale;
}

export class KeySpace {
  private issued: Uint32Array;
  private acked: Uint32Array;
  private ackEpoch: Float64Array;
  private epoch = 0;
  /** Keys 0…readable−1 all exist (loaded, or inserted and acknowledged). */
  readable: number;
  /** The next key number an insert takes. */
  nextInsert: number;
  private readonly insertedAcked = new Set<number>();
  private readonly writing = new Map<number, Promise<void>>();
  counts = emptyCounts();
  readonly samples: string[] = [];

  /** Starts a run's counts and samples afresh (the key versions carry over). */
  resetCounts(): void {
    this.counts = emptyCounts();
    this.samples.length = 0;
  }

  constructor(records: number) {
    const cap = Math.max(1024, Math.ceil(records * 1.25));
    this.issued = new Uint32Array(cap);
    this.acked = new Uint32Array(cap);
    this.ackEpoch = new Float64Array(cap);
    this.readable = 0;
    this.nextInsert = records;
  }

  get now(): number {
    return this.epoch;
  }

  private ensure(k: number): void {
    if (k < this.issued.length) return;
    let n = this.issued.length * 2;
    while (n <= k) n *= 2;
    const grow = <T extends Uint32Array | Float64Array>(a: T, make: (n: number) => T): T => { const b = make(n); b.set(a); return b; };
    this.issued = grow(this.issued, (m) => new Uint32Array(m));
    this.acked = grow(this.acked, (m) => new Uint32Array(m));
    this.ackEpoch = grow(this.ackEpoch, (m) => new Float64Array(m));
  }

  /** The load wrote version 1 of keys 0…records−1. */
  loaded(records: number): void {
    this.ensure(records);
    this.issued.fill(1, 0, records);
    this.acked.fill(1, 0, records);
    this.readable = records;
  }

  /**
   * Waits until no write to `k` is in flight, then claims the key for the caller's write;
   * call the returned function when it is done. Checking and claiming happen in one step:
   * with a check alone, two waiters woken together would both find the key free.
   */
  async lock(k: number): Promise<() => void> {
    for (let w = this.writing.get(k); w; w = this.writing.get(k)) await w;
    let release!: () => void;
    const mine = new Promise<void>((resolve) => { release = resolve; });
    this.writing.set(k, mine);
    return () => {
      if (this.writing.get(k) === mine) this.writing.delete(k);
      release();
    };
  }

  nextVersion(k: number): number {
    this.ensure(k);
    return ++this.issued[k];
  }

  written(k: number, version: number): void {
    if (version > this.acked[k]) {
      this.acked[k] = version;
      this.ackEpoch[k] = ++this.epoch;
    }
  }

  /** An insert of `k` was acknowledged: advance `readable` over contiguous acks. */
  inserted(k: number): void {
    this.insertedAcked.add(k);
    while (this.insertedAcked.delete(this.readable)) this.readable++;
  }

  /** What a read of `k` must return at least, taken when the read begins. */
  minVersion(k: number): number {
    return k < this.acked.length ? this.acked[k] : 0;
  }

  /** Checks a value read for key `k` that must be at least version `min`. */
  checkRead(k: number, value: Buffer | undefined, min: number, size: number, mustExist: boolean): void {
    const c = this.counts;
    c.reads++;
    if (value === undefined) {
      if (mustExist) this.fault('missing', `key ${k}: missing though loaded or acknowledged`);
      return;
    }
    const d = decodeValue(value, size);
    if (!d.ok) this.fault('corrupt', `key ${k}: corrupt value (${d.why})`);
    else if (d.keyNum !== k) this.fault('wrongKey', `key ${k}: holds the value of key ${d.keyNum}`);
    else if (d.version < min) this.fault('stale', `key ${k}: version ${d.version}, but ${min} was acknowledged before the read began`);
  }

  /**
   * Checks a scan from key `start` that began at epoch `since`, with `readable` keys known
   * to exist then: keys ascend, none that existed is skipped, every value is sound and no
   * older than what was acknowledged before the scan began.
   */
  checkScan(start: number, rows: Array<[number, Buffer]>, since: number, readableThen: number, count: number, size: number): void {
    let expect = start;
    for (const [k, v] of rows) {
      if (!(k >= expect)) {
        this.fault('wrongKey', `scan from ${start}: key ${k} out of order`);
        return;
      }
      for (let j = expect; j < k && j < readableThen; j++) this.fault('missing', `scan from ${start}: skipped key ${j}`);
      // A key acknowledged again during the scan may show either version: check only older acks.
      const min = k < this.ackEpoch.length && this.ackEpoch[k] <= since ? this.acked[k] : 0;
      this.checkRead(k, v, min, size, true);
      expect = k + 1;
    }
    if (rows.length < count) for (let j = expect; j < readableThen; j++) this.fault('missing', `scan from ${start}: ended before key ${j}`);
  }

  /** After the run (nothing in flight): every key holds exactly its newest acknowledged version. */
  checkFinal(k: number, value: Buffer | undefined, size: number): void {
    this.counts.finalChecked++;
    this.checkRead(k, value, this.acked[k], size, true);
    if (value !== undefined) {
      const d = decodeValue(value, size);
      if (d.ok && d.keyNum === k && d.version > this.issued[k]) this.fault('corrupt', `key ${k}: version ${d.version} was never written`);
    }
  }

  private fault(kind: 'corrupt' | 'wrongKey' | 'missing' | 'stale', message: string): void {
    this.counts[kind]++;
    if (this.samples.length < 20) this.samples.push(message);
  }
}
