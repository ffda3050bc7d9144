/**
 * The scrub and repair with real processes (doc/decisions/table-redundancy.md): bytes flipped in
 * table copies on one StoC's disk are found by the LTC's scrub, the damaged copies are written
 * again from the good ones, and reads never see the damage.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { componentDir } from '../../src/control/cluster-control.js';
import { missing, startCluster, writeKeys, type TestCluster } from '../helpers/cluster.js';
import { until } from '../helpers/until.js';

let cluster: TestCluster | undefined;
afterEach(async () => {
  await cluster?.destroy();
  cluster = undefined;
});

describe('scrub and repair', () => {
  it('finds bytes flipped in table copies on a StoC, writes those copies again from good ones, and no read sees them', async () => {
    cluster = await startCluster({ ltcs: 1, stocs: 3, args: ['--memtable-bytes', String(64 * 1024), '--ranges', '1', '--scrub-rate', String(64 * 2 ** 20), '--ltc-memory', String(16 * 2 ** 20)] });
    const c = cluster.client;
    const acked = await writeKeys(c, 0, 3000, 16);
    await c.compact();
    const dir = componentDir(cluster.dir, 'stoc', 1);
    const tables = readdirSync(dir).filter((f) => f.endsWith('.sst'));
    expect(tables.length).toBeGreaterThan(0);
    const damaged = tables.slice(0, 3);
    const originals = new Map(damaged.map((f) => [f, readFileSync(join(dir, f))]));
    for (const f of damaged) {
      const bytes = Buffer.from(originals.get(f)!);
      bytes[Math.floor(bytes.length / 3)] ^= 0x10;
      writeFileSync(join(dir, f), bytes);
    }
    expect(await missing(c, acked)).toEqual([]); // reads get good copies meanwhile
    type Row = { copiesFoundDamaged: number; tablesToRepair: number };
    await until(async () => ((await c.stats()) as Row[]).some((r) => r.copiesFoundDamaged >= damaged.length), 60_000);
    await until(async () => ((await c.stats()) as Row[]).every((r) => r.tablesToRepair === 0), 30_000);
    // Written again whole, where they were.
    for (const f of damaged) expect(readFileSync(join(dir, f)).equals(originals.get(f)!), f).toBe(true);
    expect(await missing(c, acked)).toEqual([]);
  }, 180_000);
});
