/**
 * The worker thread behind worker-pool.ts: runs mergeTables for each merge job, or builds an
 * immutable memtable's table (buildTable) for each build job, and posts each output table as
 * it is cut (its bytes transferred, not copied), then `done`.
 */
import { setPriority } from 'node:os';
import { parentPort } from 'node:worker_threads';
import { leftovers, mergeTables, type MergedTable, type MergeJob } from './merge.js';
import { Memtable, type FrozenMemtable } from '../memtable/memtable.js';
import { buildTable } from './flush.js';

export type WorkerRequest =
  /** `recycle`: the inputs and spares were transferred, and go back with `done` once merged. */
  | { id: number; job: MergeJob; recycle?: boolean; build?: undefined }
  | { id: number; build: { memtable: FrozenMemtable; expectedSize: number; smallestSnapshot: number }; job?: undefined; recycle?: undefined };
export type WorkerReply =
  | { id: number; kind: 'output'; bytes: Uint8Array; entries: number; smallest: Uint8Array; largest: Uint8Array }
  | { id: number; kind: 'done'; returned?: ArrayBuffer[] }
  | { id: number; kind: 'error'; code?: string; message: string };

/**
 * A built table's bytes, transferable without taking others' along. A builder's buffer is its
 * own (ByteBuilder allocates it unpooled), so one the table nearly fills moves as it is, slack
 * and all (under 1/16); otherwise, and for small tables, the bytes are copied to fit — except
 * when the receiver recycles the memory (`recycled`): then any slack moves too.
 */
function own(b: Buffer, recycled: boolean): Uint8Array {
  const whole = b.buffer.byteLength;
  // Memory the receiver recycles moves whole: its slack costs nothing there.
  if (b.byteOffset === 0 && whole >= MIN_TRANSFER && (recycled || whole - b.byteLength <= whole / 16)) return b;
  return new Uint8Array(b);
}
const MIN_TRANSFER = 64 * 1024;

function* outputs(request: WorkerRequest): Generator<MergedTable> {
  if (request.job) {
    yield* mergeTables(request.job);
    return;
  }
  const { memtable, expectedSize, smallestSnapshot } = request.build;
  const built = buildTable(new Memtable(0, 0, memtable), expectedSize, smallestSnapshot);
  if (built.entries > 0) yield { bytes: built.bytes, entries: built.entries, smallest: built.smallest!, largest: built.largest! };
}

/**
 * Merges and flush builds are background work: this thread runs at a lower priority than
 * the process's event loop, whose requests (log appends, reads, replies) wait on it. On
 * Linux a nice value is per thread, so the main thread keeps its own. Best effort: where
 * the priority cannot be set, the thread runs as it is.
 */
const BACKGROUND_NICE = 10;
try {
  setPriority(BACKGROUND_NICE);
} catch {
  // not permitted here, or not supported: run at the default priority
}

parentPort!.on('message', (request: WorkerRequest) => {
  const id = request.id;
  try {
    const recycled = request.recycle === true;
    for (const t of outputs(request)) {
      const bytes = own(t.bytes, recycled);
      const reply: WorkerReply = { id, kind: 'output', bytes, entries: t.entries, smallest: t.smallest, largest: t.largest };
      parentPort!.postMessage(reply, [bytes.buffer as ArrayBuffer]);
    }
    // The merge is over: nothing here reads the inputs or the unused spares any more.
    const returned = recycled && request.job ? leftovers(request.job) : [];
    parentPort!.postMessage({ id, kind: 'done', returned } satisfies WorkerReply, returned);
  } catch (err) {
    const code = (err as { code?: unknown })?.code;
    parentPort!.postMessage({ id, kind: 'error', code: typeof code === 'string' ? code : undefined, message: (err as Error)?.message ?? String(err) } satisfies WorkerReply);
  }
});
