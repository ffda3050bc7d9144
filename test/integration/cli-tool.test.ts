/**
 * `nova tool` on real files an engine wrote, and on damaged copies; `nova db` on a directory.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { ROOT } from '../helpers/peer-process.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-tool-', 'all');
const dir = tempDir();
const nova = (...args: string[]) => spawnSync(process.execPath, [join(ROOT, 'bin', 'nova.js'), ...args], { encoding: 'utf8', timeout: 30_000 });
const file = (re: RegExp) => join(dir, readdirSync(dir).find((n) => re.test(n))!);

beforeAll(async () => {
  // Small memtables of few keys each, flushed (not merged): the directory holds tables.
  const db = await Engine.open(dir, { memtableBytes: 4096, sync: false, mergeUnderKeys: 0 });
  const client = { idHigh: 0xcdcd, idLow: 0xcd }; // a client's numbered writes: the log and MANIFEST name them
  for (let i = 0; i < 100; i++) await db.put(Buffer.from(`key${String(i).padStart(3, '0')}`), Buffer.from(`value ${i}`), { session: { ...client, seq: i + 1, floor: i + 1, open: i === 0 } });
  await db.delete(Buffer.from('key007'));
  await db.close(); // leaves tables, a MANIFEST and a log
  const again = await Engine.open(dir, { sync: false });
  await again.put(Buffer.from('after'), Buffer.from('reopen'), { session: { ...client, seq: 101, floor: 101, open: false } });
  await again.close();
});

describe('nova tool', () => {
  it('lists its commands in --help', () => {
    const r = nova('--help');
    expect(r.status).toBe(0);
    for (const c of ['info', 'bench', 'tool', 'db']) expect(r.stdout).toContain(c);
    expect(nova('tool', 'sst', '--help').stdout).toMatch(/dump.*\n.*check/s);
  });

  it('dumps and checks a table', () => {
    const sst = file(/\.sst$/);
    const check = nova('tool', 'sst', 'check', sst);
    expect(check.status).toBe(0);
    expect(check.stdout).toMatch(/OK \(table .* entries, format v1\)/);
    const dump = nova('tool', 'sst', 'dump', sst, '--limit', '5');
    expect(dump.status).toBe(0);
    expect(dump.stdout).toMatch(/"key\d{3}" @\d+ (put|del)/);
    expect(dump.stdout.trim().split('\n').length).toBe(2 + 5);
  });

  it('dumps a log and a MANIFEST', () => {
    const log = nova('tool', 'log', 'dump', file(/\.log$/));
    expect(log.status).toBe(0);
    expect(log.stdout).toMatch(/put "after" = "reopen"/);
    expect(log.stdout).toContain(`client ${'cdcd'.padStart(14, '0')}${'cd'.padStart(14, '0')} write 101 (floor 101)`);
    const manifest = nova('tool', 'manifest', 'dump', file(/^MANIFEST-/));
    expect(manifest.status).toBe(0);
    expect(manifest.stdout).toMatch(/edit 0: nextFile \d+; lastSequence \d+; add L\d #\d+/);
    expect(manifest.stdout).toMatch(/bind memtable \d+ -> log \d+/);
    expect(manifest.stdout).toContain(`sessions 1: ${'cdcd'.padStart(14, '0')}${'cd'.padStart(14, '0')} floor 100 applied [100]`);
  });

  it('reports a damaged table with its offset and exits 1', () => {
    const bad = join(dir, 'damaged.sst');
    const bytes = readFileSync(file(/\.sst$/));
    bytes[20] ^= 0xff;
    writeFileSync(bad, bytes);
    const r = nova('tool', 'sst', 'check', bad);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/nova: CORRUPTION: .*damaged\.sst.*offset \d+/);
  });
});

describe('nova db', () => {
  it('puts, gets, deletes and scans keys in a directory, across invocations', () => {
    const d = tempDir('nova-db-');
    expect(nova('db', 'put', d, 'user1', 'hello').status).toBe(0);
    expect(nova('db', 'put', d, 'user2', 'wor ld').status).toBe(0);
    const got = nova('db', 'get', d, 'user1');
    expect([got.status, got.stdout]).toEqual([0, 'hello']);
    const missing = nova('db', 'get', d, 'nope');
    expect(missing.status).toBe(1);
    expect(missing.stderr).toMatch(/nope: not found/);
    expect(nova('db', 'delete', d, 'user1').status).toBe(0);
    expect(nova('db', 'scan', d).stdout).toBe('"user2"\t"wor ld"\n');
    expect(nova('db', 'flush', d).status).toBe(0);
    const stats = JSON.parse(nova('db', 'stats', d).stdout) as { lastSequence: number; memtables: number };
    expect(stats.lastSequence).toBe(3);
    expect(nova('db', 'put', d, 'user3', 'again').status).toBe(0);
    expect(nova('db', 'compact', d).status).toBe(0);
    const tree = JSON.parse(nova('db', 'stats', d).stdout) as { tablesPerLevel: number[] };
    expect(tree.tablesPerLevel[0]).toBe(0); // two L0 tables merged into L1, the deepest
    expect(tree.tablesPerLevel[1]).toBe(1);
    expect(nova('db', 'scan', d).stdout).toBe('"user2"\t"wor ld"\n"user3"\t"again"\n');
  });

  it('refuses a directory another live engine holds, saying which process', async () => {
    const d = tempDir('nova-db-');
    const db = await Engine.open(d, { sync: false });
    try {
      const r = nova('db', 'get', d, 'k');
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(new RegExp(`nova: BUSY: .* in use by process ${process.pid}`));
    } finally {
      await db.close();
    }
  });
});
