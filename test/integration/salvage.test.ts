/**
 * Damage with one copy of each table (--table-replicas 1), with real processes
 * (doc/decisions/salvage.md): a table whose index is damaged and another with a damaged data
 * block. The range still opens; reads that need the damage fail with CORRUPTION naming the
 * table and offset, the rest are served; `nova repair` salvages what reads, reports what was
 * lost, and the range is whole again: no read fails, compactions go on.
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { componentDir } from '../../src/control/cluster-control.js';
import type { NovaClient } from '../../src/client/nova-client.js';
import { BIN, key, startCluster, value, writeKeys, type TestCluster } from '../helpers/cluster.js';
import { until } from '../helpers/until.js';

let cluster: TestCluster | undefined;
afterEach(async () => {
  await cluster?.destroy();
  cluster = undefined;
});

/** "SST1NOVA": the last 8 bytes of a table's footer, which only a metadata fragment (or a whole table) ends with. */
const MAGIC = Buffer.from('SST1NOVA', 'latin1');
const FOOTER = 48;

/** What each key reads: its value, nothing, or the error's code and message. */
async function readAll(c: NovaClient, keys: number[]): Promise<Map<number, { ok: boolean; missing?: boolean; error?: { code: string; message: string } }>> {
  const out = new Map<number, { ok: boolean; missing?: boolean; error?: { code: string; message: string } }>();
  for (let i = 0; i < keys.length; i += 64) {
    await Promise.all(keys.slice(i, i + 64).map(async (k) => {
      try {
        const v = await c.get(key(k));
        out.set(k, v === undefined ? { ok: false, missing: true } : { ok: v.equals(value(k)) });
      } catch (err) {
        const e = err as { code: string; message: string };
        out.set(k, { ok: false, error: { code: e.code, message: e.message } });
      }
    }));
  }
  return out;
}

describe('damage without redundancy', () => {
  it('a damaged index and a damaged data block: the range opens, reads of the damage fail naming table and offset, the rest serve; nova repair salvages and reports what was lost', async () => {
    cluster = await startCluster({
      ltcs: 1, stocs: 3,
      args: ['--table-replicas', '1', '--memtable-bytes', String(64 * 1024), '--ranges', '1', '--l0-trigger', '50', '--ltc-memory', String(16 * 2 ** 20), '--scrub-rate', '1'],
    });
    const c = cluster.client;
    const acked = [...await writeKeys(c, 0, 4000, 16)];
    await c.compact();
    await writeKeys(c, 4000, 5000, 16).then((s) => acked.push(...s));
    await c.flush();

    // One table's metadata fragment and another's data fragment, on whichever StoCs hold them.
    const files = [1, 2, 3].flatMap((s) => readdirSync(componentDir(cluster!.dir, 'stoc', s)).filter((f) => f.endsWith('.sst'))
      .map((f) => ({ path: join(componentDir(cluster!.dir, 'stoc', s), f), name: f })));
    const isMeta = (p: string): boolean => readFileSync(p).subarray(-8).equals(MAGIC);
    const meta = files.find((f) => isMeta(f.path))!;
    const data = files.find((f) => f.name !== meta.name && !isMeta(f.path) && readFileSync(f.path).length > 16 * 1024)!;
    expect(meta && data).toBeTruthy();
    const m = readFileSync(meta.path);
    m[m.length - FOOTER - 12] ^= 0x5a; // in the index block, just before the footer
    writeFileSync(meta.path, m);
    const d = readFileSync(data.path);
    d[Math.floor(d.length / 2)] ^= 0x5a; // in a data block
    writeFileSync(data.path, d);

    // The LTC restarted reads every table's metadata again: the range opens all the same.
    await cluster.kill('ltc', 1);
    await cluster.up();
    const before = await readAll(c, acked);
    const failed = [...before].filter(([, r]) => r.error);
    const served = [...before].filter(([, r]) => r.ok);
    expect(failed.length).toBeGreaterThan(0);
    expect(served.length).toBeGreaterThan(acked.length / 2);
    expect([...before.values()].filter((r) => !r.ok && !r.error)).toEqual([]); // never a wrong value, never silently nothing
    for (const [, r] of failed) {
      expect(r.error!.code).toBe('CORRUPTION');
      expect(r.error!.message).toMatch(/\d{6}\.sst|table \d+/); // the table, by its file or its number
      expect(r.error!.message).toMatch(/offset \d+/);
    }
    type Row = { tablesDamaged: number };
    expect(((await c.stats()) as Row[])[0].tablesDamaged).toBeGreaterThanOrEqual(1);

    // nova repair: what reads is kept; what was lost is named.
    const { stdout } = await promisify(execFile)(process.execPath, [BIN, 'repair', '1', '--dir', cluster.dir, '--json'], { timeout: 120_000 });
    const report = JSON.parse(stdout) as { range: number; tablesChecked: number; salvaged: Array<{ file: number; kept: number; entries: number; unreadable?: string; blocksLost: number; lost: unknown[] }>; entriesLost: number };
    expect(report.range).toBe(1);
    expect(report.tablesChecked).toBeGreaterThan(2);
    expect(report.salvaged.length).toBe(2);
    expect(report.salvaged.some((t) => t.unreadable !== undefined && t.kept === 0)).toBe(true);
    expect(report.salvaged.some((t) => t.unreadable === undefined && t.blocksLost >= 1 && t.kept > 0 && t.kept < t.entries)).toBe(true);
    expect(report.entriesLost).toBeGreaterThan(0);
    process.stderr.write(`[salvage] ${failed.length} of ${acked.length} keys failed before the repair; it kept ${report.salvaged.map((t) => `${t.kept}/${t.entries}`).join(' and ')} entries, lost ${report.entriesLost}\n`);

    // Whole again: no read fails; every key that failed before is among those lost, and just as many as reported.
    const after = await readAll(c, acked);
    expect([...after.values()].filter((r) => r.error)).toEqual([]);
    const lost = [...after].filter(([, r]) => !r.ok).map(([k]) => k);
    expect([...after].filter(([, r]) => !r.ok && !r.missing)).toEqual([]);
    expect(lost.length).toBe(report.entriesLost);
    for (const [k] of failed) expect(lost).toContain(k);
    for (const [k] of served) expect(after.get(k)!.ok).toBe(true);
    await until(async () => ((await c.stats()) as Row[])[0].tablesDamaged === 0, 10_000);

    // Compactions go on: a full compaction and more writes succeed.
    await writeKeys(c, 5000, 5500, 16);
    await c.compact();
    expect((await readAll(c, [5000, 5250, 5499])).get(5250)!.ok).toBe(true);
  }, 240_000);
});
