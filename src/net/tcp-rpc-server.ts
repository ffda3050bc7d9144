/**
 * The server side of request/response over plain TCP (frames.ts), for client ↔ LTC and control traffic with the
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
 * A server with the cluster's secret (cluster-secret.ts) greets each connection with a nonce,
 *   greeting = [0, 0, {challenge: nonce | null}]
 * and serves it only once its first request, [id, "auth", [proof]], proves the peer knows the
 * secret; anything else first is answered BAD_ARGUMENT, logged, and the connection closed.
 *
 * What a peer can make a server hold is bounded (ServerLimits): connections; bytes of frames not
 * yet whole, over all connections (the connection that would pass the bound is closed); a
 * connection that sent part of a frame and then nothing for a while is closed, and one that
 * has sent nothing for long, with no request of its own under way, too.
 *
 * A server also listens on a local socket named for its address (localSocketOf), and a
 * client tries that first: the same frames, but a write costs a copy into the peer's queue
 * instead of a trip through loopback TCP (doc/decisions/tcp-frames.md). A client
 * tries it only for an address this machine owns, under the exact address string the server
 * listens at (reaching 0.0.0.0:P as 127.0.0.1:P stays on TCP); elsewhere it uses TCP.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
import { tcpTls, type TcpTls } from './tcp-tls.js';
import { performance } from 'node:perf_hooks';
import { NovaError } from '../common/errors.js';
import { errorResponse, failureResponse, okResponse } from '../common/rpc-envelope.js';
import { checkProof, clusterSecret, newNonce } from '../common/cluster-secret.js';
import { DEFAULT_MAX_FRAME, FrameReader } from './frames.js';
import { localSocketOf } from './local-socket.js';
import { Outbox, packr } from './outbox.js';

export type TcpHandler = (args: unknown[], peer: string) => unknown;

export interface ServerOptions {
  /** Where to listen (0.0.0.0: every interface). */
  host?: string;
  port?: number;
  /** The host clients reach it at, when not `host` (which may be a wildcard); names the local socket. */
  advertise?: string;
  /** Names this server in log lines and errors. */
  name: string;
  handlers: Record<string, TcpHandler>;
  maxFrame?: number;
  limits?: Partial<ServerLimits>;
  /** The secret peers must prove they know (default: the process's, clusterSecret()). */
  secret?: Buffer;
  /** TLS: with a certificate and key, only TLS is served (default: the process's, tcpTls()). */
  tls?: TcpTls;
  onLog?: (line: string) => void;
}

/** What one server holds for its peers at most. */
export interface ServerLimits {
  connections: number;
  /** Bytes of frames not yet whole, all connections together. */
  bufferedBytes: number;
  /** A connection holding part of a frame that receives nothing for this long is closed. */
  stallMs: number;
  /** A connection that sends nothing for this long, with none of its requests under way, is closed. */
  idleMs: number;
}

export const DEFAULT_LIMITS: ServerLimits = { connections: 4096, bufferedBytes: 256 * 2 ** 20, stallMs: 10_000, idleMs: 600_000 };

/** One connection's state, for the limits. */
interface Conn {
  socket: Socket;
  peer: string;
  reader: FrameReader;
  /** performance.now() of its last bytes. */
  heardAt: number;
  /** Its requests under way. */
  running: number;
  /** What it adds to the server's count of partial-frame bytes. */
  counted: number;
  /** The nonce it was challenged with, until it proved it knows the secret (undefined: proven, or none asked). */
  challenge?: Buffer;
  /** performance.now() at accept: the proof is due within stallMs of it. */
  acceptedAt: number;
  /** Refused (no proof): nothing more it sends is read. */
  refused?: true;
}

/** Whether `host` listens on every interface, so it cannot be the address peers use. */
export function isWildcard(host: string): boolean {
  return host === '0.0.0.0' || host === '::' || host === '[::]';
}

/**
 * The host peers reach a server at: `advertise`, else `host` (default loopback). BAD_ARGUMENT
 * for a wildcard `host` without `advertise`.
 */
