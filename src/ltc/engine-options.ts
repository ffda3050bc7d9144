/**
 * What a caller gives the engine (EngineOptions, per write and per read) and the settings it
 * runs with once defaults are filled in and values checked (resolveOptions).
 */
import { NovaError } from '../common/errors.js';
import { MAX_ACTIVE_MEMTABLES } from '../log/version-edit.js';
import { DEFAULT_LIMITS, type Limits } from '../log/write-batch.js';
import type { SessionRef } from '../common/write-id.js';
import { mergeWorkerAvailable } from '../compaction/worker-pool.js';
import { DEFAULT_SETTINGS, type LtcVariant } from '../cluster/config.js';
import type { EngineEnv } from './engine-env.js';

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
   * L0 tables from which writes are slowed to a rate each flush and compaction adjusts
   * (write-delay.ts; absent or 0: 2 × l0Trigger, at most l0StopTrigger; equal to it: no slowdown).
   */
  l0SlowdownTrigger?: number;
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
   * With a block cache: an open reads only its tables' metadata, and this long after it begins
   * to cache them whole, slowly, while the cache has room (default 10 000). Soon after an open
   * the LTC may be opening other ranges (a rebalance moves several in a row): whole-table reads
   * then would slow those opens.
   */
  warmAfterMs?: number;
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
   * Bytes of data blocks kept in a block cache (default 0: none; memoryBudgetBytes, when set,
   * sizes the cache instead). With a cache, and a store that reads parts of tables (StoCs), the
   * engine holds only each table's metadata (filter, index) and loads data blocks as reads need
   * them; without, it holds every table whole.
   */
  blockCacheBytes?: number;
  /**
   * Compaction jobs run at once (the knob compactionJobs): jobs that share no table (picker.ts
   * pickCompactions), so L0 cut at the gaps between Dranges merges in parallel.
   */
  compactionJobs?: number;
  /**
   * The engine's memory budget (default 0: none): its memtables (δ × τ reserved), lookup
   * index and tables' filters and indexes count against it, and data blocks are cached in
   * what is left (tables held as metadata, as with blockCacheBytes, which it replaces). Needs a
   * store that reads parts of tables (StoCs); the cluster gives each range its LTC's
   * ltcMemoryBytes divided among the ranges it serves.
   */
  memoryBudgetBytes?: number;
  /**
   * An immutable memtable of one Drange with fewer unique keys than this is merged with the
   * Drange's other immutable ones into a new memtable and log instead of flushed (the knob
   * mergeUnderKeys; 0: never).
   */
  mergeUnderKeys?: number;
  /** Memory of the lookup index (lookup-index.ts; the knob lookupIndexBytes; 0: none). */
  lookupIndexBytes?: number;
  /**
   * Check every answer of the lookup index and the range index against a full search, and
   * fail the read (CORRUPTION) on a difference (tests; default off).
   */
  checkIndexes?: boolean;
  /**
   * nova, or an ablation (the knob ltcVariant): nova-s turns off reorganization, merge instead
   * of flush and both indexes; nova-r too, and has one Drange whose α active memtables take writes in turn.
   */
  ltcVariant?: LtcVariant;
  /** Scans merge only the sources of each Drange's interval (read-path.ts scanInto; the knob rangeIndex). */
  rangeIndex?: boolean;
  /** Minor and major reorganizations of the Dranges (reorganization.ts; the knob reorganization). */
  reorganization?: boolean;
  /** γ: Tranges per Drange, the unit of a minor reorganization (the knob trangesPerDrange). */
  trangesPerDrange?: number;
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

/** EngineOptions with every default filled in. */
export type Settings = Required<Omit<EngineOptions, 'onWarning' | 'onNote' | 'env'>> & Pick<EngineOptions, 'onWarning' | 'onNote'>;

