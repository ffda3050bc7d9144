/**
 * What the LTC's engine asks of its logs (one per memtable) and of its MANIFEST: the
 * contracts LogC's stores keep (on StoCs, in StoC memory, none) and the local-directory
 * stores (ltc/local-store.ts) too.
 */

/** An append-only log of records (a memtable's log, or the MANIFEST). */
export interface LogWriter {
  /**
   * Appends records, in order; resolves once they reached the log's store (a process crash
   * cannot lose them). With `sync`, only once they, and all before them, are durable.
   * Calls may overlap (the engine pipelines commit rounds); they apply in call order.
   */
  append(records: readonly Buffer[], sync: boolean): Promise<void>;
  close(): Promise<void>;
  /**
   * Whether it lost replicas that a new file would have again (StoCs enough answer): the
   * engine then moves its MANIFEST, or the memtable's writes, to a new one. Undefined: a store
   * without replicas.
   */
  readonly degraded?: boolean;
  /** Replicas it writes to (undefined: a store without replicas). */
  readonly replicaCount?: number;
  /**
   * Whether a replica is on a StoC that new logs would not go to now (failed, leaving), or its
   * connection there was lost (a restart ends its handle). A log not yet written learns of a
   * lost replica only from this: a log made ahead is not taken then.
   */
  readonly misplaced?: boolean;
}

/** Where a range's memtable logs live: one log per memtable, named by its file number. */
export interface LogStore {
  /** Creates a new, empty log for memtable `file` (it exists once this resolves). */
  create(file: number): Promise<LogWriter>;
  /** The bytes of log `file` (from its best replica), or undefined if it does not exist. */
  read(file: number): Promise<Buffer | undefined>;
  remove(file: number): Promise<void>;
  /** Logs present, owned by a memtable or not. */
  list(): Promise<number[]>;
  /** How messages name log `file` (a path; StoC file names). */
  describe(file: number): string;
  /**
   * Whether a log may be made ahead of the memtable switch that takes it (make-room.ts
   * prepareSpareLog): not where an empty log holds StoC memory.
   */
  readonly makeAhead: boolean;
}

/**
 * Where a range's MANIFEST lives (doc/format/manifest.md): the live one, read when the engine
 * opens, and the one each open starts with a snapshot of the whole tree.
 */
export interface ManifestStore {
  /** The live MANIFEST's bytes and its name for messages; undefined for a new range. */
  readCurrent(): Promise<{ name: string; bytes: Buffer } | undefined>;
  /** Creates MANIFEST `file`, empty; edits go through the writer, synced. */
  create(file: number): Promise<LogWriter>;
  /**
   * Makes MANIFEST `file` the live one, atomically, then deletes the others.
   * REQUIRES: its first edit (the whole tree) is durable.
   */
  install(file: number): Promise<void>;
  /** Replicas a new MANIFEST can have now (its R, or fewer places that take new files), if it has replicas. */
  placeableReplicas?(): number;
}

/** A MANIFEST left in an LTC's directory before MANIFESTs moved to StoCs: read once, then removed. */
export interface LegacyManifest {
  readCurrent(): Promise<{ name: string; bytes: Buffer } | undefined>;
  removeAll(): void;
}
