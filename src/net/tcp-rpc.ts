/**
 * Request/response over plain TCP (frames.ts), for client ↔ LTC and control traffic with the
 * coordinator. Clients are outside the cluster (DESIGN.md §2), so this is Node `net`, not the
 * fabric.
 *
 *   frame payload = msgpack [message, ...]
 *   request  = [id, op, args]                  args: an array
 *   response = [id, 0, result] | [id, 1, code, message, detail]
 *
 * Pipelined and batched: calls made in one event-loop turn leave in one frame; a server
 * answers what completes in one turn in one frame (Outbox). Every call has a deadline. A server
 * answers a malformed request whose id it can read with BAD_ARGUMENT, an unknown op with
 * UNKNOWN_METHOD; a frame it cannot parse closes that connection (with a logged reason)
 * and nothing else.
 *
 * A server also listens on a local socket named for its address (localSocketOf), and a
 * client tries that first: the same frames, but a write costs a copy into the peer's queue
 * instead of a trip through loopback TCP (doc/decisions/tcp-frames.md). A client
 * tries it only for an address this machine owns, under the exact address string the server
 * listens at (reaching 0.0.0.0:P as 127.0.0.1:P stays on TCP); elsewhere it uses TCP.
 */
import { createConnection, createServer, type NetConnectOpts, type Server, type Socket } from 'node:net';
import { Packr } from 'msgpackr';
import { createHash } from 'node:crypto';
import { networkInterfaces } from 'node:os';
import { NovaError } from '../common/errors.js';
import { PendingCalls } from '../common/pending-calls.js';
import { errorResponse, failureResponse, okResponse, readResponse, remoteError } from '../common/rpc-envelope.js';
import { DEFAULT_MAX_FRAME, FRAME_HEADER, FrameReader, packFrame } from './frames.js';

const packr = new Packr({ useRecords: false, moreTypes: false });
/** Bytes of a Unix socket name: sun_path holds 108; one is kept spare for a terminator. */
const MAX_SOCKET_NAME = 107;
/** Messages after which a frame leaves at once (Outbox; doc/decisions/tcp-frames.md). */
const FRAME_MESSAGES = 16;

export type TcpHandler = (args: unknown[], peer: string) => unknown;

type Message = unknown[];

/**
 * Collects messages for one socket and writes them as one frame per event-loop turn, or
 * sooner once FRAME_MESSAGES that cut are waiting: then the peer starts on the first part of
 * a large batch while this side prepares the rest, instead of each side idling while the
 * other works. A message that does not cut (`push(m, false)`) rides along to the turn's end:
 * a request the peer handles in groups anyway (an LTC commits the writes that arrive together
 * as one group, one log append to every replica) gains nothing from leaving early, and a
 * group cut in two costs a second append.
 *
 * A frame never exceeds `maxFrame` (the peer would close the connection, failing every call
 * on it): a batch that packs larger is cut in halves, in order; a single message that is
 * larger goes to `oversize`, which may answer a message to send instead.
 */
class Outbox {
  private queue: Message[] = [];
  private cutting = 0; // messages in `queue` that cut
  private scheduled = false;
  constructor(private readonly socket: Socket, private readonly maxFrame: number,
    private readonly oversize: (message: Message, bytes: number) => Message | undefined) {}

  push(message: Message, cuts = true): void {
    this.queue.push(message);
    if (cuts && ++this.cutting >= FRAME_MESSAGES) this.send();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.onTurn);
    }
  }

  private readonly onTurn = (): void => {
    this.scheduled = false;
    this.send();
  };

  private send(): void {
    const batch = this.queue;
    this.queue = [];
    this.cutting = 0;
    if (batch.length === 0 || this.socket.destroyed) return;
    this.write(batch);
  }

  private write(batch: Message[]): void {
    const frame = packFrame(packr, batch);
    const bytes = frame.length - FRAME_HEADER;
    if (bytes <= this.maxFrame) {
      this.socket.write(frame);
    } else if (batch.length > 1) {
      const half = batch.length >> 1;
      this.write(batch.slice(0, half));
      this.write(batch.slice(half));
    } else {
      const instead = this.oversize(batch[0], bytes);
      if (instead) this.write([instead]);
    }
  }
}

