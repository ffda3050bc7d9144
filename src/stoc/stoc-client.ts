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
 *   direct write (openDirect): copy into a staging slot, WRITE it into the window slot, and one
 *                 small FILE_WRITE names it; the StoC's progress thread writes and answers it.
 *                 These take slots of their own at the window's end (DIRECT_SLOTS), so a log
 *                 append never waits behind a table's transfer.
 *
 * In-memory files (MemoryFile): the StoC hands out its regions' keys; the client imports them
 * and moves bytes itself through a staging slot: copy in + WRITE (append), READ + copy out.
 * No RPC, and no StoC CPU, per transfer; RPCs only to create, extend, list and remove.
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
 *  - A memory write's parts are written one after another, in order, so a write that fails
 *    part-way leaves a prefix of its bytes, never a hole (logs rely on this: see
 *    memory-log-store.ts). One-sided transfers have the call's deadline too.
 *  - Not thread-safe: use it from the thread that owns the Fabric.
 */
import { constants as bufferConstants } from 'node:buffer';
import { withDeadline } from '../common/deadline.js';
import { NovaError } from '../common/errors.js';
import { clusterSecret, proofOf } from '../common/cluster-secret.js';
import type { Endpoint } from '../transport/endpoint.js';
import type { Fabric } from '../transport/fabric.js';
import type { MemoryRegion, RemoteRegion } from '../transport/regions.js';
import type { CallOptions, Rpc } from '../transport/rpc.js';
import { parseCompactReply, type CompactArgs, type CompactOutput } from './compaction-executor.js';
import { left, parseList, wrap, type Op, type PartState } from './client-calls.js';
import * as memory from './memory-file-client.js';
import type { MemoryFile } from './memory-file-client.js';
import { SlotPool } from './slot-pool.js';
import { BACKGROUND_SYNC_BYTES } from './sync-gate.js';
import { compactionDeadlineMs } from '../compaction/fragments.js';
import {
  DIRECT_WRITE_VERSION, Method, STOC_PROTOCOL_VERSION, checkName, checkPrefix, checkUint,
  type HelloReply, type StocLoad,
} from './stoc-protocol.js';

export interface StocClientOptions {
  /** Deadline of connect, and the default deadline of each call (ms, default 10 000). */
  timeoutMs?: number;
  /** Bytes per window slot (default 256 KiB, at most the window): the unit of one transfer. */
  slotBytes?: number;
  /** Transfers that may wait for a slot before calls fail with BUSY (default 65 536). */
  maxWaiting?: number;
  /** The cluster's secret to prove at hello (default: the process's, clusterSecret(); null: none). */
  secret?: Buffer | null;
}

export type LostCode = 'PEER_LOST' | 'CLOSED';

/** Window slots kept for direct writes (log appends), at most a quarter of the window's. */
const DIRECT_SLOTS = 8;
/** How long a close waits for the WRITEs in flight to complete, and then for the StoC's bye. */
const BYE_MS = 2_000;

/** A persistent file opened for writes at given offsets (StocClient.openDirect). */
export interface DirectFile {
  readonly name: string;
  /** False once the connection it was opened on is lost: its handle is gone with it. */
  readonly alive: boolean;
  /** Writes `bytes` at `offset`; then, with `sync`, fdatasyncs the file (every write answered before). */
  write(offset: number, bytes: Uint8Array, sync: boolean, options?: CallOptions): Promise<void>;
}

type Part = (slotOffset: number, at: number, length: number, state: PartState) => Promise<void>;

/**
 * Reads this small copy out of staging at once: the copy costs less than the turn it would wait
 * for, and behind a table's slots in the queue a block would wait one turn per slot.
 */
const COPY_AT_ONCE_BYTES = 64 * 1024;

/** The turns copies out of staging take, one per turn of the event loop, in order (read). */
let copies: Promise<void> = Promise.resolve();

