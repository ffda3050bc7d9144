/**
 * The RDMA-style transport, as JS sees it (DESIGN.md §2).
 *
 * A Fabric is one UCX context + worker with its own native progress thread (the "RNIC").
 * It hands out MemoryRegions (UCX-allocated, registered, seen as Buffers without copying)
 * and Endpoints to peers, on which READ, WRITE, WRITE-with-immediate, flush and messages
 * are posted.
 *
 * Contracts:
 *  - Every operation's promise settles exactly once: on its native completion event, or
 *    with CLOSED when the fabric closes. Nothing is posted that fails a bounds check.
 *  - A resolved `write` is visible in the target's memory (writes of one batch are followed
 *    by one endpoint flush, and resolve when it finishes). A `writeWithImm` notification is
 *    delivered only after its data is visible.
 *  - Operations posted in one JS turn are handed to native code in one call (a batch);
 *    completions come back in batches, one thread-safe-function call per batch.
 *  - A region's Buffer is detached (length 0) when the region closes, so JS can never touch
 *    unmapped memory. The memory itself is unmapped once no operation on it is pending.
 *  - When a peer dies, its endpoint's pending operations fail with PEER_LOST and `onLost`
 *    listeners run; UCX keepalive finds a silent death within about a second.
 *
 * Not thread-safe: use a Fabric from the thread that opened it.
 */
import { NovaError } from '../common/errors.js';
import { OP_DESC_BYTES, OpKind, Status, errorCodeOf } from './codes.js';
import { loadAddon, type NativeFabric, type NativeStats } from '../common/addon.js';
import { Endpoint } from './endpoint.js';
import { MemoryRegion, RemoteRegion } from './regions.js';
import { EventDrain, type EventSink } from './event-drain.js';
import { Handlers, type ImmediateHandler, type MessageHandler } from './handlers.js';
import { PendingOps, failure } from './pending-ops.js';
import { RemoteKey } from './remote-key.js';
import { openWorkerAddress, sealWorkerAddress } from './worker-address.js';

export interface FabricOptions {
  /**
   * Microseconds the progress thread spins after its last work before it sleeps (default 0,
   * or NOVA_SPIN_US). Spinning trims a wake-up off each completion when the process has a
   * core to itself; a cluster's processes share cores, and there it costs
   * (doc/decisions/transport-spin.md).
   */
  spinUs?: number;
  /** Deadline for control calls into the progress thread (allocate, connect, importKey). */
  controlTimeoutMs?: number;
  /** Largest message payload accepted by `send` (bytes). */
  maxMessageBytes?: number;
  /**
   * After handing a batch over, wait up to this many µs for its completions and take them at
   * once, instead of sleeping until the progress thread's notification wakes this thread. A
   * wake-up costs tens of µs on a small VM; a shared-memory batch completes in a few.
   * 0 turns it off. Default 0 (or NOVA_INLINE_WAIT_US): like spinning, the wait pays only
   * with a core to oneself (doc/decisions/transport-spin.md).
   */
  inlineWaitUs?: number;
}

export interface ConnectOptions {
  /** Deadline for the connection to be wired up and acknowledged by the peer. */
  timeoutMs?: number;
}

export type { MessageHandler, ImmediateHandler } from './handlers.js';

export interface FabricStats extends NativeStats {
  unhandledMessages: number;
  handlerErrors: number;
  /** Completion batches taken inline by a submit that waited (FabricOptions.inlineWaitUs). */
  inlineBatches: number;
}

const STAGE_OPS = 4096;
/** Descriptor byte 1 of the send that follows a WriteSend: alone, native refuses it. */
const PAIRED_SEND = 1 << 8;
/**
 * Inline completions (FabricOptions.inlineWaitUs): at most INLINE_PER_TURN times per
 * event-loop turn, so timers and I/O still run; after a miss (a slow transport), not again
 * for INLINE_BACKOFF batches.
 */
const INLINE_PER_TURN = 32;
const INLINE_BACKOFF = 64;
const DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024;
const TWO_32 = 0x1_0000_0000;

