/**
 * `nova tool sst check` on a StoC's files (src/tools/inspect.ts): a table cut into fragments
 * (ρ = 2, its metadata on a third StoC) is checked piece by piece — the metadata by its own
 * blocks, a data fragment by the checksum its range's MANIFEST records — and a flipped byte in a
 * data fragment is reported with its file.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { componentDir } from '../../src/control/cluster-control.js';
import { BIN, startCluster, writeKeys, type TestCluster } from '../helpers/cluster.js';

let cluster: TestCluster | undefined;
afterEach(async () => {
  await cluster?.destroy();
  cluster = undefined;
});

// The LTC's scrub would find the damaged copy and write it anew before the tool looks at it.
const NO_SCRUB = ['--scrub-rate', '0'];

const check = (file: string) => spawnSync(process.execPath, [BIN, 'tool', 'sst', 'check', file], { encoding: 'utf8', timeout: 60_000 });

describe('nova tool on StoC fragment files', () => {
  it('checks metadata and data fragments, and names a damaged data fragment', async () => {
    cluster = await startCluster({ ltcs: 1, stocs: 3, args: ['--scatter', '2', '--table-replicas', '1', '--memtable-bytes', String(64 * 1024), '--ranges', '1', ...NO_SCRUB] });
    await writeKeys(cluster.client, 0, 2000, 16);
    await cluster.client.compact();
    const files = [1, 2, 3].flatMap((id) => readdirSync(componentDir(cluster!.dir, 'stoc', id)).filter((f) => f.endsWith('.sst')).map((f) => join(componentDir(cluster!.dir, 'stoc', id), f)));
    expect(files.length).toBeGreaterThan(0);
    const verdicts = files.map((f) => ({ f, r: check(f) }));
    for (const { f, r } of verdicts) expect(r.status, `${f}: ${r.stderr}`).toBe(0);
    const out = verdicts.map((v) => v.r.stdout).join('');
    expect(out).toMatch(/OK \(the metadata fragment of a table of \d+ bytes/);
    expect(out).toMatch(/OK \(a data fragment of table \d+, \d+ bytes from table offset \d+, checksum as the MANIFEST records\)/);
    const data = verdicts.find((v) => /a data fragment/.test(v.r.stdout))!.f;
    const bytes = readFileSync(data);
    bytes[Math.floor(bytes.length / 2)] ^= 0x40;
    writeFileSync(data, bytes);
    const bad = check(data);
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/CORRUPTION: .*\.sst: the copy on StoC \d+ of the fragment at table offset \d+ \(\d+ bytes\) fails its checksum/);
  }, 120_000);

  it('checks a parity fragment by the checksum the MANIFEST records, and names one damaged', async () => {
    cluster = await startCluster({ ltcs: 1, stocs: 4, args: ['--scatter', '2', '--parity', '--table-replicas', '1', '--memtable-bytes', String(64 * 1024), '--ranges', '1', ...NO_SCRUB] });
    await writeKeys(cluster.client, 0, 4000, 16); // tables enough that some parity lies on a StoC with the MANIFEST
    await cluster.client.compact();
    // On the StoCs holding a replica of the range's MANIFEST (three of the four), where the checksums are known.
    const withManifest = [1, 2, 3, 4].filter((id) => readdirSync(componentDir(cluster!.dir, 'stoc', id)).some((f) => f.endsWith('.manifest')));
    const files = withManifest.flatMap((id) => readdirSync(componentDir(cluster!.dir, 'stoc', id)).filter((f) => f.endsWith('.sst')).map((f) => join(componentDir(cluster!.dir, 'stoc', id), f)));
    const verdicts = files.map((f) => ({ f, r: check(f) }));
    for (const { f, r } of verdicts) expect(r.status, `${f}: ${r.stderr}`).toBe(0);
    const parity = verdicts.find((v) => /OK \(the parity of table \d+'s data fragments, \d+ bytes, checksum as the MANIFEST records\)/.test(v.r.stdout));
    expect(parity).toBeDefined();
    const bytes = readFileSync(parity!.f);
    bytes[3] ^= 0x01;
    writeFileSync(parity!.f, bytes);
    const bad = check(parity!.f);
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/CORRUPTION: .*fails its checksum/);
  }, 120_000);
});
