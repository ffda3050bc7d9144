/**
 * The StoC's persistent-file service (DESIGN.md §6; protocol in stoc-protocol.ts).
 *
 * A StocServer owns a directory of append-mostly files, a Fabric with an Rpc on it, and one
 * shared file buffer: a single registered region cut into fixed windows, one per client
 * connection (given at hello, returned to the free list when the connection says bye, is
 * lost, or closes). Clients WRITE blocks into their window and ask the StoC to persist them;
 * for reads the StoC reads the file into the window and WRITEs it into the client's staging
 * region. It also keeps in-memory files (memory-files.ts): registered regions that clients
 * WRITE and READ themselves, for LogC's memory modes.
 *
 * Why WRITE + RPC, not WRITE-with-immediate + ack as in Nova-LSM: a request must name a file
 * and an offset, which a 32-bit immediate cannot carry; the RPC costs the same round trips
 * (one WRITE, one request, one answer).
 *
 * Contracts:
 *  - Requests are validated; a bad one gets an error answer (BAD_ARGUMENT, OUT_OF_BOUNDS,
 *    CORRUPTION for bytes that are not there), never a crash. Disk failures answer REMOTE
 *    with the errno in the message.
 *  - A window is reused only after every request that touched it has finished, so a lost
 *    client's late disk write never reads another client's bytes.
 *  - Nothing is deleted at start-up; files survive restarts. The directory is locked
 *    (src/common/files.ts) so two StoCs never share it.
 *  - `close` answers no new requests, waits for the ones running, then closes files and the
 *    fabric (whose region the running requests read and write, and which frees the memory
 *    files' regions).
 */
import { mkdir, statfs } from 'node:fs/promises';
import { DEFAULT_SETTINGS } from '../cluster/config.js';
import { BufferPool } from '../common/buffer-pool.js';
import { withDeadline } from '../common/deadline.js';
import { NovaError } from '../common/errors.js';
import { checkProof, clusterSecret, newNonce } from '../common/cluster-secret.js';
import { lockDir } from '../common/files.js';
import { Fabric, type FabricOptions } from '../transport/fabric.js';
import type { Endpoint } from '../transport/endpoint.js';
import type { MemoryRegion } from '../transport/regions.js';
import { RemoteKey } from '../transport/remote-key.js';
import { Rpc } from '../transport/rpc.js';
import { Connection } from './connection.js';
import { DirectFileService, type DirectHost } from './direct-file-service.js';
import { CompactionService, type CompactionHost } from './compaction-service.js';
import { StoredFiles, type StoredFile } from './stored-files.js';
import { SyncGate } from './sync-gate.js';
import { MemoryFiles, type MemoryFilesStats } from './memory-files.js';
import { Fences, MAX_EPOCH, MAX_FENCES, rangeOfFile } from './fences.js';
import {
  MAX_FILE_BYTES, Method, STOC_PROTOCOL_VERSION, checkName, checkPrefix, checkUint, fields,
  type HelloReply, type MemoryFileReply, type StocLoad,
} from './stoc-protocol.js';

export interface StocServerOptions {
  dir: string;
  id: number;
  /** The secret a peer must prove it knows at hello (default: the process's, clusterSecret()). */
  secret?: Buffer;
  /** Connections (LTCs, and StoCs that run compactions) served at once, each with a window; more are BUSY (default DEFAULT_PEERS). */
  peers?: number;
  /** The shared file buffer: one registered region (default peers × windowBytes). */
  bufferBytes?: number;
  /** Each connection's window in the buffer (default 8 MiB): bufferBytes / windowBytes clients at once. */
  windowBytes?: number;
  fabric?: FabricOptions;
  /** Open file descriptors kept (default 1024); idle ones beyond are closed, least recently used first. */
  maxOpenFiles?: number;
  /**
   * Bytes of registered memory the StoC gives to in-memory files at most (default 1 GiB);
   * requests beyond it fail with BUSY. Memory logs need R × (memtable size) per live memtable.
   */
  memoryBytes?: number;
  /**
   * Memory kept between compaction jobs for their inputs and outputs (default 256 MiB, about
   * 15 tables of 16 MiB), so a job does not fault in fresh pages for every table (buffer-pool.ts).
   * It stays allocated while the StoC runs; 0 keeps none.
   */
  compactionMemoryBytes?: number;
  /** In-memory file regions at most (default 1024; BUSY beyond). */
  memoryRegions?: number;
  /** Milliseconds a removed memory file's regions stay mapped before they are freed (default 10 000). */
  memoryGraceMs?: number;
  /** Where the StoC says what went wrong in work nobody waits for (default: stderr). */
  onLog?: (line: string) => void;
}

