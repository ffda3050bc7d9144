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
 * A server also listens on a local socket named for its address (localSocketOf), and a
 * client tries that first: the same frames, but a write costs a copy into the peer's queue
 * instead of a trip through loopback TCP (doc/decisions/tcp-frames.md). A client
 * tries it only for an address this machine owns, under the exact address string the server
 * listens at (reaching 0.0.0.0:P as 127.0.0.1:P stays on TCP); elsewhere it uses TCP.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { NovaError } from '../common/errors.js';
import { errorResponse, failureResponse, okResponse } from '../common/rpc-envelope.js';
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
  onLog?: (line: string) => void;
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
      await s.listenLocally(`${options.advertise ?? host}:${s.port}`);
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

function listening(server: Server, listen: (done: () => void) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    listen(() => {
      server.off('error', reject);
      resolve();
    });
  });
}
