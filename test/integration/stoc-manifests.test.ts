/**
 * A range's MANIFEST on StoCs: replicas, the live one chosen, rolled when replicas are lost.
 * StocServers and LTC-side clients on separate fabrics in this process, over shared memory.
 */
import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { readLog } from '../../src/log/log-format.js';
import { StocManifestStore } from '../../src/logc/stoc-manifest-store.js';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv } from '../../src/ltc/local-store.js';
import { LocalManifestStore } from '../../src/ltc/local-store.js';
import { StocServer } from '../../src/stoc/stoc-server.js';
import { stocHarness } from '../helpers/stocs.js';

const { servers, tempDir, startServer, config, makePool, connect } = stocHarness('nova-stoc-manifests-');
const KiB = 1024;

function recordsOf(bytes: Buffer | undefined): Buffer[] {
  if (!bytes) throw new Error('no log');
  return readLog(bytes, 'test log').records;
}

describe('MANIFESTs on StoCs', () => {
  const key = (i: number): Buffer => Buffer.from(`k${String(i).padStart(5, '0')}`);
  const value = (i: number): Buffer => Buffer.from(`v${i}`.padEnd(200, '.'));

  it('moves a MANIFEST from the LTC directory to the StoCs, and reopens from them alone', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3)];
    const pool = makePool(stocs);
    const dir = tempDir();
    const options = { memtableBytes: 16 * KiB, sync: false, mergeInWorker: false };
    let db = await Engine.open(dir, options); // the old way: MANIFEST and CURRENT in dir
    for (let i = 0; i < 500; i++) await db.put(key(i), value(i));
    await db.close();
    const onStocs = () => ({ ...localEnv(dir), manifests: new StocManifestStore(pool, 4, 3, () => undefined, new LocalManifestStore(dir)) });
    db = await Engine.open(dir, { ...options, env: onStocs() });
    for (let i = 0; i < 500; i++) expect((await db.get(key(i)))?.equals(value(i))).toBe(true);
    for (let i = 500; i < 700; i++) await db.put(key(i), value(i));
    await db.close();
    expect(readdirSync(dir).filter((n) => /^MANIFEST|^CURRENT/.test(n))).toEqual([]);
    const manifests = await Promise.all(stocs.map(async (s) => (await (await connect(s)).list('r4-')).map((f) => f.name).filter((n) => n.endsWith('.manifest'))));
    expect(manifests.map((m) => m.length)).toEqual([1, 1, 1]); // one live MANIFEST, 3 replicas
    db = await Engine.open(dir, { ...options, env: onStocs() });
    for (let i = 0; i < 700; i++) expect((await db.get(key(i)))?.equals(value(i))).toBe(true);
    await db.close();
  });

  it('takes the newest MANIFEST whose first edit is whole; refuses to start empty while tables exist or a StoC is silent', async () => {
    const stocs = [await startServer(1), await startServer(2)];
    const pool = makePool(stocs);
    const store = new StocManifestStore(pool, 5, 2, () => undefined);
    expect(await store.readCurrent()).toBeUndefined(); // a new range: every StoC says so
    const c = await connect(stocs[0]);
    // A first open that died before its first edit was whole leaves a MANIFEST of no record:
    // the range is still new (else it could never open again).
    await c.write('r5-000001.manifest', 0, Buffer.from([9, 9]), true);
    expect(await store.readCurrent()).toBeUndefined();
    const old = await store.create(10);
    await old.append([Buffer.from('edit one'), Buffer.from('edit two')], true);
    await store.install(10);
    // An open that died writing its first edit leaves a newer MANIFEST without one.
    await c.write('r5-000020.manifest', 0, Buffer.from([1, 2, 3]), true);
    const current = await store.readCurrent();
    expect(current?.name).toContain('r5-000010.manifest');
    expect(recordsOf(current!.bytes).map((r) => r.toString())).toEqual(['edit one', 'edit two']);
    // The next open reuses number 20: it starts from an empty file, not after those bytes.
    const next = await store.create(20);
    await next.append([Buffer.from('the whole tree')], true);
    expect(recordsOf((await store.readCurrent())!.bytes).map((r) => r.toString())).toEqual(['the whole tree']);
    await store.install(20);
    // Tables but no MANIFEST: not opened empty.
    await store.install(99); // removes every MANIFEST but (absent) 99
    await c.write('r5-000030.sst', 0, Buffer.from('a table'), true);
    await expect(store.readCurrent()).rejects.toMatchObject({ code: 'UNAVAILABLE', message: expect.stringContaining('not opening it empty') });
    await c.remove('r5-000030.sst');
    await servers.pop()!.close(); // StoC 2 goes silent
    await expect(store.readCurrent()).rejects.toMatchObject({ code: 'UNAVAILABLE', message: expect.stringContaining('did not answer') });
  });

  it('moves the MANIFEST to a new file on live StoCs when a StoC holding a replica dies', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3), await startServer(4)];
    const pool = makePool(stocs);
    const dir = tempDir();
    const warnings: string[] = [];
    const options = { memtableBytes: 16 * KiB, sync: false, mergeInWorker: false, onWarning: (w: string) => warnings.push(w) };
    const env = () => ({ ...localEnv(dir), manifests: new StocManifestStore(pool, 6, 3, () => undefined) });
    const manifestsOn = async (s: StocServer) => (await (await connect(s)).list('r6-')).map((f) => f.name).filter((n) => n.endsWith('.manifest'));
    let db = await Engine.open(dir, { ...options, env: env() });
    for (let i = 0; i < 300; i++) await db.put(key(i), value(i));
    await db.flush();
    const holders: StocServer[] = [];
    for (const s of stocs) if ((await manifestsOn(s)).length > 0) holders.push(s);
    expect(holders).toHaveLength(3);
    const first = (await manifestsOn(holders[0]))[0];
    servers.splice(servers.indexOf(holders[0]), 1);
    await holders[0].close(); // a StoC holding a replica dies
    for (let i = 300; i < 600; i++) await db.put(key(i), value(i));
    await db.flush();
    expect(db.stats.manifestRolls).toBe(1);
    expect(warnings.join('\n')).toMatch(/MANIFEST moved to \d+/);
    const live = stocs.filter((s) => s !== holders[0]);
    const now = await Promise.all(live.map(manifestsOn));
    expect(now.map((m) => m.length)).toEqual([1, 1, 1]); // the new one on the three live StoCs, the old one gone
    expect(new Set(now.flat()).size).toBe(1);
    expect(now[0][0] > first).toBe(true);
    await db.close();
    // The other two StoCs of the first MANIFEST die too: the range opens from the new one's last
    // replica (the coordinator no longer lists the dead).
    for (const s of holders.slice(1)) {
      servers.splice(servers.indexOf(s), 1);
      await s.close();
    }
    pool.update(config(stocs.filter((s) => !holders.includes(s))));
    db = await Engine.open(dir, { ...options, env: env() });
    for (let i = 0; i < 600; i++) expect((await db.get(key(i)))?.equals(value(i))).toBe(true);
    await db.close();
  });

  it('keeps its MANIFEST when a new one would have no more replicas (a dead StoC that looks healthy again)', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3)];
    const pool = makePool(stocs);
    const dir = tempDir();
    const warnings: string[] = [];
    const options = { memtableBytes: 16 * KiB, sync: false, mergeInWorker: false, onWarning: (w: string) => warnings.push(w) };
    const db = await Engine.open(dir, { ...options, env: { ...localEnv(dir), manifests: new StocManifestStore(pool, 7, 3, () => undefined) } });
    for (let i = 0; i < 100; i++) await db.put(key(i), value(i));
    const dead = servers.splice(servers.indexOf(stocs[2]), 1)[0];
    await dead.close();
    await db.flush(); // drops the dead replica; it is shunned, so no roll yet
    await new Promise((resolve) => setTimeout(resolve, 2_200)); // the shun ends: it looks healthy
    for (let i = 100; i < 200; i++) await db.put(key(i), value(i));
    await db.flush(); // a new MANIFEST would get only the two live StoCs: not moved
    expect(db.stats.manifestRolls).toBe(0);
    expect(warnings.filter((w) => w.includes('MANIFEST'))).toEqual([]);
    for (let i = 0; i < 200; i++) expect((await db.get(key(i)))?.equals(value(i))).toBe(true);
    await db.close();
  });
});

