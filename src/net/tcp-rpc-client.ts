/**
 * The client side of request/response over plain TCP (tcp-rpc-server.ts has the protocol):
 * calls pipelined and batched per event-loop turn, a deadline each, the server's local socket
 * tried first when it is on this machine.
 */
import { createConnection, isIP, type NetConnectOpts, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { tcpTls } from './tcp-tls.js';
import { NovaError } from '../common/errors.js';
import { clusterSecret, proofOf } from '../common/cluster-secret.js';
import { withDeadline } from '../common/deadline.js';
import { PendingCalls } from '../common/pending-calls.js';
import { responseError, responseId, responseOk } from '../common/rpc-envelope.js';
import { DEFAULT_MAX_FRAME, FrameReader } from './frames.js';
import { localSocketOf, ownAddress } from './local-socket.js';
import { Outbox, packr } from './outbox.js';

export class TcpRpcClient {
  private readonly pending: PendingCalls<string>;
  private readonly out: Outbox;
  private closedWith: NovaError | undefined;
  private readonly closeListeners: Array<() => void> = [];
  /** When the server was last heard from, or the connection last became busy (silentMs). */
  private heardAt = Date.now();
  /** The server's greeting: the nonce it challenges with, or null (it asks for no secret). */
  private greeting: Promise<Uint8Array | null>;
  private greeted!: (challenge: Uint8Array | null) => void;
  private ungreeted!: (err: Error) => void;

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
    this.greeting = new Promise((resolve, reject) => { this.greeted = resolve; this.ungreeted = reject; });
    this.greeting.catch(() => undefined); // awaited only by a client with a secret
    const reader = new FrameReader(`connection to ${address}`);
    socket.on('data', (chunk: Buffer) => {
      this.heardAt = Date.now();
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
  /**
   * `secret`: the cluster's, proved before any request (default: the process's; null: none,
   * for a server that asks for none).
   */
  static async connect(address: string, options: { timeoutMs?: number; grouped?: readonly string[]; secret?: Buffer | null } = {}): Promise<TcpRpcClient> {
    const secret = options.secret === undefined ? clusterSecret() : options.secret;
    const c = await TcpRpcClient.open(address, options);
    if (!secret) return c;
    // Proves it knows the cluster's secret, before any other request.
    try {
      const timeoutMs = options.timeoutMs ?? 10_000;
      const challenge = await withDeadline(c.greeting, timeoutMs, () => new NovaError('DEADLINE_EXCEEDED', `connect to ${address}: no greeting in ${timeoutMs} ms`));
      if (challenge) await c.call('auth', [proofOf(secret, challenge, 'tcp')]);
      return c;
    } catch (err) {
      c.close();
      throw err;
    }
  }

  private static async open(address: string, options: { timeoutMs?: number; grouped?: readonly string[] }): Promise<TcpRpcClient> {
    const { host, port } = parseAddress(address);
    const timeoutMs = options.timeoutMs ?? 10_000;
    const grouped = new Set(options.grouped);
    const deadline = Date.now() + timeoutMs;
    const ca = tcpTls()?.ca;
    // Under TLS, no local socket: it would carry the bytes in the clear (servers do not listen on one then).
    const path = ca === undefined && ownAddress(host) ? localSocketOf(address) : undefined;
    if (path !== undefined) {
      // Refused at once when the server is on another machine (or predates local sockets).
      const socket = await open({ path }, address, timeoutMs).catch(() => undefined);
      if (socket) return new TcpRpcClient(socket, address, timeoutMs, grouped, true);
    }
    const socket = await open({ host, port, noDelay: true }, address, Math.max(1, deadline - Date.now()), ca);
    return new TcpRpcClient(socket, address, timeoutMs, grouped, false);
  }

  get closed(): boolean {
    return this.closedWith !== undefined;
  }

  onClose(listener: () => void): void {
    if (this.closed) queueMicrotask(listener);
    else this.closeListeners.push(listener);
  }

  /** How long calls have waited with nothing heard from the server (0 when none waits). */
  get silentMs(): number {
    return this.pending.size === 0 ? 0 : Date.now() - this.heardAt;
  }

  /** Ends the connection, failing the calls waiting with PEER_LOST and `message`. */
  abandon(message: string): void {
    this.shut(new NovaError('PEER_LOST', `${this.address}: ${message}`));
  }

  call<T = unknown>(op: string, args: unknown[], timeoutMs = this.defaultTimeoutMs): Promise<T> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    if (this.pending.size === 0) this.heardAt = Date.now();
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
      const id = responseId(m);
      if (id === 0) {
        const challenge = (m[2] as { challenge?: unknown } | null)?.challenge;
        this.greeted(challenge instanceof Uint8Array ? challenge : null);
        continue;
      }
      const p = id === undefined ? undefined : this.pending.take(id);
      if (!p) continue; // not a response, or answered after its deadline
      if (responseOk(m)) p.resolve(m[2]);
      else p.reject(responseError(m, 0, `${this.address} ${p.meta}`));
    }
  }

  private shut(error: NovaError): void {
    if (this.closedWith) return;
    this.closedWith = error;
    this.socket.destroy();
    this.ungreeted(error);
    this.pending.failAll(error);
    for (const l of this.closeListeners.splice(0)) l();
  }
}

/**
 * A connected socket, or DEADLINE_EXCEEDED / PEER_LOST naming `address`. With `ca`, a TLS
 * connection whose server's certificate that CA signed, for the host it was reached at.
 */
function open(to: NetConnectOpts, address: string, timeoutMs: number, ca?: Buffer): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const tcp = to as { host?: string; port?: number };
    const socket: Socket = ca === undefined ? createConnection(to)
      : tlsConnect({ host: tcp.host, port: tcp.port, ca, ...(tcp.host && isIP(tcp.host) === 0 ? { servername: tcp.host } : {}) });
    if (ca !== undefined) socket.setNoDelay(true);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new NovaError('DEADLINE_EXCEEDED', `connect to ${address}: no answer in ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('error', (err) => {
      clearTimeout(timer);
      reject(new NovaError('PEER_LOST', `connect to ${address}: ${err.message}`));
    });
    socket.once(ca === undefined ? 'connect' : 'secureConnect', () => {
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
