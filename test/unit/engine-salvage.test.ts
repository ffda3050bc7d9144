/**
 * A table damaged beyond its copies, in the engine (doc/decisions/salvage.md): the engine
 * opens; reads that need the damage fail with CORRUPTION, the rest are served; a compaction
 * that meets it marks the table damaged and compactions wait instead of the engine failing;
 * `salvage` keeps what reads, reports what was lost, and compactions go on.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { readFooter } from '../../src/sstable/format.js';
import { TableReader } from '../../src/sstable/table-reader.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-salvage-');
const OPTIONS = { memtableBytes: 16 * 1024, maxMemtables: 2, activeMemtables: 1, sync: false, mergeInWorker: false, l0Trigger: 4 };

function k(i: number): Buffer {
  return Buffer.from(`key${String(i).padStart(6, '0')}`);
}
function v(i: number): Buffer {
  return Buffer.from(`value-${i}-`.padEnd(60, 'v'));
}

async function writeTables(e: Engine, from: number, to: number): Promise<void> {
  for (let i = from; i < to; i++) await e.put(k(i), v(i));
  await e.flushMemtables();
}

/** Each key's read: 'ok', 'missing', or the error's code. */
async function reads(e: Engine, n: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    try {
      const got = await e.get(k(i));
      out.push(got === undefined ? 'missing' : got.equals(v(i)) ? 'ok' : 'wrong');
    } catch (err) {
      out.push((err as { code: string }).code);
    }
  }
  return out;
}

function tables(dir: string): string[] {
  return readdirSync(dir).filter((f) => f.endsWith('.sst')).sort().map((f) => join(dir, f));
}

describe('a damaged table without copies', () => {
  it('a damaged data block: the engine serves the rest, a compaction meeting it waits instead of failing, salvage keeps the other blocks', async () => {
    const dir = tempDir();
    const warnings: string[] = [];
    let e = await Engine.open(dir, { ...OPTIONS });
    await writeTables(e, 0, 600);
    await writeTables(e, 600, 1200);
    await e.close();
    const [first] = tables(dir);
    const bytes = readFileSync(first);
    const ends = new TableReader(bytes, first).dataBlockEnds();
    bytes[ends[0] + 20] ^= 0x40; // the second data block
    writeFileSync(first, bytes);

    e = await Engine.open(dir, { ...OPTIONS, onWarning: (w) => warnings.push(w) });
    const before = await reads(e, 1200);
    expect(before.filter((r) => r === 'CORRUPTION').length).toBeGreaterThan(0);
    expect(before.filter((r) => r !== 'CORRUPTION' && r !== 'ok')).toEqual([]);
    // Enough tables for an L0 compaction, which reads the damaged one.
    await writeTables(e, 1200, 1800);
    await writeTables(e, 1800, 2400);
    await writeTables(e, 2400, 3000);
    for (let i = 0; i < 200 && e.tablesDamaged === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(e.tablesDamaged).toBe(1);
    expect(warnings.join('\n')).toMatch(/damaged in every copy.*nova repair/);
    await e.put(k(5000), v(5000)); // the engine did not fail
    expect(await e.get(k(2500))).toEqual(v(2500));

    const report = await e.salvage();
    expect(report.salvaged).toHaveLength(1);
    expect(report.salvaged[0]).toMatchObject({ blocksLost: 1 });
    const after = await reads(e, 3000);
    expect(after.filter((r) => r !== 'ok' && r !== 'missing')).toEqual([]);
    expect(after.filter((r) => r === 'missing').length).toBe(report.entriesLost);
    expect(before.map((r, i) => (r === 'CORRUPTION' ? i : -1)).filter((i) => i >= 0).every((i) => after[i] === 'missing')).toBe(true);
    expect(e.tablesDamaged).toBe(0);
    await e.compactAll();
    await e.close();
  });

  it('a damaged index: the engine opens with the table standing in, reads of its keys fail, salvage drops it whole and says so', async () => {
    const dir = tempDir();
    let e = await Engine.open(dir, { ...OPTIONS });
    await writeTables(e, 0, 600);
    await e.compactAll(); // into a sorted level
    await writeTables(e, 600, 1200);
    await e.close();
    const [first] = tables(dir); // of the compacted ones (lower numbers than the flush after)
    const bytes = readFileSync(first);
    // The keys it holds: [lo, hi].
    const it = new TableReader(bytes, first).iterator();
    const held: number[] = [];
    for (it.first(); it.valid; it.next()) held.push(Number(it.key.subarray(3, 9).toString()));
    const [lo, hi] = [held[0], held[held.length - 1]];
    expect(hi - lo + 1).toBe(held.length);
    bytes[readFooter(bytes, first).index.offset + 2] ^= 0x40;
    writeFileSync(first, bytes);

    e = await Engine.open(dir, { ...OPTIONS, onWarning: () => undefined });
    expect(e.tablesDamaged).toBe(1);
    const within = (i: number): boolean => i >= lo && i <= hi;
    const before = await reads(e, 1200);
    expect(before.every((r, i) => r === (within(i) ? 'CORRUPTION' : 'ok'))).toBe(true);
    await expect(e.scan(k(lo), { limit: 10 })).rejects.toMatchObject({ code: 'CORRUPTION' });

    const report = await e.salvage();
    expect(report.salvaged).toHaveLength(1);
    expect(report.salvaged[0]).toMatchObject({ kept: 0, entries: held.length });
    expect(report.salvaged[0].unreadable).toMatch(/index/);
    expect(report.salvaged[0].lost[0].keys).toBe(`"${k(lo).toString()}" to "${k(hi).toString()}"`);
    expect(report.entriesLost).toBe(held.length);
    const after = await reads(e, 1200);
    expect(after.every((r, i) => r === (within(i) ? 'missing' : 'ok'))).toBe(true);
    await e.close();
    // The tree it left opens clean.
    e = await Engine.open(dir, { ...OPTIONS });
    expect(e.tablesDamaged).toBe(0);
    expect((await reads(e, 1200)).every((r, i) => r === (i >= lo && i <= hi ? 'missing' : 'ok'))).toBe(true);
    await e.close();
  });

  it('a damaged filter: the table stands in at open, and salvage writes it again whole, losing nothing', async () => {
    const dir = tempDir();
    let e = await Engine.open(dir, { ...OPTIONS });
    await writeTables(e, 0, 600);
    await e.compactAll();
    await e.close();
    const first = tables(dir).at(-1)!; // the compaction's last output (inputs not yet deleted may lie before it)
    const bytes = readFileSync(first);
    bytes[readFooter(bytes, first).filter.offset + 1] ^= 0x40;
    writeFileSync(first, bytes);

    e = await Engine.open(dir, { ...OPTIONS, onWarning: () => undefined });
    expect(e.tablesDamaged).toBe(1);
    const report = await e.salvage();
    expect(report.salvaged).toHaveLength(1);
    expect(report.salvaged[0].kept).toBe(report.salvaged[0].entries);
    expect(report.entriesLost).toBe(0);
    expect(e.tablesDamaged).toBe(0);
    expect((await reads(e, 600)).every((r) => r === 'ok')).toBe(true);
    await e.close();
    e = await Engine.open(dir, { ...OPTIONS });
    expect(e.tablesDamaged).toBe(0);
    expect((await reads(e, 600)).every((r) => r === 'ok')).toBe(true);
    await e.close();
  });
});
