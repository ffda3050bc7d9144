/**
 * What an engine runs on (EngineEnv): where its tables live (BlockStore), its logs and MANIFEST
 * (LogC's contracts, logc/log-store.ts), and where compactions run (Compactor). The cluster
 * puts tables on StoCs, logs on LogC, and runs compactions on StoCs (stoc-compactor.ts); a
 * lone engine keeps them in its directory (local-store.ts).
 */
import { NovaError } from '../common/errors.js';
import type { LogStore, ManifestStore } from '../logc/log-store.js';
import type { Fragment, TableMeta } from '../log/version-edit.js';

export interface EngineEnv {
  /** SSTables. */
  store: BlockStore;
  /** Memtable logs. */
  logs: LogStore;
  /** The MANIFEST. */
  manifests: ManifestStore;
  /** Where compactions run (StoCs); without one, or when it declines a job, the engine merges. */
  compactor?: Compactor;
  /**
   * Why the engine may not acknowledge writes now, if it may not (its LTC's lease lapsed: the
   * range may already be another LTC's). Asked once per commit round, after its log append.
   */
  mayAcknowledge?: () => Error | undefined;
  /**
   * Whether a place of table fragments is gone for good (a StoC removed as dead): a table with
   * a piece that had its every copy there cannot be read again, and leaves the tree with a
   * warning naming it; a table with other copies is stored again (evacuation.ts).
   */
  isLost?: (stoc: number) => boolean;
}

/**
 * A table that no place could take now: every StoC that would is out of disk space or its disk
 * fails writes. Not a failure of the engine: flushes and compactions wait and try again, and
 * writes that must wait for a flush are refused with this error, which names the cause.
 */
export class NoRoom extends NovaError {
  constructor(why: string) {
    super('UNAVAILABLE', why);
  }
}

/** What BlockStore.repairTable did: the table's new places, or nothing to do now, or store it anew. */
export type RepairResult = { fragments: Fragment[]; written: number; bytes: number } | 'rewrite' | undefined;

/** Where a range's SSTables live. */
export interface BlockStore {
  /**
   * Stores a whole table durably; returns where its bytes are. `background`: a compaction's
   * output, which no write waits for: stored after what writes wait for (sync-gate.ts).
   */
  writeTable(file: number, bytes: Buffer, background?: boolean): Promise<Fragment[]>;
  /** `salvage`: a piece every copy of which is damaged comes back as read, not as CORRUPTION (nova repair). */
  readTable(file: number, fragments: Fragment[], salvage?: boolean): Promise<Buffer>;
  /**
   * `length` bytes of the table from `offset` (a block, or its metadata), when the store can
   * read part of a table; an engine with a block cache then holds its tables' metadata, and
   * their blocks only as its cache has room for them. `check` throwing CORRUPTION on the bytes
   * read sends the read to another copy, if the store keeps copies.
   */
  readRange?(file: number, fragments: Fragment[], offset: number, length: number, check?: (bytes: Buffer) => void): Promise<Buffer>;
  deleteTable(file: number): Promise<void>;
  /**
   * Whether the table has copies to make again (repair.ts): on a place that left, found
   * damaged, or fewer than the store keeps. Only a store that keeps copies has it.
   */
  needsRepair?(file: number, fragments: readonly Fragment[]): boolean;
  /**
   * Makes the table's copies whole from its bytes (`read`: the table, from good copies, asked
   * for only if there is work it can do now): the new list of its fragments and how many copies
   * it wrote, or undefined if it could do nothing now (no place to put a copy). Copies on the
   * StoCs of `away` (leaving the cluster) are dropped and made again elsewhere; UNAVAILABLE if a
   * piece would be left with none. 'rewrite' when the copies cannot all be placed as the table
   * is cut (fewer StoCs than its pieces and copies need): it must be stored anew.
   */
  repairTable?(file: number, fragments: readonly Fragment[], read: () => Promise<Buffer>, away?: ReadonlySet<number>): Promise<RepairResult>;
  /** Removes the table's copy on StoC `stoc` (one it no longer keeps there), if that StoC answers. */
  removeCopy?(file: number, stoc: number): Promise<void>;
  /** Reads each copy of the table and checks it against its checksum; marks damaged ones for repair. Returns the bytes read. */
  scrubTable?(file: number, fragments: readonly Fragment[]): Promise<number>;
  /** Tables present in the store, referenced or not (so a clean open can drop orphans). */
  listTables(): Promise<number[]>;
}

/** A compaction's merge as the engine hands it to a Compactor. */
export interface CompactionRequest {
  /** Input tables, with where their bytes live. */
  inputs: TableMeta[];
  /** Versions above this sequence are kept as they are (merge-rule.ts MergeRule). */
  smallestSnapshot: number;
  /** Key spans of the tables deeper than the output level (tombstones may go where none overlaps). */
  deeper: Array<{ smallest: Buffer; largest: Buffer }>;
  /** Cut an output once it reaches this many bytes, at the next user key. */
  targetBytes: number;
  /** User keys no output spans, ascending (the range's Drange bounds). */
  cuts: Buffer[];
  /** Output n is table firstFile + n; numbers the engine reserved in its MANIFEST. */
  firstFile: number;
  maxFiles: number;
}

/** Where outputs of a merge run elsewhere went: a table's metadata without its level. */
export type CompactedTable = Omit<TableMeta, 'level'>;

/** Runs compactions away from the engine (on StoCs). */
export interface Compactor {
  /**
   * Merges the inputs and stores the outputs durably in the BlockStore's places; resolves
   * with the outputs in key order, or undefined if the job could not run elsewhere (the
   * engine then merges it itself). Rejects only for faults a retry would not mend (corruption).
   */
  compact(job: CompactionRequest): Promise<CompactedTable[] | undefined>;
}
