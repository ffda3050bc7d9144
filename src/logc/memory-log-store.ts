/**
 * LogC in `memory` and `memory+disk` modes (DESIGN.md §5).
 *
 * `memory` (MemoryLogStore): each memtable's log `r<range>-<n>.log` is an in-memory file
 * (src/stoc/memory-files.ts) on R StoCs. An append frames its records once (LogFramer, the
 * same bytes a disk log holds) and WRITEs them one-sided at the log's current offset into
 * every replica; the StoCs' CPUs take no part. The log is the concatenation of its regions:
 * a record that does not fit in a region's rest continues in the next region (the writer asks
 * the StoC for it), so regions stay fully used and a log is a plain byte stream, read back by
 * readLog as it is. Bytes never written are zeros, which readLog takes as the end of the log.
 *
 * `memory+disk` (MemoryDiskLogStore): a memory log and a disk log (StocLogStore) of the same
 * records. An append is acknowledged once the disk replicas have it; the memory replicas are
 * best-effort, for fast recovery. Recovery takes a memory replica when it holds at least what
 * every disk replica holds, and reads the disk otherwise.
 *
 * What each mode survives (R = replicas of each log; "lost" = acknowledged writes lost):
 *
 *   crash                          memory                        memory+disk
 *   LTC SIGKILL                    nothing lost                  nothing lost (memory read)
 *   one StoC SIGKILL, R >= 2       nothing lost                  nothing lost (memory read)
 *   one StoC SIGKILL, R = 1        its logs lost                 nothing lost (disk read)
 *   R StoCs holding a log die      that log lost                 nothing lost (disk read)
 *   whole-cluster kill             every unflushed log lost      nothing lost (disk read)
 *   power loss / OS crash          every unflushed log lost      writes since the last sync
 *
 * Why a lost memory log reads as empty instead of failing recovery: losing it is what the
 * `memory` mode trades for its speed, and failing would keep the range closed for good after a
 * whole-cluster restart. The loss is logged, naming the log. Writes already in SSTables are
 * never affected: memtables flush to StoC disk files in every mode.
 *
 * Replicas (as in the disk store): every replica receives the same bytes in the same order,
 * one append at a time (a replica's next WRITE is posted after its previous one finished), and
 * a replica that fails is dropped and receives nothing more. With StocClient's in-order
 * parts, each replica is therefore a prefix of the log, possibly with a torn last record: never
 * a hole. Recovery keeps the replica with the most records. `sync` has no meaning in memory:
 * a resolved WRITE is in the StoC's memory, which is as far as a memory log goes.
 *
 * Appends may overlap (the engine pipelines commit rounds): offsets are assigned in call order
 * and an append resolves only after every earlier one settled, so an acknowledged append
 * implies all before it are in every surviving replica.
 */
import { NovaError } from '../common/errors.js';
import type { LogStore, LogWriter } from './log-store.js';
import { sample } from '../cluster/placement.js';
import { filesOf, logFileName } from '../stoc/stoc-protocol.js';
import type { StocPool } from '../stoc/stoc-pool.js';
import type { MemoryFile } from '../stoc/memory-file-client.js';
import { LOG_BLOCK, LogFramer, readLog } from '../log/log-format.js';
import { StocLogStore } from './stoc-log-store.js';

export interface MemoryLogOptions {
  /**
   * Bytes of each region of a log (default 16 MiB). Set it to the memtable size, so a log
   * normally takes one region (DESIGN.md §6); a longer log takes more.
   */
  regionBytes?: number;
  /** Receives one line per notable event (a replica dropped, a log lost). */
  onLog?: (line: string) => void;
  /**
   * Until this time (ms since the epoch) `read` refuses to choose while a configured StoC does
   * not answer: it may hold the longest replica. After it, the best among those that answer.
   */
  strictUntil?: number;
}

/** One replica's bytes as read back, with what readLog found in them. */
export interface LogCopy {
  stoc: number;
  bytes: Buffer;
  /** Whole records; -1 if the replica is damaged (another may be whole). */
  records: number;
  validBytes: number;
  torn: boolean;
}

const MiB = 1024 * 1024;

