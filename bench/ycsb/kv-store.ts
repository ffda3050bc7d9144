/**
 * What the runner drives (KvStore), how an engine opens one (EngineAdapter), and the loading
 * of an optional package a peer engine comes from.
 */
import type { ActionOutcome, ScheduledAction } from './schedule.js';
import type { NamedProcess } from './peak-memory.js';

export interface KvStore {
  put(key: Buffer, value: Buffer): Promise<void>;
  get(key: Buffer): Promise<Buffer | undefined>;
  /** Up to `count` entries with key >= start, in key order. */
  scan(start: Buffer, count: number): Promise<Array<[Buffer, Buffer]>>;
  /** Writes many entries at once (the load phase): `loadBatch` of them, keys ascending. */
  putMany(entries: Array<[Buffer, Buffer]>): Promise<void>;
  /** Entries per putMany in the load (default 1000): a store whose bulk path wants larger runs says so. */
  loadBatch?: number;
  /** Compacts what the load left, so runs start from a settled tree; says what it did. */
  settle(): Promise<string>;
  /** What the store measured about itself, for the report (optional). */
  report?(): Promise<string>;
  /**
   * Called as a run starts; what it returns, called as the run ends, says in a phrase what the
   * store did during that run (its own counters' differences), for the run's result (optional).
   */
  watchRun?(): Promise<() => Promise<string>>;
  /**
   * The processes whose disk writes are the store's (their /proc/PID/io is read around each
   * phase). Default: this process, where in-process engines run.
   */
  processes?(): number[];
  /** The same processes named for the report (their peak memory is read around each run); default: this process, named for the engine. */
  namedProcesses?(): NamedProcess[];
  /** With a Gemini cache: its lookups and hits so far, in all and per instance (the client's counters). */
  cacheCounters?(): CacheCounters;
  /** With a Gemini cache: entries its instances discarded so far (their configuration id below their fragment's floor). */
  cacheDiscarded?(): Promise<number>;
  /** Carries out a cluster action of a run's schedule (schedule.ts); only a cluster can. */
  act?(action: ScheduledAction): Promise<ActionOutcome>;
  close(): Promise<void>;
}

/** Records per putMany for a store that loads through ingested tables: about a 16 MiB memtable's worth of 1 KiB values. */
export const INGEST_LOAD_BATCH = 8192;

export interface CacheCounters {
  gets: number;
  hits: number;
  byInstance: Record<number, { gets: number; hits: number }>;
}

export interface StoreOptions {
  /** Make each write durable before acknowledging it. */
  sync: boolean;
  /** Records loaded: the cluster cuts its ranges evenly over this key space. */
  records?: number;
  cluster?: ClusterBenchOptions;
  /** Settings from the engine's name (`nova:flag=value:...`), for an engine that takes them. */
  settings?: Array<[string, string]>;
}

/** How the `nova` engine finds or starts its cluster. */
export interface ClusterBenchOptions {
  /** Use this running cluster; otherwise one is started in the engine's directory and stopped after. */
  coordinator?: string;
  /** The running cluster's secret file (default: NOVA_SECRET_FILE, if set). */
  secretFile?: string;
  ltcs?: number;
  stocs?: number;
  ranges?: number;
  /** LogC mode of the cluster it starts (default: the cluster's default, disk). */
  logMode?: string;
  /** Where the cluster it starts runs compaction merges (default: the cluster's, stoc). */
  compaction?: string;
  /** Read and write through a Gemini cache of this mode (the cluster's --cache-mode; an engine's cache-mode setting wins); none or absent: no cache. */
  cache?: string;
  /** Cache instances the cluster it starts runs (default 3), and each one's memory. */
  cacheInstances?: number;
  cacheMemoryBytes?: number;
  /** `nova up --cap` for the cluster it starts, applied once it is loaded and settled: the runs are capped, the load is not. */
  cap?: string;
}

export interface EngineAdapter {
  name: string;
  /** What it is, for reports. */
  describe: string;
  /** undefined when usable; otherwise why not (e.g. the package is not installed). */
  available(): Promise<string | undefined>;
  /** The settings its name may carry (`name:flag=value`), each checked before a run; none if absent. */
  checkSetting?(flag: string, value: string): string | undefined;
  open(dir: string, o: StoreOptions): Promise<KvStore>;
}

/** Dynamic import of an optional package; undefined when it is not installed or fails to load. */
export async function optional<T>(name: string): Promise<{ mod?: T; error?: string }> {
  try {
    return { mod: (await import(name)) as T };
  } catch (err) {
    return { error: `${name} is not installed or failed to load (${(err as Error).message.split('\n')[0]}); run npm install ${name}` };
  }
}
