/**
 * Fabric behaviour that needs no second process: two fabrics in this process, over
 * shared memory. Lifetimes, closing, and malformed RPC frames.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Fabric, type FabricOptions } from '../../src/transport/fabric.js';
import { openSync, closeSync, readFileSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { FILE_WRITE, Rpc, RPC_REQUEST } from '../../src/transport/rpc.js';
import { OpKind } from '../../src/transport/codes.js';
import { until } from '../helpers/until.js';
import { useTls } from '../helpers/peer-process.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-direct-');

const opened: Fabric[] = [];
function open(options?: FabricOptions): Fabric {
  useTls('sm');
  const f = Fabric.open(options);
  opened.push(f);
  return f;
}
afterEach(async () => {
  for (const f of opened.splice(0)) await f.close();
});

async function pair(options?: FabricOptions) {
  const a = open(options);
  const b = open(options);
  const accepted = new Promise<import('../../src/transport/endpoint.js').Endpoint>((r) => b.onConnection(r));
  const ep = await a.connect(b.address);
  return { a, b, ep, back: await accepted };
}

describe('Fabric in one process', () => {
  it('allocates regions whose buffers are detached when closed', async () => {
    const f = open();
    const r = f.allocate(1 << 20);
    expect(r.buffer.length).toBe(1 << 20);
    r.buffer[12345] = 7;
    expect(r.buffer[12345]).toBe(7);
    await r.close();
    expect(r.buffer.length).toBe(0);
    expect(r.isClosed).toBe(true);
    await r.close(); // idempotent
    expect(() => f.allocate(0)).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
    expect(() => f.allocate(1.5)).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
  });

  it('a region closes only after the operations on it finish', async () => {
    const { a, b, ep } = await pair();
    const local = a.allocate(8 << 20);
    const remoteRegion = b.allocate(8 << 20);
    remoteRegion.buffer.fill(3);
    const remote = ep.importKey(remoteRegion.key.serialize());
    const reads = Array.from({ length: 32 }, () => ep.read(local, 0, remote, 0, 8 << 20));
    const closed = local.close();
    await expect(Promise.all(reads)).resolves.toBeDefined();
    await closed;
    await expect(ep.read(local, 0, remote, 0, 1)).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('closing the fabric fails everything in flight with CLOSED', async () => {
    const { a, b, ep } = await pair();
    const local = a.allocate(1 << 20);
    const remote = ep.importKey(b.allocate(1 << 20).key);
    const rpc = new Rpc(a);
    const inflight = [
      ...Array.from({ length: 200 }, () => ep.read(local, 0, remote, 0, 1 << 20)),
      rpc.call(ep, 'nothing-serves-this', null, { timeoutMs: 60_000 }),
      ep.flush(),
    ];
    const outcomes = Promise.allSettled(inflight);
    await a.close();
    const results = await outcomes;
    for (const r of results) {
      if (r.status === 'rejected') expect(['CLOSED', 'UNKNOWN_METHOD']).toContain((r.reason as { code: string }).code);
    }
    expect(results.some((r) => r.status === 'rejected' && (r.reason as { code: string }).code === 'CLOSED')).toBe(true);
    expect(local.buffer.length).toBe(0);
    await expect(ep.read(local, 0, remote, 0, 1)).rejects.toMatchObject({ code: 'CLOSED' });
    expect(() => a.allocate(10)).toThrow(expect.objectContaining({ code: 'CLOSED' }));
    await expect(a.connect(b.address)).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('messages route by type; unknown types and throwing handlers are counted, not fatal', async () => {
    const { b, ep } = await pair();
    const got: string[] = [];
    b.onMessage(200, (p) => got.push(p.toString()));
    b.onMessage(201, () => { throw new Error('handler bug'); });
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    await ep.send(201, Buffer.from('boom'));
    await ep.send(999, Buffer.from('nobody'));
    await ep.send(200, Buffer.from('hello'));
    await ep.send(200, Buffer.alloc(0));
    await ep.flush();
    await new Promise((r) => setTimeout(r, 100));
    process.off('warning', onWarning);
    expect(got).toEqual(['hello', '']);
    expect(b.stats().unhandledMessages).toBe(1);
    expect(b.stats().handlerErrors).toBe(1);
    await expect(ep.send(200, Buffer.alloc(65 * 1024 * 1024))).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
  });

  it('delivers bursts larger than the drain arena intact and in order', async () => {
    const { b, ep } = await pair();
    const got: Buffer[] = [];
    const all = new Promise<void>((resolve) => b.onMessage(300, (p) => { got.push(p); if (got.length === 3000) resolve(); }));
    const sizes = Array.from({ length: 3000 }, (_, i) => [0, 1, 1000, 16 * 1024, 16 * 1024 + 1, 40_000][i % 6]);
    await Promise.all(sizes.map((n, i) => ep.send(300, Buffer.alloc(n, i & 0xff))));
    await all;
    got.forEach((p, i) => {
      expect(p.length).toBe(sizes[i]);
      if (p.length > 0) expect(p[0] === (i & 0xff) && p[p.length - 1] === (i & 0xff)).toBe(true);
    });
  });

  it('hands operations over and completions back in batches, not one crossing per op', async () => {
    const { a, b, ep } = await pair();
    const local = a.allocate(64 * 64);
    const remote = ep.importKey(b.allocate(64 * 64).key);
    const before = a.stats();
    const N = 20_000;
    let issued = 0;
    const loop = async (slot: number) => {
      while (issued < N) {
        issued++;
        await ep.read(local, slot * 64, remote, slot * 64, 64);
      }
    };
    await Promise.all(Array.from({ length: 64 }, (_, slot) => loop(slot)));
    const after = a.stats();
    const ops = after.opsPosted - before.opsPosted;
    expect(ops).toBeGreaterThanOrEqual(N);
    // With 64 in flight, each crossing should carry many operations/completions.
    expect(after.batches - before.batches).toBeLessThan(ops / 8);
    expect(after.notifications - before.notifications).toBeLessThan(ops / 8);
  });

  it('a dropped key waits for operations posted with it; later ones are refused', async () => {
    const { a, b, ep } = await pair();
    const local = a.allocate(16 << 20);
    const remoteRegion = b.allocate(16 << 20);
    remoteRegion.buffer.fill(5);
    const remote = ep.importKey(remoteRegion.key);
    const reads = Array.from({ length: 16 }, (_, i) => ep.read(local, i << 20, remote, i << 20, 1 << 20));
    remote.drop(); // same turn: the staged reads must still run with the key
    await Promise.all(reads);
    expect(local.buffer.every((x) => x === 5)).toBe(true);
    await expect(ep.read(local, 0, remote, 0, 8)).rejects.toMatchObject({ code: 'BAD_REMOTE_KEY' });
  });

  it('a throwing onLost listener does not stop event delivery', async () => {
    const { a, b, ep } = await pair();
    const other = await a.connect(b.address);
    other.onLost(() => { throw new Error('listener bug'); });
    const warned = new Promise<void>((resolve) => process.once('warning', () => resolve()));
    other.close();
    await warned;
    const local = a.allocate(4096);
    const remote = ep.importKey(b.allocate(4096).key);
    await expect(Promise.all(Array.from({ length: 100 }, () => ep.read(local, 0, remote, 0, 64)))).resolves.toBeDefined();
  });

  it('inline completions do not starve timers', async () => {
    // Counted, not timed: a repeating setImmediate samples the fabric once per event-loop turn,
    // and no turn may take more than two refills' worth of inline batches (the refill is itself
    // an immediate, so one can fall between two samples). The loops end after ten 5 ms ticks,
    // or give up on a wall-clock deadline if timers never run.
    const { a, b, ep } = await pair({ inlineWaitUs: 2000, spinUs: 200 });
    const local = a.allocate(64 * 64);
    const remote = ep.importKey(b.allocate(64 * 64).key);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 5);
    let sampling = true;
    let last = a.stats().inlineBatches;
    let mostInOneTurn = 0;
    const sample = (): void => {
      const now = a.stats().inlineBatches;
      mostInOneTurn = Math.max(mostInOneTurn, now - last);
      last = now;
      if (sampling) setImmediate(sample);
    };
    setImmediate(sample);
    const giveUpAt = Date.now() + 10_000;
    const loops = Array.from({ length: 64 }, async (_, slot) => {
      while ((ticks < 10 || a.stats().inlineBatches < 50) && Date.now() < giveUpAt) {
        await ep.read(local, slot * 64, remote, slot * 64, 64);
      }
    });
    await Promise.all(loops);
    sampling = false;
    clearInterval(timer);
    expect(ticks).toBeGreaterThanOrEqual(10);
    expect(a.stats().inlineBatches).toBeGreaterThanOrEqual(50); // the inline path did run
    expect(mostInOneTurn).toBeLessThanOrEqual(2 * 32);
  });

  it('malformed RPC requests are answered or counted, never fatal', async () => {
    const { a, b, ep } = await pair();
    const server = new Rpc(b);
    server.serve('echo', (x) => x);
    const client = new Rpc(a);
    await ep.send(RPC_REQUEST, Buffer.from([0xc1])); // not msgpack
    await ep.send(RPC_REQUEST, Buffer.from([0x93, 1, 2, 3])); // wrong shape
    await expect(client.call(ep, 'echo', 'still works')).resolves.toBe('still works');
    expect(server.stats().malformed).toBe(2);
  });

  it('direct file writes: WRITTEN into a window, named by a small message, done by the peer\'s progress thread', async () => {
    const { a, b, ep, back } = await pair();
    const dir = tempDir();
    const fd = openSync(join(dir, 'log'), 'w+');
    try {
      let messages = 0;
      b.onMessage(FILE_WRITE, () => { messages++; }); // must never be called: native answers
      const client = new Rpc(a);
      const buffer = b.allocate(1 << 20);
      const staging = a.allocate(512 * 1024);
      const spare = b.allocate(4096);
      // The handles' window is [64 KiB, +256 KiB) of the buffer; the client sees only that.
      const inWindow = { region: buffer, start: 64 * 1024, length: 256 * 1024 };
      const window = ep.importKey(buffer.key.slice(64 * 1024, 256 * 1024));
      b.registerFile(7, fd, 1 << 20, back, inWindow);
      expect(() => b.registerFile(7, fd, 1 << 20, back, inWindow)).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
      expect(() => b.registerFile(8, fd, 1 << 20, back, { ...inWindow, length: 1 << 20 })).toThrow(expect.objectContaining({ code: 'OUT_OF_BOUNDS' }));
      // `bytes` staged at `at` and WRITTEN to the same place in the window, then written to `offset`.
      const put = (handle: number, offset: number, bytes: Buffer, at = 0, into = window) => {
        staging.buffer.set(bytes, at);
        return client.writeFile(ep, handle, offset, staging, at, into, at, bytes.length);
      };
      const before = { a: a.stats(), b: b.stats() };
      const ends = await Promise.all(Array.from({ length: 64 }, (_, i) => put(7, i * 1000, Buffer.alloc(1000, i), i * 1000)));
      expect(Math.max(...ends)).toBe(64_000);
      expect(a.stats().opsPosted - before.a.opsPosted).toBe(128); // a WRITE and a 32-byte message each
      expect(b.stats().fileWrites - before.b.fileWrites).toBe(64);
      expect(await put(7, 200_000, Buffer.alloc(200_000, 9))).toBe(400_000);
      expect(buffer.buffer[64 * 1024]).toBe(9); // the bytes went through the window
      expect(b.fileEnd(7)).toBe(400_000);
      const file = readFileSync(join(dir, 'log'));
      for (let i = 0; i < 64; i++) expect(file.subarray(i * 1000, (i + 1) * 1000).every((x) => x === i)).toBe(true);
      expect(file.subarray(200_000, 400_000).every((x) => x === 9)).toBe(true);
      await expect(put(7, (1 << 20) - 10, Buffer.alloc(11))).rejects.toMatchObject({ code: 'OUT_OF_BOUNDS', message: expect.stringMatching(/file limit/) });
      await expect(put(8, 0, Buffer.alloc(1))).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
      // A sender that sees more of the buffer than the window may not name bytes past it.
      const wider = ep.importKey(buffer.key.slice(64 * 1024, 512 * 1024));
      await expect(put(7, 0, Buffer.alloc(4096), 256 * 1024, wider))
        .rejects.toMatchObject({ code: 'OUT_OF_BOUNDS', message: expect.stringMatching(/outside its 262144-byte window/) });
      // A WRITE that is refused sends no message: nothing is written from a stale window.
      const written = b.stats().fileWrites;
      await expect(put(7, 0, Buffer.alloc(4096, 5), 255 * 1024)).rejects.toMatchObject({ code: 'OUT_OF_BOUNDS' });
      expect(b.stats().fileWrites).toBe(written);
      expect(readFileSync(join(dir, 'log'))[0]).toBe(0);
      // Another connection to the same fabric may not use the handle.
      const other = await a.connect(b.address);
      const otherWindow = other.importKey(buffer.key.slice(64 * 1024, 256 * 1024));
      staging.buffer[0] = 1;
      await expect(client.writeFile(other, 7, 0, staging, 0, otherWindow, 0, 1)).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
      // Malformed requests: too short to carry a request id is counted, not answered (the
      // deadline fails it); another version or length is answered BAD_ARGUMENT.
      const malformed = b.stats().malformedFrames;
      const late = client.stats().lateResponses;
      await ep.send(FILE_WRITE, Buffer.alloc(3));
      await ep.send(FILE_WRITE, Buffer.from([1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f]));
      await ep.send(FILE_WRITE, Buffer.concat([Buffer.from([2, 0, 0, 0, 0xfe, 0xff, 0xff, 0x7f]), Buffer.alloc(40)]));
      expect(await put(7, 0, Buffer.from([1]))).toBe(400_000); // in order after them
      expect(b.stats().malformedFrames).toBe(malformed + 1);
      expect(client.stats().lateResponses).toBe(late + 2); // answers to ids it never used
      // Offsets past 32 bits (the request carries 64): a sparse write far into the file.
      b.registerFile(9, fd, 2 ** 40, back, inWindow);
      expect(await put(9, 2 ** 32 + 5, Buffer.from('far'))).toBe(2 ** 32 + 8);
      const far = Buffer.alloc(3);
      readSync(fd, far, 0, 3, 2 ** 32 + 5);
      expect(far.toString()).toBe('far');
      expect(b.unregisterFile(9)).toBe(2 ** 32 + 8);
      expect(b.unregisterFile(7)).toBe(400_000);
      await expect(put(7, 0, Buffer.alloc(1))).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
      // A handle whose window closed refuses writes.
      b.registerFile(10, fd, 1 << 20, back, inWindow);
      await buffer.close();
      await expect(put(10, 0, Buffer.alloc(1), 0, ep.importKey(spare.key))).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/window is closed/) });
      expect(messages).toBe(0);
    } finally {
      closeSync(fd);
    }
  });

  it('a write-then-send pair travels whole or fails whole; its send never goes alone', async () => {
    const { a, b, ep } = await pair();
    const local = a.allocate(4096);
    const remote = ep.importKey(b.allocate(4096).key);
    let delivered = 0;
    b.onMessage(99, () => { delivered++; });
    const post = (kind: number, opts: { region?: number; rkey?: number; length?: number } = {}) =>
      a.post(kind, ep.id, opts.region ?? 0, 0, opts.length ?? 0, opts.rkey ?? 0, 99, 0, 'raw');
    const write = { region: local.id, rkey: remote.id, length: 8 };
    const paired = OpKind.Send | (1 << 8); // native/codes.h kPairedSend in descriptor byte 1
    const bad = { code: 'BAD_ARGUMENT' };
    // Descriptors posted in one turn travel in one batch, in order.
    const results = await Promise.allSettled([
      post(paired), // a paired send alone
      post(OpKind.WriteSend, write), post(OpKind.Send), // a pair whose send is not marked: the plain send goes
      post(OpKind.WriteSend, write), post(paired), // a write with its own op id: both refused
      post(OpKind.WriteSend, write), // last of the batch, no send after it
    ]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'fulfilled', 'rejected', 'rejected', 'rejected']);
    for (const r of results) if (r.status === 'rejected') expect(r.reason).toMatchObject(bad);
    await ep.writeThenSend(local, 0, remote, 0, 8, 99, Buffer.from('named')); // the real thing
    await until(() => delivered === 2);
    await new Promise((r) => setTimeout(r, 50));
    expect(delivered).toBe(2); // the plain send and the real pair's, nothing else
  });
});
