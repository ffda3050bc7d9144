/**
 * A connection to one StoC's persistent files (DESIGN.md §6; protocol in stoc-protocol.ts).
 *
 * At connect the client says hello (the StoC gives it a window of its file buffer and its
 * id), allocates a staging region of the same size, and attaches it (the StoC imports its key
 * once). The window is cut into slots; a slot is the same offset in the window and in the
 * staging region.
 *   write/append: copy into a staging slot, WRITE it into the window slot, RPC persist.
 *   read:         RPC fetch naming a slot; the StoC WRITEs the bytes into the staging slot
 *                 before it answers; copy them out.
 * Larger transfers are split into slot-sized parts, in flight together.
 *
 * Contracts:
 *  - Every method has a deadline (CallOptions.timeoutMs, default the connect timeout, 10 s)
 *    and fails with a NovaError whose message names the StoC and the file.
 *  - Appends from one client are applied in the order they were called, and each lands
 *    contiguously even when other clients append to the same file. A failed append or write
 *    may have written some of its bytes; a failed append's unwritten bytes read as zeros.
 *  - A slot whose request got no answer by its deadline is retired (the StoC may still use
 *    it); when all are retired, calls fail with UNAVAILABLE and the caller should reconnect.
 *  - Reads of bytes the StoC does not have (missing file, past the end) fail with CORRUPTION.
 *  - Not thread-safe: use it from the thread that owns the Fabric.
 */
import { constants as bufferConstants } from 'node:buffer';
import { NovaError } from '../common/errors.js';
import type { Endpoint, Fabric, MemoryRegion, RemoteRegion } from '../transport/fabric.js';
import type { CallOptions, Rpc } from '../transport/rpc.js';
import { SlotPool } from './slot-pool.js';
import {
  Method, STOC_PROTOCOL_VERSION, checkName, checkPrefix, checkUint,
  type HelloReply, type StocLoad,
} from './stoc-protocol.js';

export interface StocClientOptions {
  /** Deadline of connect, and the default deadline of each call (ms, default 10 000). */
  timeoutMs?: number;
  /** Bytes per window slot (default 256 KiB, at most the window): the unit of one transfer. */
  slotBytes?: number;
  /** Transfers that may wait for a slot before calls fail with BUSY (default 65 536). */
  maxWaiting?: number;
}

export type LostCode = 'PEER_LOST' | 'CLOSED';

/** One call's description (for errors) and deadline. */
interface Op {
  what: string;
  deadline: number;
}

/** Set once a part's request is on its way: from then on, no answer means the slot is unsafe. */
interface PartState {
  sent: boolean;
}

type Part = (slotOffset: number, at: number, length: number, state: PartState) => Promise<void>;

export class StocClient {
  private closed = false;
  private nextAppend = 0;

  private constructor(
    private readonly rpc: Rpc,
    private readonly ep: Endpoint,
    private readonly window: RemoteRegion,
    private readonly staging: MemoryRegion,
    /** The StoC's id, as it said at hello. */
    readonly stocId: number,
    private readonly pool: SlotPool,
    private readonly timeoutMs: number,
  ) {
    ep.onLost((code) => this.pool.fail(new NovaError(code, code === 'PEER_LOST' ? 'the StoC was lost' : 'the connection was closed')));
  }

  static async connect(fabric: Fabric, rpc: Rpc, address: Uint8Array, opts: StocClientOptions = {}): Promise<StocClient> {
    const timeoutMs = checkUint('timeoutMs', opts.timeoutMs ?? 10_000);
    const deadline = Date.now() + timeoutMs;
    let ep: Endpoint | undefined;
    let staging: MemoryRegion | undefined;
    let id: number | undefined;
    try {
      ep = await fabric.connect(address, { timeoutMs });
      const hello = parseHello(await rpc.call(ep, Method.hello, { version: STOC_PROTOCOL_VERSION }, { timeoutMs: left(deadline) }));
      id = hello.id;
      const window = ep.importKey(hello.window);
      staging = fabric.allocate(hello.windowBytes);
      await rpc.call(ep, Method.attach, { key: staging.key.serialize() }, { timeoutMs: left(deadline) });
      const slotBytes = Math.min(checkUint('slotBytes', opts.slotBytes ?? 256 * 1024), hello.windowBytes);
      if (slotBytes < 1) throw new NovaError('BAD_ARGUMENT', 'slotBytes must be positive');
      const pool = new SlotPool(slotBytes, Math.floor(hello.windowBytes / slotBytes), opts.maxWaiting ?? 65_536);
      return new StocClient(rpc, ep, window, staging, hello.id, pool, timeoutMs);
    } catch (err) {
      ep?.close();
      await staging?.close().catch(() => undefined);
      throw wrap(err, `${id === undefined ? 'a StoC' : `StoC ${id}`}: connect`);
    }
  }