/** Fills in `options`' defaults and checks every value: BAD_ARGUMENT naming the first that is wrong. */
export function resolveOptions(options: EngineOptions): Settings {
  const d = DEFAULT_SETTINGS; // the knobs the engine shares with the cluster (cluster/knobs.ts)
  const active = options.activeMemtables ?? d.activeMemtables;
  const memtableBytes = options.memtableBytes ?? d.memtableBytes;
  const l0Trigger = options.l0Trigger ?? d.l0Trigger;
  const l0StopTrigger = options.l0StopTrigger ?? 3 * l0Trigger;
  const o: Settings = {
    memtableBytes,
    activeMemtables: active,
    maxMemtables: options.maxMemtables ?? 2 * active,
    sync: options.sync ?? true, // one copy: see doc/decisions/sync-policy.md
    l0Trigger,
    l0ScanTrigger: Math.min(options.l0ScanTrigger ?? d.l0ScanTrigger, l0Trigger),
    l0StopTrigger,
    l0SlowdownTrigger: options.l0SlowdownTrigger || Math.min(2 * l0Trigger, l0StopTrigger),
    idleCompactionMs: options.idleCompactionMs ?? d.idleCompactionMs,
    warmAfterMs: options.warmAfterMs ?? 10_000,
    sessionTimeoutMs: options.sessionTimeoutMs ?? d.sessionTimeoutMs,
    maxManifestBytes: options.maxManifestBytes ?? 16 * 1024 * 1024,
    l1Bytes: options.l1Bytes ?? 10 * memtableBytes,
    limits: options.limits ?? DEFAULT_LIMITS,
    onWarning: options.onWarning,
    onNote: options.onNote,
    mergeInWorker: options.mergeInWorker ?? mergeWorkerAvailable(),
    blockCacheBytes: options.blockCacheBytes ?? 0,
    compactionJobs: options.compactionJobs ?? d.compactionJobs,
    memoryBudgetBytes: options.memoryBudgetBytes ?? 0,
    trangesPerDrange: options.trangesPerDrange ?? d.trangesPerDrange,
    mergeUnderKeys: options.mergeUnderKeys ?? d.mergeUnderKeys,
    lookupIndexBytes: options.lookupIndexBytes ?? d.lookupIndexBytes,
    checkIndexes: options.checkIndexes ?? false,
    rangeIndex: options.rangeIndex ?? d.rangeIndex,
    reorganization: options.reorganization ?? d.reorganization,
    ltcVariant: options.ltcVariant ?? d.ltcVariant,
  };
  if (!(Number.isInteger(memtableBytes) && memtableBytes >= 1024)) throw new NovaError('BAD_ARGUMENT', `memtableBytes (τ) must be an integer >= 1024, not ${memtableBytes}`);
  // The MANIFEST bounds what it states of active memtables: a tree it cannot read is never written.
  if (!(Number.isInteger(active) && active >= 1 && active <= MAX_ACTIVE_MEMTABLES)) throw new NovaError('BAD_ARGUMENT', `activeMemtables (α) must be an integer from 1 to ${MAX_ACTIVE_MEMTABLES}, not ${active}`);
  if (!(Number.isInteger(o.maxMemtables) && o.maxMemtables > active)) {
    throw new NovaError('BAD_ARGUMENT', `maxMemtables (δ) must be an integer > activeMemtables (α = ${active}), not ${o.maxMemtables}`);
  }
  if (!(Number.isInteger(o.l0Trigger) && o.l0Trigger >= 1)) throw new NovaError('BAD_ARGUMENT', `l0Trigger must be an integer >= 1, not ${o.l0Trigger}`);
  if (!(Number.isInteger(o.l0ScanTrigger) && o.l0ScanTrigger >= 1)) throw new NovaError('BAD_ARGUMENT', `l0ScanTrigger must be an integer >= 1, not ${o.l0ScanTrigger}`);
  if (!(Number.isInteger(o.idleCompactionMs) && o.idleCompactionMs >= 0)) throw new NovaError('BAD_ARGUMENT', `idleCompactionMs must be an integer >= 0, not ${o.idleCompactionMs}`);
  if (!(Number.isInteger(o.warmAfterMs) && o.warmAfterMs >= 0)) throw new NovaError('BAD_ARGUMENT', `warmAfterMs must be an integer >= 0, not ${o.warmAfterMs}`);
  if (!(Number.isSafeInteger(o.maxManifestBytes) && o.maxManifestBytes >= 1)) throw new NovaError('BAD_ARGUMENT', `maxManifestBytes must be a positive integer, not ${o.maxManifestBytes}`);
  if (!(Number.isSafeInteger(o.sessionTimeoutMs) && o.sessionTimeoutMs >= 1)) throw new NovaError('BAD_ARGUMENT', `sessionTimeoutMs must be a positive integer, not ${o.sessionTimeoutMs}`);
  if (!(o.l0StopTrigger > o.l0Trigger)) throw new NovaError('BAD_ARGUMENT', `l0StopTrigger (${o.l0StopTrigger}) must exceed l0Trigger (${o.l0Trigger})`);
  if (!(Number.isInteger(o.l0SlowdownTrigger) && o.l0SlowdownTrigger > o.l0Trigger && o.l0SlowdownTrigger <= o.l0StopTrigger)) {
    throw new NovaError('BAD_ARGUMENT', `l0SlowdownTrigger must be an integer above l0Trigger (${o.l0Trigger}) and at most l0StopTrigger (${o.l0StopTrigger}), not ${o.l0SlowdownTrigger}`);
  }
  if (!['nova', 'nova-r', 'nova-s'].includes(o.ltcVariant)) throw new NovaError('BAD_ARGUMENT', `ltcVariant must be nova, nova-r or nova-s, not ${String(o.ltcVariant)}`);
  if (o.ltcVariant !== 'nova') Object.assign(o, { reorganization: false, mergeUnderKeys: 0, lookupIndexBytes: 0, rangeIndex: false });
  if (!(Number.isSafeInteger(o.lookupIndexBytes) && o.lookupIndexBytes >= 0)) throw new NovaError('BAD_ARGUMENT', `lookupIndexBytes must be a non-negative integer, not ${o.lookupIndexBytes}`);
  if (!(Number.isInteger(o.mergeUnderKeys) && o.mergeUnderKeys >= 0)) throw new NovaError('BAD_ARGUMENT', `mergeUnderKeys must be an integer >= 0, not ${o.mergeUnderKeys}`);
  if (!(Number.isInteger(o.trangesPerDrange) && o.trangesPerDrange >= 1)) throw new NovaError('BAD_ARGUMENT', `trangesPerDrange (γ) must be an integer >= 1, not ${o.trangesPerDrange}`);
  if (!(Number.isSafeInteger(o.memoryBudgetBytes) && o.memoryBudgetBytes >= 0)) throw new NovaError('BAD_ARGUMENT', `memoryBudgetBytes must be a non-negative integer, not ${o.memoryBudgetBytes}`);
  if (!(Number.isInteger(o.compactionJobs) && o.compactionJobs >= 1)) throw new NovaError('BAD_ARGUMENT', `compactionJobs must be an integer >= 1, not ${o.compactionJobs}`);
  if (!(Number.isSafeInteger(o.blockCacheBytes) && o.blockCacheBytes >= 0)) throw new NovaError('BAD_ARGUMENT', `blockCacheBytes must be a non-negative integer, not ${o.blockCacheBytes}`);
  return o;
}
