/**
 * Bytes a set of processes caused to be written to storage, from Linux's /proc/PID/io
 * (`write_bytes`). Why this counter: `wchar` counts every write(2), sockets included, so a
 * cluster's network traffic would count as disk writes; `write_bytes` counts page-cache pages
 * when first dirtied, which is what reaches the disk — the figure that compares engines'
 * write amplification. It includes every thread of the process (compaction threads, workers).
 */
import { readFileSync } from 'node:fs';

/** The summed `write_bytes` of `pids`, or undefined when any of them cannot be read (not Linux, gone, another user). */
export function diskWriteBytes(pids: readonly number[]): number | undefined {
  if (pids.length === 0) return undefined;
  let sum = 0;
  for (const pid of pids) {
    let text: string;
    try {
      text = readFileSync(`/proc/${pid}/io`, 'utf8');
    } catch {
      return undefined;
    }
    const m = /^write_bytes:\s*(\d+)$/m.exec(text);
    if (!m) return undefined;
    sum += Number(m[1]);
  }
  return sum;
}

/** Bytes written between two readings, when both were taken. */
export function writtenBetween(before: number | undefined, after: number | undefined): number | undefined {
  return before === undefined || after === undefined ? undefined : Math.max(0, after - before);
}
