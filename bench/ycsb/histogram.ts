/**
 * A latency histogram with log-linear buckets (HdrHistogram's idea): 64 buckets per power of
 * two, so any percentile is within ~1.6% of the true value, in constant memory and without
 * allocating per sample. Values in microseconds.
 */
const SUB = 64;
const POWERS = 40; // up to 2^40 µs
const BUCKETS = 1 + POWERS * SUB;

export class Histogram {
  readonly counts = new Float64Array(BUCKETS);
  total = 0;
  max = 0;
  sum = 0;

  record(us: number): void {
    this.counts[bucketOf(us)]++;
    this.total++;
    this.sum += us;
    if (us > this.max) this.max = us;
  }

  merge(other: Histogram): void {
    for (let i = 0; i < BUCKETS; i++) this.counts[i] += other.counts[i];
    this.total += other.total;
    this.sum += other.sum;
    this.max = Math.max(this.max, other.max);
  }

  /** The value at quantile q (0…1): the middle of the bucket that holds it. */
  percentile(q: number): number {
    if (this.total === 0) return 0;
    const target = Math.max(1, Math.ceil(q * this.total));
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.counts[i];
      if (seen >= target) return Math.min(this.max, valueOf(i));
    }
    return this.max;
  }

  get mean(): number {
    return this.total === 0 ? 0 : this.sum / this.total;
  }

  /** Non-empty buckets as [upper bound µs, count], for plotting the distribution. */
  /** A histogram from `buckets()` output (another process's), with `mean` and `max` given. */
  static fromBuckets(buckets: Array<[number, number]>, sum: number, max: number): Histogram {
    const h = new Histogram();
    for (const [upper, count] of buckets) {
      h.counts[bucketOf(upper)] += count;
      h.total += count;
    }
    h.sum = sum;
    h.max = max;
    return h;
  }

  buckets(): Array<[number, number]> {
    const out: Array<[number, number]> = [];
    for (let i = 0; i < BUCKETS; i++) if (this.counts[i] > 0) out.push([upperOf(i), this.counts[i]]);
    return out;
  }
}

function bucketOf(us: number): number {
  if (!(us >= 1)) return 0; // below 1 µs (and NaN) in the first bucket
  const e = Math.min(POWERS - 1, Math.floor(Math.log2(us)));
  const sub = Math.min(SUB - 1, Math.floor((us / 2 ** e - 1) * SUB));
  return 1 + e * SUB + sub;
}

function lowerOf(i: number): number {
  if (i === 0) return 0;
  const e = Math.floor((i - 1) / SUB);
  return 2 ** e * (1 + ((i - 1) % SUB) / SUB);
}

function upperOf(i: number): number {
  return i === 0 ? 1 : lowerOf(i) + 2 ** Math.floor((i - 1) / SUB) / SUB;
}

function valueOf(i: number): number {
  return (lowerOf(i) + upperOf(i)) / 2;
}