export class MemoryLogStore implements LogStore {
  readonly makeAhead = false; // an empty log holds its region of StoC memory from its making
  private readonly regionBytes: number;
  private readonly onLog: (line: string) => void;
  private readonly strictUntil: number;

  constructor(private readonly pool: StocPool, private readonly range: number, private readonly replicas: number,
    options: MemoryLogOptions = {}) {
    // Whole log blocks: a file's allocated end is then a block boundary, where readLog sees the
    // zeros as the end, never as a header cut short (a torn tail).
    this.regionBytes = Math.ceil((options.regionBytes ?? 16 * MiB) / LOG_BLOCK) * LOG_BLOCK;
    this.onLog = options.onLog ?? (() => undefined);
    this.strictUntil = options.strictUntil ?? 0;
  }

  /**
   * Creates the log, empty, on R StoCs that answer. A StoC that refuses (out of memory:
   * BUSY) or fails is replaced by another healthy one while any is left untried.
   */
  async create(file: number): Promise<LogWriter> {
    const name = logFileName(this.range, file);
    const candidates = sample(this.pool.placeableForLogs(), Number.MAX_SAFE_INTEGER, Math.random);
    const made: Replica[] = [];
    let why: Error | undefined;
    while (made.length < this.replicas && candidates.length > 0) {
      const batch = candidates.splice(0, this.replicas - made.length);
      const results = await Promise.allSettled(batch.map((id) =>
        this.pool.on(id, (c) => c.createMemory(name, this.regionBytes))));
      results.forEach((r, i) => {
        if (r.status === 'fulfilled') made.push(new Replica(batch[i], r.value));
        else why = r.reason as Error;
      });
    }
    if (made.length === 0) {
      throw new NovaError('UNAVAILABLE', `memory log ${name}: no StoC could create it${why ? `; last error: ${why.message}` : ''}`);
    }
    if (made.length < this.replicas) {
      this.onLog(`memory log ${name}: ${made.length} of ${this.replicas} replicas (fewer StoCs could take it)`);
    }
    return new MemoryLogWriter(this.pool, name, made, this.onLog);
  }

  /** The best replica (see LogCopy), or a lost log as empty (see the top of this file). */
  async read(file: number): Promise<Buffer | undefined> {
    const name = logFileName(this.range, file);
    const { copy, silent } = await this.best(file);
    if (silent.length > 0 && Date.now() < this.strictUntil) {
      throw new NovaError('UNAVAILABLE', `memory log ${name}: StoC ${silent.join(', ')} did not answer and may hold its longest replica; waiting`);
    }
    if (!copy) {
      this.onLog(`memory log ${name}: no StoC holds a replica (they died or restarted); its unflushed writes are lost`);
      return Buffer.alloc(0);
    }
    return trimmed(copy);
  }

  /**
   * Reads every configured StoC's replica of log `file`: the one with the most records (first
   * found on a tie), and the StoCs that did not answer.
   */
  async best(file: number): Promise<{ copy?: LogCopy; silent: number[] }> {
    const name = logFileName(this.range, file);
    const ids = this.pool.mayHoldFiles(); // not StoCs never heard from: they hold no replica
    const got = await Promise.all(ids.map((id) =>
      this.pool.on(id, (c) => c.readMemoryAll(name)).then((b) => ({ b }), (err: Error) => ({ err }))));
    let copy: LogCopy | undefined;
    got.forEach((g, i) => {
      if (!('b' in g) || g.b === undefined) return;
      const c = inspect(ids[i], g.b, name);
      if (!copy || c.records > copy.records) copy = c;
    });
    return { copy, silent: ids.filter((_, i) => 'err' in got[i]) };
  }

  async remove(file: number): Promise<void> {
    const name = logFileName(this.range, file);
    await Promise.all(this.pool.healthy().map((id) => this.pool.on(id, (c) => c.removeMemory(name)).catch(() => undefined)));
  }

  async list(): Promise<number[]> {
    const names = await Promise.all(this.pool.healthy().map((id) =>
      this.pool.on(id, async (c) => (await c.listMemory(`r${this.range}-`)).map((f) => f.name)).catch(() => [] as string[])));
    return [...new Set(filesOf(this.range, names.flat(), '.log'))];
  }

