/**
 * The stores the runner drives, behind one small interface. `nova-embedded` is Nova's
 * one-range engine in-process; the peers are the stores a user would pick instead, loaded
 * from optional dependencies: a missing one is reported by `available()`, never a crash.
 *
 * Every adapter gets the same treatment: Buffer keys and values, the same `sync` setting,
 * scans that return `count` entries from `start`, batched loads, and `settle()` after the
 * load (a full compaction, as a fair operator would run; LMDB has none to run).
 */
import { Engine } from '../../src/ltc/engine.js';
import { NovaClient } from '../../src/client/nova-client.js';
import { NOVA_BIN, down, up } from '../../src/control/cluster-control.js';
import { rangeOf } from '../../src/cluster/config.js';

export interface KvStore {
  put(key: Buffer, value: Buffer): Promise<void>;
  get(key: Buffer): Promise<Buffer | undefined>;
  /** Up to `count` entries with key >= start, in key order. */
  scan(start: Buffer, count: number): Promise<Array<[Buffer, Buffer]>>;
  /** Writes many entries at once (the load phase). */
  putMany(entries: Array<[Buffer, Buffer]>): Promise<void>;
  /** Compacts what the load left, so runs start from a settled tree; says what it did. */
  settle(): Promise<string>;
  /** What the store measured about itself, for the report (optional). */
  report?(): Promise<string>;
  /**
   * The processes whose disk writes are the store's (their /proc/PID/io is read around each
   * phase). Default: this process, where in-process engines run.
   */
  processes?(): number[];
  close(): Promise<void>;
}

export interface StoreOptions {
  /** Make each write durable before acknowledging it. */
  sync: boolean;
  /** Records loaded: the cluster cuts its ranges evenly over this key space. */
  records?: number;
  cluster?: ClusterBenchOptions;
}

/** How the `nova` engine finds or starts its cluster. */
export interface ClusterBenchOptions {
  /** Use this running cluster; otherwise one is started in the engine's directory and stopped after. */
  coordinator?: string;
  ltcs?: number;
  stocs?: number;
  ranges?: number;
  /** LogC mode of the cluster it starts (default: the cluster's default, disk). */
  logMode?: string;
  /** Where the cluster it starts runs compaction merges (default: the cluster's, stoc). */
  compaction?: string;
}

export interface EngineAdapter {
  name: string;
  /** What it is, for reports. */
  describe: string;
  /** undefined when usable; otherwise why not (e.g. the package is not installed). */
  available(): Promise<string | undefined>;
  open(dir: string, o: StoreOptions): Promise<KvStore>;
}

/** Dynamic import of an optional package; undefined when it is not installed or fails to load. */
async function optional<T>(name: string): Promise<{ mod?: T; error?: string }> {
  try {
    return { mod: (await import(name)) as T };
  } catch (err) {
    return { error: `${name} is not installed or failed to load (${(err as Error).message.split('\n')[0]}); run npm install ${name}` };
  }
}

const novaEmbedded: EngineAdapter = {
  name: 'nova-embedded',
  describe: 'Nova\'s one-range engine, in-process (src/ltc/engine.ts)',
  available: async () => undefined,
  async open(dir, o) {
    const db = await Engine.open(dir, { sync: o.sync });
    return {
      put: (k, v) => db.put(k, v),
      get: (k) => db.get(k),
      scan: (start, count) => db.scan(start, { limit: count }),
      putMany: (entries) => {
        const b = db.newBatch();
        for (const [k, v] of entries) b.put(k, v);
        return db.write(b);
      },
      settle: async () => {
        await db.compactAll();
        return 'memtables flushed and the whole tree compacted into its deepest level';
      },
      close: () => db.close(),
    };
  },
};

