/**
 * What one range's engine is (LevelDB's DBImpl and VersionSet fields; Pebble's DB): its
 * settings and environment, the tree (levels, memtables and their logs, the MANIFEST and what
 * it says), the write queue and pipeline, the background loops' state, the session table and
 * the counters. The engine's work is functions over it, in files named for what they do:
 * commit.ts (the write path), make-room.ts (memtable switches and stalls), version-set.ts (the
 * MANIFEST), background.ts (the flush and compaction loops and their triggers), flush-job.ts,
 * compaction-job.ts, recovery.ts, obsolete-files.ts and read-path.ts; engine.ts is the API.
 *
 * Not thread-safe: everything runs on the engine's one thread; `writeChain`, `applied` and
 * `manifestChain` order the asynchronous work that must not interleave.
 */
import { NovaError } from '../common/errors.js';
import { userKeyOf } from '../common/internal-key.js';
import { printable } from '../common/printable.js';
import { LEVELS } from '../compaction/picker.js';
import { ManifestState, type TableMeta } from '../log/version-edit.js';
import type { WriteBatch } from '../log/write-batch.js';
import type { LogWriter } from '../logc/log-store.js';
import { BlockCache } from '../sstable/block-cache.js';
import { TableReader } from '../sstable/table-reader.js';
import type { BlockStore, EngineEnv } from './engine-env.js';
import type { Memtable } from '../memtable/memtable.js';
import { type EngineOptions, resolveOptions, type Settings, type Snapshot } from './engine-options.js';
import { localEnv } from './local-store.js';
import type { Layout } from './dranges.js';
import type { LookupIndex } from './lookup-index.js';
import { MemtableSet } from './memtable-set.js';
import { MAX_ENTRIES, MAX_RING_BYTES, MAX_SESSIONS, MAX_WINDOW, SessionTable, type Ticket } from './sessions.js';
import { WriteDelay } from './write-delay.js';

/** Lost tables an engine names in its report (each is also a warning in the log). */
const MAX_LOST_NAMED = 1_000;

export interface PendingWrite {
  batch: WriteBatch;
  sync: boolean;
  /** A numbered write's place in the session table. */
  ticket: Ticket | undefined;
  resolve: () => void;
  reject: (err: Error) => void;
}

/** Blocks a read pinned in the cache, to unpin when it ends. */
export type Pins = Array<[TableReader, number]>;

export interface LiveTable {
  meta: TableMeta;
  reader: TableReader;
  /** L0: the engine's scan count when the table was flushed (undefined, read as 0, after recovery). */
  scansAtAdd?: number;
}

/** Work given up because the engine is stopping (EngineState.untilStopped): nothing of it was installed. */
export class Abandoned extends NovaError {
  constructor() {
    super('CLOSED', 'given up: the engine is closing');
  }
}

/** A log made ahead of the memtable switch that takes it (make-room.ts prepareSpareLog). */
export interface SpareLog {
  id: number;
  log: LogWriter;
}

