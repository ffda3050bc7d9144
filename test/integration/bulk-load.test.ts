/**
 * Bulk loads through a real cluster: `nova load` from a generator and from a file, chunks
 * ingested by the LTCs as tables (refused ones written as batches), and a load that goes on
 * through an LTC killed and restarted under it, losing no acknowledged record.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { keyOf } from '../../bench/ycsb/generators.js';
import { makeValue } from '../../bench/ycsb/values.js';
import { BIN, startCluster, type TestCluster } from '../helpers/cluster.js';

let c: TestCluster;

beforeAll(async () => {
  c = await startCluster({ ltcs: 1, stocs: 3, args: ['--ranges', '2', '--bench-records', '6000'] });
}, 120_000);

afterAll(async () => {
  await c?.destroy();
});

function stats(): Promise<Array<{ range: number; ingests: number; ingestedEntries: number }>> {
  return c.client.stats() as Promise<Array<{ range: number; ingests: number; ingestedEntries: number }>>;
}

describe('nova load', () => {
  it('loads generated records as ingested tables, each range its own', async () => {
    const r = spawnSync(process.execPath, [BIN, 'load', '--dir', c.dir, '--generate', '6000', '--value-size', '200', '--chunk-bytes', '131072', '--json'], { encoding: 'utf8', timeout: 120_000 });
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as { records: number; tables: number; ingested: number; written: number };
    expect(report).toMatchObject({ records: 6000, ingested: 6000, written: 0 });
    expect(report.tables).toBeGreaterThanOrEqual(2 * Math.ceil((3000 * 216) / 131072));
    const s = await stats();
    expect(s.map((x) => x.ingestedEntries).sort()).toEqual([3000, 3000]);
    for (const i of [0, 1, 2999, 3000, 4321, 5999]) expect((await c.client.get(keyOf(i)))?.equals(makeValue(i, 1, 200, false))).toBe(true);
    expect(await c.client.get(keyOf(6000))).toBeUndefined();
  }, 120_000);

  it('loads a file of nova scan lines in any order, a repeated key keeping its last value; refused chunks as batches', async () => {
    const file = join(c.dir, 'records.tsv');
    const lines = ['"f-b"\t"2"', '0x00ff\t0x0102', '"f-a"\t"1"', '"f-b"\t"22"', '"user000000000007"\t"over a loaded key"'];
    writeFileSync(file, lines.join('\n') + '\n');
    const r = spawnSync(process.execPath, [BIN, 'load', '--dir', c.dir, '--file', file, '--json'], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as { records: number; ingested: number; written: number; refusals: string[] };
    expect(report.records).toBe(5);
    expect(report.ingested + report.written).toBe(4); // f-b once
    expect((await c.client.get(Buffer.from('f-b')))?.toString()).toBe('22');
    expect((await c.client.get(Buffer.from('f-a')))?.toString()).toBe('1');
    expect(await c.client.get(Buffer.from([0x00, 0xff]))).toEqual(Buffer.from([1, 2]));
    expect((await c.client.get(keyOf(7)))?.toString()).toBe('over a loaded key');
    const bad = join(c.dir, 'bad.tsv');
    writeFileSync(bad, '"ok"\t"1"\nnot-quoted\t"2"\n');
    const b = spawnSync(process.execPath, [BIN, 'load', '--dir', c.dir, '--file', bad], { encoding: 'utf8', timeout: 60_000 });
    expect(b.status).not.toBe(0);
    expect(b.stderr).toMatch(/bad.tsv:2: key: "not-quoted" is neither a JSON string nor 0x and hex digits/);
  }, 120_000);

  it('goes on through an LTC killed and restarted under it, every record there after', async () => {
    const n = 300_000;
    const load = spawn(process.execPath, [BIN, 'load', '--dir', c.dir, '--generate', String(n), '--value-size', '100', '--chunk-bytes', '65536', '--concurrency', '2'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    load.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    load.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    const exited = new Promise<number | null>((resolve) => load.once('exit', resolve));
    // Once it has loaded some, the LTC dies; nova up starts it again.
    for (let i = 0; i < 600 && !/nova load: [1-9]/.test(err); i++) await new Promise((r) => setTimeout(r, 50));
    expect(load.exitCode, 'the load was still under way').toBeNull();
    await c.kill('ltc', 1);
    await c.up();
    expect(await exited, err).toBe(0);
    expect(out).toMatch(/loaded 300,000 records/);
    for (let i = 0; i < n; i += 2_999) expect((await c.client.get(keyOf(i)))?.equals(makeValue(i, 1, 100, false)), `record ${i}`).toBe(true);
    expect((await c.client.get(keyOf(n - 1)))?.equals(makeValue(n - 1, 1, 100, false))).toBe(true);
  }, 180_000);
});
