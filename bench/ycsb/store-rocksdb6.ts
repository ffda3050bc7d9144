/** RocksDB 6 through the `rocksdb` package (leveldown's callback API). */
import type { EngineAdapter } from './kv-store.js';
import { optional } from './kv-store.js';

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

export const rocksdb6: EngineAdapter = {
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
