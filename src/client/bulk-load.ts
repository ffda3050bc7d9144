/**
 * A bulk load (`nova load`, the bench's load phase): records from any source, cut into chunks
 * of about `chunkBytes`, each sorted (a key given twice keeps its last value) and ingested
 * through NovaClient.ingest, `concurrency` chunks at a time. Memory stays within about
 * (concurrency + 1) × chunkBytes whatever the source's size. Input already in key order
 * gives chunks that do not overlap, each of which goes to the bottom of the tree untouched by
 * compaction; unordered input still loads, more of it through compactions or as batches.
 * Each acknowledged chunk is durable (a table and a MANIFEST edit on the StoCs); a load cut
 * short by an error has applied some chunks, not others, and may be run again.
 */
import type { IngestReport, NovaClient } from './nova-client.js';

export interface BulkLoadOptions {
  chunkBytes?: number;
  concurrency?: number;
  /** Called about once a second and at the end with the records loaded so far. */
  onProgress?: (records: number, seconds: number) => void;
}

export interface BulkLoadReport extends IngestReport {
  records: number;
  bytes: number;
  seconds: number;
}

const DEFAULT_CHUNK = 16 * 1024 * 1024;

/** Sorts a chunk by key, keeping the last value given for a key. */
export function sortedChunk(entries: Array<[Buffer, Buffer]>): Array<[Buffer, Buffer]> {
  const order = entries.map((_, i) => i).sort((a, b) => Buffer.compare(entries[a][0], entries[b][0]) || b - a);
  const out: Array<[Buffer, Buffer]> = [];
  for (const i of order) {
    if (out.length > 0 && out[out.length - 1][0].equals(entries[i][0])) continue; // an earlier value of the same key
    out.push(entries[i]);
  }
  return out;
}

export async function bulkLoad(client: NovaClient, source: AsyncIterable<[Buffer, Buffer]> | Iterable<[Buffer, Buffer]>,
  o: BulkLoadOptions = {}): Promise<BulkLoadReport> {
  const chunkBytes = o.chunkBytes ?? DEFAULT_CHUNK;
  const concurrency = Math.max(1, o.concurrency ?? 4);
  const report: BulkLoadReport = { tables: 0, ingested: 0, written: 0, refusals: [], records: 0, bytes: 0, seconds: 0 };
  const start = Date.now();
  let reported = start;
  let failure: unknown;
  const running = new Set<Promise<void>>();
  const send = async (chunk: Array<[Buffer, Buffer]>): Promise<void> => {
    const r = await client.ingest(sortedChunk(chunk), { chunkBytes });
    report.tables += r.tables;
    report.ingested += r.ingested;
    report.written += r.written;
    for (const why of r.refusals) if (report.refusals.length < 8 && !report.refusals.includes(why)) report.refusals.push(why);
    report.records += chunk.length;
    const now = Date.now();
    if (now - reported >= 1000) {
      reported = now;
      o.onProgress?.(report.records, (now - start) / 1000);
    }
  };
  const launch = async (chunk: Array<[Buffer, Buffer]>): Promise<void> => {
    while (running.size >= concurrency) await Promise.race(running);
    if (failure) throw failure;
    const p: Promise<void> = send(chunk).catch((err: unknown) => { failure ??= err; }).finally(() => running.delete(p));
    running.add(p);
  };
  let chunk: Array<[Buffer, Buffer]> = [];
  let bytes = 0;
  try {
    for await (const entry of source) {
      chunk.push(entry);
      bytes += entry[0].length + entry[1].length;
      report.bytes += entry[0].length + entry[1].length;
      if (bytes >= chunkBytes) {
        await launch(chunk);
        chunk = [];
        bytes = 0;
      }
    }
    if (chunk.length > 0) await launch(chunk);
  } finally {
    await Promise.all(running); // each settles: its failure is kept in `failure`
  }
  if (failure) throw failure;
  report.seconds = (Date.now() - start) / 1000;
  o.onProgress?.(report.records, report.seconds);
  return report;
}
