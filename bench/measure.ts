/**
 * Closed-loop measurement: `outstanding` loops each issue one operation at a time for a
 * fixed duration after a warm-up; throughput counts completions, latency is sampled per
 * operation (microseconds) into a preallocated array, so measuring allocates nothing per op.
 */
import { performance } from 'node:perf_hooks';

export interface Measurement {
  ops: number;
  seconds: number;
  opsPerSec: number;
  p50Us: number;
  p99Us: number;
}

const MAX_SAMPLES = 1 << 21;

export async function measure(
  op: (slot: number) => Promise<unknown>,
  outstanding: number,
  durationMs: number,
  warmupMs = Math.min(200, durationMs / 4),
): Promise<Measurement> {
  const samples = new Float64Array(MAX_SAMPLES);
  let count = 0;
  let ops = 0;
  let recording = false;
  let stop = false;
  const loop = async (slot: number): Promise<void> => {
    while (!stop) {
      const t0 = performance.now();
      await op(slot);
      if (recording) {
        ops++;
        if (count < MAX_SAMPLES) samples[count++] = (performance.now() - t0) * 1000;
      }
    }
  };
  const loops = Array.from({ length: outstanding }, (_, slot) => loop(slot));
  await sleep(warmupMs);
  recording = true;
  const start = performance.now();
  await sleep(durationMs);
  recording = false;
  const seconds = (performance.now() - start) / 1000;
  stop = true;
  await Promise.all(loops);
  const sorted = samples.subarray(0, count).sort();
  return {
    ops,
    seconds,
    opsPerSec: ops / seconds,
    p50Us: percentile(sorted, 0.5),
    p99Us: percentile(sorted, 0.99),
  };
}

export function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
