/**
 * Waiting for the machine to go quiet before a run. Engines run side by side on one machine,
 * and each keeps working after a cell ends (LevelDB's and RocksDB's compaction threads, the
 * cluster's StoCs): without a wait, the next engine's run shares the CPUs with that work, and
 * which engine pays depends on the order they run in. So every run starts once the whole
 * machine's CPUs are nearly idle, or after `maxMs` at most; what was waited is reported.
 * Only CPU is watched: the kernel writing back dirty pages in the background is not waited for.
 */
import { readFileSync } from 'node:fs';

/** CPU time (jiffies) summed over all CPUs, busy and in all, and how many CPUs there are. */
export interface CpuTimes {
  busy: number;
  total: number;
  cpus: number;
}

export type CpuReader = () => CpuTimes | undefined;

/**
 * The first line of /proc/stat: user nice system idle iowait irq softirq steal guest
 * guest_nice. Busy is everything but idle and steal (time the hypervisor gave to others,
 * not this machine's work); iowait counts as busy, since a compaction waiting on the disk is
 * not done. guest and guest_nice are already inside user and nice.
 */
export function parseProcStat(text: string): CpuTimes | undefined {
  const lines = text.split('\n');
  const first = lines[0].trim().split(/\s+/);
  if (first[0] !== 'cpu') return undefined;
  const v = first.slice(1, 9).map(Number);
  if (v.length < 8 || v.some((x) => !Number.isFinite(x))) return undefined;
  const total = v.reduce((a, b) => a + b, 0);
  const cpus = lines.filter((l) => /^cpu\d+\s/.test(l)).length;
  return { busy: total - v[3] - v[7], total, cpus: Math.max(1, cpus) };
}

export const readProcStat: CpuReader = () => {
  try {
    return parseProcStat(readFileSync('/proc/stat', 'utf8'));
  } catch {
    return undefined;
  }
};

export interface QuietOptions {
  /** Give up after this long (ms); 0: do not wait at all. */
  maxMs: number;
  /** Quiet: fewer than this many CPUs' worth of time was busy over one sample. */
  busyCores?: number;
  sampleMs?: number;
  read?: CpuReader;
  /** Called after each busy sample with how many CPUs' worth was busy. */
  onBusy?: (cores: number, waitedMs: number) => void;
}

export interface QuietResult {
  waitedMs: number;
  /** False if it gave up at maxMs, or could not measure. */
  quiet: boolean;
  /** False where CPU use cannot be read (no /proc/stat): then it did not wait. */
  measured: boolean;
}

export const QUIET_BUSY_CORES = 0.25;

export async function awaitQuiet(o: QuietOptions): Promise<QuietResult> {
  const read = o.read ?? readProcStat;
  const busyCores = o.busyCores ?? QUIET_BUSY_CORES;
  const sampleMs = o.sampleMs ?? 500;
  const start = Date.now();
  if (o.maxMs <= 0) return { waitedMs: 0, quiet: false, measured: false };
  let before = read();
  if (!before) return { waitedMs: 0, quiet: false, measured: false };
  for (;;) {
    await new Promise((r) => setTimeout(r, sampleMs));
    const after = read();
    if (!after) return { waitedMs: Date.now() - start, quiet: false, measured: false };
    const total = after.total - before.total;
    const cores = total > 0 ? ((after.busy - before.busy) / total) * after.cpus : 0;
    const waitedMs = Date.now() - start;
    if (cores < busyCores) return { waitedMs, quiet: true, measured: true };
    o.onBusy?.(cores, waitedMs);
    if (waitedMs >= o.maxMs) return { waitedMs, quiet: false, measured: true };
    before = after;
  }
}
