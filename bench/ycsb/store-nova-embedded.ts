/** `nova-embedded`: Nova's one-range engine in this process. */
import { Engine } from '../../src/ltc/engine.js';
import type { EngineAdapter } from './kv-store.js';

export const novaEmbedded: EngineAdapter = {
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
