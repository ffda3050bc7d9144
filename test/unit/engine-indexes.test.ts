/**
 * The lookup and range indexes in the engine: a get reads one memtable or L0 table at most; a
 * scan reads only its partitions' sources; after a reopen the lookup index is rebuilt from L0.
 * (Their answers are checked against full searches in engine-model.test.ts.)
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-indexes-');
const key = (i: number): Buffer => Buffer.from(`key${String(i).padStart(6, '0')}`);
const value = (i: number, v: number): Buffer => Buffer.from(`v${v}-${i}-`.padEnd(200, '.'));

async function fill(db: Engine, n: number): Promise<void> {
  for (let v = 0; v < 2; v++) for (let i = 0; i < n; i++) await db.put(key((i * 7919) % n), value((i * 7919) % n, v));
}

describe('indexes in the engine', () => {
  for (const on of [true, false]) {
    it(`${on ? 'with' : 'without'} them, gets and scans read ${on ? 'fewer' : 'every'} memtables and L0 tables, and a reopen ${on ? 'rebuilds the lookup index' : 'has none'}`, async () => {
      const dir = tempDir();
      const options = {
        memtableBytes: 16 * 1024, activeMemtables: 4, maxMemtables: 8, l0Trigger: 12, l0StopTrigger: 40, sync: false, idleCompactionMs: 0,
        mergeUnderKeys: 0, lookupIndexBytes: on ? 1 << 20 : 0, rangeIndex: on, checkIndexes: on,
      };
      let db = await Engine.open(dir, options);
      await fill(db, 2000);
      expect(db.stats.tablesPerLevel[0]).toBeGreaterThan(4);
      const before = { ...db.stats };
      for (let i = 0; i < 2000; i += 7) expect((await db.get(key(i)))?.equals(value(i, 1))).toBe(true);
      for (let i = 0; i < 2000; i += 97) expect((await db.scan(key(i), { limit: 10 })).length).toBe(Math.min(10, 2000 - i));
      const s = db.stats;
      const perGet = s.memtablesPerGet + s.l0TablesPerGet;
      if (on) {
        expect(s.lookupHits - before.lookupHits).toBe(Math.ceil(2000 / 7));
        expect(perGet).toBeLessThanOrEqual(1);
        // Four Dranges: a scan of ten rows reads one partition's memtables and L0 tables.
        expect(s.l0TablesPerScan).toBeLessThan(s.tablesPerLevel[0] / 2);
      } else {
        expect(s.lookupHits).toBe(0);
        expect(perGet).toBeGreaterThan(2);
        expect(s.l0TablesPerScan).toBe(s.tablesPerLevel[0]);
      }
      await db.close();
      db = await Engine.open(dir, options);
      expect(db.stats.lookupComplete).toBe(on);
      if (on) expect(db.stats.lookupKeys).toBeGreaterThan(0); // L0's keys (how many reached L1 first depends on timing)
      for (let i = 0; i < 2000; i += 13) expect((await db.get(key(i)))?.equals(value(i, 1))).toBe(true);
      // Complete again after the rebuild: every get is answered by the index (a key it lacks is below L0).
      if (on) expect([db.stats.lookupHits + db.stats.lookupMisses, db.stats.lookupHits > 0]).toEqual([Math.ceil(2000 / 13), true]);
      await db.close();
    });
  }
});