export interface StocServerStats extends StocLoad, MemoryFilesStats {
  id: number;
  connections: number;
  windows: number;
  windowsInUse: number;
  openFiles: number;
  /** Files open for direct writes (stoc.dopen), and the direct writes the progress thread did. */
  directHandles: number;
  directWrites: number;
  persists: number;
  fetches: number;
  bytesWritten: number;
  bytesRead: number;
  syncs: number;
  failures: number;
  /** Offloaded compactions run (compaction-executor.ts), and the time they took. */
  compactions: number;
  compactionMs: number;
  /** Memory kept for compaction jobs now, and the buffers jobs took from it instead of new. */
  compactionMemoryBytes: number;
  /** fdatasyncs writes waited for, and those of compaction outputs: made to wait, and sent past waiting writes after a second (sync-gate.ts). */
  foregroundSyncs: number;
  backgroundSyncs: number;
  backgroundWaits: number;
  backgroundOverdue: number;
  /** What running compaction jobs hold (compaction-service.ts jobMemory), and jobs refused for want of it. */
  compactionHeldBytes: number;
  compactionsRefusedForMemory: number;
  compactionMemoryReuses: number;
}

const MiB = 1024 * 1024;
/**
 * Peers a StoC serves at once by default: room for 16 LTCs and StoCs and more. Each window is
 * virtual memory until used.
 */
export const DEFAULT_PEERS = 24;
/** Each peer's window of the file buffer by default: a table's block or a log's batch fits many times. */
export const DEFAULT_WINDOW_BYTES = 8 * MiB;
/** How long a fence waits for the writes to its range already under way. */
const FENCE_DRAIN_MS = 10_000;
/** Larger memory regions are refused: one region is one memtable's log. */
const MAX_REGION_BYTES = 2 ** 32;
type Kind = 'read' | 'write' | 'other';

export class StocServer implements CompactionHost, DirectHost {
  readonly id: number;
  /** The fabric's sealed worker address: what the coordinator hands to LTCs. */
  readonly address: Buffer;
  private readonly conns = new Map<Endpoint, Connection>();
  private readonly freeWindows: number[] = [];
  private readonly windowCount: number;
  private readonly counters = { persists: 0, fetches: 0, bytesWritten: 0, bytesRead: 0, syncs: 0, failures: 0, refused: 0 };
  /** The secret peers prove at hello, and the nonce each connection that asked was given. */
  private readonly secret: Buffer | undefined;
  private readonly challenges = new Map<Endpoint, Buffer>();
  private readonly compactions: CompactionService;
  private readonly dir: string;
  /** Free disk kept for logs and MANIFESTs (tableRoom); the cluster's setting once a configuration came. */
  private reserveBytes = DEFAULT_SETTINGS.stocReserveBytes;
  private readonly direct: DirectFileService;
  /** Writes under way to each range's files, and fences waiting for them to end (counted). */
  private readonly rangeWrites = new Map<number, { n: number; idle: Array<() => void> }>();
  private readonly load: Omit<StocLoad, 'compactionsRunning'> = { queueDepth: 0, pendingReadBytes: 0, pendingWriteBytes: 0 };
  private active = 0;
  private idleWaiters: Array<() => void> = [];
  /** @internal (CompactionHost) */
  stopping = false;
  /** The order fdatasyncs go to the disk in: what writes wait for first (sync-gate.ts). */
  private readonly syncs = new SyncGate();
  /** Most memory kept between compaction jobs (StocServerOptions.compactionMemoryBytes). */
  private readonly keptMax: number;
  private closing: Promise<void> | undefined;

