/**
 * The transport between real processes on one host, over shared memory and loopback TCP:
 * data movement at several sizes, three-process topologies, one-sidedness, and RPC.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checksum32 } from '../../src/common/checksum.js';
import { NovaError } from '../../src/common/errors.js';
import { Fabric } from '../../src/transport/fabric.js';
import type { Endpoint } from '../../src/transport/endpoint.js';
import type { MemoryRegion, RemoteRegion } from '../../src/transport/regions.js';
import { Rpc } from '../../src/transport/rpc.js';
import { PeerProcess, pattern, useTls, type Tls } from '../helpers/peer-process.js';
import { rng } from '../helpers/rng.js';

const MiB = 1024 * 1024;
const REGION = 80 * MiB;


describe.each(['sm', 'tcp'] as Tls[])('transport over %s', (tls) => {
  let fabric: Fabric;
  let rpc: Rpc;
  let local: MemoryRegion;
  let a: PeerProcess;
  let b: PeerProcess;
  let ep: Endpoint; // to a
  let remote: RemoteRegion; // a's region 0
  const rand = rng(tls === 'sm' ? 7 : 11);

  beforeAll(async () => {
    useTls(tls);
    fabric = Fabric.open();
    rpc = new Rpc(fabric);
    local = fabric.allocate(REGION);
    a = new PeerProcess(tls);
    b = new PeerProcess(tls);
    const hello = await a.request('hello');
    const region = await a.request('alloc', { size: REGION });
    ep = await fabric.connect(Buffer.from(hello.address as string, 'hex'));
    remote = ep.importKey(Buffer.from(region.key as string, 'hex'));
  });

  afterAll(async () => {
    await fabric?.close();
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it.each([1, 4096, MiB, 64 * MiB])('WRITE of %i bytes is what the peer then reads in its memory', async (size) => {
    const localOffset = Math.floor(rand() * (REGION - size));
    const remoteOffset = Math.floor(rand() * (REGION - size));
    const bytes = local.buffer.subarray(localOffset, localOffset + size);
    pattern(bytes, size + 1);
    await ep.write(local, localOffset, remote, remoteOffset, size);
    const { checksum } = await a.request('checksum', { region: 0, offset: remoteOffset, length: size });
    expect(checksum).toBe(checksum32(bytes));
  });

  it.each([1, 4096, MiB, 64 * MiB])('READ of %i bytes returns what the peer wrote', async (size) => {
    const localOffset = Math.floor(rand() * (REGION - size));
    const remoteOffset = Math.floor(rand() * (REGION - size));
    const { checksum } = await a.request('fill', { region: 0, offset: remoteOffset, length: size, seed: size * 3 });
    await ep.read(local, localOffset, remote, remoteOffset, size);
    expect(checksum32(local.buffer.subarray(localOffset, localOffset + size))).toBe(checksum);
  });

  it('writeWithImm: the data is visible when the peer gets the immediate', async () => {
    const size = 256 * 1024;
    await a.request('watchImm', { region: 0, offset: 4096, length: size });
    for (let i = 1; i <= 20; i++) {
      const bytes = local.buffer.subarray(0, size);
      pattern(bytes, 1000 + i); // new bytes each round: a stale view would not match
      const imm = 0xabc00000 + i;
      const seen = a.waitEvent((e) => e.event === 'imm' && e.imm === imm);
      await ep.writeWithImm(local, 0, remote, 4096, size, imm);
      expect((await seen).checksum).toBe(checksum32(bytes));
    }
  });

  it('random offsets and sizes, many in flight, agree by checksum', async () => {
    const r = rng(99);
    const ops: Promise<void>[] = [];
    const spans: Array<[number, number]> = [];
    for (let i = 0; i < 200; i++) {
      const size = 1 + Math.floor(r() * 64 * 1024);
      const slot = i * 128 * 1024; // disjoint spans, so in-flight writes cannot overlap
      const offset = slot + Math.floor(r() * (128 * 1024 - size));
      pattern(local.buffer.subarray(offset, offset + size), i);
      spans.push([offset, size]);
      ops.push(ep.write(local, offset, remote, offset, size));
    }
    await Promise.all(ops);
    const sums = await Promise.all(spans.map(([offset, length]) =>
      rpc.call<number>(ep, 'checksum', { region: 0, offset, length })));
    sums.forEach((sum, i) => {
      const [offset, size] = spans[i];
      expect(sum).toBe(checksum32(local.buffer.subarray(offset, offset + size)));
    });
  });

  it('three processes: A writes into B, and this process reads it back from B', async () => {
    const bHello = await b.request('hello');
    const bRegion = await b.request('alloc', { size: 4 * MiB });
    const aEp = await a.request('connect', { address: bHello.address });
    const aRemote = await a.request('import', { ep: aEp.ep, key: bRegion.key });
    const aLocal = await a.request('alloc', { size: 4 * MiB });
    const filled = await a.request('fill', { region: aLocal.region, offset: 0, length: 3 * MiB, seed: 5 });
    await a.request('write', { ep: aEp.ep, region: aLocal.region, localOffset: 0, remote: aRemote.remote, remoteOffset: MiB, length: 3 * MiB });
    const toB = await fabric.connect(Buffer.from(bHello.address as string, 'hex'));
    const bRemote = toB.importKey(Buffer.from(bRegion.key as string, 'hex'));
    await toB.read(local, 0, bRemote, MiB, 3 * MiB);
    expect(checksum32(local.buffer.subarray(0, 3 * MiB))).toBe(filled.checksum);
    const { checksum } = await b.request('checksum', { region: 0, offset: MiB, length: 3 * MiB });
    expect(checksum).toBe(filled.checksum);
    toB.close();
  });

  it('is one-sided: READs and WRITEs complete while the target blocks its event loop', async () => {
    await a.request('fill', { region: 0, offset: 0, length: 64 * 1024, seed: 77 });
    const blocked = a.request('block', { ms: 1500 });
    await a.waitEvent((e) => e.event === 'blocking');
    const start = Date.now();
    let blockOver = false;
    void blocked.then(() => { blockOver = true; });
    for (let round = 0; round < 50; round++) {
      await ep.read(local, 0, remote, 0, 64 * 1024);
      await ep.write(local, 0, remote, 128 * 1024, 64 * 1024);
    }
    const elapsed = Date.now() - start;
    expect(blockOver).toBe(false);
    expect(elapsed).toBeLessThan(1000);
    await blocked;
    const { checksum } = await a.request('checksum', { region: 0, offset: 128 * 1024, length: 64 * 1024 });
    expect(checksum).toBe(checksum32(local.buffer.subarray(0, 64 * 1024)));
  });

  it('RPC: results, typed remote errors, unknown methods, deadlines', async () => {
    expect(await rpc.call(ep, 'echo', { x: [1, 2, 3], s: 'nova' })).toEqual({ x: [1, 2, 3], s: 'nova' });
    const big = Buffer.alloc(3 * MiB, 9);
    expect(Buffer.compare(await rpc.call<Buffer>(ep, 'echo', big), big)).toBe(0);
    await expect(rpc.call(ep, 'fail', 'x')).rejects.toMatchObject({ name: 'RemoteError', code: 'CORRUPTION' });
    await expect(rpc.call(ep, 'throw')).rejects.toMatchObject({ code: 'REMOTE' });
    await expect(rpc.call(ep, 'no-such-method')).rejects.toMatchObject({ code: 'UNKNOWN_METHOD' });
    const t = Date.now();
    await expect(rpc.call(ep, 'never', null, { timeoutMs: 200 })).rejects.toMatchObject({ code: 'DEADLINE_EXCEEDED' });
    expect(Date.now() - t).toBeLessThan(2000);
    const many = await Promise.all(Array.from({ length: 500 }, (_, i) => rpc.call<number>(ep, 'echo', i)));
    expect(many).toEqual(Array.from({ length: 500 }, (_, i) => i));
  });

  it('refuses bad use before posting anything', async () => {
    const cases: Array<[Promise<void>, string]> = [
      [ep.read(local, 0, remote, REGION - 10, 11), 'OUT_OF_BOUNDS'],
      [ep.write(local, REGION, remote, 0, 1), 'OUT_OF_BOUNDS'],
      [ep.read(local, -1, remote, 0, 1), 'OUT_OF_BOUNDS'],
      [ep.read(local, 0.5, remote, 0, 1), 'OUT_OF_BOUNDS'],
      [ep.writeWithImm(local, 0, remote, 0, 1, -1), 'BAD_ARGUMENT'],
      [ep.send(-3, Buffer.alloc(1)), 'BAD_ARGUMENT'],
    ];
    for (const [p, code] of cases) await expect(p).rejects.toMatchObject({ code });
    // A narrowed key bounds what the peer can touch.
    const region = await a.request('alloc', { size: 8192 });
    const full = (await import('../../src/transport/remote-key.js')).RemoteKey.parse(Buffer.from(region.key as string, 'hex'));
    const narrow = ep.importKey(full.slice(4096, 1024));
    await ep.write(local, 0, narrow, 1000, 24);
    await expect(ep.write(local, 0, narrow, 1000, 25)).rejects.toMatchObject({ code: 'OUT_OF_BOUNDS' });
  });

  it('refuses garbled, foreign and dropped remote keys', async () => {
    const { key } = await a.request('alloc', { size: 4096 });
    const bytes = Buffer.from(key as string, 'hex');
    for (const at of [0, 4, 9, 20, 30, bytes.length - 1]) {
      const garbled = Buffer.from(bytes);
      garbled[at] ^= 0x40;
      expect(() => ep.importKey(garbled)).toThrow(expect.objectContaining({ code: 'BAD_REMOTE_KEY' }));
    }
    expect(() => ep.importKey(bytes.subarray(0, 20))).toThrow(expect.objectContaining({ code: 'BAD_REMOTE_KEY' }));
    const bHello = await b.request('hello');
    const other = await fabric.connect(Buffer.from(bHello.address as string, 'hex'));
    const foreign = other.importKey(bytes); // imported on another endpoint
    await expect(ep.read(local, 0, foreign, 0, 8)).rejects.toMatchObject({ code: 'BAD_REMOTE_KEY' });
    const dropped = ep.importKey(bytes);
    dropped.drop();
    await expect(ep.read(local, 0, dropped, 0, 8)).rejects.toMatchObject({ code: 'BAD_REMOTE_KEY' });
    other.close();
  });
});

/** Runs `body` with a fresh fabric here and a fresh peer process; both are torn down after. */
async function withPeer(tls: Tls, body: (fabric: Fabric, peer: PeerProcess, address: Buffer) => Promise<void>): Promise<void> {
  useTls(tls);
  const fabric = Fabric.open();
  const peer = new PeerProcess(tls);
  try {
    const hello = await peer.request('hello');
    await body(fabric, peer, Buffer.from(hello.address as string, 'hex'));
  } finally {
    peer.kill9();
    await fabric.close();
  }
}