export interface ServerOptions {
  host?: string;
  port?: number;
  /** Names this server in log lines and errors. */
  name: string;
  handlers: Record<string, TcpHandler>;
  maxFrame?: number;
  onLog?: (line: string) => void;
}

export class TcpRpcServer {
  private readonly sockets = new Set<Socket>();
  private local: Server | undefined;
  private localClients = 0;
  malformed = 0;

  private constructor(private readonly server: Server, private readonly options: ServerOptions) {}

  static async listen(options: ServerOptions): Promise<TcpRpcServer> {
    const host = options.host ?? '127.0.0.1';
    const server = createServer({ noDelay: true });
    const s = new TcpRpcServer(server, options);
    server.on('connection', (socket) => s.accept(socket, `${socket.remoteAddress}:${socket.remotePort}`));
    await listening(server, (done) => server.listen(options.port ?? 0, host, done));
    try {
      await s.listenLocally(`${host}:${s.port}`);
    } catch (err) {
      await s.close();
      throw err;
    }
    return s;
  }

  /**
   * The local socket. The name is free while this server holds the TCP port it is named for
   * (the kernel frees both when a process dies), so a name already taken means another
   * process would receive this server's local clients: that refuses to start. Any other
   * failure (a name too long) leaves clients on TCP, logged.
   */
  private async listenLocally(address: string): Promise<void> {
    const path = localSocketOf(address);
    if (path === undefined) return;
    const local = createServer();
    local.on('connection', (socket) => this.accept(socket, `local client ${++this.localClients}`));
    try {
      await listening(local, (done) => local.listen(path, done));
      this.local = local;
    } catch (err) {
      const why = (err as Error).message;
      if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') {
        throw new NovaError('BUSY', `${this.options.name}: the local socket for ${address} is held by another process, which would receive this server's clients on this machine; find it with \`ss -xlp | grep nova-rpc\` and stop it`);
      }
      this.options.onLog?.(`${this.options.name}: no local socket for ${address} (${why}); clients on this machine use TCP`);
    }
  }

  get port(): number {
    const a = this.server.address();
    return typeof a === 'object' && a ? a.port : 0;
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    const closing = [this.server, this.local].map((l) => new Promise<void>((resolve) => l ? l.close(() => resolve()) : resolve()));
    return Promise.all(closing).then(() => undefined);
  }

  private accept(socket: Socket, peer: string): void {
    this.sockets.add(socket);
    const reader = new FrameReader(`${this.options.name} connection from ${peer}`, this.options.maxFrame ?? DEFAULT_MAX_FRAME);
    const out = new Outbox(socket, DEFAULT_MAX_FRAME, (m, bytes) => {
      this.options.onLog?.(`${this.options.name}: a response of ${bytes} bytes to ${peer} exceeds the ${DEFAULT_MAX_FRAME}-byte frame limit; answered BAD_ARGUMENT`);
      return errorResponse(m[0] as number, 'BAD_ARGUMENT', `the response of ${bytes} bytes exceeds the ${DEFAULT_MAX_FRAME}-byte frame limit: ask for less`);
    });
    socket.on('data', (chunk: Buffer) => {
      let payloads: Buffer[];
      try {
        payloads = reader.push(chunk);
      } catch (err) {
        this.drop(socket, (err as Error).message);
        return;
      }
      for (const p of payloads) this.onFrame(p, socket, out, peer);
    });
    socket.on('error', () => undefined); // 'close' follows; a reset peer is not our failure
    socket.on('close', () => this.sockets.delete(socket));
  }

  private drop(socket: Socket, why: string): void {
    this.malformed++;
    this.options.onLog?.(`closing connection: ${why}`);
    socket.destroy();
  }

  private onFrame(payload: Buffer, socket: Socket, out: Outbox, peer: string): void {
    let batch: unknown;
    try {
      batch = packr.unpack(payload);
    } catch (err) {
      this.drop(socket, `${this.options.name}: undecodable frame from ${peer}: ${(err as Error).message}`);
      return;
    }
    if (!Array.isArray(batch)) {
      this.drop(socket, `${this.options.name}: frame from ${peer} is not a batch of requests`);
      return;
    }
    for (const m of batch) this.onRequest(m, out, peer);
  }

  private onRequest(m: unknown, out: Outbox, peer: string): void {
    if (!Array.isArray(m) || typeof m[0] !== 'number') {
      this.malformed++;
      this.options.onLog?.(`${this.options.name}: request from ${peer} without an id ignored`);
      return;
    }
    const id = m[0];
    const [, op, args] = m;
    if (typeof op !== 'string' || !Array.isArray(args)) {
      this.malformed++;
      out.push(errorResponse(id, 'BAD_ARGUMENT', 'a request is [id, op, args]'));
      return;
    }
    const handler = Object.hasOwn(this.options.handlers, op) ? this.options.handlers[op] : undefined;
    if (!handler) {
      out.push(errorResponse(id, 'UNKNOWN_METHOD', `${this.options.name} has no request "${op}"`));
      return;
    }
    const fail = (err: unknown): void => {
      out.push(failureResponse(id, err));
    };
    try {
      const result = handler(args, peer);
      if (result instanceof Promise) result.then((r) => out.push(okResponse(id, r ?? null)), fail);
      else out.push(okResponse(id, result ?? null));
    } catch (err) {
      fail(err);
    }
  }
}