const nova: EngineAdapter = {
  name: 'nova',
  describe: 'a Nova cluster through NovaClient (started in the run\'s directory: 1 LTC, 3 StoCs by default)',
  available: async () => undefined,
  async open(dir, o) {
    const c = o.cluster ?? {};
    if (!c.coordinator) {
      const args = ['--ranges', String(c.ranges ?? 1), '--bench-records', String(o.records ?? 1_000_000)];
      if (o.sync) args.push('--sync');
      if (c.logMode) args.push('--log-mode', c.logMode);
      if (c.compaction) args.push('--compaction', c.compaction);
      await up({ dir, ltcs: c.ltcs ?? 1, stocs: c.stocs ?? 3, host: '127.0.0.1', bin: NOVA_BIN, coordinatorArgs: args });
    }
    const client = await NovaClient.connect(c.coordinator ? { coordinator: c.coordinator } : { dir });
    return {
      put: (k, v) => client.put(k, v),
      get: (k) => client.get(k),
      scan: (start, count) => client.scan(start, { limit: count }),
      putMany: async (entries) => {
        // A batch is atomic within a range: cut the load's batches at range boundaries.
        const byRange = new Map<number, ReturnType<NovaClient['batch']>>();
        for (const [k, v] of entries) {
          const r = rangeOf(client.configuration, k).id;
          let b = byRange.get(r);
          if (!b) byRange.set(r, b = client.batch());
          b.put(k, v);
        }
        await Promise.all([...byRange.values()].map((b) => client.write(b)));
      },
      settle: async () => {
        await client.compact();
        return 'memtables flushed and every range compacted into its deepest level';
      },
      report: async () => {
        const rows = (await client.stats()) as Array<{ range: number; flushes: number; compactions: number; offloadedCompactions: number; idleCompactions?: number; tablesToStocs: number; bytesToStocs: number; msToStocs: number; stalls: number; l0Stalls?: number; stallMs: number }>;
        return rows.map((r) => `range ${r.range}: ${r.flushes} flushes, ${r.compactions} compactions (${r.offloadedCompactions} on StoCs, ${r.idleCompactions ?? 0} of L0 begun when writes paused); ` +
          `${r.tablesToStocs} SSTables from the LTC to StoCs (${(r.bytesToStocs / 2 ** 20).toFixed(1)} MiB), ` +
          `transport ${r.tablesToStocs ? (r.msToStocs / r.tablesToStocs).toFixed(1) : '-'} ms per SSTable; ${r.stalls} write stalls (${Math.round(r.stallMs)} ms; ${r.l0Stalls ?? 0} on L0, the rest on a flush)`).join('; ');
      },
      // The LTCs and StoCs (the coordinator writes only its small config file). A member on
      // another machine has no /proc entry here, and then no figure is reported.
      processes: () => client.configuration.members.map((m) => m.pid),
      close: async () => {
        client.close();
        if (!c.coordinator) await down(dir);
      },
    };
  },
};

// ---- LevelDB: classic-level (abstract-level API) ----

interface LevelIterator {
  all(): Promise<Array<[Buffer, Buffer]>>;
}
interface AbstractLevelDb {
  open(): Promise<void>;
  close(): Promise<void>;
  put(k: Buffer, v: Buffer, o?: { sync?: boolean }): Promise<void>;
  get(k: Buffer): Promise<Buffer | undefined>;
  batch(ops: Array<{ type: 'put'; key: Buffer; value: Buffer }>, o?: { sync?: boolean }): Promise<void>;
  iterator(o: { gte: Buffer; limit: number }): LevelIterator;
  compactRange?(start: Buffer, end: Buffer): Promise<void>;
}
type LevelCtor = new (dir: string, o: Record<string, unknown>) => AbstractLevelDb;

function abstractLevelStore(db: AbstractLevelDb, o: StoreOptions, putNeedsBatch: boolean): KvStore {
  const wo = { sync: o.sync };
  return {
    // @nxtedition/rocksdb's put ignores `sync`: a one-entry batch honours it.
    put: putNeedsBatch && o.sync ? (k, v) => db.batch([{ type: 'put', key: k, value: v }], wo) : (k, v) => db.put(k, v, wo),
    get: async (k) => (await db.get(k)) ?? undefined,
    scan: (start, count) => db.iterator({ gte: start, limit: count }).all(),
    putMany: (entries) => db.batch(entries.map(([key, value]) => ({ type: 'put' as const, key, value })), wo),
    settle: async () => {
      if (!db.compactRange) return 'left as loaded: this binding has no manual compaction';
      await db.compactRange(Buffer.from('\x00'), Buffer.from('\xff\xff\xff\xff', 'latin1'));
      return 'compactRange over every key';
    },
    close: () => db.close(),
  };
}

/** An adapter for a store with the abstract-level API, exported as `ctor` by `pkg`. */
function abstractLevelAdapter(name: string, describe: string, pkg: string, ctor: string, putNeedsBatch: boolean): EngineAdapter {
  return {
    name,
    describe,
    available: async () => (await optional(pkg)).error,
    async open(dir, o) {
      const { mod, error } = await optional<Record<string, LevelCtor>>(pkg);
      if (!mod) throw new Error(error);
      const db = new mod[ctor](dir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
      await db.open();
      return abstractLevelStore(db, o, putNeedsBatch);
    },
  };
}

const leveldb = abstractLevelAdapter('leveldb', 'LevelDB through classic-level', 'classic-level', 'ClassicLevel', false);
const rocksdb9 = abstractLevelAdapter('rocksdb9', 'RocksDB 9 through @nxtedition/rocksdb', '@nxtedition/rocksdb', 'RocksLevel', true);

// ---- RocksDB 6: rocksdb (leveldown callback API) ----

type Cb<T = void> = (err: Error | null | undefined, v?: T) => void;
interface DownIterator {
  next(cb: (err: Error | null | undefined, k?: Buffer, v?: Buffer) => void): void;
  end(cb: Cb): void;
}
interface LevelDown {
  open(o: Record<string, unknown>, cb: Cb): void;
  close(cb: Cb): void;
  put(k: Buffer, v: Buffer, o: { sync: boolean }, cb: Cb): void;
  get(k: Buffer, o: { asBuffer: boolean; fillCache?: boolean }, cb: Cb<Buffer>): void;
  batch(ops: Array<{ type: 'put'; key: Buffer; value: Buffer }>, o: { sync: boolean }, cb: Cb): void;
  iterator(o: Record<string, unknown>): DownIterator;
  compactRange(start: Buffer, end: Buffer, cb: Cb): void;
}

function call<T = void>(f: (cb: Cb<T>) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => f((err, v) => (err ? reject(err) : resolve(v as T))));
}