/** Converts a failed native control call (an Error with a numeric `status`) to a NovaError. */
function controlError(err: unknown, what: string): NovaError {
  if (err instanceof NovaError) return err;
  const status = (err as { status?: unknown } | null)?.status;
  if (typeof status === 'number') return failure(status, what);
  return new NovaError('TRANSPORT', `${what}: ${(err as Error)?.message ?? String(err)}`, { cause: err });
}

export class Fabric {
  /** The (sealed) worker address that peers pass to `connect`. */
  readonly address: Buffer;
  private readonly native: NativeFabric;
  private readonly maxMessageBytes: number;
  private readonly inlineWaitUs: number;
  private closed = false;

  private readonly endpoints = new Map<number, Endpoint>();
  private readonly regions = new Set<MemoryRegion>();
  private readonly handlers = new Handlers();

  private readonly pending = new PendingOps();

  // Staged descriptors and message bytes, handed to native code once per JS turn.
  private readonly stage = Buffer.alloc(STAGE_OPS * OP_DESC_BYTES);
  private readonly stageU32 = new Uint32Array(this.stage.buffer, this.stage.byteOffset, this.stage.length / 4);
  private staged = 0;
  private messages = Buffer.alloc(64 * 1024);
  private messagesLength = 0;
  private flushQueued = false;
  private inlineLeft = INLINE_PER_TURN;
  private inlineBatches = 0;
  private inlineRefillQueued = false;
  private inlineSkip = 0;
  private draining = false;

  private readonly events = new EventDrain();
  /** Where drained events go. */
  private readonly sink: EventSink = {
    complete: (opId, status) => this.pending.complete(opId, status),
    accepted: (id) => this.accepted(id),
    lost: (id, status) => this.lost(id, status),
    message: (id, type, payload) => this.handlers.deliverMessage(this.endpoints.get(id), type, payload),
    immediate: (id, imm) => this.handlers.deliverImmediate(this.endpoints.get(id), imm),
  };

  private constructor(options: FabricOptions) {
    const addon = loadAddon();
    this.native = new addon.NativeFabric(
      { spinUs: options.spinUs ?? envMicros('NOVA_SPIN_US') ?? 0, controlTimeoutMs: options.controlTimeoutMs ?? 5000 },
      () => this.onEvents(),
    );
    this.address = sealWorkerAddress(this.native.address());
    this.maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE;
    this.inlineWaitUs = options.inlineWaitUs ?? envMicros('NOVA_INLINE_WAIT_US') ?? 0;
  }

  /** Opens a fabric. UCX reads its UCX_* environment now (e.g. UCX_TLS=sm or tcp). */
  static open(options: FabricOptions = {}): Fabric {
    return new Fabric(options);
  }