export function advertisedHost(host: string | undefined, advertise: string | undefined): string {
  if (advertise !== undefined) return advertise;
  const h = host ?? '127.0.0.1';
  if (isWildcard(h)) throw new NovaError('BAD_ARGUMENT', `--host ${h} listens on every interface: give --advertise <the address peers reach this machine at>`);
  return h;
}

export class TcpRpcServer {
  private readonly conns = new Set<Conn>();
  private local: Server | undefined;
  private localClients = 0;
  private readonly limits: ServerLimits;
  /** Bytes of frames not yet whole, all connections together. */
  private buffered = 0;
  private readonly sweeper: NodeJS.Timeout;
  private readonly secret: Buffer | undefined;
  malformed = 0;
  /** Connections refused for not proving they know the secret. */
  refused = 0;
  /** Connections closed or refused by the limits. */
  cutOff = 0;

  private constructor(private readonly server: Server, private readonly options: ServerOptions) {
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    this.secret = options.secret ?? clusterSecret();
    this.sweeper = setInterval(() => this.sweep(), Math.max(10, Math.min(1_000, this.limits.stallMs / 4)));
    this.sweeper.unref();
  }

  static async listen(options: ServerOptions): Promise<TcpRpcServer> {
    const host = options.host ?? '127.0.0.1';
    const tls = options.tls ?? tcpTls();
    const secure = tls?.cert !== undefined && tls.key !== undefined;
    const server = secure ? createTlsServer({ cert: tls.cert, key: tls.key }) : createServer({ noDelay: true });
    const s = new TcpRpcServer(server, options);
    server.on(secure ? 'secureConnection' : 'connection', (socket: Socket) => {
      socket.setNoDelay(true);
      s.accept(socket, `${socket.remoteAddress}:${socket.remotePort}`);
    });
    if (secure) server.on('tlsClientError', (err: Error) => options.onLog?.(`${options.name}: a TLS handshake failed: ${err.message}`));
    await listening(server, (done) => server.listen(options.port ?? 0, host, done));
    try {
      // Under TLS every client comes over TLS: a local socket would carry the bytes in the clear.
      if (!secure) await s.listenLocally(`${options.advertise ?? host}:${s.port}`);
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
    clearInterval(this.sweeper);
    for (const c of this.conns) c.socket.destroy();
    const closing = [this.server, this.local].map((l) => new Promise<void>((resolve) => l ? l.close(() => resolve()) : resolve()));
    return Promise.all(closing).then(() => undefined);
  }

  private accept(socket: Socket, peer: string): void {
    if (this.conns.size >= this.limits.connections) {
      this.cutOff++;
      this.options.onLog?.(`${this.options.name}: refused a connection from ${peer}: ${this.conns.size} are open, the most it takes`);
      socket.destroy();
      return;
    }
    const reader = new FrameReader(`${this.options.name} connection from ${peer}`, this.options.maxFrame ?? DEFAULT_MAX_FRAME);
    const now = performance.now();
    const conn: Conn = { socket, peer, reader, heardAt: now, running: 0, counted: 0, challenge: this.secret ? newNonce() : undefined, acceptedAt: now };
    this.conns.add(conn);
    const out = new Outbox(socket, DEFAULT_MAX_FRAME, (m, bytes) => {
      this.options.onLog?.(`${this.options.name}: a response of ${bytes} bytes to ${peer} exceeds the ${DEFAULT_MAX_FRAME}-byte frame limit; answered BAD_ARGUMENT`);
      return errorResponse(m[0] as number, 'BAD_ARGUMENT', `the response of ${bytes} bytes exceeds the ${DEFAULT_MAX_FRAME}-byte frame limit: ask for less`);
    });
    out.push([0, 0, { challenge: conn.challenge ?? null }]);
    socket.on('data', (chunk: Buffer) => {
      conn.heardAt = performance.now();
      let payloads: Buffer[];
      try {
        payloads = reader.push(chunk);
      } catch (err) {
        this.drop(socket, (err as Error).message);
        return;
      }
      const grew = reader.pending > conn.counted;
      this.buffered += reader.pending - conn.counted;
      conn.counted = reader.pending;
      if (grew && this.buffered > this.limits.bufferedBytes) {
        this.drop(socket, `${this.options.name}: ${peer} would pass the ${this.limits.bufferedBytes} bytes of partial frames this server holds for all its connections`, 'cutOff');
        return;
      }
      for (const p of payloads) this.onFrame(p, conn, out);
    });
    socket.on('error', () => undefined); // 'close' follows; a reset peer is not our failure
    socket.on('close', () => {
      if (this.conns.delete(conn)) this.buffered -= conn.counted;
    });
  }

  /** Closes connections stalled inside a frame, and idle ones (ServerLimits). */
  private sweep(): void {
    const now = performance.now();
    for (const c of this.conns) {
      const quiet = now - c.heardAt;
      if (c.challenge && now - c.acceptedAt > this.limits.stallMs) {
        this.refused++;
        this.drop(c.socket, `${this.options.name}: ${c.peer} did not prove it knows the cluster's secret within ${this.limits.stallMs} ms`, 'cutOff');
      } else if (c.reader.pending > 0 && quiet > this.limits.stallMs) {
        this.drop(c.socket, `${this.options.name}: ${c.peer} sent ${c.reader.pending} bytes of a frame, then nothing for ${this.limits.stallMs} ms`, 'cutOff');
      } else if (c.reader.pending === 0 && c.running === 0 && quiet > this.limits.idleMs) {
        this.cutOff++;
        c.socket.destroy(); // idle: the peer connects again when it has something to send
      }
    }
  }

  /** Closes `socket`, logging why: a bad stream (`malformed`) or a limit passed (`cutOff`). */
  private drop(socket: Socket, why: string, counter: 'malformed' | 'cutOff' = 'malformed'): void {
    this[counter]++;
    this.options.onLog?.(`closing connection: ${why}`);
    socket.destroy();
  }

  private onFrame(payload: Buffer, conn: Conn, out: Outbox): void {
    const { socket, peer } = conn;
    if (conn.refused) return;
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
    for (const m of batch) {
      if (conn.refused) return;
      this.onRequest(m, out, conn);
    }
  }

  private onRequest(m: unknown, out: Outbox, conn: Conn): void {
    const peer = conn.peer;
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
    if (conn.challenge) {
      if (op === 'auth' && checkProof(this.secret!, conn.challenge, 'tcp', args[0])) {
        conn.challenge = undefined;
        out.push(okResponse(id, null));
        return;
      }
      this.refused++;
      conn.refused = true;
      this.options.onLog?.(`${this.options.name}: refused ${peer}: its first request (${op}) did not prove it knows the cluster's secret`);
      out.push(errorResponse(id, 'BAD_ARGUMENT', `${this.options.name} serves only the cluster's members and clients, and this connection did not prove it knows the cluster's secret: give --secret-file FILE (the secret file in the cluster's directory), or --dir of the cluster`));
      // Closed once the answer has left (the outbox sends at the end of this turn).
      setImmediate(() => conn.socket.end(() => conn.socket.destroy()));
      return;
    }
    const handler = Object.hasOwn(this.options.handlers, op) ? this.options.handlers[op] : undefined;
    if (!handler) {
      out.push(errorResponse(id, 'UNKNOWN_METHOD', `${this.options.name} has no request "${op}"`));
      return;
    }
    try {
      const result = handler(args, peer);
      if (result instanceof Promise) {
        conn.running++;
        // Two callbacks, not then().finally(): every request allocates these, and a finally
        // costs two more closures and promises.
        result.then((r) => answered(conn, out, id, true, r), (err) => answered(conn, out, id, false, err));
      } else {
        out.push(okResponse(id, result ?? null));
      }
    } catch (err) {
      out.push(failureResponse(id, err));
    }
  }
}

/** Sends the answer of request `id`, which ran asynchronously: its result (`ok`) or its failure. */
function answered(conn: Conn, out: Outbox, id: number, ok: boolean, value: unknown): void {
  conn.running--; // first: a failure that cannot be encoded must not keep the connection busy
  conn.heardAt = performance.now(); // idle from its last answer, not from a request that ran long
  out.push(ok ? okResponse(id, value ?? null) : failureResponse(id, value));
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