/** Resolves in a later turn of the event loop than the copy before it. */
function copyTurn(): Promise<void> {
  const mine = copies.then(() => new Promise<void>((resolve) => setImmediate(resolve)));
  copies = mine;
  return mine;
}

export class StocClient {
  private closed = false;
  private nextAppend = 0;

  private constructor(
    /** @internal */ readonly rpc: Rpc,
    /** @internal */ readonly ep: Endpoint,
    private readonly window: RemoteRegion,
    /** @internal */ readonly staging: MemoryRegion,
    /** The StoC's id, as it said at hello. */
    readonly stocId: number,
    /** @internal */ readonly pool: SlotPool,
    private readonly directPool: SlotPool,
    /** @internal */ readonly timeoutMs: number,
  ) {
    ep.onLost((code) => this.failSlots(new NovaError(code, code === 'PEER_LOST' ? 'the StoC was lost' : 'the connection was closed')));
  }

  static async connect(fabric: Fabric, rpc: Rpc, address: Uint8Array, opts: StocClientOptions = {}): Promise<StocClient> {
    const timeoutMs = checkUint('timeoutMs', opts.timeoutMs ?? 10_000);
    const deadline = Date.now() + timeoutMs;
    let ep: Endpoint | undefined;
    let staging: MemoryRegion | undefined;
    let id: number | undefined;
    try {
      ep = await fabric.connect(address, { timeoutMs });
      const secret = opts.secret === undefined ? clusterSecret() : opts.secret;
      let proof: Buffer | undefined;
      if (secret) {
        // A StoC that predates secrets knows no challenge, and asks for no proof.
        const reply = await rpc.call(ep, Method.challenge, {}, { timeoutMs: left(deadline) }).catch((err: NovaError) => {
          if (err.code === 'UNKNOWN_METHOD') return { nonce: null };
          throw err;
        });
        const nonce = (reply as { nonce?: unknown }).nonce;
        if (nonce instanceof Uint8Array) proof = proofOf(secret, nonce, 'stoc');
      }
      const hello = parseHello(await rpc.call(ep, Method.hello, { version: STOC_PROTOCOL_VERSION, ...(proof ? { proof } : {}) }, { timeoutMs: left(deadline) }));
      id = hello.id;
      const window = ep.importKey(hello.window);
      staging = fabric.allocate(hello.windowBytes);
      await rpc.call(ep, Method.attach, { key: staging.key.serialize() }, { timeoutMs: left(deadline) });
      const slotBytes = Math.min(checkUint('slotBytes', opts.slotBytes ?? 256 * 1024), hello.windowBytes);
      if (slotBytes < 1) throw new NovaError('BAD_ARGUMENT', 'slotBytes must be positive');
      const slots = Math.floor(hello.windowBytes / slotBytes);
      const maxWaiting = opts.maxWaiting ?? 65_536;
      // Direct writes (log appends) get slots of their own, so an append never waits behind
      // a table's transfer; with too few slots to split, they share.
      const direct = slots >= 2 ? Math.max(1, Math.min(DIRECT_SLOTS, Math.floor(slots / 4))) : 0;
      const pool = new SlotPool(slotBytes, slots - direct, maxWaiting);
      const directPool = direct > 0 ? new SlotPool(slotBytes, direct, maxWaiting, slots - direct) : pool;
      return new StocClient(rpc, ep, window, staging, hello.id, pool, directPool, timeoutMs);
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

  /**
   * Writes `bytes` at `offset` of `name` (created if missing); fdatasync first when `sync`.
   * `background`: a write nothing but a compaction waits for, synced piece by piece after the
   * syncs writes wait for (sync-gate.ts), with a deadline for its size unless given one.
   */
  async write(name: string, offset: number, bytes: Uint8Array, sync: boolean, options?: CallOptions & { background?: boolean }): Promise<void> {
    const timeoutMs = options?.timeoutMs ?? (options?.background ? compactionDeadlineMs(bytes?.length ?? 0) : undefined);
    const op = this.begin(`write of ${String(name)} [${offset}, +${bytes?.length})`, { timeoutMs });
    try {
      checkName(name);
      checkUint('offset', offset);
      this.usable();
      const background = sync && options?.background === true;
      // One fdatasync after all the slots (or after each piece, in the background), not one per slot.
      const piece = background ? BACKGROUND_SYNC_BYTES : bytes.length;
      let from = 0;
      do {
        const part = bytes.subarray(from, from + piece);
        const base = offset + from;
        await this.transfer(op, part.length, (slot, at, n, state) => this.persistPart(op, state, part, slot, at, n,
          { file: name, slot, length: n, offset: base + at, sync: false }));
        if (sync) await this.call(op, Method.sync, background ? { file: name, background: true } : { file: name });
        from += part.length;
      } while (from < bytes.length);
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
  }

  /**
   * Opens `name` (creating it) for direct writes: each write is WRITTEN into a window slot and
   * named by one small message that the StoC's progress thread writes to the file and answers,
   * so the StoC's event loop never wakes for it (stoc.dopen).
   */
  async openDirect(name: string, options?: CallOptions): Promise<DirectFile> {
    const op = this.begin(`direct open of ${String(name)}`, options);
    let handle: number;
    try {
      checkName(name);
      this.usable();
      handle = checkUint('direct handle in the StoC reply', await this.call(op, Method.dopen, { file: name, version: DIRECT_WRITE_VERSION }), 0xffffffff);
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
    // A write larger than a slot goes the ordinary way, in slots: it would block the StoC's
    // progress thread for its whole pwrite.
    const client = this;
    return {
      name,
      get alive() { return client.alive; },
      write: (offset, bytes, sync, o) => bytes.length > 0 && bytes.length <= this.directPool.slotBytes
        ? this.writeDirect(name, handle, offset, bytes, sync, o) : this.write(name, offset, bytes, sync, o),
    };
  }

  /** WRITEs `bytes` into a window slot, then one small FILE_WRITE names them (Rpc.writeFile). */
  private async writeDirect(name: string, handle: number, offset: number, bytes: Uint8Array, sync: boolean,
                            options?: CallOptions): Promise<void> {
    const op = { what: '', deadline: Date.now() + (options?.timeoutMs ?? this.timeoutMs) };
    try {
      checkUint('offset', offset);
      this.usable();
      await this.withSlot(this.directPool, op.deadline, async (slot, state) => {
        this.usable();
        this.staging.buffer.set(bytes, slot);
        state.sent = true; // from here the StoC may write the slot's bytes even if we give up
        await this.rpc.writeFile(this.ep, handle, offset, this.staging, slot, this.window, slot, bytes.length,
          { timeoutMs: left(op.deadline) });
      });
      if (sync) await this.call(op, Method.sync, { file: name });
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: direct write of ${name} [${offset}, +${bytes.length})`);
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

  /**
   * The `length` bytes at `offset` of `name`; CORRUPTION if the file is missing or shorter.
   * `into`: where to put them (exactly `length` bytes), instead of a new buffer.
   */
  async read(name: string, offset: number, length: number, options?: CallOptions, into?: Buffer): Promise<Buffer> {
    const op = this.begin(`read of ${String(name)} [${offset}, +${length})`, options);
    try {
      checkName(name);
      checkUint('offset', offset);
      checkUint('length', length, bufferConstants.MAX_LENGTH);
      this.usable();
      if (into && into.length !== length) throw new NovaError('BAD_ARGUMENT', `a read of ${length} bytes into a buffer of ${into.length}`);
      const out = into ?? Buffer.allocUnsafe(length);
      await this.transfer(op, length, async (slot, at, n, state) => {
        state.sent = true;
        await this.call(op, Method.fetch, { file: name, offset: offset + at, length: n, slot });
        // One slot's copy per turn of the event loop: a table's slots arrive together, and
        // copies into fresh memory (a page fault each 4 KiB) all in one turn would hold every
        // request waiting on the event loop (doc/decisions/read-copy-turns.md).
        if (n > COPY_AT_ONCE_BYTES) await copyTurn();
        this.usable(); // the staging region is detached once the client closes
        this.staging.buffer.copy(out, at, slot, slot + n);
      });
      return out;
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
  }

  /** The size of `name`, or undefined if it does not exist. */
  async size(name: string, options?: CallOptions): Promise<number | undefined> {
    const op = this.begin(`stat of ${String(name)}`, options);
    try {
      checkName(name);
      this.usable();
      const reply = await this.call(op, Method.stat, { file: name });
      return reply === null || reply === undefined ? undefined : checkUint('size in the StoC reply', reply);
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
  list(prefix: string, options?: CallOptions): Promise<Array<{ name: string; size: number }>> {
    return this.listing(Method.list, 'files', prefix, options);
  }

  /** Deletes `name`; a missing file is not an error. */
  async remove(name: string, options?: CallOptions): Promise<void> {
    await this.simple(`remove of ${String(name)}`, Method.remove, name, options);
  }

  /** fdatasyncs `name` (group-committed with other syncs of it at the StoC). */
  async sync(name: string, options?: CallOptions): Promise<void> {
    await this.simple(`sync of ${String(name)}`, Method.sync, name, options);
  }

  // ---- in-memory files (memory-file-client.ts) ----

  /**
   * Creates in-memory file `name` with one zeroed region of `regionBytes` (replacing a file
   * of that name) and imports it. BUSY when the StoC is at its memory limit.
   */
  createMemory(name: string, regionBytes: number, options?: CallOptions): Promise<MemoryFile> {
    return memory.create(this, name, regionBytes, options);
  }

  /** In-memory file `name` with all its regions imported, or undefined if the StoC has none. */
  openMemory(name: string, options?: CallOptions): Promise<MemoryFile | undefined> {
    return memory.open(this, name, options);
  }

  /** Every allocated byte of in-memory file `name` (zeros past what was written), or undefined. */
  readMemoryAll(name: string, options?: CallOptions): Promise<Buffer | undefined> {
    return memory.readAll(this, name, options);
  }

  /** In-memory files whose names start with `prefix`, in name order, with the bytes allocated to each. */
  listMemory(prefix: string, options?: CallOptions): Promise<Array<{ name: string; size: number }>> {
    return memory.list(this, prefix, options);
  }

  /**
   * Removes in-memory file `name`; a missing file is not an error. REQUIRES: no handle of it
   * is used afterwards (the StoC frees its memory after a grace period).
   */
  async removeMemory(name: string, options?: CallOptions): Promise<void> {
    await this.simple(`remove of memory file ${String(name)}`, Method.mremove, name, options);
  }

  /** Runs a compaction job on the StoC (compaction-executor.ts); the outputs it wrote. */
  async compact(job: CompactArgs, options?: CallOptions): Promise<CompactOutput[]> {
    const op = this.begin(`compaction of range ${job.range} (${job.inputs.length} inputs)`, options);
    try {
      this.usable();
      return parseCompactReply(await this.call(op, Method.compact, job));
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
  }

  /**
   * Claims range `range` for this connection under `epoch` (the StoC's fences.ts): the StoC
   * then refuses this connection's writes to the range's files once an LTC claims it under a
   * newer one. STALE_CONFIG if one already has.
   */
  async fence(range: number, epoch: number, options?: CallOptions): Promise<void> {
    const op = this.begin(`fence of range ${range} at epoch ${epoch}`, options);
    try {
      this.usable();
      await this.call(op, Method.fence, { range: checkUint('range', range, 0xffffffff), epoch: checkUint('epoch', epoch) });
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
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
        compactionsRunning: r?.compactionsRunning === undefined ? 0 : checkUint('compactionsRunning', r.compactionsRunning),
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
    this.failSlots(new NovaError('CLOSED', 'the client was closed'));
    // WRITEs still in flight land before the bye, which frees the window for another client. A
    // StoC that stopped never completes them: then no bye (a WRITE could land after it), and the
    // StoC frees the window once it finds the connection gone, after whatever was on it.
    const flushed = this.ep.isReady && await withDeadline(this.ep.flush(), BYE_MS, () => new NovaError('DEADLINE_EXCEEDED', 'flush')).then(() => true, () => false);
    if (flushed && this.ep.isReady) await this.rpc.call(this.ep, Method.bye, null, { timeoutMs: BYE_MS }).catch(() => undefined);
    this.ep.close();
    await this.staging.close().catch(() => undefined);
  }

  // ---- private ----

  /** @internal Names and sizes of the `kind` (files, memory files) that `method` lists, starting with `prefix`. */
  async listing(method: string, kind: string, prefix: string, options: CallOptions | undefined): Promise<Array<{ name: string; size: number }>> {
    const op = this.begin(`list of ${kind} starting "${String(prefix)}"`, options);
    try {
      checkPrefix(prefix);
      this.usable();
      return parseList(await this.call(op, method, { prefix }));
    } catch (err) {
      throw wrap(err, `StoC ${this.stocId}: ${op.what}`);
    }
  }

  /** @internal */
  begin(what: string, options: CallOptions | undefined): Op {
    return { what, deadline: Date.now() + (options?.timeoutMs ?? this.timeoutMs) };
  }

  /** @internal */
  usable(): void {
    if (this.closed) throw new NovaError('CLOSED', 'the client was closed');
    if (!this.ep.isReady) throw new NovaError('PEER_LOST', 'the StoC was lost');
  }

  /**
   * A one-sided transfer, failing with DEADLINE_EXCEEDED at the call's deadline. Why: the
   * fabric has no deadline of its own, and a StoC that stops progressing (over TCP) would
   * hold the caller forever. The transfer may still finish later: its slot is retired.
   */
  /** @internal */
  oneSided(op: Op, transfer: Promise<void>): Promise<void> {
    return withDeadline(transfer, op.deadline - Date.now(), () => new NovaError('DEADLINE_EXCEEDED', 'the one-sided transfer did not finish by its deadline'));
  }

  /** @internal */
  call(op: Op, method: string, args: unknown): Promise<unknown> {
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
      parts.push(this.withSlot(this.pool, op.deadline, (slot, state) => part(slot, at, n, state)));
    }
    const failed = (await Promise.allSettled(parts)).find((r) => r.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
  }

  /** Runs `fn` on a slot of `pool`, asked for now (so in call order; see SlotPool). */
  /** @internal */
  async withSlot(pool: SlotPool, deadline: number, fn: (slotOffset: number, state: PartState) => Promise<void>): Promise<void> {
    const slot = await pool.acquire(deadline);
    const state: PartState = { sent: false };
    let safe = true;
    try {
      await fn(pool.offset(slot), state);
    } catch (err) {
      safe = !(state.sent && (err as NovaError).code === 'DEADLINE_EXCEEDED');
      throw err;
    } finally {
      if (safe) pool.release(slot);
      else pool.retire();
    }
  }

  private failSlots(err: NovaError): void {
    this.pool.fail(err);
    if (this.directPool !== this.pool) this.directPool.fail(err);
  }

  /** Copies a part into its staging slot, WRITEs it to the window slot, asks the StoC to persist it. */
  private async persistPart(op: Op, state: PartState, bytes: Uint8Array, slot: number, at: number, n: number,
                            args: Record<string, unknown>): Promise<void> {
    if (n > 0) {
      this.usable();
      this.staging.buffer.set(bytes.subarray(at, at + n), slot);
      state.sent = true; // a WRITE past its deadline may still land: its slot is then retired
      // With a deadline: a StoC that stops answering must fail the part, not hang it.
      await this.oneSided(op, this.ep.write(this.staging, slot, this.window, slot, n));
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
