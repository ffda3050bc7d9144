/**
 * LogC in `disk` mode (DESIGN.md §5): each memtable's log is a persistent StoC file
 * `r<range>-<n>.log`, replicated on R StoCs. A group commit is one append per replica, sent
 * to all replicas at once; it is acknowledged when every replica still in the set has it.
 * A replica that fails is dropped from that log's set (the others carry on), so a StoC that
 * dies does not stop writes while another replica remains; new logs pick among StoCs that
 * answer, so a StoC that comes back is used again.
 *
 * Appends overlap (up to APPENDS_IN_FLIGHT per log) and are acknowledged strictly in call
 * order. Every replica receives the same framed bytes in the same order, the StoC places a
 * connection's appends in that order (append-order.ts), and a replica that failed an append
 * is dropped before any later append is acknowledged. So a replica still in the set when
 * append k is acknowledged holds appends 1..k whole and contiguous. A replica may hold a hole
 * (zeros, or a torn part) where an append was in flight when the LTC stopped, or failed, with
 * whole records after it: none of those were acknowledged through it. Recovery therefore
 * reads every replica it can find, counts each one's records up to its first damage, and
 * keeps the one with the most (a hole is logged with its file and offset).
 */
import { ByteBuilder } from '../common/coding.js';
import { NovaError } from '../common/errors.js';
import type { LogStore, LogWriter } from '../ltc/local-store.js';
import { filesOnStocs } from '../ltc/stoc-block-store.js';
import { logFileName, manifestFileName } from '../stoc/stoc-protocol.js';
import { STOC_LOST, type StocPool } from '../ltc/stoc-pool.js';
import type { StocClient } from '../stoc/stoc-client.js';
import { sample } from '../ltc/placement.js';
import { LogFramer, readLog, readLogPrefix } from './log-format.js';

/**
 * Appends of one log in flight at once (the engine pipelines up to 4 commit rounds). One at
 * a time capped a log at one group per replicated round trip (~1.5–2 ms to 3 StoCs here).
 */
export const APPENDS_IN_FLIGHT = 4;

export class StocLogStore implements LogStore {
  /**
   * @param strictUntil until this time (ms since the epoch), `read` refuses to choose while
   *   a configured StoC does not answer: it may hold the longest replica. After it, the best
   *   replica among those that answer is taken (availability over a second failure).
   */
  constructor(private readonly pool: StocPool, private readonly range: number, private readonly replicas: number,
    private readonly onLog: (line: string) => void = () => undefined, private readonly strictUntil = 0,
    /** What the files are: memtable logs, or MANIFESTs (stoc-manifest-store.ts). */
    private readonly kind: 'log' | 'manifest' = 'log') {}

  private fileName(file: number): string {
    return this.kind === 'log' ? logFileName(this.range, file) : manifestFileName(this.range, file);
  }

  /** Creates the log's file, empty, on R StoCs that answer (fewer if fewer answer). */
  async create(file: number): Promise<LogWriter> {
    const name = this.fileName(file);
    const chosen = sample(this.pool.healthy(), this.replicas, Math.random);
    const made = await Promise.allSettled(chosen.map((id) =>
      this.pool.on(id, async (c) => { await c.append(name, Buffer.alloc(0), false); return c; })));
    const replicas = new Map<number, StocClient>();
    made.forEach((m, i) => {
      if (m.status === 'fulfilled') replicas.set(chosen[i], m.value);
    });
    if (replicas.size === 0) throw new NovaError('UNAVAILABLE', `log ${name}: no StoC could create it (${chosen.length} tried)`);
    if (replicas.size < this.replicas) this.onLog(`log ${name}: ${replicas.size} of ${this.replicas} replicas (fewer StoCs answering)`);
    return new ReplicatedLog(this.pool, name, replicas, this.replicas, this.onLog);
  }