  static ucxVersion(): string {
    return loadAddon().ucxVersion();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Allocates and registers `length` bytes that peers may READ and WRITE. */
  allocate(length: number): MemoryRegion {
    this.assertOpen('allocate');
    if (!Number.isSafeInteger(length) || length < 1) {
      throw new NovaError('BAD_ARGUMENT', `region length must be a positive integer, not ${length}`);
    }
    let r;
    try {
      r = this.native.mapRegion(length);
    } catch (err) {
      throw controlError(err, `allocate(${length})`);
    }
    const region = new MemoryRegion(this, r.id, length, r.memory, new RemoteKey(r.address, length, r.rkey));
    this.regions.add(region);
    return region;
  }

  /** Connects to the fabric whose worker address is `address`. */
  connect(address: Uint8Array, options: ConnectOptions = {}): Promise<Endpoint> {
    if (this.closed) return Promise.reject(new NovaError('CLOSED', 'connect: fabric is closed'));
    let ucxAddress: Buffer;
    try {
      ucxAddress = openWorkerAddress(address);
    } catch (err) {
      return Promise.reject(err);
    }
    const timeoutMs = options.timeoutMs ?? 5000;
    return new Promise<Endpoint>((resolve, reject) => {
      let ep: Endpoint | undefined;
      let settled = false;
      const timer = setTimeout(() => {
        if (settled) return;
        settled = true;
        reject(new NovaError('DEADLINE_EXCEEDED', `connect: no answer from the peer within ${timeoutMs} ms`));
        ep?.close();
      }, timeoutMs);
      const slot = this.pending.take('connect',
        () => {
          clearTimeout(timer);
          if (settled || !ep) return;
          settled = true;
          ep.state = 'ready';
          resolve(ep);
        },
        (e) => {
          clearTimeout(timer);
          if (ep) this.endpoints.delete(ep.id);
          if (settled) return;
          settled = true;
          reject(e);
        });
      try {
        const id = this.native.connect(ucxAddress, slot + 1);
        ep = new Endpoint(this, id, 'connecting');
        this.endpoints.set(id, ep);
      } catch (err) {
        clearTimeout(timer);
        this.pending.release(slot);
        settled = true;
        reject(controlError(err, 'connect'));
      }
    });
  }

  /** Called with each endpoint a peer opens to us, once it is ready. */
  onConnection(handler: (ep: Endpoint) => void): void {
    this.handlers.connection = handler;
  }

  /** Routes messages of `type` (a non-negative 32-bit number) to `handler`. */
  onMessage(type: number, handler: MessageHandler): void {
    if (!Number.isInteger(type) || type < 0 || type >= TWO_32) {
      throw new NovaError('BAD_ARGUMENT', `message type must be a 32-bit unsigned integer, not ${type}`);
    }
    this.handlers.messages.set(type, handler);
  }

  /** Called with each writeWithImm notification, after its data is visible. */
  onImmediate(handler: ImmediateHandler): void {
    this.handlers.immediate = handler;
  }

  stats(): FabricStats {
    return {
      ...this.native.stats(),
      unhandledMessages: this.handlers.unhandled,
      handlerErrors: this.handlers.errors,
      inlineBatches: this.inlineBatches,
    };
  }

  /** Lets the process exit while this fabric is open (it keeps the event loop alive by default). */
  unref(): void {
    this.native.unref();
  }

  ref(): void {
    this.native.ref();
  }

  /**
   * Closes the fabric: every pending operation fails with CLOSED, endpoints close, regions
   * are detached and unmapped. Idempotent.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    for (const region of this.regions) region.detach();
    this.regions.clear();
    this.native.close();
    this.onEvents();
    const closed = new NovaError('CLOSED', 'the fabric was closed');
    this.pending.failAll(closed);
    for (const ep of [...this.endpoints.values()]) ep.markLost('CLOSED');
    this.endpoints.clear();
  }

  // ---- internal: used by Endpoint and MemoryRegion ----

  /** @internal */
  post(kind: number, ep: number, region: number, localOffset: number, length: number,
       rkey: number, imm: number, remoteOffset: number, what: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const slot = this.pending.take(what, resolve, reject);
      this.stageOp(kind, slot + 1, ep, region, localOffset, length, rkey, imm, remoteOffset);
    });
  }

  /** @internal A message of `payload`, then `more` when given (copied once, into the batch). */
  postSend(ep: number, type: number, payload: Uint8Array, more?: Uint8Array): Promise<void> {
    const offset = this.stageMessage(payload, more, 1);
    if (typeof offset !== 'number') return Promise.reject(offset);
    const length = this.messagesLength - offset;
    return this.post(OpKind.Send, ep, 0, offset, length, 0, type, 0, 'send');
  }

  /**
   * @internal A WRITE, then a message sent once the write is complete at the peer (never if
   * it fails): two descriptors that must travel in one batch. Settles when the message is sent.
   */
  postWriteSend(ep: number, region: number, localOffset: number, length: number, rkey: number, remoteOffset: number,
                type: number, payload: Uint8Array, more?: Uint8Array): Promise<void> {
    if (this.closed) return Promise.reject(new NovaError('CLOSED', 'writeThenSend: fabric is closed'));
    const offset = this.stageMessage(payload, more, 2);
    if (typeof offset !== 'number') return Promise.reject(offset);
    const n = this.messagesLength - offset;
    return new Promise<void>((resolve, reject) => {
      const slot = this.pending.take('writeThenSend', resolve, reject);
      this.stageOp(OpKind.WriteSend, 0, ep, region, localOffset, length, rkey, 0, remoteOffset);
      this.stageOp(OpKind.Send | PAIRED_SEND, slot + 1, ep, 0, offset, n, 0, type, 0);
    });
  }

  /**
   * Copies a message into the batch's message bytes, first sending the batch if the message
   * or `ops` more descriptors would not fit in it. Returns its offset, or the error.
   */
  private stageMessage(payload: Uint8Array, more: Uint8Array | undefined, ops: number): number | NovaError {
    const length = payload.byteLength + (more?.byteLength ?? 0);
    if (length > this.maxMessageBytes) {
      return new NovaError('BAD_ARGUMENT', `message of ${length} bytes exceeds maxMessageBytes (${this.maxMessageBytes})`);
    }
    if (this.messagesLength + length > this.messages.length || this.staged + ops > STAGE_OPS) {
      if (this.messagesLength > 0 || this.staged > 0) this.flush();
      if (length > this.messages.length) {
        this.messages = Buffer.alloc(Math.max(length, this.messages.length * 2));
      }
    }
    const offset = this.messagesLength;
    this.messages.set(payload, offset);
    if (more) this.messages.set(more, offset + payload.byteLength);
    this.messagesLength += length;
    return offset;
  }

  /** @internal */
  importKey(ep: Endpoint, key: RemoteKey): RemoteRegion {
    this.assertOpen('importKey');
    try {
      const id = this.native.importRkey(ep.id, key.packed, key.address, key.length);
      return new RemoteRegion(this, ep, id, key.length);
    } catch (err) {
      throw controlError(err, 'importKey');
    }
  }

  /** @internal */
  dropKey(id: number): void {
    if (this.closed) return;
    this.flush(); // operations already staged with this key go first
    try {
      this.native.dropRkey(id);
    } catch {
      // The endpoint is gone and took its keys with it.
    }
  }

  /**
   * Lets the peer on `ep` write into open file `fd`, bytes [0, limit), under `handle`: it
   * WRITEs the bytes into [start, +length) of `window.region`, then a FILE_WRITE message names
   * them, which the progress thread writes to the file and answers (Rpc.writeFile), so this
   * process's event loop never wakes for them. REQUIRES: `fd` stays open until
   * unregisterFile(handle) returns.
   */
  registerFile(handle: number, fd: number, limit: number, ep: Endpoint,
               window: { region: MemoryRegion; start: number; length: number }): void {
    this.assertOpen('registerFile');
    try {
      this.native.registerFile(handle, fd, limit, ep.id, window.region.id, window.start, window.length);
    } catch (err) {
      throw controlError(err, 'registerFile');
    }
  }

  /** Stops direct writes under `handle`; returns the end of the furthest one it took. */
  unregisterFile(handle: number): number {
    if (this.closed) return 0;
    try {
      return this.native.unregisterFile(handle);
    } catch (err) {
      throw controlError(err, 'unregisterFile');
    }
  }

  /** The end of the furthest direct write `handle` took so far. */
  fileEnd(handle: number): number {
    this.assertOpen('fileEnd');
    try {
      return this.native.fileEnd(handle);
    } catch (err) {
      throw controlError(err, 'fileEnd');
    }
  }

  /** @internal */
  closeEndpoint(ep: Endpoint): void {
    this.endpoints.delete(ep.id);
    if (this.closed) return;
    this.flush();
    try {
      this.native.closeEndpoint(ep.id);
    } catch {
      // Already gone on the native side (peer lost).
    }
  }

  /** @internal */
  closeRegion(region: MemoryRegion): Promise<void> {
    this.regions.delete(region);
    if (this.closed) return Promise.resolve();
    this.flush(); // staged operations on the region go first; close waits for them
    return new Promise<void>((resolve, reject) => {
      const slot = this.pending.take('close region', resolve, reject);
      try {
        this.native.closeRegion(region.id, slot + 1);
      } catch (err) {
        this.pending.release(slot);
        reject(controlError(err, 'close region'));
      }
    });
  }

  /** @internal */
  assertOpen(what: string): void {
    if (this.closed) throw new NovaError('CLOSED', `${what}: fabric is closed`);
  }

  // ---- private ----

  private stageOp(kind: number, opId: number, ep: number, region: number, localOffset: number,
                  length: number, rkey: number, imm: number, remoteOffset: number): void {
    if (this.closed) {
      this.pending.complete(opId, Status.Closed);
      return;
    }
    const u = this.stageU32;
    const i = this.staged * (OP_DESC_BYTES / 4);
    u[i] = kind;
    u[i + 1] = opId;
    u[i + 2] = ep;
    u[i + 3] = region;
    u[i + 4] = localOffset >>> 0;
    u[i + 5] = Math.floor(localOffset / TWO_32);
    u[i + 6] = length >>> 0;
    u[i + 7] = Math.floor(length / TWO_32);
    u[i + 8] = rkey;
    u[i + 9] = imm >>> 0;
    u[i + 10] = remoteOffset >>> 0;
    u[i + 11] = Math.floor(remoteOffset / TWO_32);
    if (++this.staged === STAGE_OPS) {
      this.flush();
    } else if (!this.flushQueued) {
      this.flushQueued = true;
      queueMicrotask(this.flushTask);
    }
  }

  private readonly flushTask = (): void => {
    this.flushQueued = false;
    this.flush(true);
  };

  private readonly refillInline = (): void => {
    this.inlineRefillQueued = false;
    this.inlineLeft = INLINE_PER_TURN;
  };

  /** Hands staged operations to native code. `inline`: from the flush microtask only. */
  private flush(inline = false): void {
    if (this.staged === 0 || this.closed) return;
    const count = this.staged;
    this.staged = 0;
    const messagesLength = this.messagesLength;
    this.messagesLength = 0;
    let waitUs = 0;
    if (inline && this.inlineWaitUs > 0 && this.inlineLeft > 0 && !this.draining) {
      if (this.inlineSkip > 0) this.inlineSkip--;
      else waitUs = this.inlineWaitUs;
    }
    const ready = this.native.submit(this.stage, count, this.messages, messagesLength, waitUs);
    if (waitUs === 0) return;
    if (!ready) {
      this.inlineSkip = INLINE_BACKOFF;
      return;
    }
    this.inlineLeft--;
    this.inlineBatches++;
    if (!this.inlineRefillQueued) {
      this.inlineRefillQueued = true;
      setImmediate(this.refillInline);
    }
    this.onEvents();
  }

  private onEvents(): void {
    // Not re-entrant: a handler that closes the fabric must not drain over this loop.
    if (this.draining) return;
    this.draining = true;
    try {
      this.events.drain(this.native, this.sink);
    } finally {
      this.draining = false;
    }
  }

  private accepted(id: number): void {
    const ep = new Endpoint(this, id, 'ready');
    this.endpoints.set(id, ep);
    this.handlers.deliverConnection(ep);
  }

  private lost(id: number, status: number): void {
    const ep = this.endpoints.get(id);
    if (!ep) return;
    this.endpoints.delete(id);
    ep.markLost(errorCodeOf(status) === 'CLOSED' ? 'CLOSED' : 'PEER_LOST');
  }

}

/**
 * A microsecond knob from the environment (NOVA_SPIN_US, NOVA_INLINE_WAIT_US), so every
 * process of a cluster can be tuned at once; undefined if unset. A bad value is an error.
 */
function envMicros(name: string): number | undefined {
  const v = process.env[name];
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 0 || n > 1_000_000) throw new NovaError('BAD_ARGUMENT', `${name} must be an integer number of µs in [0, 1000000], not "${v}"`);
  return n;
}