describe.each(['sm', 'tcp'] as Tls[])('faults over %s', (tls) => {
  it('kill -9 of the peer mid-stream fails everything pending on it within 2 s', () =>
    withPeer(tls, async (fabric, peer, address) => {
      const rpc = new Rpc(fabric);
      const region = await peer.request('alloc', { size: 4 * MiB });
      const ep = await fabric.connect(address);
      const remote = ep.importKey(Buffer.from(region.key as string, 'hex'));
      const local = fabric.allocate(4 * MiB);
      const lost = new Promise<string>((resolve) => ep.onLost(resolve));
      const pendingCalls = Array.from({ length: 20 }, () => rpc.call(ep, 'never', null, { timeoutMs: 30_000 }).then(
        () => 'resolved', (e: NovaError) => e.code));
      let stop = false;
      const outcomes: string[] = [];
      const streams = Array.from({ length: 8 }, async () => {
        while (!stop) {
          const r = await Promise.allSettled([
            ep.write(local, 0, remote, 0, 64 * 1024),
            ep.read(local, MiB, remote, MiB, 64 * 1024),
            ep.send(100, Buffer.alloc(1024)),
          ]);
          for (const s of r) if (s.status === 'rejected') outcomes.push((s.reason as NovaError).code);
          if (r.some((s) => s.status === 'rejected')) return;
        }
      });
      await new Promise((r) => setTimeout(r, 200));
      const killedAt = Date.now();
      peer.kill9();
      expect(await lost).toBe('PEER_LOST');
      const calls = await Promise.all(pendingCalls);
      const elapsed = Date.now() - killedAt;
      expect(calls.filter((c) => c !== 'PEER_LOST')).toEqual([]);
      expect(elapsed).toBeLessThan(2000);
      await Promise.race([Promise.all(streams), new Promise((_, rej) => setTimeout(() => rej(new Error('streams hung')), 2000))]);
      stop = true;
      expect(outcomes.length).toBeGreaterThan(0);
      expect(outcomes.filter((c) => c !== 'PEER_LOST')).toEqual([]);
      await expect(ep.read(local, 0, remote, 0, 8)).rejects.toMatchObject({ code: 'PEER_LOST' });
      await expect(ep.send(100, Buffer.alloc(8))).rejects.toMatchObject({ code: 'PEER_LOST' });
    }));

  it('a message to a closed endpoint fails; the peer sees the close', () =>
    withPeer(tls, async (fabric, peer, address) => {
      const ep = await fabric.connect(address);
      await ep.send(100, Buffer.from('before close'));
      ep.close();
      await expect(ep.send(100, Buffer.from('after close'))).rejects.toMatchObject({ code: 'CLOSED' });
      await expect(ep.flush()).rejects.toMatchObject({ code: 'CLOSED' });
      // And when the peer closes its whole fabric, our new endpoint to it is lost.
      const again = await fabric.connect(address);
      const lost = new Promise<string>((resolve) => again.onLost(resolve));
      await peer.request('closeFabric');
      expect(await lost).toBe('PEER_LOST');
      await expect(again.send(100, Buffer.alloc(4))).rejects.toMatchObject({ code: 'PEER_LOST' });
    }));

  it('connect to a dead address fails by its deadline, not a hang', () =>
    withPeer(tls, async (fabric, peer, address) => {
      peer.kill9();
      await new Promise((r) => setTimeout(r, 100));
      const t = Date.now();
      const outcome = await fabric.connect(address, { timeoutMs: 1500 })
        .then(() => 'connected', (e: NovaError) => e.code);
      expect(['PEER_LOST', 'DEADLINE_EXCEEDED']).toContain(outcome);
      expect(Date.now() - t).toBeLessThan(3000);
      await expect(fabric.connect(Buffer.from('not an address'), { timeoutMs: 1500 })).rejects.toBeInstanceOf(NovaError);
    }));
});