export class EngineState {
  readonly store: BlockStore;
  readonly options: Settings;
  readonly env: EngineEnv;
  manifest!: LogWriter;
  manifestChain: Promise<unknown> = Promise.resolve();
  manifestFailure: Error | undefined; // an append failed: no edit may follow
  manifestState = new ManifestState(); // what the live MANIFEST's edits say
  lastManifestRoll = 0;
  manifestBytes = 0; // appended to the live MANIFEST
  manifestBaseBytes = 0; // of its first edit, the whole tree
  manifestInstalled = false; // open installed its MANIFEST: it may move on (rollManifest)
  nextFile = 1;
  lastSequence = 0;
  memtables!: MemtableSet;
  readonly logs = new Map<number, LogWriter>(); // active memtable id -> its log
  /** The log the next memtable switch takes, made ahead (make-room.ts prepareSpareLog); undefined inside if making it failed. */
  spareLog: Promise<SpareLog | undefined> | undefined;
  spareDrops: Promise<void> = Promise.resolve(); // spare logs being closed and removed (make-room.ts discard)
  levels: LiveTable[][] = Array.from({ length: LEVELS }, () => []); // L0 oldest first; others by key
  readonly liveSnapshots = new Map<number, number>(); // sequence -> count
  readonly compactCursor: Array<Buffer | undefined> = new Array(LEVELS);
  counts = {
    delays: 0, delayMs: 0, // commit rounds slowed before L0's stop (write-delay.ts), and their waits
    stalls: 0, stallMs: 0, flushes: 0, compactions: 0, offloaded: 0, idle: 0, writes: 0, rounds: 0, syncs: 0, manifestRolls: 0, l0Stalls: 0,
    jobsStarted: 0, jobsInParallel: 0, maxJobsInParallel: 0, // the last: jobs running, summed at each start, for the mean
    merges: 0, // memtables merged instead of flushed (merge-job.ts)
    ingests: 0, ingestedEntries: 0, // tables ingested (ingest.ts) and the entries they held
    maxFlushesAtOnce: 0, // flush groups written at once, the most (background.ts flushLoop)
    minorReorgs: 0, majorReorgs: 0, imbalanceSum: 0, imbalanceWrites: 0, // the last two: each window's imbalance × its writes
  };
  /** The Tranges and Dranges writes are counted in (dranges.ts), kept with memtables.drangeBounds. */
  layout: Layout = { tranges: [], dranges: [] };
  /** Writes per Trange since the last reorganization (counted only with α > 1). */
  trangeWrites: number[] = [0];
  lookup: LookupIndex | undefined; // with lookupIndexBytes > 0 (made at open: recovery.ts)
  readonly searched = { gets: 0, getMemtables: 0, getTables: 0, scans: 0, scanMemtables: 0, scanTables: 0 }; // what reads probed
  majorStreak = 0; // major reorganizations in a row, each without a calmer stretch after it

  writeChain: Promise<unknown> = Promise.resolve();
  queued: PendingWrite[] = [];
  roundScheduled = false;
  flushing: Promise<number> | undefined; // the flush loop, while it runs
  readonly flushingNow = new Set<Memtable>(); // memtables of the groups the flush loop is writing
  pokeFlushes: (() => void) | undefined; // wakes the flush loop to start groups that became ready
  compacting: Promise<number> | undefined; // the compaction loop, or a manual compaction, while it runs
  pokeCompactions: (() => void) | undefined; // wakes the compaction loop to pick again (a flush added to L0)
  manual = false; // `compacting` is a manual compaction (compactAll)
  holders = 0; // steps waiting for or holding the compaction loop's place (inLoopPlace): it starts no job
  get held(): boolean { return this.holders > 0; }
  readonly ingesting = new Set<Promise<unknown>>(); // ingests under way (ingest.ts): close waits for them
  /** Files the open found in the stores, deleted after it unless the tree names them (obsolete-files.ts); and that deletion. */
  leftovers: { tables: number[]; logs: number[] } | undefined;
  sweeping: Promise<void> | undefined;
  steps = 0; // flushes and compactions the background has finished
  scans = 0; // scans served, for L0 tables' scan allowances
  flushNeedsActives = false; // the next flush must take active memtables along
  flushingAll = false; // flushAll runs: parked memtables flush too, none is merged
  merging = false; // a merge instead of flush runs: the Dranges wait (it places its result by them)
  compactionsWaitUntil = 0; // Date.now() before which no compaction starts (one's inputs were away)
  postponeTimer: NodeJS.Timeout | undefined; // kicks the compaction loop when that wait is over
  degradedRetireAt = 0; // Date.now() of the last retire for a log short of replicas (make-room.ts)
  flushesWaitUntil = 0; // Date.now() before which no flush starts (the last found no StoC with room)
  noRoom: NovaError | undefined; // why, until a flush succeeds again (engine-env.ts NoRoom)
  waiters: Array<() => void> = [];
  readonly delay = new WriteDelay(); // the write slowdown before L0's stop
  delaySeen = { steps: -1, l0Stalls: 0 }; // what the delay was last adjusted after (commit.ts slowDown)
  failed: NovaError | undefined; // an append, flush or compaction failed: reopen to recover
  closed = false;
  stopping = false;
  /** The file number the MANIFEST had reserved up to when this open recovered (sweepOrphanTables). */
  recoveredNextFile = 0;
  sweepTimer: NodeJS.Timeout | undefined;
  warmTimer: NodeJS.Timeout | undefined;
  /** Work given up when the engine stops (untilStopped). */
  private readonly onStop = new Set<() => void>();
  unlock: () => void = () => undefined;
  memtableLimit = 2; // δ, raised if the MANIFEST holds more Dranges (recover)
  assigned = 0; // the last sequence number given to a round (applied or in flight)
  applied: Promise<void> = Promise.resolve(); // the newest round's apply step
  readonly inFlight = { rounds: 0, bytes: 0 }; // rounds appended, not yet applied
  cache: BlockCache | undefined; // set: tables are held as metadata, data blocks cached
  /** Bytes of tables being read to be cached whole: room already promised (read-path.ts openTable). */
  cacheReserved = 0;
  readonly loading = new Map<string, Promise<void>>(); // block loads under way, by table:offset
  lastWriteAt = 0; // Date.now() of the last commit round
  idleDue = false; // writes have paused for idleCompactionMs: L0 is due at one table
  idleTimer: NodeJS.Timeout | undefined;
  readonly sessions: SessionTable;
  sessionTimer: NodeJS.Timeout | undefined;