  describe(file: number): string {
    return `StoC memory log ${logFileName(this.range, file)}`;
  }
}

/** One replica of a log being written: its StoC, its file, and its chain of WRITEs. */
class Replica {
  /** Settles when this replica's last WRITE has; never rejects. */
  tail: Promise<void> = Promise.resolve();
  failure: Error | undefined;
  constructor(readonly stoc: number, readonly file: MemoryFile) {}

  /** Writes after the replica's earlier writes; once one fails, every later one fails the same. */
  write(offset: number, bytes: Buffer): Promise<void> {
    const done = this.tail.then(() => {
      if (this.failure) throw this.failure;
      return this.file.write(offset, bytes);
    });
    this.tail = done.catch((err: Error) => { this.failure ??= err; });
    return done;
  }
}

class MemoryLogWriter implements LogWriter {
  private readonly framer = new LogFramer(0);
  /** Bytes framed so far: where the next append goes. */
  private end = 0;
  /** Settles when the latest append has; never rejects. */
  private last: Promise<void> = Promise.resolve();

  constructor(private readonly pool: StocPool, private readonly name: string, private replicas: Replica[],
    private readonly onLog: (line: string) => void) {}

  append(records: readonly Buffer[], _sync: boolean): Promise<void> {
    if (this.replicas.length === 0) {
      return Promise.reject(new NovaError('UNAVAILABLE', `memory log ${this.name}: no StoC holds a replica`));
    }
    const bytes = Buffer.concat(records.map((r) => Buffer.from(this.framer.frame(r)))); // frame() returns a view: copy each
    const offset = this.end;
    this.end += bytes.length;
    const targets = [...this.replicas];
    const writes = targets.map((r) => r.write(offset, bytes));
    const done = this.settle(targets, writes, this.last);
    this.last = done.catch(() => undefined);
    return done;
  }

  async close(): Promise<void> {
    await this.last;
    for (const r of this.replicas) r.file.close();
    this.replicas = [];
  }

  /** After the previous append settled: drops the replicas that failed; fails if none is left. */
  private async settle(targets: Replica[], writes: Array<Promise<void>>, previous: Promise<void>): Promise<void> {
    const results = await Promise.allSettled(writes);
    await previous;
    const failed = targets.filter((r, i) => results[i].status === 'rejected' && this.replicas.includes(r));
    if (failed.length > 0) this.drop(failed);
    if (this.replicas.length === 0) {
      const why = targets.find((r) => r.failure)?.failure;
      throw new NovaError('UNAVAILABLE', `memory log ${this.name}: every replica failed${why ? `; last error: ${why.message}` : ''}`);
    }
  }

  private drop(failed: Replica[]): void {
    this.replicas = this.replicas.filter((r) => !failed.includes(r));
    for (const r of failed) {
      r.file.close();
      void this.pool.failed(r.stoc, r.failure);
    }
    const why = failed[0].failure?.message ?? 'unknown';
    this.onLog(`memory log ${this.name}: dropped replica(s) on StoC ${failed.map((r) => r.stoc).join(', ')} (${why}); ${this.replicas.length} left`);
  }
}

export type MemoryDiskLogOptions = MemoryLogOptions;

/**
 * `memory+disk`: composed of a MemoryLogStore and a StocLogStore over the same pool, range
 * and R. Both name a log the same; a StoC keeps memory and disk files apart.
 */
export class MemoryDiskLogStore implements LogStore {
  readonly makeAhead = false; // as MemoryLogStore
  readonly memory: MemoryLogStore;
  readonly disk: StocLogStore;
  private readonly onLog: (line: string) => void;
  private readonly strictUntil: number;

  constructor(private readonly pool: StocPool, private readonly range: number, replicas: number, options: MemoryDiskLogOptions = {}) {
    this.onLog = options.onLog ?? (() => undefined);
    this.strictUntil = options.strictUntil ?? 0;
    this.memory = new MemoryLogStore(pool, range, replicas, options);
    this.disk = new StocLogStore(pool, range, replicas, this.onLog, this.strictUntil);
  }

