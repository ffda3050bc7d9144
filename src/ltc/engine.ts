/**
 * The LSM-tree engine for one range (issue 3, first part): writes go through the log into
 * a memtable; a full memtable is flushed to an L0 SSTable; a MANIFEST of version edits
 * records the tree; reopening replays the MANIFEST and the logs. Reads merge memtables and
 * tables under a snapshot.
 *
 * Not here yet (issue 3 continues): compaction beyond L0 (so L0 only grows), several active
 * memtables, group commit, iterators that outlive a flush of the memtables they read.
 *
 * Durability: with `sync: true` (the default) a write is acknowledged only after its log
 * record is fdatasync'd, so it survives kill -9 and power loss. With `sync: false` it
 * survives kill -9 of this process (the bytes are in the OS) but not a machine crash.
 *
 * Concurrency: writes (and the flushes they trigger) run one at a time, in call order.
 * Reads may run at any time; they see a consistent tree at their snapshot.
 */
import { existsSync, mkdirSync, readFileSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { NovaError } from '../common/errors.js';
import { SEEK_TYPE, TRAILER_BYTES, ValueType, compareBytes, compareInternalKeys, makeInternalKey } from '../common/internal-key.js';
import { readLog } from '../logc/log-format.js';
import { MergingIterator, VisibleIterator, type InternalIterator } from '../sstable/merging-iterator.js';
import { TableBuilder } from '../sstable/table-builder.js';
import { TableReader } from '../sstable/table-reader.js';
import {
  LocalBlockStore, LocalLogWriter, logName, manifestName, replaceFile, syncDir, tableName, type BlockStore, type LogWriter,
} from './local-store.js';
import { Memtable } from './memtable.js';
import { decodeEdit, emptyEdit, encodeEdit, type TableMeta, type VersionEdit } from './version-edit.js';
import { DEFAULT_LIMITS, WriteBatch, decodeBatch, type Limits } from './write-batch.js';
import { LEVELS, compactionEntries, overlapping, pickCompaction, type CompactionJob } from './compaction.js';

export interface EngineOptions {
  /** Flush a memtable to an SSTable once it holds this many bytes (τ). */
  memtableBytes?: number;
  /** fdatasync each write's log record before acknowledging it. */
  sync?: boolean;
  limits?: Limits;
  /** L0 tables that trigger a compaction into L1 (writes wait for it: a write stall). */
  l0Trigger?: number;
  /** Size target of L1 in bytes (default 10 memtables); each deeper level ×10. */
  l1Bytes?: number;
  /**
   * Where tables and logs go (default: the local directory). Tests pass wrappers that
   * inject failures; the cluster puts these on StoCs and LogC.
   */
  env?: EngineEnv;
  /** Called with warnings such as a truncated torn log tail. */
  onWarning?: (message: string) => void;
}

export interface EngineEnv {
  store: BlockStore;
  /** Opens `path` for appending, truncated to `truncateTo` bytes if given. */
  openLog(path: string, truncateTo?: number): LogWriter;
}

/** The local-directory environment. */
export function localEnv(dir: string): EngineEnv {
  return { store: new LocalBlockStore(dir), openLog: (path, truncateTo) => new LocalLogWriter(path, truncateTo) };
}

export interface ReadOptions {
  /** Read as of this snapshot (a sequence number); default: the latest. */
  snapshot?: Snapshot;
}

export interface Snapshot {
  readonly sequence: number;
  /** Lets compactions drop versions only this snapshot needed. */
  release(): void;
}

export interface ScanOptions extends ReadOptions {
  /** Exclusive upper bound of user keys. */
  end?: Uint8Array;
  limit?: number;
}

export interface EngineStats {
  tablesPerLevel: number[];
  memtableBytes: number;
  lastSequence: number;
  /** Write rounds that waited for compactions, and how long in total. */
  stalls: number;
  stallMs: number;
  compactions: number;
  writes: number;
  /** Group commits: each appended one or more writes' records. */
  commitRounds: number;
  /** fdatasync calls on logs for writes. */
  syncs: number;
}

interface PendingWrite {
  batch: WriteBatch;
  sync: boolean;
  resolve: () => void;
  reject: (err: Error) => void;
}

interface LiveTable {
  meta: TableMeta;
  reader: TableReader;
}

export class Engine {
  private readonly store: BlockStore;
  private readonly options: Required<Omit<EngineOptions, 'onWarning' | 'env'>> & Pick<EngineOptions, 'onWarning'>;
  private readonly env: EngineEnv;
  private manifest!: LogWriter;
  private nextFile = 1;
  private lastSequence = 0;
  private active!: Memtable;
  private activeLog!: LogWriter;
  private immutable: Memtable | undefined;
  private levels: LiveTable[][] = Array.from({ length: LEVELS }, () => []); // L0 oldest first; others by key
  private readonly liveSnapshots = new Map<number, number>(); // sequence -> count
  private readonly compactCursor: Array<Buffer | undefined> = new Array(LEVELS);
  private stalls = { count: 0, ms: 0, compactions: 0 };
  private writeChain: Promise<unknown> = Promise.resolve();
  private queued: PendingWrite[] = [];
  private roundScheduled = false;
  private failed: NovaError | undefined; // an append, flush or compaction failed: reopen to recover
  private commits = { writes: 0, rounds: 0, syncs: 0 };
  private closed = false;

  private constructor(private readonly dir: string, options: EngineOptions) {
    this.options = {
      memtableBytes: options.memtableBytes ?? 16 * 1024 * 1024,
      sync: options.sync ?? true,
      l0Trigger: options.l0Trigger ?? 4,
      l1Bytes: options.l1Bytes ?? 10 * (options.memtableBytes ?? 16 * 1024 * 1024),
      limits: options.limits ?? DEFAULT_LIMITS,
      onWarning: options.onWarning,
    };
    this.env = options.env ?? localEnv(dir);
    this.store = this.env.store;
  }

  /** Opens (creating if needed) the engine in `dir`, recovering what it held. */
  static async open(dir: string, options: EngineOptions = {}): Promise<Engine> {
    mkdirSync(dir, { recursive: true });
    const e = new Engine(dir, options);
    await e.recover();
    await e.maintain(false); // recovery may leave L0 over its trigger
    return e;
  }

  newBatch(): WriteBatch {
    return new WriteBatch(this.options.limits);
  }

  put(key: Uint8Array, value: Uint8Array): Promise<void> {
    try {
      return this.write(this.newBatch().put(key, value));
    } catch (err) {
      return Promise.reject(err); // an oversize key or value: a rejection, like every failure here
    }
  }

  delete(key: Uint8Array): Promise<void> {
    try {
      return this.write(this.newBatch().delete(key));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Applies `batch` atomically: all of it is visible, and survives, or none of it.
   * Writes that arrive while a commit is under way are committed together (group commit):
   * their records are appended back to back and made durable by one fdatasync.
   */
  write(batch: WriteBatch, options: { sync?: boolean } = {}): Promise<void> {
    if (this.closed) return Promise.reject(new NovaError('CLOSED', 'engine is closed'));
    if (this.failed) return Promise.reject(this.failed);
    // Snapshot the batch now: the caller may reuse it before this write commits.
    const frozen = batch.clone();
    return new Promise<void>((resolve, reject) => {
      this.queued.push({ batch: frozen, sync: options.sync ?? this.options.sync, resolve, reject });
      if (!this.roundScheduled) {
        this.roundScheduled = true;
        this.writeChain = this.writeChain.then(() => this.commitRound()).catch(() => undefined);
      }
    });
  }

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

  async get(key: Uint8Array, options: ReadOptions = {}): Promise<Buffer | undefined> {
    this.assertOpen();
    const seq = options.snapshot?.sequence ?? this.lastSequence;
    for (const m of this.immutable ? [this.active, this.immutable] : [this.active]) {
      const r = m.get(key, seq);
      if (r) return r.type === 'put' ? Buffer.from(r.value) : undefined;
    }
    const l0 = this.levels[0];
    for (let i = l0.length - 1; i >= 0; i--) {
      const r = l0[i].reader.get(key, seq);
      if (r) return r.type === 'put' ? r.value : undefined;
    }
    for (let level = 1; level < LEVELS; level++) {
      const t = findTable(this.levels[level], key);
      const r = t?.reader.get(key, seq);
      if (r) return r.type === 'put' ? r.value : undefined;
    }
    return undefined;
  }

  /** Entries with start <= key < end, in key order, at most `limit` of them. */
  async scan(start: Uint8Array, options: ScanOptions = {}): Promise<Array<[Buffer, Buffer]>> {
    this.assertOpen();
    const seq = options.snapshot?.sequence ?? this.lastSequence;
    const it = new VisibleIterator(new MergingIterator(this.iterators()), seq);
    const out: Array<[Buffer, Buffer]> = [];
    const limit = options.limit ?? Infinity;
    for (it.seek(makeInternalKey(start, seq, SEEK_TYPE)); it.valid && out.length < limit; it.next()) {
      const k = it.key;
      if (options.end && compareBytes(k, 0, k.length, options.end, 0, options.end.length) >= 0) break;
      out.push([Buffer.from(k), Buffer.from(it.value)]);
    }
    return out;
  }

  /**
   * An iterator over user keys at a snapshot (default: now). It reads the tree as it was when
   * created: later writes, flushes and compactions do not change what it returns.
   */
  iterator(options: ReadOptions = {}): EngineIterator {
    this.assertOpen();
    const seq = options.snapshot?.sequence ?? this.lastSequence;
    return new EngineIterator(new VisibleIterator(new MergingIterator(this.iterators()), seq), seq);
  }

  /** Waits for pending writes, then closes files. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.writeChain;
    await this.activeLog.close();
    await this.manifest.close();
  }

  /** Flushes the active memtable to an L0 table now (tests and tools). */
  flush(): Promise<void> {
    if (this.closed) return Promise.reject(new NovaError('CLOSED', 'engine is closed'));
    const run = this.writeChain.then(async () => {
      if (this.failed) throw this.failed;
      await this.maintain();
    });
    this.writeChain = run.catch(() => undefined);
    return run;
  }

  get stats(): EngineStats {
    return {
      tablesPerLevel: this.levels.map((l) => l.length), memtableBytes: this.active.approximateBytes,
      lastSequence: this.lastSequence, stalls: this.stalls.count, stallMs: this.stalls.ms, compactions: this.stalls.compactions,
      writes: this.commits.writes, commitRounds: this.commits.rounds, syncs: this.commits.syncs,
    };
  }

  // ---- write path ----

  /** Commits every queued write: append all records, one sync if any asked for it, apply. */
  private async commitRound(): Promise<void> {
    this.roundScheduled = false;
    const group = this.queued;
    this.queued = [];
    if (this.failed) {
      for (const w of group) w.reject(this.failed);
      return;
    }
    let next = this.lastSequence + 1;
    try {
      const applied: Array<{ record: Buffer; first: number }> = [];
      for (const w of group) {
        if (w.batch.count === 0) continue;
        const record = w.batch.encode(this.active.id, next);
        await this.activeLog.append(record, false);
        applied.push({ record, first: next });
        next += w.batch.count;
      }
      if (applied.length > 0 && group.some((w) => w.sync)) {
        await this.activeLog.sync();
        this.commits.syncs++;
      }
      for (const { record, first } of applied) {
        decodeBatch(record, 'write batch').entries.forEach((e, i) => this.active.add(first + i, e.type, e.key, e.value));
      }
    } catch (err) {
      // Some records may be in the log: refuse further writes rather than guess.
      const failure = this.fail('log append', err);
      for (const w of group) w.reject(failure);
      return;
    }
    this.lastSequence = next - 1;
    this.commits.writes += group.length;
    this.commits.rounds++;
    for (const w of group) w.resolve();
    if (this.active.approximateBytes >= this.options.memtableBytes) await this.maintain();
  }

  /** Flush, then compact; any failure leaves the engine failed (reopen to recover). */
  private async maintain(flush = true): Promise<void> {
    try {
      if (flush) await this.flushActive();
      await this.compactAsNeeded();
    } catch (err) {
      throw this.fail(flush ? 'flush' : 'compaction', err);
    }
  }

  /** Marks the engine failed: its files are as a crash would leave them, and reopening recovers. */
  private fail(what: string, err: unknown): NovaError {
    this.failed ??= new NovaError('TRANSPORT', `${what} failed; reopen the engine to recover: ${(err as Error)?.message ?? String(err)}`, { cause: err });
    return this.failed;
  }

  /** Runs compactions until every level is within its target. Writes wait: a stall. */
  private async compactAsNeeded(): Promise<void> {
    const start = Date.now();
    let ran = 0;
    for (;;) {
      const job = pickCompaction(this.levels.map((l) => l.map((t) => t.meta)), this.options, this.compactCursor);
      if (!job) break;
      await this.runCompaction(job);
      ran++;
    }
    if (ran > 0) {
      this.stalls.count++;
      this.stalls.ms += Date.now() - start;
      this.stalls.compactions += ran;
    }
  }

  /** Merges the job's tables into level + 1, cutting outputs at the table size between user keys. */
  private async runCompaction(job: CompactionJob): Promise<void> {
    const out = job.level + 1;
    const inputs = [...job.inputs, ...job.overlapping];
    const readers = inputs.map((m) => this.tableFor(m.file));
    let smallestSnapshot = this.lastSequence;
    for (const seq of this.liveSnapshots.keys()) if (seq < smallestSnapshot) smallestSnapshot = seq;
    const deeper = this.levels.slice(out + 1).flat().map((t) => t.meta);
    const added: LiveTable[] = [];
    let builder: TableBuilder | undefined;
    let lastUser: Buffer | undefined;
    const finishOutput = async (): Promise<void> => {
      if (!builder) return;
      const built = builder.finish();
      builder = undefined;
      const file = this.nextFile++;
      const fragments = await this.store.writeTable(file, built.bytes);
      const meta: TableMeta = { level: out, file, size: built.bytes.length, entries: built.entries, smallest: built.smallest!, largest: built.largest!, fragments };
      added.push({ meta, reader: new TableReader(built.bytes, join(this.dir, tableName(file))) });
    };
    // Streams: each output table is written as soon as it is cut.
    const entries = compactionEntries(new MergingIterator(readers.map((r) => r.iterator())), {
      smallestSnapshot,
      isBottomFor: (user) => {
        const k = makeInternalKey(user, 0, ValueType.Delete);
        return overlapping(deeper, k, k).length === 0;
      },
    });
    for (const [k, v] of entries) {
      const userLen = k.length - TRAILER_BYTES;
      const newUser = !lastUser || compareBytes(lastUser, 0, lastUser.length, k, 0, userLen) !== 0;
      if (builder && newUser && builder.estimatedSize >= this.options.memtableBytes) await finishOutput();
      builder ??= new TableBuilder({ expectedSize: this.options.memtableBytes + 64 * 1024 });
      builder.add(k, v);
      if (newUser) lastUser = Buffer.from(k.subarray(0, userLen));
    }
    await finishOutput();
    const edit = emptyEdit();
    for (const m of job.inputs) edit.removed.push({ level: job.level, file: m.file });
    for (const m of job.overlapping) edit.removed.push({ level: out, file: m.file });
    edit.added.push(...added.map((t) => t.meta));
    edit.nextFile = this.nextFile;
    edit.lastSequence = this.lastSequence;
    await this.logEdit(edit);
    const gone = new Set(inputs.map((m) => m.file));
    for (let l = 0; l < LEVELS; l++) this.levels[l] = this.levels[l].filter((t) => !gone.has(t.meta.file));
    this.levels[out].push(...added);
    this.levels[out].sort((a, b) => compareInternalKeys(a.meta.smallest, b.meta.smallest));
    this.compactCursor[job.level] = job.inputs[job.inputs.length - 1].largest;
    for (const f of gone) await this.store.deleteTable(f);
  }

  private tableFor(file: number): TableReader {
    for (const level of this.levels) for (const t of level) if (t.meta.file === file) return t.reader;
    throw new NovaError('CORRUPTION', `table ${file} is not open`);
  }

  /**
   * Switches to a new memtable and log (recorded in the MANIFEST first, so recovery replays
   * both), writes the old memtable as an L0 table, records it, and only then deletes its log.
   */
  private async flushActive(): Promise<void> {
    if (this.active.entries === 0) return;
    const old = this.active;
    const oldLog = this.activeLog;
    const logFile = this.nextFile++;
    // The log exists (durably) before the MANIFEST names it: recovery insists on it.
    const newLog = this.createLog(logFile);
    const bind = emptyEdit();
    bind.boundLogs.push({ memtable: logFile, log: logFile });
    bind.nextFile = this.nextFile;
    await this.logEdit(bind);
    this.activeLog = newLog;
    this.active = new Memtable(logFile);
    this.immutable = old;
    await oldLog.close();

    await this.memtableToL0(old, [old.id]);
    this.immutable = undefined;
    const oldPath = join(this.dir, logName(old.id));
    if (existsSync(oldPath)) unlinkSync(oldPath);
  }

  private async logEdit(edit: VersionEdit): Promise<void> {
    await this.manifest.append(encodeEdit(edit), true);
  }

  // ---- recovery ----

  private async recover(): Promise<void> {
    const current = join(this.dir, 'CURRENT');
    const tables = new Map<number, TableMeta>();
    const logs = new Map<number, number>(); // memtable -> log file
    const oldFiles: string[] = [];
    if (existsSync(current)) {
      const name = readFileSync(current, 'utf8').trim();
      const path = join(this.dir, name);
      if (!/^MANIFEST-\d+$/.test(name) || !existsSync(path)) {
        throw new NovaError('CORRUPTION', `${current}: names "${name}", which is not a MANIFEST in ${this.dir}`);
      }
      const contents = readLog(readFileSync(path), path);
      if (contents.tornAt !== undefined) this.warn(`${path}: torn tail at offset ${contents.tornAt} dropped (a crash during an update)`);
      contents.records.forEach((r, i) => {
        const e = decodeEdit(r, `${path} record ${i}`);
        if (e.nextFile !== undefined) this.nextFile = Math.max(this.nextFile, e.nextFile);
        if (e.lastSequence !== undefined) this.lastSequence = Math.max(this.lastSequence, e.lastSequence);
        for (const x of e.removed) tables.delete(x.file);
        for (const t of e.added) tables.set(t.file, t);
        for (const b of e.boundLogs) logs.set(b.memtable, b.log);
        for (const m of e.releasedLogs) logs.delete(m);
      });
      oldFiles.push(path);
    }
    for (const meta of [...tables.values()].sort((a, b) => a.file - b.file)) {
      const bytes = await this.store.readTable(meta.file, meta.fragments);
      this.levels[meta.level].push({ meta, reader: new TableReader(bytes, join(this.dir, tableName(meta.file))) });
    }
    for (let l = 1; l < LEVELS; l++) this.levels[l].sort((a, b) => compareInternalKeys(a.meta.smallest, b.meta.smallest));
    // Replay every bound log, oldest memtable first, into one memtable.
    const replay = new Memtable(0);
    for (const [memtable, log] of [...logs.entries()].sort((a, b) => a[0] - b[0])) {
      const path = join(this.dir, logName(log));
      if (!existsSync(path)) {
        throw new NovaError('CORRUPTION', `${path}: log of memtable ${memtable} named by the MANIFEST is missing`);
      }
      const contents = readLog(readFileSync(path), path);
      if (contents.tornAt !== undefined) {
        this.warn(`${path}: torn tail at offset ${contents.tornAt} truncated (writes never acknowledged)`);
      }
      contents.records.forEach((r, i) => {
        const b = decodeBatch(r, `${path} record ${i}`);
        b.entries.forEach((e, j) => replay.add(b.firstSequence + j, e.type, e.key, e.value));
        this.lastSequence = Math.max(this.lastSequence, b.firstSequence + b.entries.length - 1);
      });
      oldFiles.push(path);
    }
    // A fresh MANIFEST that states the whole tree, and a fresh log for new writes.
    const manifestFile = this.nextFile++;
    const logFile = this.nextFile++;
    const manifestPath = join(this.dir, manifestName(manifestFile));
    this.manifest = this.env.openLog(manifestPath, 0);
    const newLog = this.createLog(logFile);
    const snapshot = emptyEdit();
    snapshot.added.push(...this.levels.flat().map((t) => t.meta));
    // Old logs stay bound until their entries are in a table (below); empty ones need not.
    if (replay.entries > 0) for (const [memtable, log] of logs) snapshot.boundLogs.push({ memtable, log });
    snapshot.boundLogs.push({ memtable: logFile, log: logFile });
    snapshot.nextFile = this.nextFile;
    snapshot.lastSequence = this.lastSequence;
    await this.logEdit(snapshot);
    replaceFile(this.dir, 'CURRENT', manifestName(manifestFile) + '\n');
    this.activeLog = newLog;
    this.active = new Memtable(logFile);
    // What the replayed logs held becomes an L0 table; then their logs can go.
    if (replay.entries > 0) await this.memtableToL0(replay, [...logs.keys()]);
    for (const path of oldFiles) {
      if (path !== manifestPath && existsSync(path)) unlinkSync(path);
    }
  }

  /**
   * Writes `mem` as an L0 table, then records it and releases the logs of `memtables` in one
   * MANIFEST edit (after which those logs may be deleted).
   */
  private async memtableToL0(mem: Memtable, memtables: number[]): Promise<void> {
    const file = this.nextFile++;
    const builder = new TableBuilder({ expectedSize: mem.approximateBytes + 4096 });
    const it = mem.iterator();
    for (it.first(); it.valid; it.next()) builder.add(it.key, it.value);
    const built = builder.finish();
    const fragments = await this.store.writeTable(file, built.bytes);
    const meta: TableMeta = {
      level: 0, file, size: built.bytes.length, entries: built.entries,
      smallest: built.smallest!, largest: built.largest!, fragments,
    };
    const edit = emptyEdit();
    edit.added.push(meta);
    edit.releasedLogs.push(...memtables);
    edit.nextFile = this.nextFile;
    edit.lastSequence = this.lastSequence;
    await this.logEdit(edit);
    this.levels[0].push({ meta, reader: new TableReader(built.bytes, join(this.dir, tableName(file))) });
  }

  // ---- helpers ----

  /** Creates an empty log file and makes its directory entry durable. */
  private createLog(file: number): LogWriter {
    const log = this.env.openLog(join(this.dir, logName(file)), 0);
    syncDir(this.dir);
    return log;
  }

  private iterators(): InternalIterator[] {
    const its: InternalIterator[] = [this.active.iterator()];
    if (this.immutable) its.push(this.immutable.iterator());
    for (const level of this.levels) for (const t of level) its.push(t.reader.iterator());
    return its;
  }

  private assertOpen(): void {
    if (this.closed) throw new NovaError('CLOSED', 'engine is closed');
  }

  private warn(message: string): void {
    if (this.options.onWarning) this.options.onWarning(message);
    else process.emitWarning(message);
  }
}

/** User-key iterator over the engine. Keys and values are copies, safe to keep. */
export class EngineIterator {
  constructor(private readonly inner: VisibleIterator, private readonly sequence: number) {}

  get valid(): boolean {
    return this.inner.valid;
  }

  get key(): Buffer {
    return Buffer.from(this.inner.key);
  }

  get value(): Buffer {
    return Buffer.from(this.inner.value);
  }

  first(): void {
    this.inner.first();
  }

  /** Positions at the first key >= `key`. */
  seek(key: Uint8Array): void {
    this.inner.seek(makeInternalKey(key, this.sequence, SEEK_TYPE));
  }

  next(): void {
    this.inner.next();
  }
}

/** The table of a sorted, disjoint level whose user-key span holds `key`, if any. */
function findTable(level: LiveTable[], key: Uint8Array): LiveTable | undefined {
  let lo = 0;
  let hi = level.length;
  while (lo < hi) { // first table whose largest user key >= key
    const mid = (lo + hi) >>> 1;
    const l = level[mid].meta.largest;
    if (compareBytes(l, 0, l.length - TRAILER_BYTES, key, 0, key.length) < 0) lo = mid + 1;
    else hi = mid;
  }
  if (lo === level.length) return undefined;
  const s = level[lo].meta.smallest;
  return compareBytes(s, 0, s.length - TRAILER_BYTES, key, 0, key.length) <= 0 ? level[lo] : undefined;
}