  constructor(readonly dir: string, options: EngineOptions) {
    const o = this.options = resolveOptions(options);
    this.sessions = new SessionTable({ timeoutMs: o.sessionTimeoutMs, maxSessions: MAX_SESSIONS, maxWindow: MAX_WINDOW, maxEntries: MAX_ENTRIES, maxRingBytes: MAX_RING_BYTES });
    this.env = options.env ?? localEnv(dir);
    this.store = this.env.store;
    if (o.memoryBudgetBytes > 0 && this.store.readRange) this.cache = new BlockCache(o.memoryBudgetBytes);
    else if (o.blockCacheBytes > 0 && this.store.readRange) this.cache = new BlockCache(o.blockCacheBytes);
  }

  /** Bytes of the tables' metadata held (filters, indexes; whole tables without a cache). */
  tableBytes(): number {
    let n = 0;
    for (const level of this.levels) for (const t of level) n += t.reader.bytes.length;
    return n;
  }

  /** What counts against the memory budget now: memtables, the lookup index, tables' metadata, cached blocks. */
  memoryBytes(): number {
    let n = this.tableBytes() + (this.lookup?.bytes ?? 0) + (this.cache?.bytes ?? 0);
    for (const m of this.memtables.all()) n += m.approximateBytes;
    return n;
  }

  /** What the budget keeps for memtables: δ of them, full. */
  memtableReserve(): number {
    return this.memtableLimit * this.options.memtableBytes;
  }

  /**
   * With a memory budget, the block cache gets what the memtables' reserve, the lookup index
   * and the tables' metadata leave of it (none, if nothing: reads then go to the StoCs).
   */
  fitCache(): void {
    if (!this.cache || this.options.memoryBudgetBytes === 0) return;
    this.cache.resize(this.options.memoryBudgetBytes - this.memtableReserve() - (this.lookup?.bytes ?? 0) - this.tableBytes());
  }

  /** Stops the background from taking more work, and gives up what waits in untilStopped. */
  stop(): void {
    this.stopping = true;
    for (const give of this.onStop) give();
    this.onStop.clear();
  }

