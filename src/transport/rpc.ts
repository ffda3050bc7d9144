/**
 * RPC over transport messages: request ids, msgpackr payloads, a deadline per call, and
 * typed remote errors (doc/format/wire.md, "RPC"). One message per transport message, the
 * RPC envelope (common/rpc-envelope.ts) after the RPC version:
 *
 *   request  = msgpack [2, id, method, args]                     message type RPC_REQUEST
 *   response = msgpack [2, id, 0, result]                        message type RPC_RESPONSE
 *            | msgpack [2, id, 1, code, message, detail?]
 *
 * Contracts:
 *  - Every call settles exactly once: with the result, a RemoteError carrying the handler's
 *    code, UNKNOWN_METHOD, DEADLINE_EXCEEDED, PEER_LOST (the endpoint was lost) or CLOSED.
 *  - Deadlines are checked by one sweeping timer for all calls (common/pending-calls.ts), not
 *    a timer per call.
 *  - A malformed request is answered with BAD_ARGUMENT when its id can be read, and counted.
 */
import { Packr } from 'msgpackr';
import { NovaError } from '../common/errors.js';
import { PendingCalls } from '../common/pending-calls.js';
import { errorResponse, failureResponse, okResponse, responseError, responseId, responseOk } from '../common/rpc-envelope.js';
import type { Endpoint } from './endpoint.js';
import type { Fabric } from './fabric.js';
import type { MemoryRegion, RemoteRegion } from './regions.js';

/** Message types used by the RPC layer. Types below 16 are reserved for the transport. */
export const RPC_REQUEST = 1;
export const RPC_RESPONSE = 2;
/**
 * A direct file write, done and answered (as an RPC response) by the peer's progress thread
 * (Fabric.registerFile; native/codes.h kMsgFileWrite). Layout, little-endian: u8 version (2),
 * 3 zero bytes, u32 request id, u32 handle, u32 length, u64 offset in the file, u64 offset in
 * the handle's window, where the sender WROTE the bytes first. The answer's result is the end
 * of the furthest write the handle took.
 */
export const FILE_WRITE = 3;
const FILE_WRITE_VERSION = 2;
const FILE_WRITE_REQUEST_BYTES = 32;
const TWO_32 = 0x1_0000_0000;
/** 1: responses [1, id, 1, result] | [1, id, 0, [code, message]] (retired); 2: the RPC envelope. */
const RPC_VERSION = 2;

export type RpcHandler = (args: unknown, from: Endpoint) => unknown;

export interface CallOptions {
  /** Milliseconds before the call fails with DEADLINE_EXCEEDED. */
  timeoutMs?: number;
}

export interface RpcStats {
  malformed: number;
  lateResponses: number;
}

export class Rpc {
  private readonly packr = new Packr({ useRecords: false, moreTypes: false });
  private readonly handlers = new Map<string, RpcHandler>();
  private readonly pending = new PendingCalls<{ ep: Endpoint; method: string }>((c) => `rpc ${c.method}: no response by its deadline`);
  private readonly fileWriteHead = Buffer.alloc(FILE_WRITE_REQUEST_BYTES);
  private readonly watched = new WeakSet<Endpoint>();
  private readonly defaultTimeoutMs: number;
  private readonly counters: RpcStats = { malformed: 0, lateResponses: 0 };
  private closed = false;

  constructor(fabric: Fabric, options: { defaultTimeoutMs?: number } = {}) {
    this.defaultTimeoutMs = options.defaultTimeoutMs ?? 10_000;
    this.fileWriteHead[0] = FILE_WRITE_VERSION;
    fabric.onMessage(RPC_REQUEST, (payload, ep) => this.onRequest(payload, ep));
    fabric.onMessage(RPC_RESPONSE, (payload) => this.onResponse(payload));
  }

  /** Serves `method`; the handler's return value (or promise) is the response. */
  serve(method: string, handler: RpcHandler): void {
    this.handlers.set(method, handler);
  }

  call<T = unknown>(ep: Endpoint, method: string, args: unknown = null, options: CallOptions = {}): Promise<T> {
    if (this.closed) return Promise.reject(new NovaError('CLOSED', `rpc ${method}: closed`));
    return this.send<T>(ep, method, options, (id) => {
      let bytes: Buffer;
      try {
        bytes = this.packr.pack([RPC_VERSION, id, method, args]);
      } catch (err) {
        return Promise.reject(new NovaError('BAD_ARGUMENT', `rpc ${method}: arguments cannot be encoded`, { cause: err }));
      }
      return ep.send(RPC_REQUEST, bytes);
    });
  }

