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
 * MANIFEST. (Reorganizing them by load is a later issue.) A batch spanning Dranges is one
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
import { existsSync, mkdirSync, readFileSync, readdirSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { NovaError } from '../common/errors.js';
import { SEEK_TYPE, TRAILER_BYTES, ValueType, compareBytes, compareInternalKeys, makeInternalKey } from '../common/internal-key.js';
import { readLog } from '../log/log-format.js';
import { MergingIterator, VisibleIterator, levelIterator, type InternalIterator } from '../sstable/merging-iterator.js';
import { BlockCache } from '../sstable/block-cache.js';
import { FOOTER_BYTES, TRAILER_BYTES as BLOCK_TRAILER, metadataStart, readFooter } from '../sstable/format.js';
import { BlockMiss, TableReader } from '../sstable/table-reader.js';
import {
  LocalBlockStore, LocalLogStore, LocalManifestStore, tableName, type BlockStore, type CompactionRequest, type Compactor,
} from './local-store.js';
import type { LogStore, LogWriter, ManifestStore } from '../logc/log-store.js';
import { lockDir, replaceFile, syncDir } from '../common/files.js';
import { boundsFromSample, drangeOf } from './dranges.js';
import { Memtable } from '../memtable/memtable.js';
import { MemtableSet } from './memtable-set.js';
import { ManifestState, decodeEdit, emptyEdit, encodeEdit, type TableMeta, type VersionEdit } from '../log/version-edit.js';
import { DEFAULT_LIMITS, WriteBatch, decodeBatch, type Limits } from '../log/write-batch.js';
import { MAX_ENTRIES, MAX_RING_BYTES, MAX_SESSIONS, MAX_WINDOW, SessionTable, type SessionStats, type Ticket } from './sessions.js';
import type { SessionRef } from '../common/write-id.js';
import { LEVELS, jobFor, overlapping, pickCompaction, type CompactionJob } from '../compaction/picker.js';
import { mergeTables, type MergeJob } from '../compaction/merge.js';
import { buildOnWorker, mergeOnWorker, mergeWorkerAvailable } from '../compaction/worker-pool.js';
import { buildTableInSlices } from '../compaction/flush.js';
import type { BuiltTable } from '../sstable/table-builder.js';

/** Write stalls at least this long are reported to `onNote`, with their cause. */
const STALL_NOTE_MS = 100;

/** A MANIFEST that lost replicas moves to a new file at most this often (rollManifest). */
const MANIFEST_ROLL_INTERVAL_MS = 10_000;

/** Commit rounds whose log appends may be in flight at once (commitRound). */
const PIPELINE_DEPTH = 4;

/** How often the session table's clock moves (and idle sessions expire). */
const SESSION_TICK_MS = 1_000;

export interface EngineOptions {
  /** Retire a memtable once it holds this many bytes (τ). */
  memtableBytes?: number;
  /**
   * α: active memtables, one per Drange (default 1). More spread writes over memtables whose
   * L0 tables do not overlap; with `sync`, each group commit syncs every log it touched.
   */
  activeMemtables?: number;
  /** δ: memtables in all, active and waiting for their flush (default 2α). */
  maxMemtables?: number;
  /** fdatasync each write's log record before acknowledging it. */
  sync?: boolean;
  limits?: Limits;
  /** L0 tables that make L0 due for compaction into L1 (default 8). */
  l0Trigger?: number;
  /**
   * L0 tables that make L0 due once scans read it (default 4; lowered to l0Trigger if above it): when the
   * oldest L0 table has been sought by more scans than its allowance (one per 16 KiB of it,
   * at least 100: LevelDB's seek compaction, for scans). A point lookup skips an L0 table by
   * its filter, a scan seeks every one; so writes get the larger trigger (less rewriting of
   * L1) and scans the smaller.
   */
  l0ScanTrigger?: number;
  /** L0 tables at which writes wait for compaction (default 3 × l0Trigger). */
  l0StopTrigger?: number;
  /**
   * Once no write has arrived for this many milliseconds, L0 is due at one table (default 250;
   * 0: never). The triggers above size merges for a steady stream of writes; when writes
   * pause, the CPU they left is spent merging L0 into L1, so reads stop probing L0 tables and
   * the next burst of writes starts with an empty L0 instead of a merge of eight tables coming
   * due in its first second. The price: a pause with few L0 tables rewrites the L1 they meet
   * for less new data than a full trigger would. The active memtable is left as it is.
   */
  idleCompactionMs?: number;
  /**
   * A client session that has sent this range no write for this long (the range's running
   * time) expires (default 300 000: 5 minutes); the client must start a new one, and is told
   * so (SESSION_EXPIRED). It bounds the session table. Clients must give up on a write well
   * within it (NovaClient: under half), or a retry could outlive the record of its original.
   */
  sessionTimeoutMs?: number;
  /**
   * A MANIFEST that has grown past this many bytes (default 16 MiB), and past twice the edit
   * that states the whole tree, moves to a new file that starts with that edit: every flush
   * appends the session table, and recovery reads the whole file (Pebble's MaxManifestFileSize).
   */
  maxManifestBytes?: number;
  /** Size target of L1 in bytes (default 10 memtables); each deeper level ×10. */
  l1Bytes?: number;
  /**
   * Where tables and logs go (default: the local directory). Tests pass wrappers that
   * inject failures; the cluster puts these on StoCs and LogC.
   */
  env?: EngineEnv;
  /** Called with warnings such as a truncated torn log tail. */
  onWarning?: (message: string) => void;
  /** Called with notable events that are no fault: a write stall of 100 ms or more, and why. */
  onNote?: (message: string) => void;
  /**
   * Run compaction merges, and flushes' table builds, on worker threads (default: yes, when
   * the built worker exists), so neither blocks reads and writes on this thread.
   */
  mergeInWorker?: boolean;
  /**
   * Bytes of data blocks kept in a block cache (default 0: none). With a cache, and a store
   * that reads parts of tables (StoCs), the engine holds only each table's metadata (filter,
   * index) and loads data blocks as reads need them; without, it holds every table whole.
   */
  blockCacheBytes?: number;
}

export interface EngineEnv {
  /** SSTables. */
  store: BlockStore;
  /** Memtable logs. */
  logs: LogStore;
  /** The MANIFEST. */
  manifests: ManifestStore;
  /** Where compactions run (StoCs); without one, or when it declines a job, the engine merges. */
  compactor?: Compactor;
}

/** The local-directory environment. */
export function localEnv(dir: string): EngineEnv {
  return { store: new LocalBlockStore(dir), logs: new LocalLogStore(dir), manifests: new LocalManifestStore(dir) };
}

export interface WriteOptions {
  /** fdatasync the log record before acknowledging (default: the engine's `sync`). */
  sync?: boolean;
  /** The client's numbering of this write: applied at most once (sessions.ts). */
  session?: SessionRef;
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
  /** Stop once the rows hold this many key and value bytes (at least one row is returned). */
  maxBytes?: number;
}

export interface EngineStats {
  tablesPerLevel: number[];
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
  /** Stalls that began with L0 at its stop trigger (the others waited for a flush). */
  l0Stalls: number;
  /** MANIFESTs moved to a new file because the live one had lost replicas. */
  manifestRolls: number;
  writes: number;
  /** Group commits: each appended one or more writes' records. */
  commitRounds: number;
  /** fdatasync calls on logs for writes. */
  syncs: number;
  /** With a block cache: its bytes, and reads of data blocks found there or loaded. */
  blockCacheBytes: number;
  blockCacheHits: number;
  blockCacheMisses: number;
  /** Client sessions known, applied writes they hold, retries answered from them, sessions expired. */
  sessions: SessionStats;
}

interface PendingWrite {
  batch: WriteBatch;
  sync: boolean;
  /** A numbered write's place in the session table. */
  ticket: Ticket | undefined;
  resolve: () => void;
  reject: (err: Error) => void;
}

/** Blocks a read pinned in the cache, to unpin when it ends. */
type Pins = Array<[TableReader, number]>;

interface LiveTable {
  meta: TableMeta;
  reader: TableReader;
  /** L0: the engine's scan count when the table was flushed (undefined, read as 0, after recovery). */
  scansAtAdd?: number;
}

/** Scans an L0 table may serve before it makes L0 due at l0ScanTrigger (LevelDB: allowed_seeks). */
function scanAllowance(t: LiveTable): number {
  return Math.max(100, Math.floor(t.meta.size / 16384));
}

type Settings = Required<Omit<EngineOptions, 'onWarning' | 'onNote' | 'env'>> & Pick<EngineOptions, 'onWarning' | 'onNote'>;

export class Engine {
  private readonly store: BlockStore;
  private readonly options: Settings;
  private readonly env: EngineEnv;
  private manifest!: LogWriter;
  private manifestChain: Promise<unknown> = Promise.resolve();
  private manifestFailure: Error | undefined; // an append failed: no edit may follow
  private manifestState = new ManifestState(); // what the live MANIFEST's edits say
  private lastManifestRoll = 0;
  private manifestBytes = 0; // appended to the live MANIFEST
  private manifestBaseBytes = 0; // of its first edit, the whole tree
  private manifestInstalled = false; // open installed its MANIFEST: it may move on (rollManifest)
  private nextFile = 1;
  private lastSequence = 0;
  private memtables!: MemtableSet;
  private readonly logs = new Map<number, LogWriter>(); // active memtable id -> its log
  private levels: LiveTable[][] = Array.from({ length: LEVELS }, () => []); // L0 oldest first; others by key
  private readonly liveSnapshots = new Map<number, number>(); // sequence -> count
  private readonly compactCursor: Array<Buffer | undefined> = new Array(LEVELS);
  private counts = { stalls: 0, stallMs: 0, flushes: 0, compactions: 0, offloaded: 0, idle: 0, writes: 0, rounds: 0, syncs: 0, manifestRolls: 0, l0Stalls: 0 };
  private writeChain: Promise<unknown> = Promise.resolve();
  private queued: PendingWrite[] = [];
  private roundScheduled = false;
  private flushing: Promise<number> | undefined; // the flush loop, while it runs
  private compacting: Promise<number> | undefined; // the compaction loop, or a manual compaction, while it runs
  private manual = false; // `compacting` is a manual compaction (compactAll)
  private steps = 0; // flushes and compactions the background has finished
  private scans = 0; // scans served, for L0 tables' scan allowances
  private flushNeedsActives = false; // the next flush must take active memtables along
  private waiters: Array<() => void> = [];
  private failed: NovaError | undefined; // an append, flush or compaction failed: reopen to recover
  private closed = false;
  private stopping = false;
  private unlock: () => void = () => undefined;
  private memtableLimit = 2; // δ, raised if the MANIFEST holds more Dranges (recover)
  private assigned = 0; // the last sequence number given to a round (applied or in flight)
  private applied: Promise<void> = Promise.resolve(); // the newest round's apply step
  private readonly inFlight = { rounds: 0, bytes: 0 }; // rounds appended, not yet applied
  private cache: BlockCache | undefined; // set: tables are held as metadata, data blocks cached
  private readonly loading = new Map<string, Promise<void>>(); // block loads under way, by table:offset
  private lastWriteAt = 0; // Date.now() of the last commit round
  private idleDue = false; // writes have paused for idleCompactionMs: L0 is due at one table
  private idleTimer: NodeJS.Timeout | undefined;
  private readonly sessions: SessionTable;
  private sessionTimer: NodeJS.Timeout | undefined;

  private constructor(private readonly dir: string, options: EngineOptions) {
    const active = options.activeMemtables ?? 1;
    const memtableBytes = options.memtableBytes ?? 16 * 1024 * 1024;
    const l0Trigger = options.l0Trigger ?? 8;
    this.options = {
      memtableBytes,
      activeMemtables: active,
      maxMemtables: options.maxMemtables ?? 2 * active,
      sync: options.sync ?? true,
      l0Trigger,
      l0ScanTrigger: Math.min(options.l0ScanTrigger ?? 4, l0Trigger),
      l0StopTrigger: options.l0StopTrigger ?? 3 * l0Trigger,
      idleCompactionMs: options.idleCompactionMs ?? 250,
      sessionTimeoutMs: options.sessionTimeoutMs ?? 300_000,
      maxManifestBytes: options.maxManifestBytes ?? 16 * 1024 * 1024,
      l1Bytes: options.l1Bytes ?? 10 * memtableBytes,
      limits: options.limits ?? DEFAULT_LIMITS,
      onWarning: options.onWarning,
      onNote: options.onNote,
      mergeInWorker: options.mergeInWorker ?? mergeWorkerAvailable(),
      blockCacheBytes: options.blockCacheBytes ?? 0,
    };
    const o = this.options;
    if (!(Number.isInteger(memtableBytes) && memtableBytes >= 1024)) throw new NovaError('BAD_ARGUMENT', `memtableBytes (τ) must be an integer >= 1024, not ${memtableBytes}`);
    if (!(Number.isInteger(active) && active >= 1)) throw new NovaError('BAD_ARGUMENT', `activeMemtables (α) must be an integer >= 1, not ${active}`);
    if (!(Number.isInteger(o.maxMemtables) && o.maxMemtables > active)) {
      throw new NovaError('BAD_ARGUMENT', `maxMemtables (δ) must be an integer > activeMemtables (α = ${active}), not ${o.maxMemtables}`);
    }
    if (!(Number.isInteger(o.l0Trigger) && o.l0Trigger >= 1)) throw new NovaError('BAD_ARGUMENT', `l0Trigger must be an integer >= 1, not ${o.l0Trigger}`);
    if (!(Number.isInteger(o.l0ScanTrigger) && o.l0ScanTrigger >= 1)) throw new NovaError('BAD_ARGUMENT', `l0ScanTrigger must be an integer >= 1, not ${o.l0ScanTrigger}`);
    if (!(Number.isInteger(o.idleCompactionMs) && o.idleCompactionMs >= 0)) throw new NovaError('BAD_ARGUMENT', `idleCompactionMs must be an integer >= 0, not ${o.idleCompactionMs}`);
    if (!(Number.isSafeInteger(o.maxManifestBytes) && o.maxManifestBytes >= 1)) throw new NovaError('BAD_ARGUMENT', `maxManifestBytes must be a positive integer, not ${o.maxManifestBytes}`);
    if (!(Number.isSafeInteger(o.sessionTimeoutMs) && o.sessionTimeoutMs >= 1)) throw new NovaError('BAD_ARGUMENT', `sessionTimeoutMs must be a positive integer, not ${o.sessionTimeoutMs}`);
    this.sessions = new SessionTable({ timeoutMs: o.sessionTimeoutMs, maxSessions: MAX_SESSIONS, maxWindow: MAX_WINDOW, maxEntries: MAX_ENTRIES, maxRingBytes: MAX_RING_BYTES });
    if (!(o.l0StopTrigger > o.l0Trigger)) throw new NovaError('BAD_ARGUMENT', `l0StopTrigger (${o.l0StopTrigger}) must exceed l0Trigger (${o.l0Trigger})`);
    this.env = options.env ?? localEnv(dir);
    this.store = this.env.store;
    if (!(Number.isSafeInteger(o.blockCacheBytes) && o.blockCacheBytes >= 0)) throw new NovaError('BAD_ARGUMENT', `blockCacheBytes must be a non-negative integer, not ${o.blockCacheBytes}`);
    if (o.blockCacheBytes > 0 && this.store.readRange) this.cache = new BlockCache(o.blockCacheBytes);
  }

  /** Opens (creating if needed) the engine in `dir`, recovering what it held. */
  static async open(dir: string, options: EngineOptions = {}): Promise<Engine> {
    const e = new Engine(dir, options);
    mkdirSync(dir, { recursive: true });
    e.unlock = lockDir(dir);
    try {
      await e.recover();
    } catch (err) {
      e.unlock();
      throw err;
    }
    e.kick(); // recovery may leave L0 over its trigger
    e.lastWriteAt = Date.now();
    e.armIdle(e.options.idleCompactionMs); // and below it, with no writes coming
    let last = performance.now();
    e.sessionTimer = setInterval(() => {
      const now = performance.now();
      e.sessions.advance(now - last);
      last = now;
    }, SESSION_TICK_MS);
    e.sessionTimer.unref();
    return e;
  }

  newBatch(): WriteBatch {
    return new WriteBatch(this.options.limits);
  }

  put(key: Uint8Array, value: Uint8Array, options: WriteOptions = {}): Promise<void> {
    try {
      // Sized exactly, and the engine's own: no copy of it is needed.
      return this.enqueue(new WriteBatch(this.options.limits, WriteBatch.putBytes(key, value)).put(key, value), options);
    } catch (err) {
      return Promise.reject(err); // an oversize key or value: a rejection, like every failure here
    }
  }

  delete(key: Uint8Array, options: WriteOptions = {}): Promise<void> {
    try {
      return this.enqueue(new WriteBatch(this.options.limits, key.length + 8).delete(key), options);
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
    return this.enqueue(batch.clone(), options);
  }

  /**
   * Queues a batch the engine owns from here on (commitRound writes its header). A write a
   * client numbered is answered from the session table instead when it is applied already
   * or in flight.
   */
  private enqueue(batch: WriteBatch, options: WriteOptions): Promise<void> {
    if (this.closed) return Promise.reject(new NovaError('CLOSED', 'engine is closed'));
    if (this.failed) return Promise.reject(this.failed);
    let ticket: Ticket | undefined;
    if (options.session) {
      let admission;
      try {
        admission = this.sessions.admit(options.session);
      } catch (err) {
        return Promise.reject(err);
      }
      if (admission === 'applied') return Promise.resolve();
      if (admission instanceof Promise) return admission;
      ticket = admission;
    }
    const sync = options.sync ?? this.options.sync;
    if (ticket) this.sessions.begin(ticket);
    const outcome = new Promise<void>((resolve, reject) => {
      this.queued.push({ batch, sync, ticket, resolve, reject });
      if (!this.roundScheduled) {
        this.roundScheduled = true;
        this.writeChain = this.writeChain.then(() => this.commitRound()).catch(() => undefined);
      }
    });
    return outcome;
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
    if (!this.cache) return this.getNow(key, options.snapshot?.sequence ?? this.lastSequence);
    // A get that must load a block runs again once it is loaded; its snapshot keeps the
    // versions it may see from compactions meanwhile.
    const snapshot = options.snapshot ? undefined : this.snapshot();
    const pins: Pins = [];
    try {
      for (;;) {
        try {
          return this.getNow(key, (options.snapshot ?? snapshot!).sequence);
        } catch (err) {
          if (!(err instanceof BlockMiss)) throw err;
          await this.load(err, pins);
        }
      }
    } finally {
      snapshot?.release();
      for (const [reader, offset] of pins) reader.unpin(offset);
    }
  }

  private getNow(key: Uint8Array, seq: number): Buffer | undefined {
    for (const m of this.memtables.forKey(key)) {
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

  /**
   * Loads the block a read missed into the cache (one load per block at a time) and pins it
   * for the read (`pins`), which unpins what it pinned when it ends.
   */
  private async load(miss: BlockMiss, pins: Pins): Promise<void> {
    const live = (): LiveTable | undefined => this.levels.flat().find((t) => t.reader === miss.table);
    const table = live();
    if (!table) return; // compacted away meanwhile: the next try reads its successor
    const key = `${table.meta.file}:${miss.handle.offset}`;
    let p = this.loading.get(key);
    if (!p) {
      p = this.store.readRange!(table.meta.file, table.meta.fragments, miss.handle.offset, miss.handle.size + BLOCK_TRAILER)
        .then((bytes) => miss.table.insert(miss.handle, bytes))
        .finally(() => this.loading.delete(key));
      this.loading.set(key, p);
    }
    try {
      await p;
    } catch (err) {
      if (live()) throw err; // else it was deleted after a compaction replaced it: try again
      return;
    }
    // Evicted again before this read could pin it (other loads ran meanwhile): the retry loads it.
    if (miss.table.pin(miss.handle.offset)) pins.push([miss.table, miss.handle.offset]);
  }

  /** A reader of table `file` just written from `bytes`: whole, or with a block cache only its metadata (copied out). */
  private readerOf(bytes: Buffer, file: number): TableReader {
    const name = join(this.dir, tableName(file));
    if (!this.cache) return new TableReader(bytes, name);
    const start = metadataStart(readFooter(bytes, name));
    return TableReader.metadataOnly(Buffer.from(bytes.subarray(start)), start, name, this.cache);
  }

  /**
   * Opens table `meta`: whole, or with a block cache only its metadata (two reads: the footer,
   * then filter and index).
   */
  private async openTable(meta: TableMeta): Promise<TableReader> {
    const name = join(this.dir, tableName(meta.file));
    if (!this.cache) return new TableReader(await this.store.readTable(meta.file, meta.fragments), name);
    const footer = readFooter(await this.store.readRange!(meta.file, meta.fragments, meta.size - FOOTER_BYTES, FOOTER_BYTES), name);
    const start = metadataStart(footer);
    if (start > meta.size - FOOTER_BYTES) throw new NovaError('CORRUPTION', `${name}: metadata at offset ${start}, past the table's ${meta.size} bytes`);
    const bytes = await this.store.readRange!(meta.file, meta.fragments, start, meta.size - start);
    return TableReader.metadataOnly(bytes, start, name, this.cache);
  }

  /** Entries with start <= key < end, in key order, at most `limit` of them. */
  async scan(start: Uint8Array, options: ScanOptions = {}): Promise<Array<[Buffer, Buffer]>> {
    this.assertOpen();
    this.countScan();
    const out: Array<[Buffer, Buffer]> = [];
    const page = { bytes: 0 };
    if (!this.cache) {
      this.scanInto(out, page, start, options.snapshot?.sequence ?? this.lastSequence, options);
      return out;
    }
    // A scan that must load a block goes on after its last row once the block is loaded,
    // at the same snapshot (held, so compactions keep what it may see).
    const snapshot = options.snapshot ? undefined : this.snapshot();
    const seq = (options.snapshot ?? snapshot!).sequence;
    const pins: Pins = [];
    let from: Uint8Array = start;
    try {
      for (;;) {
        try {
          this.scanInto(out, page, from, seq, options);
          return out;
        } catch (err) {
          if (!(err instanceof BlockMiss)) throw err;
          await this.load(err, pins);
          if (out.length > 0) from = Buffer.concat([out[out.length - 1][0], Buffer.alloc(1)]);
        }
      }
    } finally {
      snapshot?.release();
      for (const [reader, offset] of pins) reader.unpin(offset);
    }
  }

  /** Adds the rows from `start` to `out` until the scan's end, limit or byte budget. */
  private scanInto(out: Array<[Buffer, Buffer]>, page: { bytes: number }, start: Uint8Array, seq: number, options: ScanOptions): void {
    const it = new VisibleIterator(new MergingIterator(this.iterators()), seq);
    const limit = options.limit ?? Infinity;
    const maxBytes = options.maxBytes ?? Infinity;
    for (it.seek(makeInternalKey(start, seq, SEEK_TYPE)); it.valid && out.length < limit && page.bytes < maxBytes; it.next()) {
      const k = it.key;
      if (options.end && compareBytes(k, 0, k.length, options.end, 0, options.end.length) >= 0) break;
      out.push([Buffer.from(k), Buffer.from(it.value)]);
      page.bytes += k.length + it.value.length;
    }
  }

  /**
   * An iterator over user keys at a snapshot (default: now). It reads the tree as it was when
   * created: later writes, flushes and compactions do not change what it returns.
   */
  iterator(options: ReadOptions = {}): EngineIterator {
    this.assertOpen();
    if (this.cache) throw new NovaError('BAD_ARGUMENT', 'iterator() reads tables synchronously: open the engine without a block cache, or use scan()');
    const seq = options.snapshot?.sequence ?? this.lastSequence;
    return new EngineIterator(new VisibleIterator(new MergingIterator(this.iterators()), seq), seq);
  }

  /**
   * Waits for pending writes and for the flush or compaction step under way, then closes
   * files. Memtables not yet flushed stay in their logs; the next open replays them.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.idleTimer);
    clearInterval(this.sessionTimer);
    // Pending writes may need the background to make room, and a round that hit its size
    // cap chains another behind itself: wait until the chain stops growing.
    for (let chain = this.writeChain; ; chain = this.writeChain) {
      await chain;
      if (chain === this.writeChain && this.queued.length === 0) break;
    }
    await this.applied;
    this.stopping = true;
    await this.background;
    await this.manifestChain;
    try {
      for (const log of this.logs.values()) await log.close();
      this.logs.clear();
      await this.manifest.close();
    } finally {
      this.unlock();
    }
  }

  /**
   * Flushes every memtable to L0 and runs the compactions that leaves due; resolves when
   * both are done — except that a manual compaction in progress (compactAll) is not waited
   * for. Retiring the active memtables here does not wait for room (δ).
   */
  flush(): Promise<void> {
    return this.betweenWrites(() => this.flushAll());
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
      if (this.compacting) {
        await this.compacting;
        continue;
      }
      break;
    }
    // Holds the loop's place (kick() starts no other) before the first job is picked.
    this.manual = true;
    const manual = Promise.resolve().then(() => this.compactLevels());
    this.compacting = manual.then(() => 0, () => 0);
    try {
      await manual;
    } catch (err) {
      throw this.fail('manual compaction', err);
    } finally {
      this.manual = false;
      this.compacting = undefined;
      this.kick(); // levels left over their targets, and L0 tables flushed meanwhile
    }
  }

  /** Runs `work` in the write chain: after every write before it, before every write after. */
  private betweenWrites(work: () => Promise<void>): Promise<void> {
    if (this.closed) return Promise.reject(new NovaError('CLOSED', 'engine is closed'));
    const run = this.writeChain.then(async () => {
      await this.applied; // no round may still be applied to a memtable retired here
      if (this.failed) throw this.failed;
      await work();
      if (this.failed) throw this.failed;
    });
    this.writeChain = run.catch(() => undefined);
    return run;
  }

  private async flushAll(): Promise<void> {
    for (let d = 0; d < this.memtables.dranges; d++) {
      if (this.memtables.active(d).entries > 0) await this.retire(d, false);
    }
    // Until a background run finds nothing to do (one may be under way already). A manual
    // compaction in the compaction loop's place is not waited for: it may take minutes, and
    // a shutdown flushes (LtcServer.close) before its close stops that compaction.
    for (;;) {
      this.kick();
      const running = this.manual ? this.flushing : this.background;
      if (!running || (await running) === 0) break;
    }
  }

  /**
   * Every level above the deepest that holds tables (L1 at least: L0's tables may overlap),
   * merged down one level at a time.
   */
  private async compactLevels(): Promise<void> {
    let bottom = LEVELS - 1;
    while (bottom > 1 && this.levels[bottom].length === 0) bottom--;
    // The L0 tables there are now; those flushed meanwhile are newer and stay in L0.
    let l0 = this.levels[0].length > 0;
    for (let level = 0; level < bottom; level++) {
      while (level === 0 ? l0 : this.levels[level].length > 0) {
        if (this.failed) throw this.failed;
        if (this.closed) return; // between jobs: each one is whole in the MANIFEST
        // L0's tables may overlap one another: all at once. A sorted level: its first table,
        // the same size of job as a background one.
        l0 = false;
        const inputs = level === 0 ? [...this.levels[0]] : [this.levels[level][0]];
        await this.runCompaction(jobFor(this.levels.map((l) => l.map((t) => t.meta)), level, inputs.map((t) => t.meta)));
        this.steps++;
        this.wake(); // writers stalled on L0 may go on
      }
    }
  }

  /** Why the engine refuses work (an append, flush or compaction failed), if it does. */
  get failure(): NovaError | undefined {
    return this.failed;
  }

  get stats(): EngineStats {
    const mems = this.memtables.all();
    const c = this.counts;
    return {
      tablesPerLevel: this.levels.map((l) => l.length),
      memtableBytes: mems.reduce((n, m) => n + m.approximateBytes, 0),
      memtables: mems.length, dranges: this.memtables.dranges, lastSequence: this.lastSequence,
      stalls: c.stalls, l0Stalls: c.l0Stalls, stallMs: c.stallMs, flushes: c.flushes, compactions: c.compactions, offloadedCompactions: c.offloaded, idleCompactions: c.idle, manifestRolls: c.manifestRolls,
      writes: c.writes, commitRounds: c.rounds, syncs: c.syncs,
      blockCacheBytes: this.cache?.bytes ?? 0, blockCacheHits: this.cache?.counters.hits ?? 0, blockCacheMisses: this.cache?.counters.misses ?? 0,
      sessions: this.sessions.stats,
    };
  }

  // ---- write path ----

  /**
   * Commits every queued write: append all records, sync the logs if any asked, apply.
   *
   * Rounds are pipelined: a round's appends start while up to PIPELINE_DEPTH earlier rounds
   * still wait for theirs (a remote log costs a round trip; waiting for each in turn would cap
   * writes at one group per round trip). Sequence numbers and appends go out in round order
   * (appends to one log are applied in call order), and rounds are applied to memtables and
   * acknowledged strictly in that order. Before a memtable may need switching the pipeline
   * drains, so a memtable never retires with a round still to be applied to it.
   */
  private async commitRound(): Promise<void> {
    this.lastWriteAt = Date.now();
    this.idleDue = false;
    this.armIdle(this.options.idleCompactionMs);
    if (this.inFlight.rounds > 0 && (this.flushNeedsActives || this.inFlight.rounds >= PIPELINE_DEPTH ||
        this.memtables.fullDrange(this.options.memtableBytes - this.inFlight.bytes) >= 0)) {
      await this.applied;
    }
    try {
      if (this.failed) throw this.failed;
      await this.makeRoom();
    } catch (err) {
      // A failed memtable switch left files half made: fail() already marked the engine.
      this.rejectQueued(err as Error);
      return;
    }
    // Writes that queued while room was made join this round, up to a size that keeps a
    // round from overfilling a memtable (LevelDB caps its groups at 1 MiB for the same reason).
    const cap = Math.min(1 << 20, this.options.memtableBytes >> 2);
    let n = 0;
    let bytes = 0;
    for (; n < this.queued.length && (n === 0 || bytes < cap); n++) bytes += this.queued[n].batch.byteSize;
    const group = this.queued.splice(0, n);
    if (this.queued.length === 0) this.roundScheduled = false;
    else this.writeChain = this.writeChain.then(() => this.commitRound()).catch(() => undefined);
    if (this.inFlight.rounds === 0) this.assigned = this.lastSequence;
    const first = this.assigned + 1;
    let next = first;
    const toApply: Array<{ batch: WriteBatch; first: number; home: Memtable }> = [];
    let appended: Promise<unknown>;
    try {
      // One append per log for the whole group: a remote log (LogC) then costs one round
      // trip per group, not one per write.
      const perLog = new Map<LogWriter, Buffer[]>();
      for (const w of group) {
        const firstKey = w.batch.firstKey();
        if (firstKey === undefined) continue;
        // The whole batch is one record in the log of its first key's memtable: atomic.
        const home = this.memtables.active(this.memtables.drangeOf(firstKey));
        const log = this.logs.get(home.id)!;
        let records = perLog.get(log);
        if (!records) perLog.set(log, records = []);
        records.push(w.batch.encode(home.id, next, w.ticket?.ref));
        toApply.push({ batch: w.batch, first: next, home });
        next += w.batch.count;
      }
      const sync = group.some((w) => w.sync);
      appended = Promise.all([...perLog].map(([log, records]) => log.append(records, sync)));
      if (sync) this.counts.syncs += perLog.size;
    } catch (err) {
      appended = Promise.reject(err);
    }
    this.assigned = next - 1;
    this.inFlight.rounds++;
    this.inFlight.bytes += bytes;
    const previous = this.applied;
    this.applied = (async () => {
      let appendError: unknown;
      try {
        await appended;
      } catch (err) {
        appendError = err;
      }
      await previous; // rounds apply in order
      this.inFlight.rounds--;
      this.inFlight.bytes -= bytes;
      // Some records may be in a log: refuse further writes rather than guess.
      if (appendError !== undefined) return this.rejectGroup(group, this.fail('log append', appendError));
      if (this.failed) return this.rejectGroup(group, this.failed); // an earlier round failed
      try {
        for (const { batch, first: seq0, home } of toApply) {
          let seq = seq0;
          batch.forEach((type, key, value) => {
            const m = this.memtables.active(this.memtables.drangeOf(key));
            m.add(seq++, type, key, value);
            if (m !== home) this.memtables.link(home, m);
          });
        }
      } catch (err) {
        // The records are in the log but not all in memtables: only a reopen can tell.
        return this.rejectGroup(group, this.fail('memtable insert', err));
      }
      this.lastSequence = next - 1;
      this.counts.writes += group.length;
      this.counts.rounds++;
      for (const w of group) {
        if (w.ticket) this.sessions.applied(w.ticket);
        w.resolve();
      }
    })();
  }

  private rejectGroup(group: PendingWrite[], err: Error): void {
    for (const w of group) {
      if (w.ticket) this.sessions.failed(w.ticket, err);
      w.reject(err);
    }
  }

  private rejectQueued(err: Error): void {
    this.roundScheduled = false;
    const group = this.queued;
    this.queued = [];
    this.rejectGroup(group, err);
  }

  /**
   * Retires full active memtables (LevelDB MakeRoomForWrite). When δ memtables exist or L0
   * is at its stop trigger, waits for the background to flush or compact: a write stall.
   */
  private async makeRoom(): Promise<void> {
    let stalledAt: number | undefined;
    let stallCause = '';
    for (;;) {
      if (this.failed) throw this.failed;
      if (this.flushNeedsActives) {
        // The oldest immutable memtable shares records with active ones: they go together.
        this.flushNeedsActives = false;
        for (const m of this.memtables.nextFlush()) {
          const d = this.memtables.drangeOfActive(m);
          if (d >= 0) await this.retire(d, false);
        }
        this.kick();
        continue;
      }
      const full = this.memtables.fullDrange(this.options.memtableBytes);
      if (full < 0) break;
      const roomy = this.memtables.size < this.memtableLimit && this.levels[0].length < this.options.l0StopTrigger;
      if (roomy) {
        await this.retire(full, true);
        this.kick();
        continue;
      }
      if (stalledAt === undefined) {
        stalledAt = performance.now();
        if (this.levels[0].length >= this.options.l0StopTrigger) {
          this.counts.l0Stalls++;
          stallCause = `L0 at ${this.levels[0].length} tables, its stop trigger`;
        } else {
          stallCause = `${this.memtables.size} memtables, waiting for a flush`;
        }
      }
      this.kick();
      if (!this.background) {
        throw this.failed ?? new NovaError('CLOSED', 'engine is closing: no room for the write');
      }
      const steps = this.steps;
      await new Promise<void>((resolve) => this.waiters.push(resolve));
      if (this.steps === steps && !this.background && !this.flushNeedsActives && !this.failed) {
        // Not expected: a full engine always has a flush or a compaction to run.
        throw new NovaError('BAD_ARGUMENT', 'no room for the write and nothing to flush or compact; check l0Trigger/l0StopTrigger');
      }
    }
    if (stalledAt !== undefined) {
      const ms = performance.now() - stalledAt;
      this.counts.stalls++;
      this.counts.stallMs += ms;
      // Where stalls fall (a load, a run) is what tuning needs; only hosts that log get it.
      if (ms >= STALL_NOTE_MS) this.options.onNote?.(`writes stalled ${Math.round(ms)} ms (${stallCause})`);
    }
  }

  /**
   * Gives Drange `d` a fresh active memtable and log (bound in the MANIFEST before any write
   * goes to it); the old one waits for its flush. With α > 1 and no Dranges yet, a full
   * memtable (`learn`) cuts the key space into Dranges from a sample of its keys instead.
   */
  private async retire(d: number, learn: boolean): Promise<void> {
    try {
      await this.switchMemtables(d, learn);
    } catch (err) {
      throw this.fail('memtable switch', err); // a log may exist unbound, or an edit be half written
    }
  }

  private async switchMemtables(d: number, learn: boolean): Promise<void> {
    const old = this.memtables.active(d);
    const edit = emptyEdit();
    const α = this.options.activeMemtables;
    const bounds = learn && α > 1 && this.memtables.dranges === 1 ? boundsFromSample(sampleKeys(old, α * 16), α) : [];
    const fresh: Memtable[] = [];
    for (let i = 0; i <= bounds.length; i++) fresh.push(await this.newMemtable(edit));
    syncDir(this.dir); // the logs exist before the MANIFEST names them: recovery insists on it
    if (bounds.length > 0) edit.dranges = bounds;
    edit.nextFile = this.nextFile;
    await this.logEdit(edit);
    const retired = bounds.length > 0 ? this.memtables.activeAll() : [old];
    if (bounds.length > 0) this.memtables.reshape(bounds, fresh);
    else this.memtables.retire(d, fresh[0]);
    for (const m of retired) {
      const log = this.logs.get(m.id)!;
      this.logs.delete(m.id);
      await log.close();
    }
  }

  /** A memtable with a new, empty log file, its binding added to `edit`. */
  private async newMemtable(edit: VersionEdit): Promise<Memtable> {
    const id = this.nextFile++;
    // The log exists before the MANIFEST names it, so recovery can tell an empty log from a lost one.
    this.logs.set(id, await this.env.logs.create(id));
    edit.boundLogs.push({ memtable: id, log: id });
    return new Memtable(id, this.options.memtableBytes);
  }

  private async logEdit(edit: VersionEdit): Promise<void> {
    const run = this.manifestChain.then(async () => {
      // After a failed append the MANIFEST's tail is unknown (a torn record, a lost
      // fdatasync): an edit after it could be dropped by recovery along with the tear, while
      // what it allowed (deleting a compaction's inputs) has happened. So none follows.
      if (this.manifestFailure) throw this.manifestFailure;
      const record = encodeEdit(edit);
      await this.manifest.append([record], true);
      if (this.manifestBytes === 0) this.manifestBaseBytes = record.length;
      this.manifestBytes += record.length;
      this.manifestState.apply(edit);
      if (!this.manifestInstalled) return;
      if (this.manifest.degraded && Date.now() - this.lastManifestRoll >= MANIFEST_ROLL_INTERVAL_MS) await this.rollManifest('replicas');
      else if (this.manifestBytes >= Math.max(this.options.maxManifestBytes, 2 * this.manifestBaseBytes)) await this.rollManifest('size');
    });
    this.manifestChain = run.catch((err: unknown) => { this.manifestFailure ??= err as Error; });
    await run;
  }

  /**
   * Moves the MANIFEST to a new file stating the whole tree, on StoCs that answer: when the
   * current one lost replicas (a StoC died; otherwise the next StoC lost could take the
   * range's last MANIFEST with it), or grew past maxManifestBytes. Runs in the MANIFEST
   * chain, so the state it states is exactly what the edits so far say. If the new file
   * cannot be made, the current one goes on; once its first edit may be whole, the new file
   * may be chosen at recovery (it is the highest-numbered), so from there only the new one is
   * written, or nothing more.
   */
  private async rollManifest(why: 'replicas' | 'size'): Promise<void> {
    this.lastManifestRoll = Date.now();
    const file = this.nextFile++;
    let next: LogWriter;
    try {
      next = await this.env.manifests.create(file);
    } catch (err) {
      this.warn(`MANIFEST ${file} not started (${(err as Error).message}); the current one goes on with fewer replicas`);
      return;
    }
    const [now, then] = [next.replicaCount ?? 0, this.manifest.replicaCount ?? 0];
    if (why === 'replicas' ? now <= then : now < then) {
      // No more StoCs answered than before (a dead one still looks healthy for a while), or
      // fewer than the current one has: keep the current one. The new file holds no record,
      // so no recovery ever chooses it.
      await next.close();
      return;
    }
    const snapshot = this.manifestState.snapshot();
    snapshot.nextFile = Math.max(snapshot.nextFile ?? 0, this.nextFile);
    const record = encodeEdit(snapshot);
    await next.append([record], true); // a failure here ends the chain (the caller records it)
    this.manifestBytes = this.manifestBaseBytes = record.length;
    this.manifestState.apply(snapshot);
    const old = this.manifest;
    this.manifest = next;
    await old.close();
    this.counts.manifestRolls++;
    if (why === 'replicas') this.warn(`MANIFEST moved to ${file}: the previous one had lost replicas`);
    else this.options.onNote?.(`MANIFEST moved to ${file}: the previous one passed ${this.options.maxManifestBytes} bytes`);
    await this.env.manifests.install(file).catch((err: Error) => this.warn(`older MANIFESTs not all removed: ${err.message}`));
  }

  // ---- background: a flush loop and a compaction loop ----

  /**
   * Starts the flush loop and the compaction loop, each unless it runs or the engine failed
   * or is stopping. They run side by side, so a long compaction never holds up a flush (the
   * immutable memtable would stall writes meanwhile; LevelDB flushes between compaction
   * outputs for the same reason). Why that is safe: a flush only adds L0 tables newer than
   * anything a running compaction reads, and each removes only what it picked.
   */
  private kick(): void {
    if (this.failed || this.stopping) return;
    this.flushing ??= this.loop(() => this.flushStep(), () => { this.flushing = undefined; });
    this.compacting ??= this.loop(() => this.compactStep(), () => { this.compacting = undefined; });
  }

  /** Both loops while either runs; resolves with the steps they ran. */
  private get background(): Promise<number> | undefined {
    if (!this.flushing && !this.compacting) return undefined;
    return Promise.all([this.flushing ?? 0, this.compacting ?? 0]).then(([f, c]) => f + c);
  }

  /** Runs `step` until it finds nothing to do, then calls `ended`; returns the steps it ran. */
  private async loop(step: () => Promise<boolean>, ended: () => void): Promise<number> {
    let n = 0;
    try {
      while (!this.stopping && !this.failed && await step()) {
        n++;
        this.steps++;
        this.wake();
      }
    } catch (err) {
      this.fail('flush or compaction', err);
    }
    ended();
    // A loop that found nothing to do wakes no stalled writer while the other loop runs:
    // the writer would only kick it again, a busy loop that starves the other of the turns
    // it needs. Once neither runs, writers must learn it (nothing will make room).
    if (n > 0 || !this.background) this.wake();
    return n;
  }

  /** Flushes the oldest group of immutable memtables, if one is ready. */
  private async flushStep(): Promise<boolean> {
    const group = this.memtables.nextFlush();
    if (group.length === 0) return false;
    if (group.some((m) => this.memtables.isActive(m))) {
      this.flushNeedsActives = true; // the write path retires them, then kicks
      this.wake();
      return false;
    }
    await this.flushGroup(group);
    this.kick(); // the new L0 table may make a compaction due
    return true;
  }

  private async compactStep(): Promise<boolean> {
    const levels = { l0Trigger: this.l0TriggerNow(), l1Bytes: this.options.l1Bytes };
    const job = pickCompaction(this.levels.map((l) => l.map((t) => t.meta)), levels, this.compactCursor);
    if (!job) return false;
    if (job.level === 0 && this.idleDue && job.inputs.length < this.options.l0Trigger) this.counts.idle++;
    await this.runCompaction(job);
    return true;
  }

  /**
   * 1 while writes have paused (idleCompactionMs); else l0ScanTrigger once the oldest L0
   * table has served its allowance of scans; else l0Trigger.
   */
  private l0TriggerNow(): number {
    if (this.idleDue) return 1;
    return this.l0ScannedEnough() ? this.options.l0ScanTrigger : this.options.l0Trigger;
  }

  /**
   * Checks for a pause in writes `ms` from now. One timer at a time: a commit round only
   * arms it when none is set, and the check re-arms it for the rest of the pause when writes
   * came meanwhile, so a busy write path costs a Date.now() per round, not a timer.
   */
  private armIdle(ms: number): void {
    if (this.idleTimer || this.options.idleCompactionMs === 0 || this.closed) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = undefined;
      const left = this.lastWriteAt + this.options.idleCompactionMs - Date.now();
      if (left > 0) return this.armIdle(left);
      // Until the next write. The compaction loop takes L0 now, or next if it is running;
      // a memtable whose flush ends during the pause kicks it again (flushStep).
      this.idleDue = true;
      if (this.levels[0].length > 0) this.kick();
    }, ms);
    this.idleTimer.unref();
  }

  /** Whether the oldest L0 table (the most scanned) has served its allowance of scans. */
  private l0ScannedEnough(): boolean {
    const oldest = this.levels[0][0];
    return oldest !== undefined && this.scans - (oldest.scansAtAdd ?? 0) >= scanAllowance(oldest);
  }

  /**
   * Counts a scan; once the oldest L0 table's allowance is used up, L0 is due at
   * l0ScanTrigger tables: start the compaction loop unless it runs (then it picks the job
   * next). Not only on the scan that crosses: that one may come while the loop is ending.
   */
  private countScan(): void {
    this.scans++;
    if (!this.compacting && this.levels[0].length >= this.options.l0ScanTrigger && this.l0ScannedEnough()) this.kick();
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const resolve of w) resolve();
  }

  /** Marks the engine failed: its files are as a crash would leave them, and reopening recovers. */
  private fail(what: string, err: unknown): NovaError {
    this.failed ??= new NovaError('TRANSPORT', `${what} failed; reopen the engine to recover: ${(err as Error)?.message ?? String(err)}`, { cause: err });
    this.wake();
    return this.failed;
  }

  /**
   * Writes each memtable of `group` (oldest first) as an L0 table, then records the tables
   * and releases the memtables' logs in one MANIFEST edit; only then are the logs deleted.
   */
  private async flushGroup(group: Memtable[]): Promise<void> {
    const edit = emptyEdit();
    const added: LiveTable[] = [];
    for (const m of group) {
      if (m.entries > 0) added.push(await this.writeL0(m));
      edit.releasedLogs.push(m.id);
    }
    edit.added.push(...added.map((t) => t.meta));
    edit.nextFile = this.nextFile;
    edit.lastSequence = this.lastSequence;
    // The released logs' records named client writes: the table keeps what they said.
    edit.sessions = this.sessions.encode();
    await this.logEdit(edit);
    this.levels[0].push(...added);
    this.memtables.flushed(group);
    this.counts.flushes++;
    for (const m of group) await this.env.logs.remove(m.id);
  }

  /** On the flush worker; if the worker died or failed (not the data), here instead. */
  private async buildOnWorker(mem: Memtable, size: number, smallestSnapshot: number): Promise<BuiltTable> {
    try {
      return await buildOnWorker(mem.frozen(), size, smallestSnapshot);
    } catch (err) {
      const code = (err as NovaError).code;
      if (code !== 'CLOSED' && code !== 'REMOTE') throw err;
      this.warn(`flush of memtable ${mem.id}: ${(err as Error).message}; building it on this thread`);
      return buildTableInSlices(mem, size, smallestSnapshot);
    }
  }

  /**
   * Builds and stores the L0 table of `mem`; the caller records it. Versions no reader can see
   * are left out (flush.ts): a snapshot taken later reads at a sequence above all of `mem`.
   */
  private async writeL0(mem: Memtable): Promise<LiveTable> {
    const file = this.nextFile++;
    const size = mem.approximateBytes + 4096;
    const oldest = this.smallestSnapshot();
    const built = this.options.mergeInWorker ? await this.buildOnWorker(mem, size, oldest) : await buildTableInSlices(mem, size, oldest);
    const fragments = await this.store.writeTable(file, built.bytes);
    const meta: TableMeta = {
      level: 0, file, size: built.bytes.length, entries: built.entries,
      smallest: built.smallest!, largest: built.largest!, fragments,
    };
    return { meta, reader: this.readerOf(built.bytes, file), scansAtAdd: this.scans };
  }

  /**
   * Merges the job's tables into level + 1, cutting outputs at the table size between user
   * keys (merge.ts): on the Compactor (a StoC) when there is one, else here, on the merge
   * worker thread unless `mergeInWorker` is off.
   */
  private async runCompaction(job: CompactionJob): Promise<void> {
    const out = job.level + 1;
    const inputs = [...job.inputs, ...job.overlapping];
    const smallestSnapshot = this.smallestSnapshot();
    // Only deeper tables within the job's key span can stop a tombstone from going.
    let smallest = inputs[0].smallest;
    let largest = inputs[0].largest;
    for (const m of inputs) {
      if (compareInternalKeys(m.smallest, smallest) < 0) smallest = m.smallest;
      if (compareInternalKeys(m.largest, largest) > 0) largest = m.largest;
    }
    const deeper = overlapping(this.levels.slice(out + 1).flat().map((t) => t.meta), smallest, largest)
      .map((t) => ({ smallest: t.smallest, largest: t.largest }));
    const added = (this.env.compactor && await this.offload(this.env.compactor, out, inputs, smallestSnapshot, deeper))
      ?? await this.mergeHere(out, inputs, smallestSnapshot, deeper);
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
    this.counts.compactions++;
    for (const f of gone) await this.store.deleteTable(f);
  }

  /** Merges on this process; each output is stored as soon as it is cut. */
  private async mergeHere(out: number, inputs: TableMeta[], smallestSnapshot: number,
    deeper: CompactionRequest['deeper']): Promise<LiveTable[]> {
    const merge: MergeJob = {
      tables: await Promise.all(inputs.map((m) => {
        const reader = this.tableFor(m.file);
        return reader.whole ? reader.bytes : this.store.readTable(m.file, m.fragments);
      })),
      names: inputs.map((m) => this.tableFor(m.file).name),
      smallestSnapshot,
      deeper,
      targetBytes: this.options.memtableBytes,
    };
    const added: LiveTable[] = [];
    for await (const t of this.options.mergeInWorker ? mergeOnWorker(merge) : mergeTables(merge)) {
      const file = this.nextFile++;
      const fragments = await this.store.writeTable(file, t.bytes);
      const meta: TableMeta = { level: out, file, size: t.bytes.length, entries: t.entries, smallest: t.smallest, largest: t.largest, fragments };
      added.push({ meta, reader: this.readerOf(t.bytes, file) });
    }
    return added;
  }

  /**
   * Runs the merge on the Compactor, then opens its outputs. The output numbers are reserved
   * in the MANIFEST before the job leaves: a job still running when this process dies can
   * never write a table under a number a later flush uses. Undefined if the Compactor declined.
   */
  private async offload(compactor: Compactor, out: number, inputs: TableMeta[], smallestSnapshot: number,
    deeper: CompactionRequest['deeper']): Promise<LiveTable[] | undefined> {
    const targetBytes = this.options.memtableBytes;
    const inputBytes = inputs.reduce((sum, m) => sum + m.size, 0);
    // Every output but the last holds at least targetBytes; twice that count, for slack.
    const maxFiles = 2 * Math.ceil(inputBytes / targetBytes) + 2;
    const firstFile = this.nextFile;
    this.nextFile += maxFiles;
    await this.logEdit({ ...emptyEdit(), nextFile: this.nextFile });
    const tables = await compactor.compact({ inputs, smallestSnapshot, deeper, targetBytes, firstFile, maxFiles });
    if (!tables) return undefined;
    tables.forEach((t, i) => {
      if (t.file < firstFile || t.file >= firstFile + maxFiles || (i > 0 && t.file <= tables[i - 1].file)) {
        throw new NovaError('CORRUPTION', `an offloaded compaction answered table ${t.file}, not in order within the numbers reserved [${firstFile}, ${firstFile + maxFiles})`);
      }
      if (i > 0 && compareInternalKeys(tables[i - 1].largest, t.smallest) >= 0) {
        throw new NovaError('CORRUPTION', `an offloaded compaction answered tables ${tables[i - 1].file} and ${t.file} whose keys overlap or are out of order`);
      }
    });
    let opened: LiveTable[];
    try {
      opened = await Promise.all(tables.map(async (t) => {
        const meta: TableMeta = { ...t, level: out };
        const reader = await this.openTable(meta);
        if ((reader.whole && reader.bytes.length !== t.size) || reader.entries !== t.entries) {
          throw new NovaError('CORRUPTION', `${reader.name}: ${reader.entries} entries${reader.whole ? ` in ${reader.bytes.length} bytes` : ''}; the compaction said ${t.entries} in ${t.size}`);
        }
        return { meta, reader };
      }));
    } catch (err) {
      if ((err as NovaError).code === 'CORRUPTION') throw err;
      // A StoC holding an output went away after the job: merge here instead (the outputs
      // are deleted where they can be, else at the next open, as no edit names them).
      this.warn(`compaction outputs could not be read back (${(err as Error).message}); merging on this process instead`);
      await Promise.all(tables.map((t) => this.store.deleteTable(t.file).catch(() => undefined)));
      return undefined;
    }
    this.counts.offloaded++;
    return opened;
  }

  /** The oldest sequence a reader may read at: the oldest live snapshot's, or the present. */
  private smallestSnapshot(): number {
    let oldest = this.lastSequence;
    for (const seq of this.liveSnapshots.keys()) if (seq < oldest) oldest = seq;
    return oldest;
  }

  private tableFor(file: number): TableReader {
    for (const level of this.levels) for (const t of level) if (t.meta.file === file) return t.reader;
    throw new NovaError('CORRUPTION', `table ${file} is not open`);
  }

  // ---- recovery ----

  private async recover(): Promise<void> {
    const state = new ManifestState();
    const current = await this.env.manifests.readCurrent();
    if (current) {
      const path = current.name;
      const contents = readLog(current.bytes, path);
      if (contents.tornAt !== undefined) this.warn(`${path}: torn tail at offset ${contents.tornAt} dropped (a crash during an update)`);
      contents.records.forEach((r, i) => {
        state.apply(decodeEdit(r, `${path} record ${i}`));
      });
    }
    this.nextFile = Math.max(this.nextFile, state.nextFile);
    this.lastSequence = Math.max(this.lastSequence, state.lastSequence);
    if (state.sessions) this.sessions.load(state.sessions, `${current!.name}: sessions`);
    const { tables, logs, bounds } = state;
    for (const meta of [...tables.values()].sort((a, b) => a.file - b.file)) {
      this.levels[meta.level].push({ meta, reader: await this.openTable(meta) });
    }
    for (let l = 1; l < LEVELS; l++) this.levels[l].sort((a, b) => compareInternalKeys(a.meta.smallest, b.meta.smallest));
    // Replay every bound log into one memtable per Drange (so no one memtable must hold all
    // of them). Sequence numbers order the entries within each, and every entry in a log is
    // newer than what its Drange has in tables (flushes take the oldest memtables first), so
    // these L0 tables, newest of all and disjoint, hold them correctly.
    const replays = Array.from({ length: bounds.length + 1 }, () => new Memtable(0));
    for (const [memtable, log] of [...logs.entries()].sort((a, b) => a[0] - b[0])) {
      const path = this.env.logs.describe(log);
      const bytes = await this.env.logs.read(log);
      if (bytes === undefined) {
        throw new NovaError('CORRUPTION', `${path}: log of memtable ${memtable} named by the MANIFEST is missing`);
      }
      const contents = readLog(bytes, path);
      if (contents.tornAt !== undefined) {
        this.warn(`${path}: torn tail at offset ${contents.tornAt} truncated (writes never acknowledged)`);
      }
      contents.records.forEach((r, i) => {
        const b = decodeBatch(r, `${path} record ${i}`);
        b.entries.forEach((e, j) => replays[drangeOf(bounds, e.key)].add(b.firstSequence + j, e.type, e.key, e.value));
        if (b.session) this.sessions.replay(b.session);
        this.lastSequence = Math.max(this.lastSequence, b.firstSequence + b.entries.length - 1);
      });
    }
    // A fresh MANIFEST that states the whole tree, and fresh memtables and logs for writes.
    const manifestFile = this.nextFile++;
    this.manifest = await this.env.manifests.create(manifestFile);
    this.manifestState = new ManifestState();
    const snapshot = emptyEdit();
    const fresh: Memtable[] = [];
    for (let i = 0; i <= bounds.length; i++) fresh.push(await this.newMemtable(snapshot));
    syncDir(this.dir);
    snapshot.added.push(...this.levels.flat().map((t) => t.meta));
    // Old logs stay bound until their entries are in a table (below); empty ones need not.
    const replayed = replays.some((m) => m.entries > 0);
    if (replayed) for (const [memtable, log] of logs) snapshot.boundLogs.push({ memtable, log });
    if (bounds.length > 0) snapshot.dranges = bounds;
    snapshot.sessions = this.sessions.encode();
    snapshot.nextFile = this.nextFile;
    snapshot.lastSequence = this.lastSequence;
    await this.logEdit(snapshot);
    await this.env.manifests.install(manifestFile);
    this.manifestInstalled = true;
    this.memtables = new MemtableSet(bounds, fresh);
    // The tree's Dranges come from its MANIFEST, whatever α this open asks for; δ must leave
    // room for one immutable memtable beside their active ones.
    this.memtableLimit = Math.max(this.options.maxMemtables, bounds.length + 2);
    // What the replayed logs held becomes L0 tables, recorded in one edit that also
    // releases the logs (a crash before it leaves unrecorded tables, deleted next open).
    if (replayed) {
      const tables: LiveTable[] = [];
      for (const m of replays) if (m.entries > 0) tables.push(await this.writeL0(m));
      const edit = emptyEdit();
      edit.added.push(...tables.map((t) => t.meta));
      edit.releasedLogs.push(...logs.keys());
      edit.nextFile = this.nextFile;
      edit.lastSequence = this.lastSequence;
      await this.logEdit(edit);
      this.levels[0].push(...tables);
    }
    await this.removeObsoleteFiles();
  }

  /**
   * Deletes files the new MANIFEST does not name: replayed logs, and what a crash left
   * behind — a table whose edit never landed (its entries are still in logs or in the
   * compaction's inputs), a log never bound (no write reached it). Other files are left
   * alone. (Installing the new MANIFEST removed the old ones.)
   */
  private async removeObsoleteFiles(): Promise<void> {
    const liveTables = new Set(this.levels.flat().map((t) => t.meta.file));
    for (const file of await this.store.listTables()) if (!liveTables.has(file)) await this.store.deleteTable(file);
    for (const file of await this.env.logs.list()) if (!this.logs.has(file)) await this.env.logs.remove(file);
  }

  // ---- helpers ----

  /** Every memtable and L0 table, and one LevelIterator per deeper level (its tables are disjoint). */
  private iterators(): InternalIterator[] {
    const its: InternalIterator[] = this.memtables.all().map((m) => m.iterator());
    for (const t of this.levels[0]) its.push(t.reader.iterator());
    for (let l = 1; l < LEVELS; l++) {
      const level = this.levels[l];
      if (level.length === 1) its.push(level[0].reader.iterator());
      else if (level.length > 1) its.push(levelIterator(level.map((t) => ({ largest: t.meta.largest, iterator: () => t.reader.iterator() }))));
    }
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

/** About `count` user keys of `mem`, evenly spaced, ascending. */
function sampleKeys(mem: Memtable, count: number): Buffer[] {
  const every = Math.max(1, Math.floor(mem.entries / count));
  const out: Buffer[] = [];
  const it = mem.iterator();
  let i = 0;
  for (it.first(); it.valid; it.next(), i++) {
    if (i % every === 0) out.push(Buffer.from(it.key.subarray(0, it.key.length - TRAILER_BYTES)));
  }
  return out;
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

