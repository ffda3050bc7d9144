/** LevelDB (classic-level) and RocksDB 9 (@nxtedition/rocksdb), both abstract-level stores. */
import type { EngineAdapter, KvStore, StoreOptions } from './kv-store.js';
import { optional } from './kv-store.js';

interface LevelIterator {
  all(): Promise<Array<[Buffer, Buffer]>>;
}
interface AbstractLevelDb {
  open(o?: Record<string, unknown>): Promise<void>;
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

/** The settings an abstract-level engine's name may carry: the option each sets, and its help. */
const LEVEL_SETTINGS = {
  'cache-size': { option: 'cacheSize', help: 'cache-size=BYTES (its block cache)' },
  'max-open-files': { option: 'maxOpenFiles', help: 'max-open-files=N' },
} as const;
type LevelSetting = keyof typeof LEVEL_SETTINGS;

/**
 * An adapter for a store with the abstract-level API, exported as `ctor` by `pkg`; its name may carry
 * `settings` (those its binding reads).
 */
function abstractLevelAdapter(name: string, describe: string, pkg: string, ctor: string, putNeedsBatch: boolean, settings: readonly LevelSetting[]): EngineAdapter {
  return {
    name,
    describe,
    available: async () => (await optional(pkg)).error,
    // Its block cache, so a compare can give it the memory another engine has (default 8 MiB), and the
    // tables it keeps open (default 1000), which a large store outgrows.
    checkSetting: (flag, value) => (!(settings as readonly string[]).includes(flag) ? `${name} takes ${settings.map((f) => LEVEL_SETTINGS[f].help).join(' or ')}, not "${flag}"`
      : /^\d+$/.test(value) && Number(value) > 0 && Number(value) < 2 ** 32 ? undefined : `${flag} is a whole number under 2^32, not "${value}"`),
    async open(dir, o) {
      const { mod, error } = await optional<Record<string, LevelCtor>>(pkg);
      if (!mod) throw new Error(error);
      const options: Record<string, unknown> = { keyEncoding: 'buffer', valueEncoding: 'buffer' };
      for (const [flag, value] of o.settings ?? []) options[LEVEL_SETTINGS[flag as LevelSetting].option] = Number(value);
      const db = new mod[ctor](dir, options);
      await db.open(options);
      return abstractLevelStore(db, o, putNeedsBatch);
    },
  };
}

export const leveldb = abstractLevelAdapter('leveldb', 'LevelDB through classic-level', 'classic-level', 'ClassicLevel', false, ['cache-size', 'max-open-files']);
export const rocksdb9 = abstractLevelAdapter('rocksdb9', 'RocksDB 9 through @nxtedition/rocksdb', '@nxtedition/rocksdb', 'RocksLevel', true, ['cache-size']);

// ---- RocksDB 6: rocksdb (leveldown callback API) ----