  private constructor(
    opts: StocServerOptions,
    /** @internal (CompactionHost) */ readonly fabric: Fabric,
    /** @internal (CompactionHost) */ readonly rpc: Rpc,
    /** @internal (DirectHost) */ readonly buffer: MemoryRegion,
    /** @internal (DirectHost) */ readonly windowBytes: number,
    /** @internal (CompactionHost) */ readonly files: StoredFiles,
    private readonly memory: MemoryFiles,
    private readonly fences: Fences,
    private readonly unlock: () => void,
  ) {
    this.id = opts.id;
    this.dir = opts.dir;
    this.secret = opts.secret ?? clusterSecret();
    this.direct = new DirectFileService(this);
    this.keptMax = checkUint('compactionMemoryBytes', opts.compactionMemoryBytes ?? 256 * MiB);
    this.compactions = new CompactionService(this, opts.onLog ?? ((line) => process.stderr.write(`${line}\n`)), new BufferPool(this.keptMax));
    this.address = fabric.address;
    this.windowCount = Math.floor(buffer.length / windowBytes);
    for (let i = this.windowCount - 1; i >= 0; i--) this.freeWindows.push(i);
    this.serveAll();
  }

  static async start(opts: StocServerOptions): Promise<StocServer> {
    const id = checkUint('StoC id', opts.id, 0xffffffff);
    const windowBytes = checkUint('windowBytes', opts.windowBytes ?? DEFAULT_WINDOW_BYTES, 2 ** 40);
    const peers = checkUint('peers', opts.peers ?? DEFAULT_PEERS, 4096);
    if (peers < 1) throw new NovaError('BAD_ARGUMENT', 'peers must be at least 1');
    const bufferBytes = checkUint('bufferBytes', opts.bufferBytes ?? peers * windowBytes, 2 ** 40);
    if (windowBytes > bufferBytes) throw new NovaError('BAD_ARGUMENT', `windowBytes ${windowBytes} is larger than bufferBytes ${bufferBytes}`);
    if (windowBytes < 4096) throw new NovaError('BAD_ARGUMENT', `windowBytes must be at least 4096, not ${windowBytes}`);
    const memory = {
      limitBytes: checkUint('memoryBytes', opts.memoryBytes ?? 1024 * MiB),
      maxRegions: checkUint('memoryRegions', opts.memoryRegions ?? 1024),
      graceMs: checkUint('memoryGraceMs', opts.memoryGraceMs ?? 10_000, 2 ** 31 - 1),
    };
    await mkdir(opts.dir, { recursive: true });
    const unlock = lockDir(opts.dir);
    let fabric: Fabric | undefined;
    try {
      fabric = Fabric.open(opts.fabric);
      const buffer = fabric.allocate(bufferBytes);
      const files = new StoredFiles(opts.dir, opts.maxOpenFiles ?? 1024);
      const memoryFiles = new MemoryFiles(fabric, id, memory);
      return new StocServer({ ...opts, id }, fabric, new Rpc(fabric), buffer, windowBytes, files, memoryFiles, new Fences(opts.dir), unlock);
    } catch (err) {
      await fabric?.close();
      unlock();
      throw err;
    }
  }

  stats(): StocServerStats {
    return {
      id: this.id,
      connections: this.conns.size,
      windows: this.windowCount,
      windowsInUse: this.windowCount - this.freeWindows.length,
      openFiles: this.files.openFiles,
      directHandles: this.direct.handles(),
      directWrites: this.fabric.stats().fileWrites,
      ...this.memory.stats(),
      ...this.counters,
      ...this.compactions.counters,
      ...this.syncs.counters,
      compactionMemoryBytes: this.compactions.env.memory.bytes,
      compactionHeldBytes: this.compactions.heldBytes,
      compactionMemoryReuses: this.compactions.env.memory.counters.reused,
      ...this.load,
      compactionsRunning: this.compactions.running,
    };
  }

  /** Offloaded compactions run at once (the cluster's stocCompactions); more are answered BUSY. */
  setCompactionLimit(jobs: number): void {
    this.compactions.limit = Math.max(1, Math.floor(jobs));
  }

  /**
   * Memory for offloaded compactions (the cluster's stocMemoryBytes; what is kept between jobs
   * is a quarter of it at most) and for in-memory files (stocLogMemoryBytes).
   */
  setMemory(compactionBytes: number, logBytes: number): void {
    this.compactions.memoryBytes = Math.max(0, Math.floor(compactionBytes));
    this.compactions.env.memory.setMax(Math.min(this.keptMax, Math.floor(compactionBytes / 4)));
    this.memory.setLimit(Math.max(0, Math.floor(logBytes)));
  }

