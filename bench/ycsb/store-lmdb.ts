/** LMDB through the `lmdb` package: a B+tree in a memory map. */
import type { EngineAdapter } from './kv-store.js';
import { optional } from './kv-store.js';

interface LmdbDb {
  put(k: Buffer, v: Buffer): Promise<boolean>;
  get(k: Buffer): Buffer | undefined;
  getRange(o: { start: Buffer; limit: number }): Iterable<{ key: Buffer; value: Buffer }>;
  transaction<T>(fn: () => T): Promise<T>;
  putSync(k: Buffer, v: Buffer): boolean;
  close(): Promise<void>;
}

export const lmdb: EngineAdapter = {
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