export class TcpRpcClient {
  private readonly pending: PendingCalls<string>;
  private readonly out: Outbox;
  private closedWith: NovaError | undefined;
  private readonly closeListeners: Array<() => void> = [];

  private constructor(private readonly socket: Socket, readonly address: string, private readonly defaultTimeoutMs: number,
    private readonly grouped: ReadonlySet<string>,
    /** Whether this connection is on the server's local socket rather than TCP. */
    readonly local: boolean) {
    this.pending = new PendingCalls<string>((op) => `${address} ${op}: no answer by its deadline`, true);
    this.out = new Outbox(socket, DEFAULT_MAX_FRAME, (m, bytes) => {
      const p = this.pending.take(m[0] as number);
      p?.reject(new NovaError('BAD_ARGUMENT', `${address} ${p.meta}: the request of ${bytes} bytes exceeds the ${DEFAULT_MAX_FRAME}-byte frame limit: send less at once`));
      return undefined;
    });
    const reader = new FrameReader(`connection to ${address}`);
    socket.on('data', (chunk: Buffer) => {
      try {
        for (const p of reader.push(chunk)) this.onFrame(p);
      } catch (err) {
        this.shut(err as NovaError);
      }
    });
    socket.on('error', (err) => this.shut(new NovaError('PEER_LOST', `${address}: ${err.message}`)));
    socket.on('close', () => this.shut(new NovaError('PEER_LOST', `${address}: connection closed`)));
  }

  /**
   * `grouped`: ops the server handles in groups (an LTC's writes), whose requests do not cut
   * a frame early (Outbox).
   */
  static async connect(address: string, options: { timeoutMs?: number; grouped?: readonly string[] } = {}): Promise<TcpRpcClient> {
    const { host, port } = parseAddress(address);
    const timeoutMs = options.timeoutMs ?? 10_000;
    const grouped = new Set(options.grouped);
    const deadline = Date.now() + timeoutMs;
    const path = ownAddress(host) ? localSocketOf(address) : undefined;
    if (path !== undefined) {
      // Refused at once when the server is on another machine (or predates local sockets).
      const socket = await open({ path }, address, timeoutMs).catch(() => undefined);
      if (socket) return new TcpRpcClient(socket, address, timeoutMs, grouped, true);
    }
    const socket = await open({ host, port, noDelay: true }, address, Math.max(1, deadline - Date.now()));
    return new TcpRpcClient(socket, address, timeoutMs, grouped, false);
  }

