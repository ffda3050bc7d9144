/**
 * Runs merges (merge.ts) on a worker thread shared by every engine of the process, so a
 * compaction's CPU never blocks the event loop that serves reads and writes. Jobs run one at
 * a time, in order. The worker keeps the process alive only while a job is pending; if it
 * dies, pending jobs fail and the next job starts a new one.
 */
import { existsSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { NovaError, isErrorCode } from '../common/errors.js';
import type { MergedTable, MergeJob } from './merge.js';
import type { MergeReply } from './merge-worker.js';

// From the TypeScript sources (tests), the worker is the built one in dist/.
const HERE = fileURLToPath(import.meta.url);
const WORKER = HERE.includes(`${sep}dist${sep}`)
  ? join(dirname(HERE), 'merge-worker.js')
  : join(dirname(HERE), '..', '..', 'dist', 'src', 'ltc', 'merge-worker.js');

interface Pending {
  push: (t: MergedTable) => void;
  end: (err?: Error) => void;
}

let worker: Worker | undefined;
let nextId = 1;
const pending = new Map<number, Pending>();

/** Whether merges can go to a worker (the built worker script exists). */
export function mergeWorkerAvailable(): boolean {
  return existsSync(WORKER);
}

function start(): Worker {
  const w = new Worker(WORKER);
  w.on('message', (m: MergeReply) => {
    const p = pending.get(m.id);
    if (!p) return;
    if (m.kind === 'output') {
      const b = (x: Uint8Array) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);
      p.push({ bytes: b(m.bytes), entries: m.entries, smallest: b(m.smallest), largest: b(m.largest) });
      return;
    }
    pending.delete(m.id);
    if (pending.size === 0) w.unref();
    if (m.kind === 'done') p.end();
    // A failure without a code of its own (out of memory, a bug) is not evidence of damage.
    else p.end(new NovaError(m.code && isErrorCode(m.code) ? m.code : 'REMOTE', `merge on the worker thread: ${m.message}`));
  });
  const lost = (why: string): void => {
    if (worker === w) worker = undefined;
    const err = new NovaError('CLOSED', `merge worker ${why}`);
    for (const p of pending.values()) p.end(err);
    pending.clear();
  };
  w.on('error', (err) => lost(`failed: ${err.message}`));
  w.on('exit', (code) => lost(`exited with code ${code}`));
  w.unref();
  return w;
}

/**
 * Runs `job` on the worker; yields each output table as it arrives. With `transfer`, the
 * input tables' memory moves to the worker instead of being copied (each must own its
 * ArrayBuffer whole); the caller must not touch them after.
 */
export async function* mergeOnWorker(job: MergeJob, transfer = false): AsyncGenerator<MergedTable> {
  worker ??= start();
  worker.ref();
  const id = nextId++;
  const queue: MergedTable[] = [];
  let finished = false;
  let failure: Error | undefined;
  let wake: (() => void) | undefined;
  pending.set(id, {
    push: (t) => { queue.push(t); wake?.(); },
    end: (err) => { finished = true; failure = err; wake?.(); },
  });
  worker.postMessage({ id, job }, transfer ? job.tables.map((t) => t.buffer as ArrayBuffer) : []);
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
