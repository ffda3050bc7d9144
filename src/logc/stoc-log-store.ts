/**
 * LogC in `disk` mode (DESIGN.md §5): each memtable's log is a persistent StoC file
 * `r<range>-<n>.log`, replicated on R StoCs. A group commit is one write per replica, sent to
 * all replicas at once, at the offset the log assigns it, as a direct write (a WRITE into the
 * StoC's window and one small message that its fabric progress thread writes and answers:
 * StocClient.openDirect). A replica
 * that fails is dropped from that log's set (the others carry on), so a StoC that dies does
 * not stop writes while another replica remains (the last one, if its StoC is only slow, is
 * written again); new logs pick among StoCs that answer, so a
 * StoC that comes back is used again.
 *
 * Appends overlap (up to APPENDS_IN_FLIGHT per log) and are acknowledged strictly in call
 * order, once a majority of the R replicas (every replica left, if fewer) holds them and all
 * before them; a replica that fails an append is sent nothing more. So when append k is
 * acknowledged, at least that majority holds appends 1..k whole and contiguous (with R = 3,
 * two StoCs: any one may die). A replica may hold a hole (zeros, or a torn part) where an
 * append was in flight when the LTC stopped, or failed, with whole records after it; no
 * replica counted for an acknowledgement has a hole before what it acknowledged. Recovery
 * therefore reads every replica it can find, counts each one's records up to its first
 * damage, and keeps the one with the most (a hole is logged with its file and offset).
 *
 * Known limit: damage in the middle of a log that every replica shares (bit rot on all R, or
 * R = 1) reads as such a hole, so the records after it are dropped with a log line instead
 * of stopping the range with CORRUPTION.
 */
import { ByteBuilder } from '../common/coding.js';
import { NovaError } from '../common/errors.js';
import type { LogStore, LogWriter } from './log-store.js';
import { logFileName, manifestFileName } from '../stoc/stoc-protocol.js';
import { filesOnStocs, type StocPool } from '../stoc/stoc-pool.js';
import type { DirectFile } from '../stoc/stoc-client.js';
import { sample } from '../cluster/placement.js';
import { LogFramer, readLog, readLogPrefix } from '../log/log-format.js';

/**
 * Appends of one log in flight at once (the engine pipelines up to 4 commit rounds): one at a
 * time would cap a log at one group per replicated round trip (doc/decisions/log-appends-in-flight.md).
 */
export const APPENDS_IN_FLIGHT = 4;

