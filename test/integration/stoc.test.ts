/**
 * StoC persistent files: a StocServer and StocClients on separate fabrics in this process,
 * over shared memory. Data path, append order, validation, restarts, window reuse, load.
 */
import { readdirSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { NovaError } from '../../src/common/errors.js';
import { StocClient } from '../../src/stoc/stoc-client.js';
import { StoredFiles } from '../../src/stoc/stored-files.js';
import { StocServer } from '../../src/stoc/stoc-server.js';
import { Fabric } from '../../src/transport/fabric.js';
import type { Endpoint } from '../../src/transport/endpoint.js';
import { Rpc } from '../../src/transport/rpc.js';
import { pattern } from '../fixtures/pattern.js';
import { useTls } from '../helpers/peer-process.js';
import { rng } from '../helpers/rng.js';
import { until } from '../helpers/until.js';
import { tempDirs } from '../helpers/temp.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const SLOT = 256 * KiB; // the client's default slot

const tempDir = tempDirs('nova-stoc-', 'all');
const servers: StocServer[] = [];
const fabrics: Fabric[] = [];

async function startServer(dir = tempDir(), windows = 4, maxOpenFiles?: number): Promise<StocServer> {
  useTls('sm');
  const s = await StocServer.start({ dir, id: 7, bufferBytes: windows * 2 * MiB, windowBytes: 2 * MiB, maxOpenFiles });
  servers.push(s);
  return s;
}

function openFabric(): { fabric: Fabric; rpc: Rpc } {
  useTls('sm');
  const fabric = Fabric.open();
  fabrics.push(fabric);
  return { fabric, rpc: new Rpc(fabric) };
}

async function connect(s: StocServer, timeoutMs?: number): Promise<StocClient> {
  const { fabric, rpc } = openFabric();
  return StocClient.connect(fabric, rpc, s.address, { timeoutMs });
}

/** A bare endpoint to the StoC, for requests the client would never send. */
async function raw(s: StocServer): Promise<{ rpc: Rpc; ep: Endpoint }> {
  const { fabric, rpc } = openFabric();
  return { rpc, ep: await fabric.connect(s.address) };
}

function bytes(n: number, seed: number): Buffer {
  const b = Buffer.alloc(n);
  pattern(b, seed);
  return b;
}

afterEach(async () => {
  for (const f of fabrics.splice(0)) await f.close();
  for (const s of servers.splice(0)) await s.close();
});

describe('StoC persistent files', () => {
  it('knows the StoC id and round-trips writes of 0, 1, a slot, and several MiB', async () => {
    const s = await startServer();
    const c = await connect(s);
    expect(c.stocId).toBe(7);
    expect(c.alive).toBe(true);
    for (const size of [0, 1, SLOT - 1, SLOT, SLOT + 1, 5 * MiB + 123]) {
      const data = bytes(size, size + 1);
      await c.write(`f-${size}`, 0, data, size % 2 === 0);
      expect((await c.readAll(`f-${size}`))!.equals(data)).toBe(true);
      expect((await c.read(`f-${size}`, 0, size)).equals(data)).toBe(true);
      if (size > 10) {
        const mid = Math.floor(size / 3);
        expect((await c.read(`f-${size}`, mid, size - mid - 1)).equals(data.subarray(mid, size - 1))).toBe(true);
      }
    }
    expect(s.stats()).toMatchObject({ id: 7, connections: 1, windows: 4, windowsInUse: 1 });
    expect(s.stats().bytesWritten).toBeGreaterThan(5 * MiB);
  });

  it('background writes (compaction outputs) land whole, synced piece by piece as background syncs; a bad flag is refused', async () => {
    const s = await startServer();
    const c = await connect(s);
    for (const size of [0, 1, MiB, 3 * MiB + 5]) {
      const data = bytes(size, size + 7);
      const before = s.stats();
      await c.write(`b-${size}`, 0, data, true, { background: true });
      expect((await c.readAll(`b-${size}`))!.equals(data)).toBe(true);
      const after = s.stats();
      expect(after.backgroundSyncs - before.backgroundSyncs).toBe(Math.max(1, Math.ceil(size / MiB))); // 1 MiB pieces
      expect(after.foregroundSyncs).toBe(before.foregroundSyncs);
    }
    await c.write('f', 0, bytes(3 * MiB, 1), true);
    expect(s.stats().foregroundSyncs).toBe(1); // one sync for the whole write
    const { rpc, ep } = await raw(s);
    await rpc.call(ep, 'stoc.hello', { version: 1 });
    await expect(rpc.call(ep, 'stoc.sync', { file: 'f', background: 'yes' })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringContaining('background must be a boolean') });
  });

  it('direct writes: the progress thread writes them; size, read, sync, remove and a closed connection all see them', async () => {
    const s = await startServer();
    const c = await connect(s);
    const file = await c.openDirect('r1-5.log');
    const parts = Array.from({ length: 40 }, (_, i) => bytes(1000 + i * 997, i + 1));
    const offsets: number[] = [];
    let at = 0;
    for (const p of parts) { offsets.push(at); at += p.length; }
    // All at once, as a pipelined log sends them; the last one synced.
    await Promise.all(parts.map((p, i) => file.write(offsets[i], p, i === parts.length - 1)));
    expect(s.stats()).toMatchObject({ persists: 0, directHandles: 1 }); // the event loop wrote none of it
    expect(s.stats().directWrites).toBeGreaterThanOrEqual(parts.length);
    expect(await c.size('r1-5.log')).toBe(at); // the size covers what the progress thread wrote
    // A write larger than a slot goes through the window in slots, to the same file.
    const big = bytes(4 * SLOT + 5, 99);
    await file.write(at, big, false);
    expect(s.stats().persists).toBe(5);
    expect((await c.read('r1-5.log', at, big.length)).equals(big)).toBe(true);
    parts.push(big);
    at += big.length;
    expect((await c.readAll('r1-5.log'))!.equals(Buffer.concat(parts))).toBe(true);
    expect((await c.list('r1-'))).toEqual([{ name: 'r1-5.log', size: at }]);
    // The connection ends: the handle goes, the size stays.
    await c.close();
    await until(() => s.stats().directHandles === 0);
    const d = await connect(s);
    expect(await d.size('r1-5.log')).toBe(at);
    // Removing a file stops its direct writes (the descriptor may then close).
    const again = await d.openDirect('r1-5.log');
    await again.write(at, Buffer.from('tail'), false);
    await d.remove('r1-5.log');
    expect(s.stats().directHandles).toBe(0);
    await expect(again.write(0, Buffer.from('x'), false)).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    expect(await d.size('r1-5.log')).toBeUndefined();
    await expect(d.openDirect('../x')).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
  });

  it('a direct handle the fabric cannot close keeps its file open, and a later remove closes it', async () => {
    const s = await startServer();
    const c = await connect(s);
    const file = await c.openDirect('r1-6.log');
    await file.write(0, Buffer.from('acknowledged'), false);
    // The native unregister times out once (its progress thread stalled): the handle must stay.
    const fabric = (s as unknown as { fabric: Fabric }).fabric;
    const unregister = fabric.unregisterFile.bind(fabric);
    let failures = 1;
    fabric.unregisterFile = (handle: number): number => {
      if (failures-- > 0) throw new NovaError('TIMEOUT', 'unregisterFile failed: TIMEOUT');
      return unregister(handle);
    };
    await c.close();
    await until(() => s.stats().connections === 0);
    expect(s.stats().directHandles).toBe(1); // kept, with its pin: its fd is not closed under it
    // And with its window: a FILE_WRITE still on its way names bytes there, which must not
    // be another client's.
    expect(s.stats().windowsInUse).toBe(1);
    const d = await connect(s);
    expect(s.stats().windowsInUse).toBe(2);
    expect(await d.size('r1-6.log')).toBe(12);
    await d.remove('r1-6.log'); // tries again, and closes it
    expect(s.stats().directHandles).toBe(0);
    expect(s.stats().windowsInUse).toBe(1);
    expect(await d.size('r1-6.log')).toBeUndefined();
  });

  it('a file asked for while it is being removed is the new one, not the unlinked old inode', async () => {
    const dir = tempDir();
    const files = new StoredFiles(dir, 8);
    const old = (await files.acquire('f', true))!;
    await old.writeAt(Buffer.from('old'), 0);
    old.unpin();
    const removing = files.remove('f');
    const fresh = (await files.acquire('f', true))!; // asked for after the remove began
    await removing;
    expect(fresh).not.toBe(old);
    expect(fresh.size).toBe(0);
    await fresh.writeAt(Buffer.from('new'), 0);
    fresh.extend(3);
    fresh.unpin();
    expect(await files.size('f')).toBe(3);
    expect(readdirSync(dir)).toContain('f'); // what it wrote is in the directory, not in a deleted inode
    await files.closeAll();
  });

  it('writes at offsets overwrite in place; a gap reads as zeros', async () => {
    const s = await startServer();
    const c = await connect(s);
    await c.write('g', 0, Buffer.alloc(100, 1), false);
    await c.write('g', 40, Buffer.alloc(10, 2), false);
    await c.write('g', 200, Buffer.alloc(5, 3), true);
    const all = (await c.readAll('g'))!;
    expect(all.length).toBe(205);
    expect([all[39], all[40], all[49], all[50], all[150], all[204]]).toEqual([1, 2, 2, 1, 0, 3]);
    await Promise.all(Array.from({ length: 40 }, (_, i) => c.write('h', i * 1000, Buffer.alloc(1000, i), false)));
    const h = (await c.readAll('h'))!;
    for (let i = 0; i < 40; i++) expect(h[i * 1000] === i && h[i * 1000 + 999] === i).toBe(true);
  });

  it('appends from one client land in call order, many in flight, some larger than a slot', async () => {
    const s = await startServer();
    const c = await connect(s);
    const r = rng(5);
    const chunks = Array.from({ length: 120 }, (_, i) => bytes(i % 10 === 0 ? Math.floor(r() * 3 * SLOT) : Math.floor(r() * 5000), i));
    await Promise.all(chunks.map((b, i) => c.append('log', b, i % 7 === 0)));
    expect((await c.readAll('log'))!.equals(Buffer.concat(chunks))).toBe(true);
    await c.append('log', Buffer.alloc(0), true);
    await c.append('log', Buffer.from('tail'), false);
    expect((await c.readAll('log'))!.subarray(-4).toString()).toBe('tail');
  });

  it('appends from two clients to one file each land whole and in their own order', async () => {
    const s = await startServer();
    const [a, b] = [await connect(s), await connect(s)];
    const record = (who: number, i: number, n: number): Buffer => {
      const body = bytes(n, who * 1000 + i);
      const head = Buffer.alloc(9);
      head.writeUInt32LE(n, 0);
      head[4] = who;
      head.writeUInt32LE(i, 5);
      return Buffer.concat([head, body]);
    };
    const r = rng(9);
    const work = [a, b].flatMap((c, who) => Array.from({ length: 40 }, (_, i) =>
      c.append('shared', record(who, i, Math.floor(r() * (i % 8 === 0 ? 2 * SLOT : 3000))), false)));
    await Promise.all(work);
    const file = (await a.readAll('shared'))!;
    const seen = [0, 0];
    for (let at = 0; at < file.length;) {
      const n = file.readUInt32LE(at);
      const who = file[at + 4];
      const i = file.readUInt32LE(at + 5);
      expect(i).toBe(seen[who]++);
      expect(file.subarray(at, at + 9 + n).equals(record(who, i, n))).toBe(true);
      at += 9 + n;
    }
    expect(seen).toEqual([40, 40]);
  });

  it('missing files, reads past the end, list and remove', async () => {
    const s = await startServer();
    const c = await connect(s);
    expect(await c.readAll('nope')).toBeUndefined();
    await expect(c.read('nope', 0, 1)).rejects.toMatchObject({ code: 'CORRUPTION', message: expect.stringMatching(/StoC 7.*nope/) });
    await c.write('r1-a.sst', 0, Buffer.alloc(10), false);
    await c.write('r1-b.sst', 0, Buffer.alloc(20), false);
    await c.write('r2-a.sst', 0, Buffer.alloc(30), false);
    const err = await c.read('r1-a.sst', 5, 6).catch((e: NovaError) => e);
    expect(err).toMatchObject({ code: 'CORRUPTION' });
    expect((err as Error).message).toMatch(/StoC 7.*r1-a\.sst \[5, \+6\).*10 bytes/);
    expect((await c.read('r1-a.sst', 10, 0)).length).toBe(0);
    expect(await c.list('r1-')).toEqual([{ name: 'r1-a.sst', size: 10 }, { name: 'r1-b.sst', size: 20 }]);
    expect((await c.list('')).map((f) => f.name)).toEqual(['r1-a.sst', 'r1-b.sst', 'r2-a.sst']); // not LOCK
    await c.remove('r1-a.sst');
    await c.remove('r1-a.sst'); // missing: fine
    expect(await c.readAll('r1-a.sst')).toBeUndefined();
    expect((await c.list('r1-')).map((f) => f.name)).toEqual(['r1-b.sst']);
    await c.append('r1-a.sst', Buffer.from('new'), true); // a fresh file after remove
    expect((await c.readAll('r1-a.sst'))!.toString()).toBe('new');
    await c.sync('r1-b.sst');
    await expect(c.sync('nope')).rejects.toMatchObject({ code: 'CORRUPTION' });
  });

  it('files survive closing and restarting the StoC on the same directory', async () => {
    const dir = tempDir();
    let s = await startServer(dir);
    let c = await connect(s);
    const data = bytes(3 * SLOT + 17, 42);
    await c.write('keep.sst', 0, data, true);
    await c.append('keep.log', Buffer.from('one,'), true);
    await c.close();
    expect(c.alive).toBe(false);
    await s.close();
    await expect(startServer(dir).then(() => undefined)).resolves.toBeUndefined(); // lock released
    await servers.pop()!.close();
    s = await startServer(dir);
    c = await connect(s);
    expect((await c.readAll('keep.sst'))!.equals(data)).toBe(true);
    await c.append('keep.log', Buffer.from('two'), true);
    expect((await c.readAll('keep.log'))!.toString()).toBe('one,two');
    expect(readdirSync(dir).sort()).toEqual(['LOCK', 'keep.log', 'keep.sst']);
  });

  it('keeps at most maxOpenFiles idle files open, reopening on use', async () => {
    const s = await startServer(tempDir(), 4, 2);
    const c = await connect(s);
    for (let i = 0; i < 6; i++) await c.append(`e${i}`, Buffer.from(`first ${i};`), false);
    expect(s.stats().openFiles).toBeLessThanOrEqual(2);
    await Promise.all(Array.from({ length: 6 }, (_, i) => c.append(`e${i}`, Buffer.from(`second ${i}`), i % 2 === 0)));
    for (let i = 0; i < 6; i++) expect((await c.readAll(`e${i}`))!.toString()).toBe(`first ${i};second ${i}`);
    expect((await c.list('e')).map((f) => f.size)).toEqual(Array.from({ length: 6 }, (_, i) => `first ${i};second ${i}`.length));
  });

  it('syncs a new file\'s directory entry even when the file was closed between its write and its sync', async () => {
    const files = new StoredFiles(tempDir(), 1);
    let dirSyncs = 0;
    const t = files as unknown as { syncDirectory: () => Promise<void> };
    const real = t.syncDirectory.bind(files);
    t.syncDirectory = async () => { dirSyncs++; await real(); };
    const a = (await files.acquire('a', true))!;
    await a.writeAt(Buffer.from('new'), 0);
    a.unpin();
    (await files.acquire('b', true))!.unpin(); // evicts a (one open file at most)
    const again = (await files.acquire('a', false))!;
    await again.sync();
    expect(dirSyncs).toBe(1);
    await again.sync(); // durable now: no second directory sync
    expect(dirSyncs).toBe(1);
    again.unpin();
    await files.closeAll();
  });

  it('refuses a second StoC on a directory in use', async () => {
    const dir = tempDir();
    await startServer(dir);
    await expect(StocServer.start({ dir, id: 8 })).rejects.toMatchObject({ code: 'BUSY' });
  });

  it('rejects bad names and offsets with clear errors and keeps serving', async () => {
    const dir = tempDir();
    const s = await startServer(dir);
    const c = await connect(s);
    for (const name of ['', '../etc/passwd', 'a/b', '.hidden', 'LOCK', 'x'.repeat(201), 'sp ace']) {
      await expect(c.write(name, 0, Buffer.alloc(1), false)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringContaining('StoC 7') });
    }
    await expect(c.write('ok', -1, Buffer.alloc(1), false)).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await expect(c.read('ok', 0.5, 1)).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await expect(c.list('a/')).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });

    // What a broken or hostile client could send.
    const { rpc, ep } = await raw(s);
    await expect(rpc.call(ep, 'stoc.persist', { file: 'x', slot: 0, length: 1, offset: 0 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringContaining('before stoc.hello') });
    await rpc.call(ep, 'stoc.hello', { version: 1 });
    await expect(rpc.call(ep, 'stoc.hello', { version: 99 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    const bad: unknown[] = [
      null, 5, [1, 2], { file: '../x', slot: 0, length: 1, offset: 0 },
      { file: 'x', slot: 2 * MiB, length: 1, offset: 0 }, { file: 'x', slot: 0, length: 2 * MiB + 1, offset: 0 },
      { file: 'x', slot: 0, length: 1, offset: -5 }, { file: 'x', slot: 0, length: 1, offset: 2 ** 60 },
      { file: 'x', slot: 0, length: 1, offset: 'zero' }, { file: 'x', slot: 0, length: 10, append: [0, 5, 0] },
      { file: 'x', slot: 0, length: 1, append: 'no' },
    ];
    for (const args of bad) await expect(rpc.call(ep, 'stoc.persist', args)).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await expect(rpc.call(ep, 'stoc.fetch', { file: 'x', slot: 0, length: 1, offset: 0 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringContaining('before stoc.attach') });
    await expect(rpc.call(ep, 'stoc.attach', { key: Buffer.from('not a key') })).rejects.toMatchObject({ code: 'BAD_REMOTE_KEY' });
    await expect(rpc.call(ep, 'stoc.nothing', {})).rejects.toMatchObject({ code: 'UNKNOWN_METHOD' });
    await expect(rpc.call(ep, 'stoc.remove', { file: 'a\0b' })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });

    await c.write('still', 0, Buffer.from('serving'), true);
    expect((await c.readAll('still'))!.toString()).toBe('serving');
    expect(readdirSync(dir)).not.toContain('x');
  });

  it('a client whose fabric closes mid-write frees its window for a new client', async () => {
    const s = await startServer(tempDir(), 2);
    const { fabric, rpc } = openFabric();
    const doomed = await StocClient.connect(fabric, rpc, s.address);
    await connect(s);
    expect(s.stats().windowsInUse).toBe(2);
    await expect(connect(s)).rejects.toMatchObject({ code: 'BUSY', message: expect.stringMatching(/StoC 7: it serves 2 peers at once .* start it with a larger --peers/) });
    const lost = new Promise<string>((resolve) => doomed.onLost(resolve));
    const writing = doomed.write('big', 0, bytes(6 * MiB, 1), true);
    await new Promise((r) => setTimeout(r, 2));
    await fabric.close();
    await expect(writing).rejects.toMatchObject({ code: 'CLOSED', message: expect.stringContaining('big') });
    expect(await lost).toBe('CLOSED');
    expect(doomed.alive).toBe(false);
    await expect(doomed.readAll('big')).rejects.toBeInstanceOf(NovaError);
    await until(() => s.stats().windowsInUse === 1);
    const fresh = await connect(s);
    await fresh.write('after', 0, Buffer.from('ok'), false);
    expect((await fresh.readAll('after'))!.toString()).toBe('ok');
  });

  it('close says bye: the window is free at once, and pending calls fail with CLOSED', async () => {
    const s = await startServer(tempDir(), 1);
    const c = await connect(s);
    const pending = c.write('w', 0, bytes(4 * MiB, 3), false).catch((e: NovaError) => e);
    await c.close();
    expect(await pending).toMatchObject({ code: 'CLOSED' });
    expect(s.stats().windowsInUse).toBe(0);
    await expect(c.write('w', 0, Buffer.alloc(1), false)).rejects.toMatchObject({ code: 'CLOSED', message: expect.stringContaining('StoC 7') });
    await c.close(); // idempotent
    await (await connect(s)).write('w2', 0, Buffer.alloc(1), false);
  });

  it('load() counts requests in progress and the bytes they wait on', async () => {
    const s = await startServer();
    const c = await connect(s);
    expect(await c.load()).toEqual({ queueDepth: 0, pendingReadBytes: 0, pendingWriteBytes: 0, compactionsRunning: 0 });
    // Append 3 of a raw connection waits at the StoC until appends 0-2 arrive or are cancelled.
    const { rpc, ep } = await raw(s);
    await rpc.call(ep, 'stoc.hello', { version: 1 });
    const waiting = rpc.call(ep, 'stoc.persist', { file: 'q', slot: 0, length: 1000, append: [3, 1000, 0], sync: false });
    const waiting2 = rpc.call(ep, 'stoc.persist', { file: 'q', slot: 1000, length: 24, append: [2, 24, 0], sync: false });
    await until(async () => (await c.load()).queueDepth === 2);
    expect(await c.load()).toEqual({ queueDepth: 2, pendingReadBytes: 0, pendingWriteBytes: 1024, compactionsRunning: 0 });
    expect(s.stats()).toMatchObject({ queueDepth: 2, pendingWriteBytes: 1024 });
    await rpc.call(ep, 'stoc.cancel', { seq: 1 });
    await rpc.call(ep, 'stoc.cancel', { seq: 0 });
    await Promise.all([waiting, waiting2]);
    expect(await c.load()).toEqual({ queueDepth: 0, pendingReadBytes: 0, pendingWriteBytes: 0, compactionsRunning: 0 });
    expect((await c.readAll('q'))!.length).toBe(1024); // append 2's 24 bytes, then append 3's 1000
  });

  it('a call past its deadline fails with DEADLINE_EXCEEDED naming the StoC and file', async () => {
    const s = await startServer();
    const c = await connect(s);
    const err = await c.write('slow', 0, bytes(8 * MiB, 2), false, { timeoutMs: 1 }).catch((e: NovaError) => e);
    expect(err).toMatchObject({ code: 'DEADLINE_EXCEEDED', message: expect.stringMatching(/StoC 7.*slow/) });
    await c.close();
    const d = await connect(s);
    await d.append('slow.log', Buffer.from('fine'), false);
  });

  it('serves as many peers as --peers gives windows, each of windowBytes', async () => {
    useTls('sm');
    const s = await StocServer.start({ dir: tempDir(), id: 9, peers: 3, windowBytes: 1 * MiB });
    servers.push(s);
    const clients = [await connect(s), await connect(s), await connect(s)];
    expect(s.stats()).toMatchObject({ windows: 3, windowsInUse: 3 });
    await expect(connect(s)).rejects.toMatchObject({ code: 'BUSY', message: expect.stringMatching(/serves 3 peers at once/) });
    await clients[0].close();
    await until(() => s.stats().windowsInUse === 2);
    await connect(s);
    await expect(StocServer.start({ dir: tempDir(), id: 9, peers: 0 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
  });

  it('fences: once a range is claimed under a newer epoch, a connection that claimed it under an older one writes none of its files, also after a restart', async () => {
    const dir = tempDir();
    let s = await startServer(dir);
    const old = await connect(s);
    await old.fence(1, 5);
    await old.append('r1-000001.log', Buffer.from('a'), true);
    const direct = await old.openDirect('r1-000002.log');
    await direct.write(0, Buffer.from('d'), true);
    await old.createMemory('r1-000003.log', 4096);
    await old.fence(2, 5);
    const fresh = await connect(s);
    await fresh.fence(1, 9); // another LTC opens range 1
    const refused = { code: 'STALE_CONFIG', message: expect.stringMatching(/range 1 was opened under epoch 9, newer than this LTC's 5/) };
    await expect(old.append('r1-000001.log', Buffer.from('b'), true)).rejects.toMatchObject(refused);
    await expect(old.write('r1-000004.manifest', 0, Buffer.from('m'), true)).rejects.toMatchObject(refused);
    await expect(old.remove('r1-000001.log')).rejects.toMatchObject(refused);
    await expect(old.openDirect('r1-000001.log')).rejects.toMatchObject(refused);
    await expect(old.createMemory('r1-000005.log', 4096)).rejects.toMatchObject(refused);
    await expect(old.removeMemory('r1-000003.log')).rejects.toMatchObject(refused);
    await expect(direct.write(1, Buffer.from('late'), true)).rejects.toThrow(); // its handle was closed by the fence
    await expect(old.fence(1, 5)).rejects.toMatchObject({ code: 'STALE_CONFIG' });
    // Its other range, files of no range, reads: as before.
    await old.append('r2-000001.log', Buffer.from('x'), true);
    await old.append('plain.log', Buffer.from('x'), true);
    expect((await old.readAll('r1-000001.log'))!.toString()).toBe('a');
    expect((await old.readAll('r1-000002.log'))!.toString()).toBe('d');
    // The new owner writes; a client that never claimed the range is not an owner and is not refused.
    await fresh.append('r1-000001.log', Buffer.from('c'), true);
    const other = await connect(s);
    await other.append('r1-000006.sst', Buffer.from('t'), true);
    await expect(other.write('FENCES', 0, Buffer.from('x'), true)).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    // Restarted, the StoC still knows epoch 9.
    await old.close();
    await fresh.close();
    await other.close();
    await s.close();
    servers.splice(servers.indexOf(s), 1);
    s = await startServer(dir);
    const again = await connect(s);
    await expect(again.fence(1, 5)).rejects.toMatchObject({ code: 'STALE_CONFIG' });
    await expect(again.append('r1-000001.log', Buffer.from('z'), true)).rejects.toMatchObject({ code: 'STALE_CONFIG' });
    await again.fence(1, 9);
    await again.append('r1-000001.log', Buffer.from('e'), true);
    expect((await again.readAll('r1-000001.log'))!.toString()).toBe('ace');
    await expect(again.fence(-1, 1)).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    // An epoch past what the file holds is refused before it is kept (the StoC would not start again).
    const { rpc, ep } = await raw(s);
    await rpc.call(ep, 'stoc.hello', { version: 1 });
    await expect(rpc.call(ep, 'stoc.fence', { range: 1, epoch: Number.MAX_SAFE_INTEGER })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await s.close();
    servers.splice(servers.indexOf(s), 1);
    await startServer(dir);
  });
});
