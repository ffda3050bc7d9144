/**
 * Runs the engine's CPU-heavy pure work on worker threads, so it never blocks the event loop
 * that serves reads and writes: compaction merges (merge.ts) on one worker, flush builds (an
 * L0 table from an immutable memtable) on another, both shared by every engine of the
 * process. Two, because a flush waiting behind a long merge would stall writes. Each
 * worker runs its jobs one at a time, in order, and keeps the process alive only while a
 * job is pending; if it dies, its pending jobs fail and the next job starts a new one.
 */
import { existsSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { NovaError, isErrorCode } from '../common/errors.js';
import type { BuiltTable } from '../sstable/table-builder.js';
import type { MergedTable, MergeJob } from './merge.js';
import type { FrozenMemtable } from '../memtable/memtable.js';
import type { WorkerReply, WorkerRequest } from './worker-main.js';

// From the TypeScript sources (tests), the worker is the built one in dist/.
const HERE = fileURLToPath(import.meta.url);
const WORKER = HERE.includes(`${sep}dist${sep}`)
  ? join(dirname(HERE), 'worker-main.js')
  : join(dirname(HERE), '..', '..', 'dist', 'src', 'compaction', 'worker-main.js');

/** Whether work can go to a worker (the built worker script exists). */
export function mergeWorkerAvailable(): boolean {
  return existsSync(WORKER);
}

interface Pending {
  push: (t: MergedTable) => void;
  end: (err?: Error) => void;
  recycle?: (memory: ArrayBuffer[]) => void;
}

/** One worker thread and the jobs sent to it. */
class Lane {
  private worker: Worker | undefined;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();

  constructor(private readonly what: string) {}

  /** Sends `request` (its id filled in); yields each output table as it arrives. */
  async* run(request: Omit<WorkerRequest, 'id'>, transfer: ArrayBuffer[],
    recycle?: (memory: ArrayBuffer[]) => void): AsyncGenerator<MergedTable> {
    const worker = this.worker ??= this.start();
    worker.ref();
    const id = this.nextId++;
    const queue: MergedTable[] = [];
    let finished = false;
    let failure: Error | undefined;
    let wake: (() => void) | undefined;
    this.pending.set(id, {
      push: (t) => { queue.push(t); wake?.(); },
      end: (err) => { finished = true; failure = err; wake?.(); },
      recycle,
    });
    worker.postMessage({ ...request, id } as WorkerRequest, transfer);
    for (;;) {
      if (queue.length > 0) {
        yield queue.shift()!;
        continue;
      }
      if (finished) break;
      await new Promise<void>((resolve) => { wake = resolve; });
      wake = undefined;
    }
    if (failure) throw failure;
  }

  /** Starts the worker now if it is not running (it keeps the process alive only with a job pending). */
  warm(): void {
    this.worker ??= this.start();
  }

  private start(): Worker {
    const w = new Worker(WORKER);
    w.on('message', (m: WorkerReply) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      if (m.kind === 'output') {
        const b = (x: Uint8Array) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);
        p.push({ bytes: b(m.bytes), entries: m.entries, smallest: b(m.smallest), largest: b(m.largest) });
        return;
      }
      this.pending.delete(m.id);
      if (this.pending.size === 0) w.unref();
      if (m.kind === 'done') {
        if (m.returned && m.returned.length > 0) p.recycle?.(m.returned);
        p.end();
      }
      // A failure without a code of its own (out of memory, a bug) is not evidence of damage.
      else p.end(new NovaError(m.code && isErrorCode(m.code) ? m.code : 'REMOTE', `${this.what} on the worker thread: ${m.message}`));
    });
    const lost = (why: string): void => {
      if (this.worker === w) this.worker = undefined;
      const err = new NovaError('CLOSED', `${this.what} worker ${why}`);
      for (const p of this.pending.values()) p.end(err);
      this.pending.clear();
    };
    w.on('error', (err) => lost(`failed: ${err.message}`));
    w.on('exit', (code) => lost(`exited with code ${code}`));
    w.unref();
    return w;
  }
}

const merges = new Lane('merge');
const builds = new Lane('flush build');

/**
 * Starts both workers ahead of their first job, if the built worker script is there: a range
 * that opens on a process that just started then does not wait for a thread to start and load
 * its modules before it can build L0 from its logs.
 */
export function startWorkers(): void {
  if (!mergeWorkerAvailable()) return;
  merges.warm();
  builds.warm();
}

/**
 * Runs `job` on the merge worker; yields each output table as it arrives. With `transfer`,
 * the input tables' memory moves to the worker instead of being copied (each must own its
 * ArrayBuffer, from offset 0; no two may share one); the caller must not touch them after.
 *
 * With `recycle` too, the job's spares move along, every output's memory moves whole
 * (slack and all), and once the merge is over the worker sends the inputs' memory and the
 * spares it did not use back to `recycle` (only when the job succeeds) — memory the caller
 * reuses (BufferPool) instead of faulting in fresh pages for every job.
 */
export function mergeOnWorker(job: MergeJob, transfer = false, recycle?: (memory: ArrayBuffer[]) => void): AsyncGenerator<MergedTable> {
  if (!transfer) {
    if (recycle) throw new NovaError('BAD_ARGUMENT', 'mergeOnWorker: memory is recycled only when it is transferred');
    return merges.run({ job: { ...job, spares: undefined } }, []);
  }
  const moved = [...job.tables.map((t) => t.buffer as ArrayBuffer), ...(recycle ? job.spares ?? [] : [])];
  return merges.run({ job: recycle ? job : { ...job, spares: undefined }, recycle: recycle !== undefined }, moved, recycle);
}

/**
 * Builds the table of an immutable memtable on the flush worker (flush.ts buildTable),
 * reading its memory in place (shared, not copied). The memtable must not change until this
 * settles.
 */
export async function buildOnWorker(memtable: FrozenMemtable, expectedSize: number, smallestSnapshot: number): Promise<BuiltTable> {
  for await (const t of builds.run({ build: { memtable, expectedSize, smallestSnapshot } }, [])) return t;
  return { bytes: Buffer.alloc(0), entries: 0, smallest: undefined, largest: undefined }; // an empty memtable
}