  /** Creates both logs. Without a disk log it fails; without a memory log it carries on, logged. */
  async create(file: number): Promise<LogWriter> {
    const [memory, disk] = await Promise.allSettled([this.memory.create(file), this.disk.create(file)]);
    if (disk.status === 'rejected') {
      if (memory.status === 'fulfilled') await memory.value.close();
      throw disk.reason;
    }
    if (memory.status === 'rejected') {
      this.onLog(`log ${logFileName(this.range, file)}: no memory replica (${(memory.reason as Error).message}); disk only`);
    }
    return new MemoryDiskLogWriter(logFileName(this.range, file), memory.status === 'fulfilled' ? memory.value : undefined,
      disk.value, this.onLog);
  }

  /**
   * A memory replica when it holds at least what every disk replica holds (by bytes: both
   * are the same byte stream, so that means at least as many records), else the disk's best.
   * Why sizes: the disk replicas need one stat each, not a whole read, so a recovery from
   * memory costs no disk reads.
   */
  async read(file: number): Promise<Buffer | undefined> {
    const name = logFileName(this.range, file);
    const [memory, disk] = await Promise.all([
      this.memory.best(file).catch(() => ({ copy: undefined, silent: [] })),
      this.diskSizes(name),
    ]);
    const strict = disk.silent.length > 0 && Date.now() < this.strictUntil;
    const copy = memory.copy;
    if (!strict && copy && copy.records >= 0 && !copy.torn && copy.validBytes >= disk.largest) return trimmed(copy);
    return this.disk.read(file);
  }

  async remove(file: number): Promise<void> {
    await Promise.all([this.memory.remove(file), this.disk.remove(file)]);
  }

  async list(): Promise<number[]> {
    const [memory, disk] = await Promise.all([this.memory.list(), this.disk.list()]);
    return [...new Set([...memory, ...disk])];
  }

  describe(file: number): string {
    return `StoC memory+disk log ${logFileName(this.range, file)}`;
  }

  /** The largest disk replica's size (0 if none), and the StoCs that did not answer. */
  private async diskSizes(name: string): Promise<{ largest: number; silent: number[] }> {
    const ids = this.pool.mayHoldFiles(); // not StoCs never heard from: they hold no replica
    const sizes = await Promise.all(ids.map((id) => this.pool.on(id, (c) => c.size(name)).then((s) => s ?? 0, () => -1)));
    return { largest: Math.max(0, ...sizes), silent: ids.filter((_, i) => sizes[i] < 0) };
  }
}

class MemoryDiskLogWriter implements LogWriter {
  constructor(private readonly name: string, private memory: LogWriter | undefined, private readonly disk: LogWriter,
    private readonly onLog: (line: string) => void) {}

  /**
   * Resolves when the disk log has the records; the memory log gets them too, but its failure
   * only ends it (a memory log with a gap would be useless): recovery then reads the disk.
   */
  async append(records: readonly Buffer[], sync: boolean): Promise<void> {
    const memory = this.memory?.append(records, sync).catch((err: Error) => this.abandon(err));
    const disk = this.disk.append(records, sync);
    await Promise.allSettled([memory, disk]); // the memory WRITEs are microseconds: wait, so a read finds them
    await disk;
  }

  async close(): Promise<void> {
    await Promise.all([this.memory?.close(), this.disk.close()]);
  }

  private abandon(err: Error): void {
    if (!this.memory) return;
    const memory = this.memory;
    this.memory = undefined;
    this.onLog(`log ${this.name}: memory replicas lost (${err.message}); disk only from here`);
    void memory.close();
  }
}

/** What readLog finds in one replica's bytes. */
function inspect(stoc: number, bytes: Buffer, name: string): LogCopy {
  try {
    const c = readLog(bytes, name);
    return { stoc, bytes, records: c.records.length, validBytes: c.validBytes, torn: c.tornAt !== undefined };
  } catch {
    return { stoc, bytes, records: -1, validBytes: 0, torn: false }; // damaged: another replica may be whole
  }
}

/**
 * A replica's bytes without the zeros past its last record (its regions are allocated whole),
 * so a reader sees the log as written. A torn or damaged replica is returned whole, for
 * readLog to report.
 */
function trimmed(copy: LogCopy): Buffer {
  return copy.records >= 0 && !copy.torn ? copy.bytes.subarray(0, copy.validBytes) : copy.bytes;
}