  /** True until the StoC is lost or the client closed. */
  get alive(): boolean {
    return !this.closed && this.ep.isReady;
  }

  /** Calls `cb` once when the StoC is lost (PEER_LOST) or the connection closes (CLOSED). */
  onLost(cb: (code: LostCode) => void): void {
    this.ep.onLost(cb);
  }

  /** Writes `bytes` at `offset` of `name` (created if missing); fdatasync first when `sync`. */
  async write(name: string, offset: number, bytes: Uint8Array, sync: boolean, options?: CallOptions): Promise<void> {
    const op = this.begin(`write of ${String(name)} [${offset}, +${bytes?.length})`, options);
    try {
      checkName(name);
      checkUint('offset', offset);
      this.usable();
      await this.transfer(op, bytes.length, (slot, at, n, state) => this.persistPart(op, state, bytes, slot, at, n,
        { file: name, slot, length: n, offset: offset + at, sync }));
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
  }

  /** Appends `bytes` at the end of `name` as the StoC knows it, after this client's earlier appends. */
  async append(name: string, bytes: Uint8Array, sync: boolean, options?: CallOptions): Promise<void> {
    const op = this.begin(`append of ${bytes?.length} bytes to ${String(name)}`, options);
    let seq: number | undefined;
    try {
      checkName(name);
      this.usable();
      seq = this.nextAppend++;
      const s = seq;
      await this.transfer(op, bytes.length, (slot, at, n, state) => this.persistPart(op, state, bytes, slot, at, n,
        { file: name, slot, length: n, append: [s, bytes.length, at], sync }));
    } catch (err) {
      if (seq !== undefined) this.cancel(seq);
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
  }

  /** The `length` bytes at `offset` of `name`; CORRUPTION if the file is missing or shorter. */
  async read(name: string, offset: number, length: number, options?: CallOptions): Promise<Buffer> {
    const op = this.begin(`read of ${String(name)} [${offset}, +${length})`, options);
    try {
      checkName(name);
      checkUint('offset', offset);
      checkUint('length', length, bufferConstants.MAX_LENGTH);
      this.usable();
      const out = Buffer.allocUnsafe(length);
      await this.transfer(op, length, async (slot, at, n, state) => {
        state.sent = true;
        await this.call(op, Method.fetch, { file: name, offset: offset + at, length: n, slot });
        this.usable(); // the staging region is detached once the client closes
        this.staging.buffer.copy(out, at, slot, slot + n);
      });
      return out;
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
  }

  /** The whole of `name`, or undefined if it does not exist. */
  async readAll(name: string, options?: CallOptions): Promise<Buffer | undefined> {
    const op = this.begin(`read of all of ${String(name)}`, options);
    let size: number | undefined;
    try {
      checkName(name);
      this.usable();
      const reply = await this.call(op, Method.stat, { file: name });
      if (reply === null || reply === undefined) return undefined;
      size = checkUint('size in the StoC reply', reply);
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
    return this.read(name, 0, size, { timeoutMs: left(op.deadline) });
  }

  /** Files whose names start with `prefix`, in name order, with their sizes. */
  async list(prefix: string, options?: CallOptions): Promise<Array<{ name: string; size: number }>> {
    const op = this.begin(`list of files starting "${String(prefix)}"`, options);
    try {
      checkPrefix(prefix);
      this.usable();
      const reply = await this.call(op, Method.list, { prefix });
      if (!Array.isArray(reply)) throw new NovaError('CORRUPTION', 'the StoC answered list with a non-array');
      return reply.map((e: unknown) => {
        if (!Array.isArray(e) || typeof e[0] !== 'string') throw new NovaError('CORRUPTION', 'malformed list entry from the StoC');
        return { name: e[0], size: checkUint('size in the StoC reply', e[1]) };
      });
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
  }

  /** Deletes `name`; a missing file is not an error. */
  async remove(name: string, options?: CallOptions): Promise<void> {
    await this.simple(`remove of ${String(name)}`, Method.remove, name, options);
  }

  /** fdatasyncs `name` (group-committed with other syncs of it at the StoC). */
  async sync(name: string, options?: CallOptions): Promise<void> {
    await this.simple(`sync of ${String(name)}`, Method.sync, name, options);
  }

  /** The StoC's current load, for power-of-d placement. */
  async load(options?: CallOptions): Promise<StocLoad> {
    const op = this.begin('load', options);
    try {
      this.usable();
      const r = await this.call(op, Method.load, null) as Record<string, unknown> | null;
      return {
        queueDepth: checkUint('queueDepth', r?.queueDepth),
        pendingReadBytes: checkUint('pendingReadBytes', r?.pendingReadBytes),
        pendingWriteBytes: checkUint('pendingWriteBytes', r?.pendingWriteBytes),
      };
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
  }

  /**
   * Says bye (the StoC frees the window once this connection's requests finish), closes the
   * endpoint and the staging region. Calls still pending fail with CLOSED. Never rejects.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.pool.fail(new NovaError('CLOSED', 'the client was closed'));
    if (this.ep.isReady) await this.rpc.call(this.ep, Method.bye, null, { timeoutMs: 2_000 }).catch(() => undefined);
    this.ep.close();
    await this.staging.close().catch(() => undefined);
  }

  // ---- private ----

  private begin(what: string, options: CallOptions | undefined): Op {
    return { what, deadline: Date.now() + (options?.timeoutMs ?? this.timeoutMs) };
  }

  private usable(): void {
    if (this.closed) throw new NovaError('CLOSED', 'the client was closed');
    if (!this.ep.isReady) throw new NovaError('PEER_LOST', 'the StoC was lost');
  }

  private call(op: Op, method: string, args: unknown): Promise<unknown> {
    const timeoutMs = op.deadline - Date.now();
    if (timeoutMs <= 0) return Promise.reject(new NovaError('DEADLINE_EXCEEDED', 'the deadline passed'));
    return this.rpc.call(this.ep, method, args, { timeoutMs });
  }

  private async simple(what: string, method: string, name: string, options: CallOptions | undefined): Promise<void> {
    const op = this.begin(what, options);
    try {
      checkName(name);
      this.usable();
      await this.call(op, method, { file: name });
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
  }

  /**
   * Runs `part` over [0, length) in slot-sized pieces, each with its own slot. All slots are
   * asked for now, in order (see SlotPool). A zero-length transfer is one part with no slot.
   * Rejects with the first failure, after every part has settled.
   */
  private async transfer(op: Op, length: number, part: Part): Promise<void> {
    if (length === 0) {
      await part(0, 0, 0, { sent: false });
      return;
    }
    const parts: Array<Promise<void>> = [];
    for (let at = 0; at < length; at += this.pool.slotBytes) {
      const n = Math.min(this.pool.slotBytes, length - at);
      parts.push(this.withSlot(this.pool.acquire(op.deadline), (slot, state) => part(slot, at, n, state)));
    }
    const failed = (await Promise.allSettled(parts)).find((r) => r.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
  }

  private async withSlot(slotP: Promise<number>, fn: (slotOffset: number, state: PartState) => Promise<void>): Promise<void> {
    const slot = await slotP;
    const state: PartState = { sent: false };
    let safe = true;
    try {
      await fn(this.pool.offset(slot), state);
    } catch (err) {
      safe = !(state.sent && (err as NovaError).code === 'DEADLINE_EXCEEDED');
      throw err;
    } finally {
      if (safe) this.pool.release(slot);
      else this.pool.retire();
    }
  }

  /** Copies a part into its staging slot, WRITEs it to the window slot, asks the StoC to persist it. */
  private async persistPart(op: Op, state: PartState, bytes: Uint8Array, slot: number, at: number, n: number,
                            args: Record<string, unknown>): Promise<void> {
    if (n > 0) {
      this.usable();
      this.staging.buffer.set(bytes.subarray(at, at + n), slot);
      await this.ep.write(this.staging, slot, this.window, slot, n);
    }
    state.sent = true;
    await this.call(op, Method.persist, args);
  }

  /** Tells the StoC append `seq` sends no more parts, so later appends need not wait for it. */
  private cancel(seq: number): void {
    if (!this.ep.isReady) return;
    this.rpc.call(this.ep, Method.cancel, { seq }, { timeoutMs: this.timeoutMs }).catch(() => undefined);
  }
}

function parseHello(v: unknown): HelloReply {
  const h = v as Partial<HelloReply> | null;
  if (h?.version !== STOC_PROTOCOL_VERSION || !(h.window instanceof Uint8Array)) {
    throw new NovaError('BAD_ARGUMENT', `the StoC answered hello with protocol ${String(h?.version)}, want ${STOC_PROTOCOL_VERSION}`);
  }
  return {
    version: h.version,
    id: checkUint('StoC id', h.id),
    windowBytes: checkUint('windowBytes', h.windowBytes),
    window: h.window,
  };
}

function left(deadline: number): number {
  return Math.max(1, deadline - Date.now());
}

/**
 * The error with `context` ("StoC 3: write of f [0, +9)") in front, keeping its code. The
 * StoC's own messages already name it and the file, and are kept as they are.
 */
function wrap(err: unknown, context: string): NovaError {
  const e = err instanceof NovaError ? err
    : new NovaError('BAD_ARGUMENT', (err as Error)?.message ?? String(err), { cause: err });
  const stoc = context.slice(0, context.indexOf(':'));
  if (e.message.includes(`${stoc}:`)) return e;
  return new NovaError(e.code, `${context}: ${e.message}`, { cause: err });
}
