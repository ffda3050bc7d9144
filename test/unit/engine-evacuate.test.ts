/**
 * An engine taking its tables off a place that leaves (Engine.evacuate, as for `nova stoc
 * remove`): tables there are stored again elsewhere (L0 merged into L1, sorted levels copied)
 * while writes go on, so a reopen that counts the place as lost finds nothing there and every
 * key reads back; a place lost for good drops its tables, named.
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv } from '../../src/ltc/local-store.js';
import type { EngineEnv } from '../../src/ltc/engine-env.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-evacuate-');
const key = (i: number): Buffer => Buffer.from(`key${String(i).padStart(6, '0')}`);
const val = (i: number): Buffer => Buffer.from(`v-${i}-`.padEnd(200, '*'));
const warnings: string[] = [];
const OPTIONS = { memtableBytes: 16 * 1024, l0Trigger: 2, l0StopTrigger: 3, l1Bytes: 64 * 1024, sync: false, mergeInWorker: false, onWarning: (m: string) => warnings.push(m) };

/**
 * The local environment with its tables' fragments labelled with a place (`placeOn`, as a StoC
 * id), like a cluster's; `lost` places are gone for good (EngineEnv.isLost).
 */
function placed(dir: string): { env: EngineEnv; placeOn: number; copyOn?: number; lost: Set<number> } {
  const local = localEnv(dir);
  const control: { env: EngineEnv; placeOn: number; copyOn?: number; lost: Set<number> } = { env: local, placeOn: 1, lost: new Set<number>() };
  const home = (fragments: Array<{ stoc: number; offset: number; size: number }>) => fragments.map((f) => ({ ...f, stoc: 0 }));
  const store = local.store;
  local.store = {
    writeTable: async (file, bytes) => (await store.writeTable(file, bytes)).flatMap((f) => [
      { ...f, stoc: control.placeOn }, ...(control.copyOn === undefined ? [] : [{ ...f, stoc: control.copyOn }])]),
    readTable: (file, fragments) => store.readTable(file, home(fragments)),
    readRange: store.readRange && ((file, fragments, offset, length) => store.readRange!(file, home(fragments), offset, length)),
    deleteTable: (file) => store.deleteTable(file),
    listTables: () => store.listTables(),
  };
  local.isLost = (stoc) => control.lost.has(stoc);
  return control;
}

async function writeAll(e: Engine, from: number, to: number): Promise<void> {
  for (let i = from; i < to; i += 50) {
    const b = e.newBatch();
    for (let j = i; j < Math.min(to, i + 50); j++) b.put(key(j), val(j));
    await e.write(b);
  }
}

describe('evacuation', () => {
  it('takes every table off a place while writes go on; a reopen that counts it lost finds nothing there', async () => {
    const dir = tempDir();
    const p = placed(dir);
    let e = await Engine.open(dir, { ...OPTIONS, env: p.env });
    await writeAll(e, 0, 3000);
    await e.compactAll();
    await writeAll(e, 3000, 3400); // and some in L0
    expect(e.stats.tablesPerLevel.slice(1).some((n) => n > 0)).toBe(true);
    p.placeOn = 2;
    // Writes run throughout, on tiny memtables with an L0 stop trigger of 3: they stall on L0
    // while the evacuation holds the compactions, and must neither fail nor spin.
    const writing = writeAll(e, 3400, 6000);
    const r = await e.evacuate(new Set([1]));
    await writing;
    expect(r.tablesCopied + r.l0Merged).toBeGreaterThan(0);
    expect(r.lost).toEqual([]);
    await e.close();
    p.lost.add(1);
    e = await Engine.open(dir, { ...OPTIONS, env: p.env });
    expect(e.lostTables).toEqual([]);
    for (const i of [0, 1234, 2999, 3000, 3399, 3400, 5999]) expect(await e.get(key(i))).toEqual(val(i));
    expect((await e.scan(key(0), { limit: 10_000 })).length).toBe(6000);
    await e.close();
  });

  it('a place lost for good: its tables leave the tree, named, at once or at the next open', async () => {
    const dir = tempDir();
    const p = placed(dir);
    let e = await Engine.open(dir, { ...OPTIONS, env: p.env });
    await writeAll(e, 0, 2000);
    await e.compactAll();
    p.placeOn = 2;
    await writeAll(e, 2000, 2100);
    await e.flush(); // an L0 table on place 2 survives
    p.lost.add(1);
    const r = await e.evacuate(new Set([1]));
    expect(r.lost.length).toBeGreaterThan(0);
    for (const t of r.lost) expect(t).toMatch(/^table \d+ of level \d+ \(\d+ entries, \d+ bytes, user keys "key\d+" to "key\d+"\)$/);
    expect(warnings.filter((w) => /is lost: StoC 1 held every copy of a fragment of it and was removed as dead/.test(w))).toHaveLength(r.lost.length);
    expect(await e.get(key(10))).toBeUndefined(); // lost
    expect(await e.get(key(2050))).toEqual(val(2050));
    await e.put(key(10), val(10)); // the range serves on
    await e.close();
    e = await Engine.open(dir, { ...OPTIONS, env: p.env });
    expect(e.lostTables).toEqual([]); // gone from the MANIFEST already
    expect(await e.get(key(10))).toEqual(val(10));
    await e.close();
    // One that was never evacuated loses them at its open.
    const dir2 = tempDir();
    const q = placed(dir2);
    e = await Engine.open(dir2, { ...OPTIONS, env: q.env });
    await writeAll(e, 0, 1000);
    await e.flush();
    await e.close();
    q.lost.add(1);
    e = await Engine.open(dir2, { ...OPTIONS, env: q.env });
    expect(e.lostTables.length).toBeGreaterThan(0);
    expect(await e.get(key(5))).toBeUndefined();
    await e.close();
  });

  it('a place lost for good with another copy of each table: nothing is lost, and the tables are stored again off it, now and at the next open', async () => {
    const dir = tempDir();
    const p = placed(dir);
    p.copyOn = 3;
    let e = await Engine.open(dir, { ...OPTIONS, env: p.env });
    await writeAll(e, 0, 2000);
    await e.compactAll();
    await writeAll(e, 2000, 2100);
    await e.flush();
    p.placeOn = 2; // where tables are stored again
    p.lost.add(1);
    const r = await e.evacuate(new Set([1]));
    expect(r.lost).toEqual([]);
    expect(r.tablesCopied + r.l0Merged).toBeGreaterThan(0);
    expect(e.hasTablesOn(1)).toBe(false);
    for (const i of [10, 1500, 2050]) expect(await e.get(key(i))).toEqual(val(i));
    await e.close();
    // Lost while the range was closed: the open keeps the tables; they are still on the lost place until evacuated.
    p.placeOn = 1;
    e = await Engine.open(dir, { ...OPTIONS, env: p.env });
    await writeAll(e, 3000, 3500);
    await e.flush();
    await e.close();
    p.lost.add(1);
    p.placeOn = 2;
    e = await Engine.open(dir, { ...OPTIONS, env: p.env });
    expect(e.lostTables).toEqual([]);
    expect(e.hasTablesOn(1)).toBe(true);
    await e.evacuate(new Set([1]));
    expect(e.hasTablesOn(1)).toBe(false);
    for (const i of [10, 2050, 3100]) expect(await e.get(key(i))).toEqual(val(i));
    await e.close();
  });
});