  /**
   * Writes `length` bytes at `localOffset` of `local` to `offset` of the file the peer
   * registered as `handle` for this endpoint: WRITEs them to `remoteOffset` of `window` (the
   * window the handle was registered with), then sends a small FILE_WRITE naming them, which
   * the peer's progress thread writes and answers (its event loop is not involved). The
   * window range must stay untouched until this settles. Settles like call(): with the end
   * of the furthest write the handle took, a RemoteError, DEADLINE_EXCEEDED or PEER_LOST.
   */
  writeFile(ep: Endpoint, handle: number, offset: number, local: MemoryRegion, localOffset: number,
                window: RemoteRegion, remoteOffset: number, length: number, options: CallOptions = {}): Promise<number> {
    if (this.closed) return Promise.reject(new NovaError('CLOSED', 'rpc file write: closed'));
    if (!(length >= 0 && length < TWO_32 && Number.isInteger(length))) {
      return Promise.reject(new NovaError('BAD_ARGUMENT', `rpc file write of ${length} bytes: at most 2^32 - 1`));
    }
    return this.send<number>(ep, 'file write', options, (id) => {
      // One request buffer for every write: writeThenSend copies it into the fabric's batch at once.
      const head = this.fileWriteHead;
      head.writeUInt32LE(id, 4);
      head.writeUInt32LE(handle, 8);
      head.writeUInt32LE(length, 12);
      head.writeUInt32LE(offset % TWO_32, 16);
      head.writeUInt32LE(Math.floor(offset / TWO_32), 20);
      head.writeUInt32LE(remoteOffset % TWO_32, 24);
      head.writeUInt32LE(Math.floor(remoteOffset / TWO_32), 28);
      return ep.writeThenSend(local, localOffset, window, remoteOffset, length, FILE_WRITE, head);
    });
  }

  /**
   * Registers a call and sends it with `post` (given its id; it copies what it sends at once),
   * settled by its response, its deadline or the endpoint's loss.
   */
  private send<T>(ep: Endpoint, method: string, options: CallOptions, post: (id: number) => Promise<void>): Promise<T> {
    this.watch(ep);
    return new Promise<T>((resolve, reject) => {
      const id = this.pending.add({ ep, method }, options.timeoutMs ?? this.defaultTimeoutMs, resolve as (v: unknown) => void, reject);
      post(id).catch((err: NovaError) => this.pending.fail(id, err));
    });
  }

  stats(): RpcStats {
    return { ...this.counters };
  }

  /** Fails every pending call with CLOSED and stops serving. */
  close(): void {
    this.closed = true;
    this.pending.failAll(new NovaError('CLOSED', 'rpc closed'));
  }

  private watch(ep: Endpoint): void {
    if (this.watched.has(ep)) return;
    this.watched.add(ep);
    ep.onLost((code) => this.pending.failWhere((c) => c.ep === ep,
      (c) => new NovaError(code, `rpc ${c.method}: ${code === 'PEER_LOST' ? 'the peer was lost' : 'endpoint closed'}`)));
  }

  private decode(payload: Buffer): unknown[] | undefined {
    try {
      const v: unknown = this.packr.unpack(payload);
      if (Array.isArray(v) && v.length >= 4 && v[0] === RPC_VERSION && Number.isInteger(v[1])) return v;
    } catch {
      // fall through: malformed
    }
    this.counters.malformed++;
    return undefined;
  }

  private onRequest(payload: Buffer, ep: Endpoint): void {
    const msg = this.decode(payload);
    if (!msg) return;
    const [, id, method, args] = msg as [number, number, unknown, unknown];
    if (typeof method !== 'string') {
      this.respondError(ep, id, 'BAD_ARGUMENT', 'method name must be a string');
      return;
    }
    const handler = this.handlers.get(method);
    if (!handler || this.closed) {
      this.respondError(ep, id, 'UNKNOWN_METHOD', `no handler for method "${method}"`);
      return;
    }
    let result: unknown;
    try {
      result = handler(args, ep);
    } catch (err) {
      this.respondFailure(ep, id, err);
      return;
    }
    if (result instanceof Promise) {
      result.then((value) => this.respond(ep, okResponse(id, value, RPC_VERSION)), (err) => this.respondFailure(ep, id, err));
    } else {
      this.respond(ep, okResponse(id, result, RPC_VERSION));
    }
  }

  private respondFailure(ep: Endpoint, id: number, err: unknown): void {
    this.respond(ep, failureResponse(id, err, RPC_VERSION));
  }

  private respondError(ep: Endpoint, id: number, code: string, message: string): void {
    this.respond(ep, errorResponse(id, code, message, null, RPC_VERSION));
  }

  private respond(ep: Endpoint, response: unknown[]): void {
    let bytes: Buffer;
    try {
      bytes = this.packr.pack(response);
    } catch (err) {
      bytes = this.packr.pack(errorResponse(response[1] as number, 'BAD_ARGUMENT', `result cannot be encoded: ${(err as Error).message}`, null, RPC_VERSION));
    }
    // The caller may be gone; its own deadline or peer-loss handles that side.
    ep.send(RPC_RESPONSE, bytes).catch(() => undefined);
  }

  private onResponse(payload: Buffer): void {
    const msg = this.decode(payload);
    const id = msg && responseId(msg, 1);
    if (msg === undefined || id === undefined) {
      if (msg) this.counters.malformed++;
      return;
    }
    const call = this.pending.take(id);
    if (!call) {
      this.counters.lateResponses++;
      return;
    }
    if (responseOk(msg, 1)) call.resolve(msg[3]);
    else call.reject(responseError(msg, 1, `rpc ${call.meta.method}`));
  }
}