export class StocLogStore implements LogStore {
  readonly makeAhead = true;
  /** The logs this store created, until removed. */
  private readonly writers = new Map<number, ReplicatedLog>();

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
    const chosen = sample(this.pool.placeableForLogs(), this.replicas, Math.random);
    // Opened for direct writes: a group commit then costs each StoC no wake-up of its event
    // loop (the fabric's progress thread writes it); see stoc-client.ts openDirect.
    const made = await Promise.allSettled(chosen.map((id) =>
      this.pool.on(id, (c) => c.openDirect(name))));
    const replicas = new Map<number, LogAppender>();
    made.forEach((m, i) => {
      if (m.status === 'fulfilled') replicas.set(chosen[i], m.value);
    });
    if (replicas.size === 0) throw new NovaError('UNAVAILABLE', `log ${name}: no StoC could create it (${chosen.length} tried)`);
    if (replicas.size < this.replicas) this.onLog(`log ${name}: ${replicas.size} of ${this.replicas} replicas (fewer StoCs answering)`);
    const log = new ReplicatedLog(this.pool, name, replicas, this.replicas, this.onLog);
    this.writers.set(file, log);
    return log;
  }

  async read(file: number): Promise<Buffer | undefined> {
    const name = this.fileName(file);
    const ids = this.pool.mayHoldFiles(); // not StoCs never heard from: they hold no replica
    const copies = await Promise.all(ids.map((id) =>
      this.pool.on(id, (c) => c.readAll(name)).then((b) => ({ b }), (err: Error) => ({ err }))));
    const silent = ids.filter((_, i) => 'err' in copies[i]);
    if (silent.length > 0 && Date.now() < this.strictUntil) {
      throw new NovaError('UNAVAILABLE', `log ${name}: StoC ${silent.join(', ')} did not answer and may hold its longest replica; waiting`);
    }
    // An acknowledged append is on a majority of its R replicas, not on all: with more than
    // R - majority StoCs silent, every one holding it may be among them (a lagging replica
    // would read as whole and lose the tail), so even after strictUntil, keep waiting.
    if (this.kind === 'log' && silent.length > this.replicas - (Math.floor(this.replicas / 2) + 1)) {
      throw new NovaError('UNAVAILABLE', `log ${name}: StoC ${silent.join(', ')} did not answer; every replica holding its last acknowledged writes may be among them; waiting`);
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

  /**
   * Removes the file from every StoC that answers. If a slow replica may still be writing it
   * (removed first, its write would make the file again), the removal waits for it in the
   * background: a flush that releases a log must not wait on a StoC that hangs (up to a
   * call's deadline). A file left behind is removed at the range's next open.
   */
  async remove(file: number): Promise<void> {
    const name = this.fileName(file);
    const removeNow = () => Promise.all(this.pool.healthy().map((id) => this.pool.on(id, (c) => c.remove(name)).catch(() => undefined)));
    const writer = this.writers.get(file);
    this.writers.delete(file);
    if (writer && !writer.isDrained) {
      void writer.drained().then(removeNow);
      return;
    }
    await removeNow();
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
 * A MANIFEST: the replica with the most records, whole. The engine sends an edit only once
 * the one before was acknowledged, so the majority that acknowledged the last edit holds no
 * hole (a replica that lagged may, and reads as damaged here). Damage before a valid record
 * in every replica is corruption, which the caller's readLog reports: a cut MANIFEST could
 * forget a compaction's outputs.
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
/** The deadline of an append sent again to a last replica whose StoC answered a probe but not the write. */
export const SLOW_WRITE_MS = 60_000;
/** Appends some replica has not answered yet, at most (a slow replica's backlog). */
const MAX_UNSETTLED = 16;

type Caller = { resolve: () => void; reject: (err: Error) => void };

/** Appends that arrived while APPENDS_IN_FLIGHT others were in flight: they leave together. */
interface Waiting {
  bytes: ByteBuilder;
  sync: boolean;
  callers: Caller[];
}

/** An append sent to the replicas, until acknowledged (or refused) and every replica answered. */
interface Sent {
  index: number;
  bytes: ByteBuilder;
  callers: Caller[];
  unanswered: number;
}

/** What a replica of a log needs of its StoC connection. */
export type LogAppender = Pick<DirectFile, 'write'> & Partial<Pick<DirectFile, 'alive'>>;

interface Replica {
  client: LogAppender;
  /** Appends 0..done all succeeded on it. */
  done: number;
  /** Appends after done+1 that succeeded (answers may come out of order). */
  ahead: Set<number>;
}

/**
 * One log's replicas (exported for tests). An append is acknowledged once a majority of the
 * R replicas wanted (or every replica left, when fewer are left) holds it and every append
 * before it, and after every earlier append was acknowledged: with R = 3, one slow StoC no
 * longer holds up the log, and each acknowledged record is on two StoCs (any one may die).
 */
export class ReplicatedLog implements LogWriter {
  private readonly framer = new LogFramer(0);
  private waiting: Waiting | undefined;
  private nextIndex = 0;
  /** Where the next group's bytes go in every replica's file. */
  private end = 0;
  /** Sent, not yet acknowledged or refused, in call order. */
  private readonly unacked: Sent[] = [];
  private unsettled = 0;
  /** Group buffers every replica answered, for the next groups (a log then allocates none). */
  private readonly spare: ByteBuilder[] = [];
  private readonly replicas = new Map<number, Replica>();
  /** Set once no replica is left: the log takes nothing more. */
  private dead: NovaError | undefined;
  private acked: Array<() => void> = [];
  private idle: Array<() => void> = [];

  /**
   * @param clients each replica's StoC and the connection that created it; a replica that
   *   fails an append (its connection lost, say) is dropped and sent nothing more.
   * @param wanted R, the replicas the log was meant to have.
   */
  constructor(private readonly pool: Pick<StocPool, 'failed' | 'isHealthy' | 'placeableForLogs'>, private readonly name: string,
    clients: Map<number, LogAppender>, private readonly wanted: number,
    private readonly onLog: (line: string) => void) {
    for (const [id, client] of clients) this.replicas.set(id, { client, done: -1, ahead: new Set() });
  }

  get degraded(): boolean {
    return this.replicas.size < this.wanted && this.pool.placeableForLogs().length > this.replicas.size;
  }

  get replicaCount(): number {
    return this.replicas.size;
  }

  get misplaced(): boolean {
    const placeable = this.pool.placeableForLogs();
    for (const [id, r] of this.replicas) if (!placeable.includes(id) || r.client.alive === false) return true;
    return false;
  }

  /**
   * Frames the records now (so bytes follow call order) and sends them at once if fewer than
   * APPENDS_IN_FLIGHT appends wait for acknowledgement; otherwise they join the next one to
   * leave: one append at a time would cap a log at one group per replicated round trip
   * (doc/decisions/log-appends-in-flight.md).
   */
  append(records: readonly Buffer[], sync: boolean): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.dead) return reject(this.dead);
      const w = this.waiting ??= { bytes: this.spare.pop() ?? new ByteBuilder(GROUP_BYTES), sync: false, callers: [] };
      for (const r of records) w.bytes.bytes(this.framer.frame(r)); // frame() returns a view: copied here
      w.sync ||= sync;
      w.callers.push({ resolve, reject });
      this.sendWaiting();
    });
  }

  /**
   * Resolves once every append was acknowledged or refused. A slow replica may still be
   * writing (drained() waits for it): a memtable switch need not wait for it.
   */
  async close(): Promise<void> {
    if (this.waiting || this.unacked.length > 0) await new Promise<void>((resolve) => this.acked.push(resolve));
  }

  get isDrained(): boolean {
    return !this.waiting && this.unacked.length === 0 && this.unsettled === 0;
  }

  /** Resolves once, besides, every replica answered every append (so the file may go). */
  async drained(): Promise<void> {
    if (this.waiting || this.unacked.length > 0 || this.unsettled > 0) await new Promise<void>((resolve) => this.idle.push(resolve));
  }

  /** Replicas an append must be on before it is acknowledged. */
  private get needed(): number {
    return Math.min(Math.floor(this.wanted / 2) + 1, this.replicas.size);
  }

  private sendWaiting(): void {
    const w = this.waiting;
    if (!w || this.unacked.length >= APPENDS_IN_FLIGHT || this.unsettled >= MAX_UNSETTLED) return;
    // A synced group goes out only once every earlier group's write was answered: the StoC
    // does not order writes at different offsets, and an fdatasync that ran before an
    // earlier group's write would leave that group in the page cache only, a hole after a
    // power loss in front of a write acknowledged as durable.
    if (w.sync && this.unsettled > 0) return;
    this.waiting = undefined;
    const a: Sent = { index: this.nextIndex++, bytes: w.bytes, callers: w.callers, unanswered: this.replicas.size };
    this.unacked.push(a);
    if (a.unanswered === 0) {
      this.dead ??= new NovaError('UNAVAILABLE', `log ${this.name}: no StoC holds a replica`);
      this.advance();
      return;
    }
    this.unsettled++;
    const bytes = w.bytes.view();
    // At an offset of its own, not appended at the StoC's end of file: an append that fails
    // before the StoC placed it would otherwise let the next one land where it belonged, and
    // that replica would read as whole without it. Here it leaves zeros, which readers see.
    const offset = this.end;
    this.end += bytes.length;
    for (const [id, r] of this.replicas) void this.writeReplica(id, r, a, offset, bytes, w.sync).finally(() => this.answered(a));
  }

  /**
   * Writes one append to one replica. A failure drops the replica, unless it is the last one and
   * the write only passed its deadline on a StoC that still answers a probe (its disk behind, not
   * the StoC gone): dropping it would fail the log and its range (with one StoC, every range's),
   * so the same bytes go once more to the same offset, with SLOW_WRITE_MS to land. Once only: a
   * write that times out in its slot retires the slot, and a connection has few.
   */
  private async writeReplica(id: number, r: Replica, a: Sent, offset: number, bytes: Uint8Array, sync: boolean): Promise<void> {
    try {
      await r.client.write(offset, bytes, sync);
      return this.succeeded(id, a.index);
    } catch (err) {
      const last = this.replicas.size === 1 && this.replicas.get(id) === r;
      if ((err as NovaError).code !== 'DEADLINE_EXCEEDED' || !last) return this.failed(id, err as Error);
      await this.pool.failed(id, err); // probes the StoC, and shuns it if silent
      if (!this.pool.isHealthy(id) || this.replicas.get(id) !== r) return this.failed(id, err as Error);
      this.onLog(`log ${this.name}: StoC ${id} answers but did not write in time (${(err as Error).message}); writing again`);
    }
    try {
      await r.client.write(offset, bytes, sync, { timeoutMs: SLOW_WRITE_MS });
      return this.succeeded(id, a.index);
    } catch (err) {
      return this.failed(id, err as Error);
    }
  }

  private succeeded(id: number, index: number): void {
    const r = this.replicas.get(id);
    if (!r) return; // dropped meanwhile
    if (index === r.done + 1) {
      r.done = index;
      while (r.ahead.delete(r.done + 1)) r.done++;
    } else {
      r.ahead.add(index);
    }
    this.advance();
  }

  private failed(id: number, err: Error): void {
    if (!this.replicas.delete(id)) return;
    void this.pool.failed(id, err);
    this.onLog(`log ${this.name}: dropped replica(s) on StoC ${id} (${err.message}); ${this.replicas.size} left`);
    if (this.replicas.size === 0) this.dead ??= new NovaError('UNAVAILABLE', `log ${this.name}: every replica failed; last error: ${err.message}`);
    this.advance();
  }

  private answered(a: Sent): void {
    if (--a.unanswered > 0) return;
    this.unsettled--;
    // Every replica answered, so nothing reads the bytes now: reuse the buffer.
    if (a.bytes.capacity <= MAX_SPARE_BYTES) {
      a.bytes.reset();
      this.spare.push(a.bytes);
    }
    this.advance();
  }

  /** Acknowledges (or refuses) appends from the oldest, in order; sends what waits. */
  private advance(): void {
    while (this.unacked.length > 0) {
      const a = this.unacked[0];
      if (this.dead) {
        for (const c of a.callers) c.reject(this.dead);
      } else {
        let holding = 0;
        for (const r of this.replicas.values()) if (r.done >= a.index) holding++;
        if (holding < this.needed) break;
        for (const c of a.callers) c.resolve();
      }
      this.unacked.shift();
    }
    if (this.dead && this.waiting) {
      for (const c of this.waiting.callers) c.reject(this.dead);
      this.waiting = undefined;
    }
    this.sendWaiting();
    if (this.waiting || this.unacked.length > 0) return;
    for (const resolve of this.acked.splice(0)) resolve();
    if (this.unsettled === 0) for (const resolve of this.idle.splice(0)) resolve();
  }
}