const rocksdb6: EngineAdapter = {
  name: 'rocksdb6',
  describe: 'RocksDB 6 through rocksdb (leveldown)',
  available: async () => (await optional('rocksdb')).error,
  async open(dir, o) {
    const { mod, error } = await optional<{ default: (dir: string) => LevelDown }>('rocksdb');
    if (!mod) throw new Error(error);
    const db = mod.default(dir);
    await call((cb) => db.open({ createIfMissing: true }, cb));
    const wo = { sync: o.sync };
    return {
      put: (k, v) => call((cb) => db.put(k, v, wo, cb)),
      get: (k) => new Promise<Buffer | undefined>((resolve, reject) => db.get(k, { asBuffer: true }, (err, v) => {
        if (err) {
          if (/NotFound/i.test(err.message)) resolve(undefined);
          else reject(err);
        } else {
          resolve(v);
        }
      })),
      scan: (start, count) => new Promise((resolve, reject) => {
        const it = db.iterator({ gte: start, limit: count, keyAsBuffer: true, valueAsBuffer: true });
        const out: Array<[Buffer, Buffer]> = [];
        const step = (): void => it.next((err, k, v) => {
          if (err) return it.end(() => reject(err));
          if (k === undefined) return it.end((e) => (e ? reject(e) : resolve(out)));
          out.push([k, v!]);
          step();
        });
        step();
      }),
      putMany: (entries) => call((cb) => db.batch(entries.map(([key, value]) => ({ type: 'put' as const, key, value })), wo, cb)),
      settle: async () => {
        await call((cb) => db.compactRange(Buffer.from('\x00'), Buffer.from('\xff\xff\xff\xff', 'latin1'), cb));
        return 'compactRange over every key';
      },
      close: () => call((cb) => db.close(cb)),
    };
  },
};

// ---- LMDB: lmdb ----

interface LmdbDb {
  put(k: Buffer, v: Buffer): Promise<boolean>;
  get(k: Buffer): Buffer | undefined;
  getRange(o: { start: Buffer; limit: number }): Iterable<{ key: Buffer; value: Buffer }>;
  transaction<T>(fn: () => T): Promise<T>;
  putSync(k: Buffer, v: Buffer): boolean;
  close(): Promise<void>;
}

const lmdb: EngineAdapter = {
  name: 'lmdb',
  describe: 'LMDB through lmdb (lmdb-js)',
  available: async () => (await optional('lmdb')).error,
  async open(dir, o) {
    const { mod, error } = await optional<{ open: (o: Record<string, unknown>) => LmdbDb }>('lmdb');
    if (!mod) throw new Error(error);
    // lmdb-js commits writes in batched transactions; noSync drops the fsync of each commit.
    const db = mod.open({ path: dir, keyEncoding: 'binary', encoding: 'binary', noSync: !o.sync, compression: false });
    return {
      put: async (k, v) => { await db.put(k, v); },
      get: async (k) => db.get(k),
      scan: async (start, count) => {
        const out: Array<[Buffer, Buffer]> = [];
        for (const { key, value } of db.getRange({ start, limit: count })) out.push([key, value]);
        return out;
      },
      putMany: async (entries) => {
        await db.transaction(() => { for (const [k, v] of entries) db.putSync(k, v); });
      },
      settle: async () => 'nothing to compact (a B+tree)',
      close: () => db.close(),
    };
  },
};

export const ENGINES: readonly EngineAdapter[] = [nova, novaEmbedded, leveldb, rocksdb6, rocksdb9, lmdb];

export function engineByName(name: string): EngineAdapter {
  const e = ENGINES.find((x) => x.name === name);
  if (!e) throw new Error(`unknown engine "${name}": use one of ${ENGINES.map((x) => x.name).join(', ')}`);
  return e;
}