  /** Free disk kept for logs and MANIFESTs (the cluster's stocReserveBytes). */
  setReserve(bytes: number): void {
    this.reserveBytes = Math.max(0, Math.floor(bytes));
  }

  /**
   * @internal (CompactionHost) DISK_FAILED (as ENOSPC) if writing `length` bytes of table file
   * `name` would leave less free disk than the reserve: logs and MANIFESTs keep room to go on
   * when tables have filled the disk. Other files are not checked.
   */
  async tableRoom(name: string, length: number): Promise<void> {
    if (!name.endsWith('.sst') || this.reserveBytes === 0) return;
    const fs = await statfs(this.dir);
    const free = fs.bavail * fs.bsize;
    if (free - length < this.reserveBytes) {
      throw new NovaError('DISK_FAILED', `StoC ${this.id}: write of ${name} refused: ENOSPC: ${mib(free)} free, and ${mib(this.reserveBytes)} are kept for logs and MANIFESTs (--stoc-reserve)`);
    }
  }

  /** Stops serving, waits for running requests, closes files and the fabric. Idempotent. */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    this.stopping = true;
    const closed = new NovaError('CLOSED', `StoC ${this.id} is closing`);
    for (const conn of this.conns.values()) conn.order.fail(closed);
    if (this.active > 0) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    this.rpc.close();
    await this.compactions.close();
    this.memory.closeAll(); // the fabric frees their regions
    // No direct write may land after this: their files' descriptors close next.
    this.direct.closeEverywhere();
    await this.files.closeAll();
    await this.fabric.close();
    this.unlock();
  }

  private serveAll(): void {
    const serve = (method: string, fn: (args: unknown, ep: Endpoint) => unknown): void => {
      this.rpc.serve(method, (args, ep) => {
        if (this.stopping) throw new NovaError('CLOSED', `StoC ${this.id} is closing`);
        // With a secret, nothing but the challenge and hello before a hello that proved it.
        if (this.secret && method !== Method.challenge && method !== Method.hello && !this.conns.has(ep)) {
          throw new NovaError('BAD_ARGUMENT', `StoC ${this.id}: ${method} before a ${Method.hello} that proved the cluster's secret`);
        }
        return fn(args, ep);
      });
    };
    serve(Method.challenge, (_a, ep) => this.challenge(ep));
    serve(Method.hello, (a, ep) => this.hello(a, ep));
    serve(Method.attach, (a, ep) => this.attach(a, ep));
    serve(Method.persist, (a, ep) => this.persist(a, ep));
    serve(Method.cancel, (a, ep) => this.cancel(a, ep));
    serve(Method.fetch, (a, ep) => this.fetch(a, ep));
    serve(Method.stat, (a) => this.stat(a));
    serve(Method.list, (a) => this.list(a));
    serve(Method.remove, (a, ep) => this.remove(a, ep));
    serve(Method.fence, (a, ep) => this.fence(a, ep));
    serve(Method.sync, (a) => this.sync(a));
    serve(Method.load, (): StocLoad => ({ ...this.load, compactionsRunning: this.compactions.running }));
    serve(Method.bye, (_a, ep) => this.drop(ep));
    serve(Method.mcreate, (a, ep) => this.mcreate(a, ep));
    serve(Method.mget, (a) => this.memory.get(checkName(fields(Method.mget, a).file)) ?? null);
    serve(Method.mextend, (a, ep) => this.mextend(a, ep));
    serve(Method.mlist, (a) => this.memory.list(checkPrefix(fields(Method.mlist, a).prefix)));
    serve(Method.mremove, (a, ep) => {
      const name = checkName(fields(Method.mremove, a).file);
      this.checkOwner(name, ep, Method.mremove);
      this.memory.remove(name);
      return null;
    });
    serve(Method.compact, (a, ep) => this.compactions.compact(a, ep, (work) => this.track(undefined, 'other', 0, work)));
    serve(Method.dopen, (a, ep) => this.direct.open(a, ep));
  }

  // ---- connections and windows ----

  /** A nonce for `ep` to prove the secret with at hello (none without a secret). */
  private challenge(ep: Endpoint): { nonce: Uint8Array | null } {
    if (!this.secret) return { nonce: null };
    if (this.challenges.size >= MAX_CHALLENGES && !this.challenges.has(ep)) {
      throw new NovaError('BUSY', `StoC ${this.id}: ${MAX_CHALLENGES} connections are proving the secret at once; try again`);
    }
    let nonce = this.challenges.get(ep);
    if (!nonce) {
      nonce = newNonce();
      this.challenges.set(ep, nonce);
      ep.onLost(() => this.challenges.delete(ep));
    }
    return { nonce };
  }

  private hello(args: unknown, ep: Endpoint): HelloReply {
    const a = fields(Method.hello, args);
    if (a.version !== STOC_PROTOCOL_VERSION) {
      throw new NovaError('BAD_ARGUMENT', `StoC ${this.id} speaks protocol ${STOC_PROTOCOL_VERSION}, not ${String(a.version)}`);
    }
    if (this.secret && !this.conns.has(ep)) {
      const nonce = this.challenges.get(ep);
      if (!nonce || !checkProof(this.secret, nonce, 'stoc', a.proof)) {
        this.counters.refused++;
        this.log(`StoC ${this.id}: refused a peer that did not prove it knows the cluster's secret`);
        throw new NovaError('BAD_ARGUMENT', `StoC ${this.id} serves only the cluster's members, and this connection did not prove it knows the cluster's secret (give --secret-file FILE)`);
      }
      this.challenges.delete(ep);
    }
    let conn = this.conns.get(ep);
    if (!conn) {
      const window = this.freeWindows.pop();
      if (window === undefined) {
        throw new NovaError('BUSY', `StoC ${this.id}: it serves ${this.windowCount} peers at once and all ${this.windowCount} windows of ${this.windowBytes} bytes are in use; ` +
          'start it with a larger --peers');
      }
      conn = new Connection(window);
      this.conns.set(ep, conn);
      ep.onLost(() => void this.drop(ep));
    }
    const window = this.buffer.key.slice(conn.window * this.windowBytes, this.windowBytes).serialize();
    return { version: STOC_PROTOCOL_VERSION, id: this.id, windowBytes: this.windowBytes, window };
  }

  private attach(args: unknown, ep: Endpoint): null {
    const a = fields(Method.attach, args);
    const conn = this.connection(ep, Method.attach);
    if (!(a.key instanceof Uint8Array)) throw new NovaError('BAD_ARGUMENT', `${Method.attach}: key must be bytes`);
    const key = RemoteKey.parse(a.key);
    conn.client?.drop();
    conn.client = ep.importKey(key);
    return null;
  }

  /**
   * The connection ended (bye, lost or closed): its window is freed once its requests finish.
   * Resolves then, so a client that said bye knows the StoC no longer touches its staging region.
   */
  private drop(ep: Endpoint): Promise<null> {
    const conn = this.conns.get(ep);
    if (!conn) return Promise.resolve(null);
    this.conns.delete(ep);
    conn.gone = true;
    const freed = new Promise<null>((resolve) => conn.onFreed.push(() => resolve(null)));
    this.direct.closeAll(conn); // may free the window already
    conn.order.fail(new NovaError('CLOSED', `StoC ${this.id}: the connection ended`));
    this.freeIfDone(conn);
    return freed;
  }

  // A handle that lingers (closeDirect) keeps the window: its endpoint's FILE_WRITEs name
  // bytes in it, which must not become another client's.
  /** @internal (DirectHost) */
  freeIfDone(conn: Connection): void {
    if (!conn.gone || conn.inflight > 0 || conn.freed || conn.direct.size > 0) return;
    conn.freed = true;
    conn.client?.drop();
    this.freeWindows.push(conn.window);
    for (const cb of conn.onFreed.splice(0)) cb();
  }

  /** @internal (DirectHost) */
  connection(ep: Endpoint, method: string): Connection {
    const conn = this.conns.get(ep);
    if (!conn) throw new NovaError('BAD_ARGUMENT', `StoC ${this.id}: ${method} before ${Method.hello} on this connection`);
    return conn;
  }

  /** The bytes of `slot` in a connection's window. */
  private windowSlice(conn: Connection, slot: number, length: number): Buffer {
    const start = conn.window * this.windowBytes + slot;
    return this.buffer.buffer.subarray(start, start + length);
  }

  // ---- requests ----

  /** Runs a request, counting it in the load and keeping its connection's window alive. */
  /** @internal (DirectHost) */
  async track<T>(conn: Connection | undefined, kind: Kind, bytes: number, work: () => Promise<T>): Promise<T> {
    this.active++;
    this.load.queueDepth++;
    if (conn) conn.inflight++;
    if (kind === 'read') this.load.pendingReadBytes += bytes;
    if (kind === 'write') this.load.pendingWriteBytes += bytes;
    try {
      return await work();
    } catch (err) {
      this.counters.failures++;
      throw err;
    } finally {
      if (kind === 'read') this.load.pendingReadBytes -= bytes;
      if (kind === 'write') this.load.pendingWriteBytes -= bytes;
      this.load.queueDepth--;
      if (conn) {
        conn.inflight--;
        this.freeIfDone(conn);
      }
      if (--this.active === 0) for (const wake of this.idleWaiters.splice(0)) wake();
    }
  }

  /**
   * `fence {range, epoch}`: this connection writes range `range` as its owner under `epoch`
   * (fences.ts). A newer epoch than any before raises the fence, durably; then the direct handles
   * of connections that claimed the range under an older epoch close, and the answer waits for
   * the writes to the range's files already under way (they were let in before the raise).
   * An older epoch is STALE_CONFIG, and this connection may then write none of the range's files.
   */
  private async fence(args: unknown, ep: Endpoint): Promise<{ epoch: number }> {
    const a = fields(Method.fence, args);
    const range = checkUint('range', a.range, 0xffffffff);
    const epoch = checkUint('epoch', a.epoch, MAX_EPOCH);
    const conn = this.connection(ep, Method.fence);
    if (!conn.epochs.has(range) && conn.epochs.size >= MAX_FENCES) throw new NovaError('BAD_ARGUMENT', `a connection fences at most ${MAX_FENCES} ranges`);
    conn.epochs.set(range, epoch);
    this.fences.raise(range, epoch);
    const stale = (): NovaError => new NovaError('STALE_CONFIG', `StoC ${this.id}: range ${range} was opened under epoch ${this.fences.epoch(range)}, newer than this LTC's ${epoch}: it is another LTC's now`);
    if (epoch < this.fences.epoch(range)) throw stale();
    // Every time, not only when this raised the fence: an earlier fence that timed out in its
    // drain must not leave an older owner's direct handles open.
    this.closeStaleHandles(range);
    await this.drain(range);
    if (epoch < this.fences.epoch(range)) throw stale(); // a newer one came while we waited
    return { epoch };
  }

  /** Closes the direct handles on range `range`'s files of connections that claimed it under an older epoch than its fence. */
  private closeStaleHandles(range: number): void {
    const now = this.fences.epoch(range);
    const prefix = `r${range}-`;
    for (const other of [...this.conns.values()]) {
      const e = other.epochs.get(range);
      if (e === undefined || e >= now) continue;
      for (const file of new Set([...other.direct.values()].map((f) => f.name))) {
        if (file.startsWith(prefix)) this.direct.closeAll(other, file);
      }
    }
  }

  /**
   * @internal (DirectHost) Throws STALE_CONFIG if `name` is a file of a range this connection
   * claimed under an older epoch than the range's fence; else the file's range, if it has one.
   */
  checkOwner(name: string, ep: Endpoint, method: string): number | undefined {
    const range = rangeOfFile(name);
    if (range === undefined) return undefined;
    const e = this.conns.get(ep)?.epochs.get(range);
    if (e !== undefined && e < this.fences.epoch(range)) {
      throw new NovaError('STALE_CONFIG', `StoC ${this.id}: ${method} of ${name} refused: range ${range} was opened under epoch ${this.fences.epoch(range)}, ` +
        `newer than this LTC's ${e}: it is another LTC's now`);
    }
    return range;
  }

  /**
   * Runs `work`, the write itself to a file of range `range` (undefined: of no range), counted so
   * that a fence raised meanwhile waits for it. Call it right after checkOwner, with nothing
   * awaited between: a write is either refused or waited for.
   */
  private async counted<T>(range: number | undefined, work: () => Promise<T>): Promise<T> {
    if (range === undefined) return work();
    let w = this.rangeWrites.get(range);
    if (!w) this.rangeWrites.set(range, w = { n: 0, idle: [] });
    const mine = w;
    mine.n++;
    try {
      return await work();
    } finally {
      if (--mine.n === 0) {
        this.rangeWrites.delete(range);
        for (const wake of mine.idle.splice(0)) wake();
      }
    }
  }

  /** Resolves once no write to range `range`'s files is under way; UNAVAILABLE after FENCE_DRAIN_MS. */
  private async drain(range: number): Promise<void> {
    const w = this.rangeWrites.get(range);
    if (!w) return;
    await withDeadline(new Promise<void>((resolve) => w.idle.push(resolve)), FENCE_DRAIN_MS,
      () => new NovaError('UNAVAILABLE', `StoC ${this.id}: writes to range ${range}'s files still under way after ${FENCE_DRAIN_MS} ms; retry`));
  }

  private persist(args: unknown, ep: Endpoint): Promise<null> {
    const a = fields(Method.persist, args);
    const name = checkName(a.file);
    const slot = checkUint('slot', a.slot, this.windowBytes);
    const length = checkUint('length', a.length, this.windowBytes - slot);
    const append = a.append === undefined || a.append === null ? undefined : this.appendArgs(a.append, length);
    const offset = append ? 0 : checkUint('offset', a.offset, MAX_FILE_BYTES - length);
    const conn = this.connection(ep, Method.persist);
    const what = append ? `append ${append.seq} to ${name}` : `write of ${name} [${offset}, +${length})`;
    this.checkOwner(name, ep, Method.persist); // refused early; checked again just before the write
    return this.track(conn, 'write', length, () => this.disk(what, async () => {
      if (!append) await this.tableRoom(name, length);
      const file = (await this.files.acquire(name, true))!;
      try {
        let target: StoredFile = file;
        let position = offset;
        if (append) {
          const p = await conn.order.place(append.seq, file, append.total);
          target = p.file;
          position = p.base + append.at;
        } else if (length > 0) {
          file.extend(offset + length);
        }
        let range: number | undefined;
        try {
          range = this.checkOwner(name, ep, Method.persist); // a fence may have come while it waited its turn
        } catch (err) {
          if (append) conn.order.consume(append.seq, length);
          throw err;
        }
        await this.counted(range, async () => {
          await target.writeAt(this.windowSlice(conn, slot, length), position);
          if (append) conn.order.consume(append.seq, length);
          if (a.sync === true) await this.syncFile(target);
        });
        this.counters.persists++;
        this.counters.bytesWritten += length;
        return null;
      } finally {
        file.unpin();
      }
    }));
  }

  private appendArgs(v: unknown, length: number): { seq: number; total: number; at: number } {
    if (!Array.isArray(v) || v.length !== 3) {
      throw new NovaError('BAD_ARGUMENT', `append must be [seq, total, at], not ${Array.isArray(v) ? `${v.length} items` : typeof v}`);
    }
    const seq = checkUint('append seq', v[0]);
    const total = checkUint('append total', v[1], MAX_FILE_BYTES);
    const at = checkUint('append part offset', v[2], total - length);
    return { seq, total, at };
  }

  private cancel(args: unknown, ep: Endpoint): null {
    const a = fields(Method.cancel, args);
    this.connection(ep, Method.cancel).order.cancel(checkUint('seq', a.seq));
    return null;
  }

  private fetch(args: unknown, ep: Endpoint): Promise<null> {
    const a = fields(Method.fetch, args);
    const name = checkName(a.file);
    const slot = checkUint('slot', a.slot, this.windowBytes);
    const length = checkUint('length', a.length, this.windowBytes - slot);
    const offset = checkUint('offset', a.offset, MAX_FILE_BYTES);
    const conn = this.connection(ep, Method.fetch);
    const client = conn.client;
    if (!client) throw new NovaError('BAD_ARGUMENT', `StoC ${this.id}: ${Method.fetch} before ${Method.attach} on this connection`);
    if (slot + length > client.length) {
      throw new NovaError('OUT_OF_BOUNDS', `StoC ${this.id}: slot [${slot}, +${length}) is outside the client's ${client.length}-byte staging region`);
    }
    const what = `read of ${name} [${offset}, +${length})`;
    return this.track(conn, 'read', length, () => this.disk(what, async () => {
      const file = await this.files.acquire(name, false);
      if (!file) throw new NovaError('CORRUPTION', `StoC ${this.id}: ${what}: ${name} does not exist`);
      try {
        if (offset + length > file.size) {
          throw new NovaError('CORRUPTION', `StoC ${this.id}: ${what} is past the end of ${name} (${file.size} bytes)`);
        }
        if (length === 0) return null;
        await file.readAt(this.windowSlice(conn, slot, length), offset);
        await ep.write(this.buffer, conn.window * this.windowBytes + slot, client, slot, length);
        this.counters.fetches++;
        this.counters.bytesRead += length;
        return null;
      } finally {
        file.unpin();
      }
    }));
  }

  private async stat(args: unknown): Promise<number | null> {
    const name = checkName(fields(Method.stat, args).file);
    return (await this.disk(`stat of ${name}`, () => this.files.size(name))) ?? null;
  }

  private async list(args: unknown): Promise<Array<[string, number]>> {
    const prefix = checkPrefix(fields(Method.list, args).prefix);
    return this.disk(`list of "${prefix}"`, () => this.files.list(prefix, isName));
  }

  private async remove(args: unknown, ep: Endpoint): Promise<null> {
    const name = checkName(fields(Method.remove, args).file);
    const range = this.checkOwner(name, ep, Method.remove);
    await this.counted(range, () => this.disk(`remove of ${name}`, () => this.files.remove(name)));
    // Then its direct handles end (so its descriptor closes): after the unlink, so that a
    // dopen whose open was under way when the remove came is closed too.
    this.direct.closeOf(name);
    return null;
  }

  private sync(args: unknown): Promise<null> {
    const a = fields(Method.sync, args);
    const name = checkName(a.file);
    if (a.background !== undefined && typeof a.background !== 'boolean') throw new NovaError('BAD_ARGUMENT', `${Method.sync}: background must be a boolean`);
    return this.track(undefined, 'other', 0, () => this.disk(`sync of ${name}`, async () => {
      const file = await this.files.acquire(name, false);
      if (!file) throw new NovaError('CORRUPTION', `StoC ${this.id}: sync of ${name}: it does not exist`);
      try {
        await this.syncFile(file, a.background === true);
        return null;
      } finally {
        file.unpin();
      }
    }));
  }

  // ---- in-memory files ----

  private mcreate(args: unknown, ep: Endpoint): MemoryFileReply {
    const a = fields(Method.mcreate, args);
    const name = checkName(a.file);
    this.checkOwner(name, ep, Method.mcreate);
    return this.memory.create(name, checkUint('regionBytes', a.regionBytes, MAX_REGION_BYTES));
  }

  private mextend(args: unknown, ep: Endpoint): Uint8Array {
    const a = fields(Method.mextend, args);
    const name = checkName(a.file);
    this.checkOwner(name, ep, Method.mextend);
    return this.memory.extend(name, checkUint('index', a.index, 0xffffffff));
  }

  // ---- offloaded compaction ----

  /** @internal (DirectHost) */
  connections(): Iterable<Connection> {
    return this.conns.values();
  }

  /** @internal (DirectHost) */
  log(line: string): void {
    this.compactions.env.log(line);
  }

  /** @internal (CompactionHost) */
  wrote(bytes: number): void {
    this.counters.bytesWritten += bytes;
  }

  /** @internal (CompactionHost) */
  async syncFile(file: StoredFile, background = false): Promise<void> {
    await this.syncs.run(background, () => file.sync());
    this.counters.syncs++;
  }

  /** @internal (CompactionHost) Runs file-system work; an errno failure becomes REMOTE naming the StoC and the operation. */
  async disk<T>(what: string, work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (err) {
      if (err instanceof NovaError) throw err;
      const e = err as NodeJS.ErrnoException;
      // A disk that refuses writes is the StoC's, not the request's: the LTC places elsewhere.
      const code = e.code !== undefined && DISK_ERRNOS.has(e.code) ? 'DISK_FAILED' : 'REMOTE';
      throw new NovaError(code, `StoC ${this.id}: ${what} failed: ${e.code ?? ''} ${e.message}`.trim(), { cause: err });
    }
  }
}

/** Connections proving the secret at once, at most (each holds a nonce until its hello). */
const MAX_CHALLENGES = 4096;

function mib(bytes: number): string {
  return `${(bytes / MiB).toFixed(1)} MiB`;
}

/** Errnos of a disk that refuses writes: full, over quota, failing, read-only. */
const DISK_ERRNOS: ReadonlySet<string> = new Set(['ENOSPC', 'EDQUOT', 'EIO', 'EROFS']);

function isName(name: string): boolean {
  try {
    checkName(name);
    return true;
  } catch {
    return false;
  }
}