  async read(file: number): Promise<Buffer | undefined> {
    const name = this.fileName(file);
    const ids = this.pool.ids();
    const copies = await Promise.all(ids.map((id) =>
      this.pool.on(id, (c) => c.readAll(name)).then((b) => ({ b }), (err: Error) => ({ err }))));
    const silent = ids.filter((_, i) => 'err' in copies[i]);
    if (silent.length > 0 && Date.now() < this.strictUntil) {
      throw new NovaError('UNAVAILABLE', `log ${name}: StoC ${silent.join(', ')} did not answer and may hold its longest replica; waiting`);
    }
    return this.kind === 'log' ? this.longestPrefix(name, copies) : longestWhole(name, copies);
  }

  /** A memory-table log: the replica with the most records before its first damage. */
  private longestPrefix(name: string, copies: readonly Copy[]): Buffer | undefined {
    let best: { bytes: Buffer; records: number; damage?: { offset: number; why: string } } | undefined;
    for (const copy of copies) {
      if (!('b' in copy) || copy.b === undefined) continue;
      const c = readLogPrefix(copy.b);
      if (!best || c.records.length > best.records) {
        // A damaged replica is cut to its whole records, so the engine's readLog reads them.
        best = c.damage ? { bytes: copy.b.subarray(0, c.validBytes), records: c.records.length, damage: c.damage }
          : { bytes: copy.b, records: c.records.length };
      }
    }
    if (best?.damage) {
      this.onLog(`log ${name}: the longest replica has ${best.damage.why} at offset ${best.damage.offset} with whole ` +
        `records after it; kept the ${best.records} records before it (appends in flight when the log was last ` +
        'written leave such holes, and none after one was acknowledged)');
    }
    return best?.bytes;
  }

  async remove(file: number): Promise<void> {
    const name = this.fileName(file);
    await Promise.all(this.pool.healthy().map((id) => this.pool.on(id, (c) => c.remove(name)).catch(() => undefined)));
  }

  list(): Promise<number[]> {
    return filesOnStocs(this.pool, this.range, this.kind === 'log' ? '.log' : '.manifest');
  }

  describe(file: number): string {
    return `StoC ${this.kind} ${this.fileName(file)}`;
  }
}

/** One replica as read: its bytes (undefined: the StoC has no such file), or why it failed. */
type Copy = { b: Buffer | undefined } | { err: Error };

/**
 * A MANIFEST: the replica with the most records, whole. Its edits are appended one at a
 * time, so a replica never holds a hole; damage before a valid record is corruption, which
 * the caller's readLog reports (a cut MANIFEST could forget a compaction's outputs).
 */
function longestWhole(name: string, copies: readonly Copy[]): Buffer | undefined {
  let best: { bytes: Buffer; records: number } | undefined;
  for (const copy of copies) {
    if (!('b' in copy) || copy.b === undefined) continue;
    let records = -1;
    try {
      records = readLog(copy.b, name).records.length;
    } catch {
      // a damaged replica: another may be whole
    }
    if (!best || records > best.records) best = { bytes: copy.b, records };
  }
  return best?.bytes;
}

/** What a group's bytes start with room for (a commit round is typically tens of KiB). */
const GROUP_BYTES = 64 * 1024;
/** A group buffer grown past this (a huge batch) is not kept for reuse. */
const MAX_SPARE_BYTES = 4 << 20;

/** Appends that arrived while APPENDS_IN_FLIGHT others were in flight: they leave together. */
interface Waiting {
  bytes: ByteBuilder;
  sync: boolean;
  callers: Array<{ resolve: () => void; reject: (err: Error) => void }>;
}

class ReplicatedLog implements LogWriter {
  private readonly framer = new LogFramer(0);
  private waiting: Waiting | undefined;
  private inFlight = 0;
  /** Settles when the latest append was acknowledged or refused: appends settle in call order. */
  private settled: Promise<void> = Promise.resolve();
  /** Group buffers whose appends settled, for the next groups (a log then allocates none). */
  private readonly spare: ByteBuilder[] = [];
  /** Replicas that failed an append: sent nothing more, dropped when that append settles. */
  private readonly failing = new Set<number>();

