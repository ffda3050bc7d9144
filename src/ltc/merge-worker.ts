/**
 * The worker thread behind merge-pool.ts: runs mergeTables for each job it is sent and posts
 * each output table as it is cut (its bytes transferred, not copied), then `done`.
 */
import { parentPort } from 'node:worker_threads';
import { mergeTables, type MergeJob } from './merge.js';

export type MergeRequest = { id: number; job: MergeJob };
export type MergeReply =
  | { id: number; kind: 'output'; bytes: Uint8Array; entries: number; smallest: Uint8Array; largest: Uint8Array }
  | { id: number; kind: 'done' }
  | { id: number; kind: 'error'; code?: string; message: string };

/** `b` on an ArrayBuffer of its own, so it can be transferred without taking others' bytes along. */
function own(b: Buffer): Uint8Array {
  if (b.byteOffset === 0 && b.byteLength === b.buffer.byteLength) return b;
  return new Uint8Array(b);
}

parentPort!.on('message', ({ id, job }: MergeRequest) => {
  try {
    for (const t of mergeTables(job)) {
      const bytes = own(t.bytes);
      const reply: MergeReply = { id, kind: 'output', bytes, entries: t.entries, smallest: t.smallest, largest: t.largest };
      parentPort!.postMessage(reply, [bytes.buffer as ArrayBuffer]);
    }
    parentPort!.postMessage({ id, kind: 'done' } satisfies MergeReply);
  } catch (err) {
    const code = (err as { code?: unknown })?.code;
    parentPort!.postMessage({ id, kind: 'error', code: typeof code === 'string' ? code : undefined, message: (err as Error)?.message ?? String(err) } satisfies MergeReply);
  }
});
