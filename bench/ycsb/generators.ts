/**
 * Key choosers, after YCSB's core generators (site.ycsb.generator): uniform, Zipfian (Gray et
 * al., "Quickly generating billion-record synthetic databases"), scrambled Zipfian (a Zipfian
 * over 10^10 items, FNV-hashed onto the key space, so the popular keys are scattered), skewed
 * latest (Zipfian over the newest keys), and hotspot. Pure and seeded: the same seed gives
 * the same sequence in every process.
 */

/** A seeded source of floats in [0, 1) (mulberry32). */
export class Random {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0 || 0x9e3779b9;
  }

  next(): number {
    let t = (this.s = (this.s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** An integer in [0, n). */
  below(n: number): number {
    return Math.floor(this.next() * n);
  }
}

/** Chooses a key number in [0, count), where count may grow (inserts). */
export interface KeyChooser {
  next(count: number): number;
}

export class UniformChooser implements KeyChooser {
  constructor(private readonly r: Random) {}
  next(count: number): number {
    return this.r.below(count);
  }
}

export const ZIPFIAN_CONSTANT = 0.99;

/** ζ(n, θ) = Σ_{i=1..n} 1/i^θ, extended from a known ζ(from, θ). */
export function zeta(from: number, to: number, theta: number, initial = 0): number {
  let sum = initial;
  for (let i = from + 1; i <= to; i++) sum += 1 / i ** theta;
  return sum;
}

/**
 * Zipfian over [0, n): item 0 is the most popular; P(i) ∝ 1/(i+1)^θ. ζ is extended
 * incrementally when n grows (YCSB does the same for its latest generator).
 */
export class Zipfian {
  private n: number;
  private zetan: number;
  private readonly zeta2: number;
  private readonly alpha: number;
  private eta: number;

  constructor(private readonly r: Random, n: number, private readonly theta = ZIPFIAN_CONSTANT, zetan?: number) {
    this.n = n;
    this.zetan = zetan ?? zeta(0, n, theta);
    this.zeta2 = zeta(0, 2, theta);
    this.alpha = 1 / (1 - theta);
    this.eta = this.etaFor(n);
  }

  private etaFor(n: number): number {
    return (1 - (2 / n) ** (1 - this.theta)) / (1 - this.zeta2 / this.zetan);
  }

  /** An item in [0, n); `n` may be larger than last time (never smaller). */
  next(n = this.n): number {
    if (n > this.n) {
      this.zetan = zeta(this.n, n, this.theta, this.zetan);
      this.n = n;
      this.eta = this.etaFor(n);
    }
    const u = this.r.next();
    const uz = u * this.zetan;
    if (uz < 1) return 0;
    if (uz < 1 + 0.5 ** this.theta) return 1;
    return Math.min(this.n - 1, Math.floor(this.n * (this.eta * u - this.eta + 1) ** this.alpha));
  }
}

/** YCSB's scrambled Zipfian: a Zipfian over 10^10 items (ζ precomputed for θ 0.99), hashed. */
export class ScrambledZipfianChooser implements KeyChooser {
  static readonly ITEM_COUNT = 10_000_000_000;
  static readonly ZETAN = 26.46902820178302; // ζ(10^10, 0.99), YCSB's constant
  private readonly z: Zipfian;
  private readonly small: boolean;

  constructor(r: Random, count: number, theta = ZIPFIAN_CONSTANT) {
    // YCSB uses the big precomputed generator only for its default θ; otherwise ζ over n.
    this.small = theta !== ZIPFIAN_CONSTANT;
    this.z = this.small ? new Zipfian(r, count, theta) : new Zipfian(r, ScrambledZipfianChooser.ITEM_COUNT, theta, ScrambledZipfianChooser.ZETAN);
  }

  next(count: number): number {
    const v = this.small ? this.z.next() : this.z.next(ScrambledZipfianChooser.ITEM_COUNT);
    return fnvMod(v, count);
  }
}

/** Zipfian over the newest keys: the last inserted is the most popular (YCSB's SkewedLatest). */
export class LatestChooser implements KeyChooser {
  private readonly z: Zipfian;
  constructor(r: Random, count: number, theta = ZIPFIAN_CONSTANT) {
    this.z = new Zipfian(r, count, theta);
  }

  next(count: number): number {
    return count - 1 - this.z.next(count);
  }
}

/** A fraction of operations (`hotOps`) goes to a fraction of the keys (`hotSet`), at the start. */
export class HotspotChooser implements KeyChooser {
  constructor(private readonly r: Random, private readonly hotSet = 0.2, private readonly hotOps = 0.8) {}
  next(count: number): number {
    const hot = Math.max(1, Math.floor(count * this.hotSet));
    if (hot >= count || this.r.next() < this.hotOps) return this.r.below(Math.min(hot, count));
    return hot + this.r.below(count - hot);
  }
}

export type Distribution = 'uniform' | 'zipfian' | 'latest' | 'hotspot';
export const DISTRIBUTIONS: readonly Distribution[] = ['uniform', 'zipfian', 'latest', 'hotspot'];

export function makeChooser(dist: Distribution, r: Random, count: number, theta = ZIPFIAN_CONSTANT): KeyChooser {
  switch (dist) {
    case 'uniform': return new UniformChooser(r);
    case 'zipfian': return new ScrambledZipfianChooser(r, count, theta);
    case 'latest': return new LatestChooser(r, count, theta);
    case 'hotspot': return new HotspotChooser(r);
  }
}

/**
 * YCSB's fnvhash64 (FNV-1 over the 8 little-endian bytes of a long, then |x|) modulo `n`,
 * in 32-bit halves: no BigInt on the hot path.
 */
export function fnvMod(v: number, n: number): number {
  let lo = v >>> 0;
  let vhi = Math.floor(v / 4294967296) >>> 0;
  let hlo = 0x84222325; // offset basis 0xCBF29CE484222325
  let hhi = 0xcbf29ce4;
  for (let i = 0; i < 8; i++) {
    const octet = lo & 0xff;
    lo = ((lo >>> 8) | ((vhi & 0xff) << 24)) >>> 0;
    vhi >>>= 8;
    hlo = (hlo ^ octet) >>> 0;
    // × 0x100000001B3 = × 0x1B3 + × 2^40
    const p = hlo * 0x1b3;
    const carry = Math.floor(p / 4294967296);
    const nhi = (hhi * 0x1b3 + carry + ((hlo << 8) >>> 0)) >>> 0;
    hlo = p >>> 0;
    hhi = nhi;
  }
  if (hhi & 0x80000000) { // Java's Math.abs on the signed value: two's complement
    hlo = (~hlo + 1) >>> 0;
    hhi = (~hhi + (hlo === 0 ? 1 : 0)) >>> 0;
  }
  let r = hhi % n;
  r = (r * 65536 + (hlo >>> 16)) % n;
  return (r * 65536 + (hlo & 0xffff)) % n;
}

/** Keys are "user" plus a 12-digit zero-padded number: byte order is numeric order. */
export const KEY_DIGITS = 12;

export function keyOf(n: number): Buffer {
  return Buffer.from(`user${String(n).padStart(KEY_DIGITS, '0')}`, 'latin1');
}

/** Split keys that cut the key space of `records` bench keys into `ranges` even ranges. */
export function benchSplits(ranges: number, records: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 1; i < ranges; i++) out.push(keyOf(Math.floor((i * records) / ranges)));
  return out;
}

export function keyNumber(key: Uint8Array): number {
  return Number(Buffer.from(key.buffer, key.byteOffset, key.length).toString('latin1', 4));
}
