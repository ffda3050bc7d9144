/**
 * Waiting for the machine to go quiet before a run. Engines run side by side on one machine,
 * and each keeps working after a cell ends (LevelDB's and RocksDB's compaction threads, the
 * cluster's StoCs): without a wait, the next engine's run shares the CPUs with that work, and
 * which engine pays depends on the order they run in. So every run starts once the whole
 * machine is nearly idle, or after `maxMs` at most; what was waited is reported.
 */
import { readFileSync } from 'node:fs';

/** Busy and total CPU time (jiffies) over all CPUs, or undefined where /proc/stat is missing. */
export type CpuReader = () => { busy: number; total: number } | undefined;

export const readProcStat: CpuReader = () => {
  let text: string;
  try {
    text = readFileSync('/proc/stat', 'utf8');
  } catch {
    return undefined;
  }
  const line = text.slice(0, text.indexOf('\n')).trim().split(/\s+/);
  if (line[0] !== 'cpu') return undefined;
  // user nice system idle iowait irq softirq steal …: idle and iowait are not busy.
  const v = line.slice(1, 9).map(Number);
  if (v.some((x) => !Number.isFinite(x))) return undefined;
  const total = v.reduce((a, b) => a + b, 0);
  return { busy: total - v[3] - v[4], total };
};

export interface QuietOptions {
  /** Give up after this long (ms); 0: do not wait at all. */
  maxMs: number;
  /** The machine is quiet when less than this share of all CPUs was busy over one sample. */
  busyBelow?: number;
  sampleMs?: number;
  read?: CpuReader;
  /** Called after each busy sample with the share that was busy. */
  onBusy?: (busy: number, waitedMs: number) => void;
}

export interface QuietResult {
  waitedMs: number;
  /** False if it gave up at maxMs (or could not measure: then waitedMs is 0). */
  quiet: boolean;
}

export async function awaitQuiet(o: QuietOptions): Promise<QuietResult> {
  const read = o.read ?? readProcStat;
  const busyBelow = o.busyBelow ?? 0.1;
  const sampleMs = o.sampleMs ?? 500;
  const start = Date.now();
  if (o.maxMs <= 0) return { waitedMs: 0, quiet: false };
  let before = read();
  if (!before) return { waitedMs: 0, quiet: false };
  for (;;) {
    await new Promise((r) => setTimeout(r, sampleMs));
    const after = read();
    if (!after) return { waitedMs: Date.now() - start, quiet: false };
    const total = after.total - before.total;
    const busy = total > 0 ? (after.busy - before.busy) / total : 0;
    const waitedMs = Date.now() - start;
    if (busy < busyBelow) return { waitedMs, quiet: true };
    if (waitedMs >= o.maxMs) return { waitedMs, quiet: false };
    o.onBusy?.(busy, waitedMs);
    before = after;
  }
}

