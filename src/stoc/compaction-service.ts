/**
 * A StoC's offloaded compactions (stoc.compact): at most `limit` at once, each run by
 * compaction-executor.ts over this StoC's files and connections to the other StoCs that hold
 * its inputs or take its outputs; a job whose LTC is lost removes what it wrote.
 *
 * Memory: a job holds its inputs whole while they merge, and an output or two besides
 * (jobMemory). Jobs run side by side only while what they hold fits `memoryBytes`; a job that
 * does not fit is answered BUSY, like one past the limit, and its LTC merges it. A job alone always runs: refusing it would move the same memory to its LTC.
 */
import { performance } from 'node:perf_hooks';
import { BufferPool } from '../common/buffer-pool.js';
import { ConnectionCache } from '../common/connection-cache.js';
import { NovaError } from '../common/errors.js';
import type { Endpoint } from '../transport/endpoint.js';
import type { Fabric } from '../transport/fabric.js';
import type { Rpc } from '../transport/rpc.js';
import { outputBytes } from '../compaction/merge.js';
import { parseCompactArgs, runCompaction, type CompactArgs, type CompactOutput, type ExecutorEnv } from './compaction-executor.js';
import type { StoredFiles, StoredFile } from './stored-files.js';
import { BACKGROUND_SYNC_BYTES } from './sync-gate.js';
import { StocClient } from './stoc-client.js';


/**
 * The memory a job holds at its peak: its inputs whole (the size of each table, from its data
 * fragments' extents) and two outputs, the one being written and the next being built.
 */
export function jobMemory(job: Pick<CompactArgs, 'inputs' | 'targetBytes'>): number {
  let bytes = 2 * outputBytes(job.targetBytes);
  for (const input of job.inputs) {
    let size = 0;
    for (const f of input.fragments) if (f.parity !== true) size = Math.max(size, f.offset + f.size);
    bytes += size;
  }
  return bytes;
}

function mib(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(0);
}

/** What the service needs of its StoC. */
export interface CompactionHost {
  readonly id: number;
  readonly fabric: Fabric;
  readonly rpc: Rpc;
  readonly files: StoredFiles;
  /** Runs file-system work; an errno failure becomes REMOTE naming the StoC and the operation. */
  disk<T>(what: string, work: () => Promise<T>): Promise<T>;
  /** fdatasyncs `file`, counted; `background`: after the syncs writes wait for (sync-gate.ts). */
  syncFile(file: StoredFile, background?: boolean): Promise<void>;
  /** Counts bytes written to this StoC's disk. */
  wrote(bytes: number): void;
  /** Whether the StoC is closing: no new connections to other StoCs then. */
  readonly stopping: boolean;
  /** DISK_FAILED if writing `length` bytes of table `name` would eat into the disk kept for logs and MANIFESTs. */
  tableRoom(name: string, length: number): Promise<void>;
}

export class CompactionService {
  readonly counters = { compactions: 0, compactionMs: 0, compactionsRefusedForMemory: 0 };
  readonly env: ExecutorEnv;
  /** Connections to other StoCs, by address, for compaction inputs and outputs. */
  private readonly peers = new ConnectionCache<string, StocClient>(
    (key) => StocClient.connect(this.host.fabric, this.host.rpc, Buffer.from(key, 'base64'), { timeoutMs: 5_000 }), (c, lost) => c.onLost(lost));
  /** Jobs running now (reported in the StoC's load). */
  running = 0;
  /**
   * Jobs run at once; more are answered BUSY (the LTC then merges them itself). The cluster's
   * stocCompactions knob, set once the StoC has the configuration.
   */
  limit = 2;
  /** Memory jobs may hold at once (the cluster's stocMemoryBytes, set with the configuration). */
  memoryBytes = 1024 * 2 ** 20;
  /** What the running jobs hold, by jobMemory. */
  heldBytes = 0;

  constructor(private readonly host: CompactionHost, log: (line: string) => void, memory: BufferPool) {
    this.env = {
      id: host.id,
      log,
      memory,
      readLocal: (name, into) => host.disk(`read of ${name}`, async () => {
        const file = await host.files.acquire(name, false);
        if (!file) throw new NovaError('CORRUPTION', `${name} does not exist`);
        try {
          if (into.length > file.size) throw new NovaError('CORRUPTION', `${name} has ${file.size} bytes, not the ${into.length} expected`);
          await file.readAt(into, 0);
        } finally {
          file.unpin();
        }
      }),
      sizeLocal: (name) => host.disk(`stat of ${name}`, () => host.files.size(name)),
      createLocal: (name, bytes) => host.disk(`write of ${name}`, async () => {
        await host.tableRoom(name, bytes.length);
        const file = (await host.files.acquire(name, true))!;
        try {
          file.extend(bytes.length);
          // Synced piece by piece in the background: a flush's sync waits for a piece at most.
          let at = 0;
          do { // an empty output is synced too: its file is made durable
            const piece = bytes.subarray(at, at + BACKGROUND_SYNC_BYTES);
            await file.writeAt(piece, at);
            await host.syncFile(file, true);
            at += piece.length;
          } while (at < bytes.length);
          host.wrote(bytes.length);
        } finally {
          file.unpin();
        }
      }),
      removeLocal: (name) => host.disk(`remove of ${name}`, () => host.files.remove(name)),
      peer: (address) => this.peer(address),
    };
  }

  /**
   * Runs the job in `args` for the LTC at `ep` (its outputs go if the LTC is lost first);
   * `track` counts it among the StoC's running requests.
   */
  compact(args: unknown, ep: Endpoint, track: (work: () => Promise<CompactOutput[]>) => Promise<CompactOutput[]>): Promise<CompactOutput[]> {
    const job = parseCompactArgs(args);
    if (this.running >= this.limit) {
      throw new NovaError('BUSY', `StoC ${this.host.id}: ${this.limit} compactions are running already; merge this one elsewhere`);
    }
    const need = jobMemory(job);
    if (this.running > 0 && this.heldBytes + need > this.memoryBytes) {
      this.counters.compactionsRefusedForMemory++;
      throw new NovaError('BUSY', `StoC ${this.host.id}: the job needs ${mib(need)} MiB and the running ones hold ${mib(this.heldBytes)} of the ${mib(this.memoryBytes)} MiB ` +
        'of compaction memory (--stoc-memory); merge this one elsewhere');
    }
    this.running++;
    this.heldBytes += need;
    return track(async () => {
      const started = performance.now();
      const outputs = await runCompaction(this.env, job, () => !ep.isReady);
      this.counters.compactions++;
      this.counters.compactionMs += performance.now() - started;
      return outputs;
    }).finally(() => {
      this.running--;
      this.heldBytes -= need;
    });
  }

  /** Closes the connections to other StoCs. */
  close(): Promise<void> {
    return this.peers.closeAll();
  }

  /** A kept connection to the StoC at `address`; a lost or failed one is made again on next use. */
  private peer(address: Uint8Array): Promise<StocClient> {
    const key = Buffer.from(address).toString('base64');
    // Closing: jobs still running keep their connections, and make no new ones.
    if (this.host.stopping && !this.peers.has(key)) return Promise.reject(new NovaError('CLOSED', `StoC ${this.host.id} is closing`));
    return this.peers.get(key);
  }
}