  /** `p`, unless the engine stops first: then Abandoned (p's outcome is dropped). */
  untilStopped<T>(p: Promise<T>): Promise<T> {
    if (this.stopping) {
      p.catch(() => undefined);
      return Promise.reject(new Abandoned());
    }
    return new Promise<T>((resolve, reject) => {
      const give = (): void => reject(new Abandoned());
      this.onStop.add(give);
      p.then((v) => { this.onStop.delete(give); resolve(v); }, (err: unknown) => { this.onStop.delete(give); reject(err); });
    });
  }

  /**
   * Tables no copy of which reads whole (every copy damaged), by file, with why: reads that
   * need what is damaged fail with CORRUPTION, and no compaction takes them (it would carry
   * the damage on, or reorder L0 around them) until `nova repair` salvages them (salvage.ts).
   */
  readonly damaged = new Map<number, string>();

  /** Records table `file` as damaged beyond its copies (damaged), once. */
  markDamaged(file: number, why: string): void {
    if (this.damaged.has(file)) return;
    this.damaged.set(file, why);
    this.warn(`table ${file} is damaged in every copy (${why}); reads that need it fail, and compactions that would take it wait: run \`nova repair\` on the range`);
  }

  /** Tables dropped since the open because a StoC holding a fragment was removed as dead (loseTable). */
  readonly lostTables: string[] = [];

  /** Records that table `t` is lost with a dead StoC (it leaves the tree), with a warning naming it. */
  loseTable(t: TableMeta): void {
    const name = `table ${t.file} of level ${t.level} (${t.entries} entries, ${t.size} bytes, user keys ${printable(userKeyOf(t.smallest), 40)} to ${printable(userKeyOf(t.largest), 40)})`;
    if (this.lostTables.length < MAX_LOST_NAMED) this.lostTables.push(name);
    this.warn(`${name} is lost: StoC ${t.fragments.filter((f) => this.env.isLost?.(f.stoc)).map((f) => f.stoc).join(', ')} held every copy of a fragment of it and was removed as dead; its keys may read older values or none`);
  }

  warn(message: string): void {
    if (this.options.onWarning) this.options.onWarning(message);
    else process.emitWarning(message);
  }

  /** Marks the engine failed: its files are as a crash would leave them, and reopening recovers. */
  fail(what: string, err: unknown): NovaError {
    this.failed ??= new NovaError('TRANSPORT', `${what} failed; reopen the engine to recover: ${(err as Error)?.message ?? String(err)}`, { cause: err });
    this.wake();
    return this.failed;
  }

  wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const resolve of w) resolve();
  }

  /** Resolves at the next wake(), or after `ms`, whichever comes first. */
  wokenOr(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        const i = this.waiters.indexOf(done);
        if (i >= 0) this.waiters.splice(i, 1); // woken by the timer: no stale entry left behind
        resolve();
      };
      const timer = setTimeout(done, Math.ceil(ms));
      this.waiters.push(done);
    });
  }

  assertOpen(): void {
    if (this.closed) throw new NovaError('CLOSED', 'engine is closed');
  }

  /** The oldest sequence a reader may read at: the oldest live snapshot's, or the present. */
  smallestSnapshot(): number {
    let oldest = this.lastSequence;
    for (const seq of this.liveSnapshots.keys()) if (seq < oldest) oldest = seq;
    return oldest;
  }

  tableFor(file: number): TableReader {
    for (const level of this.levels) for (const t of level) if (t.meta.file === file) return t.reader;
    throw new NovaError('CORRUPTION', `table ${file} is not open`);
  }

  /** A snapshot at the present; compactions keep what it may read until it is released. */
  snapshot(): Snapshot {
    const sequence = this.lastSequence;
    this.liveSnapshots.set(sequence, (this.liveSnapshots.get(sequence) ?? 0) + 1);
    let released = false;
    return {
      sequence,
      release: () => {
        if (released) return;
        released = true;
        const n = (this.liveSnapshots.get(sequence) ?? 1) - 1;
        if (n <= 0) this.liveSnapshots.delete(sequence);
        else this.liveSnapshots.set(sequence, n);
      },
    };
  }
}