  /**
   * @param replicas each replica's StoC and the connection that created it. Every append to a
   *   replica goes over that one connection, because the StoC orders appends per connection:
   *   over a new one, an append could land where an earlier one that failed should have been.
   *   A replica whose connection is lost is dropped.
   */
  constructor(private readonly pool: StocPool, private readonly name: string,
    private readonly replicas: Map<number, StocClient>, private readonly wanted: number,
    private readonly onLog: (line: string) => void) {}

  get degraded(): boolean {
    return this.replicas.size < this.wanted && this.pool.healthy().length > this.replicas.size;
  }

  /**
   * Frames the records now (so bytes follow call order) and sends them at once if fewer than
   * APPENDS_IN_FLIGHT appends are in flight; otherwise they join the next one to leave.
   * Measured through a cluster (W100, 64 writes outstanding): one append at a time took
   * 1.4–2.4 ms and kept the log busy ~90% of the time; see bench/README.md.
   */
  append(records: readonly Buffer[], sync: boolean): Promise<void> {
    return new Promise((resolve, reject) => {
      const w = this.waiting ??= { bytes: this.spare.pop() ?? new ByteBuilder(GROUP_BYTES), sync: false, callers: [] };
      for (const r of records) w.bytes.bytes(this.framer.frame(r)); // frame() returns a view: copied here
      w.sync ||= sync;
      w.callers.push({ resolve, reject });
      this.sendWaiting();
    });
  }

  private sendWaiting(): void {
    const w = this.waiting;
    if (!w || this.inFlight >= APPENDS_IN_FLIGHT) return;
    this.waiting = undefined;
    this.inFlight++;
    const sent = this.send(w.bytes.view(), w.sync);
    const previous = this.settled;
    this.settled = (async () => {
      const failedOn = await sent;
      await previous;
      this.inFlight--;
      // Every replica's append has settled, so nothing reads the bytes now: reuse the buffer.
      if (w.bytes.capacity <= MAX_SPARE_BYTES) {
        w.bytes.reset();
        this.spare.push(w.bytes);
      }
      try {
        this.drop(failedOn);
        for (const c of w.callers) c.resolve();
      } catch (err) {
        for (const c of w.callers) c.reject(err as Error);
      }
      this.sendWaiting();
    })();
  }

  /** Sends one append to every replica in the set; the replicas that failed it, and why. */
  private async send(bytes: Buffer, sync: boolean): Promise<Map<number, Error>> {
    const targets = [...this.replicas].filter(([id]) => !this.failing.has(id));
    const failed = new Map<number, Error>();
    await Promise.all(targets.map(([id, c]) => c.append(this.name, bytes, sync).catch((err: Error) => {
      this.failing.add(id);
      failed.set(id, err);
      if (STOC_LOST.has((err as NovaError).code)) this.pool.shun(id);
    })));
    return failed;
  }

  /**
   * Drops the replicas that failed an append, in call order (so before any later append is
   * acknowledged); throws once none is left. Every replica left has had every append so far.
   */
  private drop(failedOn: Map<number, Error>): void {
    const dropped = [...this.replicas.keys()].filter((id) => failedOn.has(id));
    for (const id of dropped) this.replicas.delete(id);
    if (dropped.length > 0) {
      const why = failedOn.get(dropped[0])!;
      this.onLog(`log ${this.name}: dropped replica(s) on StoC ${dropped.join(', ')} (${why.message}); ${this.replicas.size} left`);
      if (this.replicas.size === 0) throw new NovaError('UNAVAILABLE', `log ${this.name}: every replica failed; last error: ${why.message}`);
    }
    if (this.replicas.size === 0) throw new NovaError('UNAVAILABLE', `log ${this.name}: no StoC holds a replica`);
  }

  async close(): Promise<void> {
    // Nothing is held open here: the StoCs keep their files. Appends still in flight settle.
    await this.settled;
  }
}
