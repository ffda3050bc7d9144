/**
 * The TCP RPC in this process: batching, deadlines, local sockets, malformed input, the coordinator over it.
 */
import { describe, expect, it } from 'vitest';
import { TcpRpcClient } from '../../src/net/tcp-rpc-client.js';
import { TcpRpcServer } from '../../src/net/tcp-rpc-server.js';
import { encodeFrame } from '../../src/net/frames.js';
import { readTlsFiles, useTcpTls } from '../../src/net/tcp-tls.js';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { until } from '../helpers/until.js';
import { localSocketOf } from '../../src/net/local-socket.js';
import { createConnection, createServer } from 'node:net';

describe('TCP RPC', () => {
  it('batches pipelined calls, answers errors with codes, and meets deadlines', async () => {
    let frames = 0;
    const server = await TcpRpcServer.listen({
      name: 'test',
      handlers: {
        echo: (a) => a[0],
        fail: () => { throw Object.assign(new Error('no'), { code: 'BUSY', detail: 42 }); },
        slow: () => new Promise(() => undefined),
      },
    });
    const c = await TcpRpcClient.connect(`127.0.0.1:${server.port}`);
    const socket = (c as unknown as { socket: import('node:net').Socket }).socket;
    const write = socket.write.bind(socket);
    socket.write = ((b: Buffer) => { frames++; return write(b); }) as typeof socket.write;
    const answers = await Promise.all(Array.from({ length: 100 }, (_, i) => c.call('echo', [i])));
    expect(answers).toEqual(Array.from({ length: 100 }, (_, i) => i));
    expect(frames).toBe(7); // 100 calls in one turn leave in frames of 16 (the last has 4)
    frames = 0;
    await Promise.all([c.call('echo', [1]), c.call('echo', [2])]);
    expect(frames).toBe(1); // a few calls in one turn share one frame
    await expect(c.call('fail', [])).rejects.toMatchObject({ code: 'BUSY', detail: 42 });
    await expect(c.call('nope', [])).rejects.toMatchObject({ code: 'UNKNOWN_METHOD' });
    await expect(c.call('slow', [], 100)).rejects.toMatchObject({ code: 'DEADLINE_EXCEEDED' });
    c.close();
    await expect(c.call('echo', [1])).rejects.toMatchObject({ code: 'CLOSED' });
    await server.close();
  });

  it('lets grouped requests ride to the end of the turn: they do not cut a frame early', async () => {
    const server = await TcpRpcServer.listen({ name: 'test', handlers: { echo: (a) => a[0], put: (a) => a[0] } });
    const c = await TcpRpcClient.connect(`127.0.0.1:${server.port}`, { grouped: ['put'] });
    let frames = 0;
    const socket = (c as unknown as { socket: import('node:net').Socket }).socket;
    const write = socket.write.bind(socket);
    socket.write = ((b: Buffer) => { frames++; return write(b); }) as typeof socket.write;
    // 100 grouped requests in one turn: one frame.
    expect(await Promise.all(Array.from({ length: 100 }, (_, i) => c.call('put', [i])))).toHaveLength(100);
    expect(frames).toBe(1);
    // Mixed: only the 40 that cut count toward the early cut (16, 16, then the rest with the turn).
    frames = 0;
    await Promise.all(Array.from({ length: 80 }, (_, i) => c.call(i % 2 === 0 ? 'echo' : 'put', [i])));
    expect(frames).toBe(3);
    c.close();
    await server.close();
  });

  it('uses the server\'s local socket on the same machine, and TCP where none answers', async () => {
    const peers: string[] = [];
    const server = await TcpRpcServer.listen({ name: 'test', handlers: { echo: (a, peer) => (peers.push(peer), a[0]) } });
    const address = `127.0.0.1:${server.port}`;
    const near = await TcpRpcClient.connect(address);
    expect(near.local).toBe(true);
    expect(await Promise.all(Array.from({ length: 40 }, (_, i) => near.call('echo', [Buffer.alloc(i * 100, i)]))))
      .toEqual(Array.from({ length: 40 }, (_, i) => Buffer.alloc(i * 100, i)));
    expect(new Set(peers)).toEqual(new Set(['local client 1']));
    // Garbage on the local socket closes that connection only, as on TCP.
    const raw = createConnection({ path: localSocketOf(address)! });
    raw.on('error', () => undefined); // a reset after the garbage is as good as a close
    raw.resume(); // the server's greeting is read, so its close arrives
    await new Promise((r) => raw.once('connect', r));
    raw.write(Buffer.alloc(32, 0xee));
    await new Promise((r) => raw.once('close', r));
    expect(server.malformed).toBe(1);
    expect(await near.call('echo', ['still'])).toBe('still');
    near.close();
    // Without the local listener (a server elsewhere), a client connects over TCP.
    await new Promise((r) => (server as unknown as { local: import('node:net').Server }).local.close(r));
    const far = await TcpRpcClient.connect(address);
    expect(far.local).toBe(false);
    expect(await far.call('echo', [5])).toBe(5);
    expect(peers.at(-1)).toMatch(/^127\.0\.0\.1:\d+$/);
    far.close();
    await server.close();
  });

  it('names local sockets within the kernel\'s limit, and tries them only for this machine\'s addresses', async () => {
    // Names the kernel would cut to one 108-byte prefix stay distinct.
    const host = 'h'.repeat(120);
    const a = localSocketOf(`${host}:7001`)!;
    const b = localSocketOf(`${host}:7002`)!;
    expect(a).not.toBe(b);
    expect(Buffer.byteLength(a)).toBeLessThanOrEqual(107);
    expect(localSocketOf('127.0.0.1:7001')).toBe('\0nova-rpc/127.0.0.1:7001');
    // A name bound here for an address of another machine is never tried: the client goes to
    // that address over TCP (here: nothing listens, so the connect fails) and not to the squatter.
    const elsewhere = '192.0.2.1:7070'; // TEST-NET-1, never this machine's
    const squatter = createServer((sock) => sock.destroy());
    await new Promise<void>((r) => squatter.listen(localSocketOf(elsewhere)!, r));
    let squatted = 0;
    squatter.on('connection', () => squatted++);
    try {
      await expect(TcpRpcClient.connect(elsewhere, { timeoutMs: 200 })).rejects.toMatchObject({ code: expect.stringMatching(/PEER_LOST|DEADLINE_EXCEEDED/) });
      expect(squatted).toBe(0);
    } finally {
      await new Promise((r) => squatter.close(r));
    }
  });

  it('refuses to start when another process holds its local socket name', async () => {
    const probe = await TcpRpcServer.listen({ name: 'probe', handlers: {} });
    const port = probe.port;
    await probe.close();
    const squatter = createServer();
    await new Promise<void>((r) => squatter.listen(localSocketOf(`127.0.0.1:${port}`)!, r));
    try {
      await expect(TcpRpcServer.listen({ name: 'test', port, handlers: {} }))
        .rejects.toMatchObject({ code: 'BUSY', message: expect.stringContaining('held by another process') });
    } finally {
      await new Promise((r) => squatter.close(r));
    }
    // Once the name is free, the same port serves (so the refused server let go of it).
    const server = await TcpRpcServer.listen({ name: 'test', port, handlers: { echo: (a) => a[0] } });
    const c = await TcpRpcClient.connect(`127.0.0.1:${port}`);
    expect(c.local).toBe(true);
    expect(await c.call('echo', [1])).toBe(1);
    c.close();
    await server.close();
  });

  it('keeps what it read intact: bytes a handler holds on to are not overwritten by later reads', async () => {
    const held: Buffer[] = [];
    const server = await TcpRpcServer.listen({
      name: 'test',
      handlers: { hold: (a) => held.push(a[0] as Buffer), count: () => held.length },
    });
    const c = await TcpRpcClient.connect(`127.0.0.1:${server.port}`);
    const value = (i: number): Buffer => Buffer.alloc(1000 + (i % 97), i % 251);
    // 3,000 values of ~1 KB over 30 turns, the handler keeping views into what was read.
    for (let turn = 0; turn < 30; turn++) {
      await Promise.all(Array.from({ length: 100 }, (_, j) => c.call('hold', [value(turn * 100 + j)])));
    }
    expect(await c.call('count', [])).toBe(3000);
    const bad = held.findIndex((b, i) => !b.equals(value(i)));
    expect(bad).toBe(-1);
    c.close();
    await server.close();
  });

  it('never sends a frame past the limit: large batches are cut, an oversize message fails alone', async () => {
    const MiB = 1024 * 1024;
    const logs: string[] = [];
    const server = await TcpRpcServer.listen({
      name: 'test', onLog: (l) => logs.push(l),
      handlers: { big: (a) => Buffer.alloc((a[0] as number) * MiB, 1), echo: (a) => a[0] },
    });
    const c = await TcpRpcClient.connect(`127.0.0.1:${server.port}`, { timeoutMs: 30_000 });
    // Three 30 MiB answers complete in one turn: 90 MiB, more than one 64 MiB frame holds.
    const three = await Promise.all([30, 30, 30].map((n) => c.call<Uint8Array>('big', [n])));
    expect(three.map((b) => b.length)).toEqual([30 * MiB, 30 * MiB, 30 * MiB]);
    // One answer larger than a frame: that call gets BAD_ARGUMENT; the connection goes on.
    const [huge, small] = await Promise.allSettled([c.call('big', [70]), c.call('echo', ['ok'])]);
    expect(huge).toMatchObject({ status: 'rejected', reason: { code: 'BAD_ARGUMENT', message: expect.stringContaining('exceeds the 67108864-byte frame limit') } });
    expect(small).toMatchObject({ status: 'fulfilled', value: 'ok' });
    expect(logs.join('\n')).toContain('exceeds the 67108864-byte frame limit');
    // A request larger than a frame fails at the client without touching the connection.
    await expect(c.call('echo', [Buffer.alloc(70 * MiB)])).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringContaining('send less at once') });
    expect(await c.call('echo', [7])).toBe(7);
    expect(c.closed).toBe(false);
    c.close();
    await server.close();
  });

  it('bounds what peers make it hold: a half-sent frame is cut off when it stalls, partial frames past the total bound and connections past the most are refused, idle connections close; others are served', async () => {
    const lines: string[] = [];
    const server = await TcpRpcServer.listen({
      name: 'test', handlers: { echo: (a) => a[0], wait: () => new Promise((r) => setTimeout(r, 400)) },
      limits: { connections: 6, bufferedBytes: 3 * 2 ** 20, stallMs: 200, idleMs: 300 }, onLog: (l) => lines.push(l),
    });
    const raw = async (): Promise<import('node:net').Socket> => {
      const s = createConnection({ host: '127.0.0.1', port: server.port });
      s.on('error', () => undefined);
      s.resume(); // the server's greeting is read, so its close arrives
      await new Promise((r) => s.once('connect', r));
      return s;
    };
    const closed = (s: import('node:net').Socket): Promise<unknown> => new Promise((r) => (s.destroyed ? r(undefined) : s.once('close', r)));
    const frame = encodeFrame(Buffer.alloc(2 * 2 ** 20));
    // Half a frame, then silence: cut off after stallMs.
    const slow = await raw();
    slow.write(frame.subarray(0, 1000));
    const t0 = performance.now();
    await closed(slow);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(150);
    expect(lines.some((l) => /sent 1000 bytes of a frame, then nothing for 200 ms/.test(l))).toBe(true);
    // Two peers each holding most of a 2 MiB frame pass the 3 MiB bound: the second is closed.
    const a = await raw();
    const b = await raw();
    a.write(frame.subarray(0, 1.5 * 2 ** 20));
    await new Promise((r) => setTimeout(r, 50));
    b.write(frame.subarray(0, 1.8 * 2 ** 20));
    await closed(b);
    expect(lines.some((l) => /would pass the 3145728 bytes of partial frames/.test(l))).toBe(true);
    a.destroy();
    // Past the most connections, a new one is refused; the ones open are served.
    const c = await TcpRpcClient.connect(`127.0.0.1:${server.port}`);
    const held = await Promise.all(Array.from({ length: 5 }, () => raw()));
    const extra = await raw();
    await closed(extra);
    expect(lines.some((l) => /6 are open, the most it takes/.test(l))).toBe(true);
    expect(await c.call('echo', ['served'])).toBe('served');
    held.forEach((s) => s.destroy());
    // A connection silent for idleMs is closed unless one of its requests is under way.
    const waiting = c.call('wait', []);
    await new Promise((r) => setTimeout(r, 350));
    expect(c.closed).toBe(false);
    await waiting;
    await new Promise((r) => setTimeout(r, 700));
    expect(c.closed).toBe(true);
    expect(server.cutOff).toBeGreaterThanOrEqual(4);
    // Malformed streams (a bad checksum after a partial frame, a bad header) leave the count of held bytes right.
    const badSum = Buffer.from(frame);
    badSum[badSum.length - 1] ^= 1;
    const d = await raw();
    d.write(badSum.subarray(0, 1000));
    await new Promise((r) => setTimeout(r, 20));
    d.write(badSum.subarray(1000));
    await closed(d);
    const e = await raw();
    e.write(Buffer.alloc(64, 0xee));
    await closed(e);
    await until(() => (server as unknown as { buffered: number }).buffered === 0);
    await server.close();
  });

  it('with TLS: a server with a certificate serves only TLS clients that trust its CA; a plain client, or a TLS client of a plain server, fails at connect', async () => {
    const fixtures = join(fileURLToPath(new URL('.', import.meta.url)), '..', 'fixtures', 'tls');
    const files = readTlsFiles({ cert: join(fixtures, 'server.pem'), key: join(fixtures, 'server.key'), ca: join(fixtures, 'ca.pem') });
    const secure = await TcpRpcServer.listen({ name: 'test', handlers: { echo: (a) => a[0] }, tls: files });
    const plain = await TcpRpcServer.listen({ name: 'test', handlers: { echo: (a) => a[0] }, tls: {} });
    try {
      useTcpTls({ ca: files.ca });
      const c = await TcpRpcClient.connect(`127.0.0.1:${secure.port}`, { timeoutMs: 3_000 });
      expect(c.local).toBe(false);
      expect(await c.call('echo', ['over tls'])).toBe('over tls');
      c.close();
      await expect(TcpRpcClient.connect(`127.0.0.1:${plain.port}`, { timeoutMs: 3_000 })).rejects.toMatchObject({ code: expect.stringMatching(/PEER_LOST|DEADLINE_EXCEEDED/) });
      useTcpTls(undefined);
      const clear = await TcpRpcClient.connect(`127.0.0.1:${secure.port}`, { timeoutMs: 2_000 }).catch((err: Error) => err);
      if (clear instanceof TcpRpcClient) {
        await expect(clear.call('echo', ['x'], 2_000)).rejects.toMatchObject({ code: expect.stringMatching(/PEER_LOST|DEADLINE_EXCEEDED/) });
        clear.close();
      }
      expect(() => readTlsFiles({ cert: join(fixtures, 'server.pem') })).toThrow(/both --tls-cert and --tls-key/);
      expect(() => readTlsFiles({ ca: join(fixtures, 'none.pem') })).toThrow(/no such file/);
    } finally {
      useTcpTls(undefined);
      await secure.close();
      await plain.close();
    }
  });

  it('a client with a secret fails at once, not at its deadline, when the server closes before it greets', async () => {
    const server = createServer((socket) => socket.destroy());
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const t0 = Date.now();
    await expect(TcpRpcClient.connect(`127.0.0.1:${port}`, { secret: Buffer.alloc(32, 3), timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'PEER_LOST' });
    expect(Date.now() - t0).toBeLessThan(2_000);
    await new Promise((r) => server.close(r));
  });
});
