/** `nova-embedded`: Nova's one-range engine in this process. */
import { Engine } from '../../src/ltc/engine.js';
import { INGEST_LOAD_BATCH, type EngineAdapter } from './kv-store.js';

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
      // The bulk path: one ingested table per call, or a batch where the engine refuses it.
      putMany: async (entries) => {
        const r = await db.ingest(entries.map(([k]) => k), entries.map(([, v]) => v));
        if (!('refused' in r)) return;
        const b = db.newBatch();
        for (const [k, v] of entries) b.put(k, v);
        await db.write(b);
      },
      loadBatch: INGEST_LOAD_BATCH,
      settle: async () => {
        await db.compactAll();
        return 'memtables flushed and the whole tree compacted into its deepest level';
      },
      close: () => db.close(),
    };
  },
};