  get closed(): boolean {
    return this.closedWith !== undefined;
  }

  onClose(listener: () => void): void {
    if (this.closed) queueMicrotask(listener);
    else this.closeListeners.push(listener);
  }

  call<T = unknown>(op: string, args: unknown[], timeoutMs = this.defaultTimeoutMs): Promise<T> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    return new Promise<T>((resolve, reject) => {
      const id = this.pending.add(op, timeoutMs, resolve as (v: unknown) => void, reject);
      this.out.push([id, op, args], !this.grouped.has(op));
    });
  }

  close(): void {
    this.shut(new NovaError('CLOSED', `connection to ${this.address} closed`));
  }

  private onFrame(payload: Buffer): void {
    const batch = packr.unpack(payload) as unknown;
    if (!Array.isArray(batch)) throw new NovaError('CORRUPTION', `${this.address}: response frame is not a batch`);
    for (const m of batch) {
      if (!Array.isArray(m)) continue;
      const r = readResponse(m);
      const p = r && this.pending.take(r.id);
      if (!r || !p) continue; // not a response, or answered after its deadline
      if (r.ok) p.resolve(r.value);
      else p.reject(remoteError(r, `${this.address} ${p.meta}`));
    }
  }

  private shut(error: NovaError): void {
    if (this.closedWith) return;
    this.closedWith = error;
    this.socket.destroy();
    this.pending.failAll(error);
    for (const l of this.closeListeners.splice(0)) l();
  }
}

/**
 * The local socket of a server at `address` (HOST:PORT as it listens and is advertised): a
 * name in Linux's abstract namespace, so no file is left behind. An address too long for a
 * socket name (108 bytes, which the kernel would cut, not refuse) is named by its hash.
 * Undefined where there is no such namespace.
 */
export function localSocketOf(address: string): string | undefined {
  if (process.platform !== 'linux') return undefined;
  const name = `\0nova-rpc/${address}`;
  return Buffer.byteLength(name) <= MAX_SOCKET_NAME ? name : `\0nova-rpc/sha256:${createHash('sha256').update(address).digest('hex')}`;
}

/**
 * Whether a client may try the local socket of a server at `host`: only an address this
 * machine owns (loopback or one of its interfaces). Anyone on a machine can bind an abstract
 * name, but only the machine's own addresses can they bind over TCP too; trying the name of
 * another machine's server would hand its traffic to whoever took that name here.
 */
function ownAddress(host: string): boolean {
  const h = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h)) return true;
  return Object.values(networkInterfaces()).some((list) => list?.some((i) => i.address === h));
}

function listening(server: Server, listen: (done: () => void) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    listen(() => {
      server.off('error', reject);
      resolve();
    });
  });
}

/** A connected socket, or DEADLINE_EXCEEDED / PEER_LOST naming `address`. */
function open(to: NetConnectOpts, address: string, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = createConnection(to);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new NovaError('DEADLINE_EXCEEDED', `connect to ${address}: no answer in ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('error', (err) => {
      clearTimeout(timer);
      reject(new NovaError('PEER_LOST', `connect to ${address}: ${err.message}`));
    });
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(socket);
    });
  });
}

/** Splits "host:port"; a bad address is a BAD_ARGUMENT that says what was expected. */
export function parseAddress(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':');
  const port = Number(address.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port <= 0 || port > 65535) {
    throw new NovaError('BAD_ARGUMENT', `"${address}" is not HOST:PORT`);
  }
  return { host: address.slice(0, i), port };
}
