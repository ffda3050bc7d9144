/**
 * The LSM-tree engine for one range (DESIGN.md §3–4): writes go through a memtable's log
 * into that memtable; full memtables are flushed to L0 SSTables in the background while
 * writes continue; compactions keep every level within its size target; a MANIFEST of
 * version edits records the tree; reopening replays the MANIFEST and the logs. Reads merge
 * memtables and tables under a snapshot.
 *
 * Memtables: α active ones, one per Drange, and at most δ in all (MemtableSet). A write goes
 * to the active memtable of its key's Drange. With α > 1 the key space is cut into Dranges
 * the first time a memtable fills, from a sample of its keys; the boundaries are kept in the
 * MANIFEST; they do not yet follow the load. A batch spanning Dranges is one
 * record in one memtable's log, and the memtables it touched are flushed together.
 *
 * Exactly once: a write a client numbered (WriteOptions.session) is applied at most once;
 * its retries are answered from the range's session table (sessions.ts), which its log
 * records rebuild at recovery and each flush's MANIFEST edit keeps once the logs go.
 *
 * Durability: with `sync: true` (the default) a write is acknowledged only after its log
 * record is fdatasync'd (one fdatasync per log per group commit), so it survives kill -9
 * and power loss. With `sync: false` it survives kill -9 of this process (the bytes are in
 * the OS) but not a machine crash.
 *
 * Concurrency: writes run one group commit at a time, in call order. In the background a
 * flush loop and a compaction loop run side by side, each one step at a time (kick); the
 * MANIFEST takes their edits in call order. Only the write path switches
 * memtables, so the memtables a commit round appends to stay the same until it applies.
 * Writes wait (a stall, counted and timed) when a full memtable cannot be retired: δ
 * memtables exist, or L0 holds `l0StopTrigger` tables. Reads may run at any time; they see
 * a consistent tree at their snapshot.
 */
import { mkdirSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { NovaError } from '../common/errors.js';
import { lockDir } from '../common/files.js';
import { WriteBatch } from '../log/write-batch.js';
import { MergingIterator, VisibleIterator } from '../sstable/merging-iterator.js';
import { loadReport } from './reorganization.js';
import { Postponed } from './compaction-job.js';
import { NoRoom } from './engine-env.js';
import { armIdle, background, compactLevels, flushAll, inLoopPlace, kick } from './background.js';
import { ingest, type IngestOutcome } from './ingest.js';
import { betweenWrites, enqueue } from './commit.js';
import { dropSpareLog, retire } from './make-room.js';
import type { Memtable } from '../memtable/memtable.js';
import { EngineIterator } from './engine-iterator.js';
import type { EngineOptions, ReadOptions, ScanOptions, Snapshot, WriteOptions } from './engine-options.js';
import { Abandoned, EngineState } from './engine-state.js';
import { removeObsoleteFiles, sweepOrphanTables } from './obsolete-files.js';
import { getValue, iterators, scanRows, warmTables } from './read-path.js';
import { recover } from './recovery.js';
import type { SessionStats } from './sessions.js';
import { splitKey } from './split-key.js';
import { evacuateStep, moveManifest, type EvacuationReport } from './evacuation.js';
import { repairStep, tablesNeedingRepair, type RepairReport } from './repair.js';
import { salvageRange, type SalvageReport } from './salvage.js';
import { logEdit } from './version-set.js';
import { emptyEdit } from '../log/version-edit.js';
import { typeOf, userKeyOf, ValueType } from '../common/internal-key.js';

/** How often the session table's clock moves (and idle sessions expire). */
const SESSION_TICK_MS = 1_000;
/** How long caching tables whole after an open rests between two (EngineOptions.warmAfterMs). */
const WARM_PAUSE_MS = 50;
/** When an open sweeps orphan tables again (a compaction the last owner gave up may finish late). */
const ORPHAN_SWEEP_MS = 120_000;
/** Memtable keys sampled to choose a split key. */
const SPLIT_SAMPLES = 4_096;

export interface EngineStats {
  tablesPerLevel: number[];
  /** Replicas of the active memtables' logs, the fewest (undefined: logs without replicas). */
  fewestLogReplicas?: number;
  /** Bytes in memtables not yet flushed. */
  memtableBytes: number;
  /** Memtables not yet flushed (active and immutable), and Dranges. */
  memtables: number;
  dranges: number;
  lastSequence: number;
  /** Write rounds that waited for a flush or compaction, and how long in total. */
  stalls: number;
  stallMs: number;
  flushes: number;
  compactions: number;
  /** Compactions whose merge ran on the Compactor (a StoC) rather than here. */
  offloadedCompactions: number;
  /** Compactions of L0 begun below its trigger because writes had paused (idleCompactionMs). */
  idleCompactions: number;
  /** Each Drange's share of the writes counted since the last reorganization (α > 1). */
  drangeShares: number[];
  /** Each Drange's active memtables (several: a duplicated Drange, one hot key). */
  drangeCopies: number[];
  /** Dranges duplicated now. */
  duplicatedDranges: number;
  /**
   * The paper's load imbalance: the standard deviation of the Dranges' shares of writes (a
   * duplicated Drange's spread over its copies), over each stretch between reorganizations,
   * weighted by its writes (0: even).
   */
  loadImbalance: number;
  /** Its parts, so a stretch's imbalance is the difference of two readings' ratios: Σ imbalance × writes, and Σ writes. */
  imbalanceTimesWrites: number;
  imbalanceWrites: number;
  /** Immutable memtables merged into a new memtable instead of flushed (few unique keys), and merged memtables waiting. */
  mergesInsteadOfFlush: number;
  parkedMemtables: number;
  /** Flush groups whose tables were written at once, the most (up to α). */
  maxFlushesAtOnce: number;
  /** Tables ingested (bulk loads, ingest.ts), and the entries they held. */
  ingests: number;
  ingestedEntries: number;
  /** The lookup index: gets it answered (hits) or not, keys and bytes it holds, whether it knows every key of memtables and L0. */
  lookupHits: number;
  lookupMisses: number;
  lookupKeys: number;
  lookupBytes: number;
  lookupComplete: boolean;
  /** Memtables and L0 tables read per get and per scan, on average (what the indexes save). */
  memtablesPerGet: number;
  l0TablesPerGet: number;
  memtablesPerScan: number;
  l0TablesPerScan: number;
  /** Reorganizations: Tranges handed to a neighbour (minor), Dranges cut again (major). */
  minorReorganizations: number;
  majorReorganizations: number;
  /** Compaction jobs running at once: the most, and the mean as each job started (itself counted). */
  maxJobsInParallel: number;
  meanJobsInParallel: number;
  /** Stalls that began with L0 at its stop trigger (the others waited for a flush). */
  l0Stalls: number;
  /** Commit rounds the write slowdown held back, their wait in all, and its rate now (bytes/s; 0: writes not slowed). */
  delayedRounds: number;
  delayMs: number;
  delayedWriteRate: number;
  /** MANIFESTs moved to a new file because the live one had lost replicas. */
  manifestRolls: number;
  writes: number;
  /** Group commits: each appended one or more writes' records. */
  commitRounds: number;
  /** fdatasync calls on logs for writes. */
  syncs: number;
  /**
   * With a memory budget: the budget, and what counts against it now (memtables, the lookup
   * index, tables' filters and indexes, cached blocks; pinned blocks may pass it for a moment).
   */
  memoryBudgetBytes: number;
  memoryBytes: number;
  /** With a block cache: its bytes, and reads of data blocks found there or loaded. */
  blockCacheBytes: number;
  blockCacheHits: number;
  blockCacheMisses: number;
  /** Client sessions known, applied writes they hold, retries answered from them, sessions expired. */
  sessions: SessionStats;
}

export class Engine {
  private constructor(private readonly db: EngineState) {}

  /** Opens (creating if needed) the engine in `dir`, recovering what it held. */
  static async open(dir: string, options: EngineOptions = {}): Promise<Engine> {
    const db = new EngineState(dir, options);
    mkdirSync(dir, { recursive: true });
    db.unlock = lockDir(dir);
    try {
      await recover(db);
    } catch (err) {
      db.unlock();
      throw err;
    }
    kick(db); // recovery may leave L0 over its trigger
    // What a crash or the last owner left behind goes while the range serves.
    db.sweeping = removeObsoleteFiles(db).catch((err: Error) => db.warn(`removing files the tree does not name failed: ${err.message}`));
    // Recovery opened tables by their metadata: cached whole later, and slowly (warmAfterMs).
    db.warmTimer = setTimeout(() => void warmTables(db, WARM_PAUSE_MS), db.options.warmAfterMs);
    db.warmTimer.unref();
    // Outputs of a compaction the last owner gave up may land after recovery swept: sweep again.
    const below = db.recoveredNextFile;
    db.sweepTimer = setTimeout(() => void sweepOrphanTables(db, below).catch((err: Error) => db.warn(`sweeping orphan tables failed: ${err.message}`)), ORPHAN_SWEEP_MS);
    db.sweepTimer.unref();
    db.lastWriteAt = Date.now();
    armIdle(db, db.options.idleCompactionMs); // and below it, with no writes coming
    let last = performance.now();
    db.sessionTimer = setInterval(() => {
      const now = performance.now();
      db.sessions.advance(now - last);
      last = now;
    }, SESSION_TICK_MS);
    db.sessionTimer.unref();
    return new Engine(db);
  }

  snapshot(): Snapshot {
    return this.db.snapshot();
  }

  get(key: Uint8Array, options: ReadOptions = {}): Promise<Buffer | undefined> {
    return getValue(this.db, key, options);
  }

  /** Entries with start <= key < end, in key order, at most `limit` of them. */
  scan(start: Uint8Array, options: ScanOptions = {}): Promise<Array<[Buffer, Buffer]>> {
    return scanRows(this.db, start, options);
  }

  newBatch(): WriteBatch {
    return new WriteBatch(this.db.options.limits);
  }

  put(key: Uint8Array, value: Uint8Array, options: WriteOptions = {}): Promise<void> {
    try {
      // Sized exactly, and the engine's own: no copy of it is needed.
      return enqueue(this.db, new WriteBatch(this.db.options.limits, WriteBatch.putBytes(key, value)).put(key, value), options);
    } catch (err) {
      return Promise.reject(err); // an oversize key or value: a rejection, like every failure here
    }
  }

  delete(key: Uint8Array, options: WriteOptions = {}): Promise<void> {
    try {
      return enqueue(this.db, new WriteBatch(this.db.options.limits, key.length + 8).delete(key), options);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Applies `batch` atomically: all of it is visible, and survives, or none of it.
   * Writes that arrive while a commit is under way are committed together (group commit):
   * their records are appended back to back and made durable by one fdatasync per log.
   */
  write(batch: WriteBatch, options: WriteOptions = {}): Promise<void> {
    // Snapshot the batch now: the caller may reuse it before this write commits.
    return enqueue(this.db, batch.clone(), options);
  }

  /**
   * Writes `keys` (ascending, each once) with `values` as one table, off the write path, in
   * the deepest level it may go to (ingest.ts): a bulk load's fast way. Refused, applying
   * nothing, where versions of its keys are in memtables or were written since it began:
   * then write them as a batch.
   */
  ingest(keys: Buffer[], values: Buffer[], options: Pick<WriteOptions, 'session'> = {}): Promise<IngestOutcome> {
    const p = ingest(this.db, keys, values, options.session);
    this.db.ingesting.add(p);
    const done = (): void => void this.db.ingesting.delete(p);
    p.then(done, done);
    return p;
  }

  /**
   * An iterator over user keys at a snapshot (default: now). It reads the tree as it was when
   * created: later writes, flushes and compactions do not change what it returns.
   */
  iterator(options: ReadOptions = {}): EngineIterator {
    this.db.assertOpen();
    if (this.db.cache) throw new NovaError('BAD_ARGUMENT', 'iterator() reads tables synchronously: open the engine without a block cache, or use scan()');
    const seq = options.snapshot?.sequence ?? this.db.lastSequence;
    return new EngineIterator(new VisibleIterator(new MergingIterator(iterators(this.db)), seq), seq);
  }

  /**
   * Waits for pending writes and for the flush or compaction step under way, then closes
   * files. Memtables not yet flushed stay in their logs; the next open replays them.
   */
  async close(): Promise<void> {
    if (this.db.closed) return;
    this.db.closed = true;
    this.db.wake(); // a round the write slowdown holds back goes at once
    clearTimeout(this.db.idleTimer);
    clearTimeout(this.db.postponeTimer);
    clearInterval(this.db.sessionTimer);
    clearTimeout(this.db.sweepTimer);
    clearTimeout(this.db.warmTimer);
    // Pending writes may need the background to make room, and a round that hit its size
    // cap chains another behind itself: wait until the chain stops growing.
    for (let chain = this.db.writeChain; ; chain = this.db.writeChain) {
      await chain;
      if (chain === this.db.writeChain && this.db.queued.length === 0) break;
    }
    await this.db.applied;
    this.db.stop();
    await Promise.allSettled([...this.db.ingesting]);
    await background(this.db);
    await this.db.sweeping;
    await this.db.manifestChain;
    try {
      await dropSpareLog(this.db); // never throws: a log's failed close below must not leak it
      for (const log of this.db.logs.values()) await log.close();
      this.db.logs.clear();
      await this.db.manifest.close();
    } finally {
      this.db.unlock();
    }
  }

  /**
   * Flushes every memtable to L0 and runs the compactions that leaves due; resolves when
   * both are done — except that a manual compaction in progress (compactAll) is not waited
   * for. Retiring the active memtables here does not wait for room (δ).
   */
  flush(): Promise<void> {
    return betweenWrites(this.db, () => flushAll(this.db));
  }

  /** What counts against the memory budget now (EngineStats.memoryBytes), without the other figures. */
  get memoryBytes(): number {
    return this.db.memoryBytes();
  }

  /**
   * Gives the engine a new memory budget (EngineOptions.memoryBudgetBytes): its LTC has more or
   * fewer ranges now. The block cache grows or shrinks to fit; an engine opened without a
   * budget keeps none.
   */
  setMemoryBudget(bytes: number): void {
    if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new NovaError('BAD_ARGUMENT', `a memory budget is a positive integer, not ${bytes}`);
    if (this.db.options.memoryBudgetBytes === 0) return;
    this.db.options.memoryBudgetBytes = bytes;
    this.db.fitCache();
  }

  /**
   * Retires the active memtables that hold entries (every one, with `everyLog`: every log that
   * exists now is then released), between writes, and waits until the flush loop has written
   * them, and those waiting before them, to L0 (not the memtables that fill meanwhile).
   * Compactions are not waited for, and writes go on into new memtables. Used before a range
   * moves away (so the LTC taking it replays little), at the end of a fill, and to take a
   * range's logs off StoCs that leave (evacuate).
   */
  async flushMemtables(everyLog = false): Promise<void> {
    const db = this.db;
    let targets = new Set<Memtable>();
    await betweenWrites(db, async () => {
      // What holds entries now: these, not the memtables that fill meanwhile, are waited for.
      // With `everyLog`, empty ones too: every log that exists now is then released.
      targets = new Set(db.memtables.all().filter((m) => everyLog || m.entries > 0));
      if (everyLog) await dropSpareLog(db); // made before the StoCs that leave were known
      for (let d = 0; d < db.memtables.dranges; d++) {
        if (everyLog || db.memtables.actives(d).some((m) => m.entries > 0)) await retire(db, d, false);
      }
    });
    const was = db.flushingAll;
    db.flushingAll = true; // to L0, none merged instead
    try {
      while ([...targets].some((m) => db.memtables.all().includes(m))) {
        if (db.failed) throw db.failed;
        if (db.noRoom) throw db.noRoom; // no StoC takes a table now: the caller tries again later
        if (db.stopping || db.closed) return;
        kick(db);
        const running = db.flushing;
        if (running) await running;
        else await new Promise((resolve) => setTimeout(resolve, 10));
      }
    } finally {
      db.flushingAll = was;
    }
    if (db.failed) throw db.failed;
  }

  /**
   * Flushes, then merges the whole tree into its deepest level that holds tables (LevelDB's
   * CompactRange over every key): level by level, a few tables at a time with what they
   * overlap below, as the background compactions do. For a bulk load before a benchmark
   * (LevelDB and RocksDB settle this way), or to reclaim space at once. Writes wait only for
   * the flush: meanwhile they go on into memtables and new L0 tables, which stay above (newer
   * than anything merged); a close stops it between jobs.
   */
  async compactAll(): Promise<void> {
    for (;;) {
      await this.flush();
      // Nothing runs in the compaction loop's place now, unless another compactAll took it
      // first: wait for that one, then flush again.
      if (this.db.compacting) {
        await this.db.compacting;
        continue;
      }
      break;
    }
    // Holds the loop's place (kick() starts no other) before the first job is picked.
    this.db.manual = true;
    const manual = Promise.resolve().then(() => compactLevels(this.db));
    this.db.compacting = manual.then(() => 0, () => 0);
    try {
      await manual;
    } catch (err) {
      if (err instanceof Postponed || err instanceof Abandoned || err instanceof NoRoom) throw err; // the engine goes on, or is closing: not a failure
      throw this.db.fail('manual compaction', err);
    } finally {
      this.db.manual = false;
      this.db.compacting = undefined;
      kick(this.db); // levels left over their targets, and L0 tables flushed meanwhile
    }
  }

  /**
   * Takes the range's files off the StoCs of `from`, which are leaving the cluster
   * (evacuation.ts): every memtable gets a new log (the old ones go once flushed), tables with
   * a fragment there are stored again elsewhere, or leave the tree if their StoC was removed
   * as dead, and the MANIFEST moves to a new file. New files must already avoid `from` (the
   * store's placement). Holds the compaction loop's place for each table, as compactAll does;
   * stops between two once `stop()` says so.
   */
  async evacuate(from: ReadonlySet<number>, stop: () => boolean = () => false): Promise<EvacuationReport> {
    await this.flushMemtables(true);
    const report: EvacuationReport = { tablesCopied: 0, bytesCopied: 0, l0Merged: 0, lost: [] };
    await this.stepsInLoopPlace(() => evacuateStep(this.db, from, report), () => {
      if (stop()) throw new NovaError('UNAVAILABLE', 'evacuation stopped: the range is being let go');
    });
    await moveManifest(this.db);
    report.lost = [...this.db.lostTables];
    return report;
  }

  /**
   * Makes again the table copies its store says are missing or damaged (repair.ts): written
   * from good copies onto StoCs that hold none of the table, or over a damaged copy, and the
   * table's new places recorded in the MANIFEST. In the compaction loop's place, a table at a
   * time, as evacuate does.
   */
  async repair(stop: () => boolean = () => false): Promise<RepairReport> {
    const report: RepairReport = { tablesRepaired: 0, copiesMade: 0, failed: 0 };
    const tried = new Set<number>();
    await this.stepsInLoopPlace(() => repairStep(this.db, tried, report), () => {
      if (stop()) throw new NovaError('UNAVAILABLE', 'repair stopped: the range is being let go');
    });
    return report;
  }

  /**
   * `nova repair`: reads every table, salvages those with damage no copy escapes (salvage.ts)
   * and reports what was lost; then compactions, held while any table was damaged, go on.
   */
  async salvage(stop: () => boolean = () => false): Promise<SalvageReport> {
    this.db.assertOpen();
    let report: SalvageReport | undefined;
    await this.stepsInLoopPlace(async () => {
      report = await salvageRange(this.db, stop);
      return false;
    }, () => {
      if (stop()) throw new NovaError('UNAVAILABLE', 'repair stopped: the range is being let go');
    });
    return report!;
  }

  /** Tables damaged in every copy: reads that need them fail, and no compaction takes them until `salvage`. */
  get tablesDamaged(): number {
    return this.db.damaged.size;
  }

  /**
   * Has the store check every copy of the first table after file number `after` (in file
   * order, from the start again past the last): BlockStore.scrubTable. The table scrubbed and
   * the bytes read; undefined with no table, or a store that keeps no checksums.
   */
  async scrubOne(after: number): Promise<{ file: number; bytes: number } | undefined> {
    const store = this.db.store;
    if (!store.scrubTable) return undefined;
    const tables = this.db.levels.flat().map((t) => t.meta).sort((a, b) => a.file - b.file);
    const next = tables.find((t) => t.file > after) ?? tables[0];
    if (!next) return undefined;
    return { file: next.file, bytes: await store.scrubTable(next.file, next.fragments) };
  }

  /** Tables with copies their store says are missing or damaged (repair). */
  get tablesToRepair(): number {
    return tablesNeedingRepair(this.db);
  }

  /**
   * Runs `step` until it returns false, each run in the compaction loop's place: between two,
   * the loop starts the jobs due then, so writes do not stall on L0 meanwhile. `check` runs
   * before each step (it may throw to stop).
   */
  private async stepsInLoopPlace(step: () => Promise<boolean>, check: () => void): Promise<void> {
    for (let more = true; more;) {
      await new Promise((resolve) => setImmediate(resolve)); // the loop kicked after the last step picks its jobs
      check();
      more = await inLoopPlace(this.db, step);
    }
  }


  /**
   * Where to split the range by default (split-key.ts): the median of a sample of the
   * memtables' keys written (not deleted), or of the tables' bytes, within [start, end).
   * Undefined for a range with no key there after `start`.
   */
  splitKey(start: Buffer, end?: Buffer): Buffer | undefined {
    this.db.assertOpen();
    const writes: Buffer[] = [];
    const mems = this.db.memtables.all();
    const entries = mems.reduce((n, m) => n + m.entries, 0);
    const stride = Math.max(1, Math.ceil(entries / SPLIT_SAMPLES));
    for (const m of mems) {
      const it = m.iterator();
      let i = 0;
      // Deletions are not load to split by (a trim's, after a split, would pull the key out of the range).
      for (it.first(); it.valid; it.next()) if (i++ % stride === 0 && typeOf(it.key) !== ValueType.Delete) writes.push(userKeyOf(it.key));
    }
    const tables = this.db.levels.flat().map((t) => ({ smallest: userKeyOf(t.meta.smallest), size: t.meta.size }));
    return splitKey(writes, tables, start, end);
  }

  /** Whether a table of the tree has a fragment copy on StoC `stoc`. */
  hasTablesOn(stoc: number): boolean {
    return this.db.levels.some((level) => level.some((t) => t.meta.fragments.some((f) => f.stoc === stoc)));
  }

  /** Tables dropped since the open because a StoC holding every copy of a fragment was removed as dead, by name. */
  get lostTables(): readonly string[] {
    return this.db.lostTables;
  }

  /** The range's record of client writes as bytes (SessionTable.encode): what a range taking over some of its keys adopts. */
  sessions(): Buffer {
    this.db.assertOpen();
    return this.db.sessions.encode();
  }

  /**
   * Adds another range's record of client writes (as its engine exports it), and logs it in the MANIFEST:
   * writes applied there are then answered as applied here too, so a client retrying one after
   * its key came here (a split or merge) does not apply it twice.
   */
  async adoptSessions(bytes: Buffer, where: string): Promise<void> {
    this.db.assertOpen();
    this.db.sessions.adopt(bytes, where);
    await logEdit(this.db, { ...emptyEdit(), sessions: this.db.sessions.encode() });
  }

  /** Why the engine refuses work (an append, flush or compaction failed), if it does. */
  get failure(): NovaError | undefined {
    return this.db.failed;
  }

  get stats(): EngineStats {
    const mems = this.db.memtables.all();
    const c = this.db.counts;
    const load = loadReport(this.db);
    const lk = this.db.lookup;
    const r = this.db.searched;
    const per = (n: number, of: number): number => (of > 0 ? n / of : 0);
    const memtableBytes = mems.reduce((n, m) => n + m.approximateBytes, 0);
    const replicas = [...this.db.memtables.activeAll()].map((m) => this.db.logs.get(m.id)?.replicaCount).filter((n): n is number => n !== undefined);
    return {
      tablesPerLevel: this.db.levels.map((l) => l.length),
      ...(replicas.length > 0 ? { fewestLogReplicas: Math.min(...replicas) } : {}),
      memtableBytes,
      memtables: mems.length, dranges: this.db.memtables.dranges, lastSequence: this.db.lastSequence,
      stalls: c.stalls, l0Stalls: c.l0Stalls, stallMs: c.stallMs, delayedRounds: c.delays, delayMs: c.delayMs, delayedWriteRate: this.db.delay.rate, flushes: c.flushes, compactions: c.compactions, offloadedCompactions: c.offloaded, idleCompactions: c.idle, manifestRolls: c.manifestRolls,
      lookupHits: lk?.counters.hits ?? 0, lookupMisses: lk?.counters.misses ?? 0, lookupKeys: lk?.size ?? 0, lookupBytes: lk?.bytes ?? 0, lookupComplete: lk?.complete ?? false,
      memtablesPerGet: per(r.getMemtables, r.gets), l0TablesPerGet: per(r.getTables, r.gets), memtablesPerScan: per(r.scanMemtables, r.scans), l0TablesPerScan: per(r.scanTables, r.scans),
      mergesInsteadOfFlush: c.merges, parkedMemtables: this.db.memtables.parkedCount, ingests: c.ingests, ingestedEntries: c.ingestedEntries, maxFlushesAtOnce: c.maxFlushesAtOnce,
      drangeShares: load.shares, drangeCopies: load.copies, duplicatedDranges: load.copies.filter((n) => n > 1).length, loadImbalance: load.imbalance, imbalanceTimesWrites: load.weighted, imbalanceWrites: load.writes, minorReorganizations: c.minorReorgs, majorReorganizations: c.majorReorgs,
      maxJobsInParallel: c.maxJobsInParallel, meanJobsInParallel: c.jobsStarted ? c.jobsInParallel / c.jobsStarted : 0,
      writes: c.writes, commitRounds: c.rounds, syncs: c.syncs,
      memoryBudgetBytes: this.db.options.memoryBudgetBytes,
      memoryBytes: this.db.memoryBytes(),
      blockCacheBytes: this.db.cache?.bytes ?? 0, blockCacheHits: this.db.cache?.counters.hits ?? 0, blockCacheMisses: this.db.cache?.counters.misses ?? 0,
      sessions: this.db.sessions.stats,
    };
  }
}
