/**
 * The runner's generators against theory: Zipfian frequencies against 1/(i+1)^θ / ζ(n),
 * YCSB's FNV hash against a BigInt reference, the scrambled Zipfian's skew, latest favouring
 * new keys, hotspot and operation mixes in their proportions.
 */
import { describe, expect, it } from 'vitest';
import {
  HotspotChooser, LatestChooser, Random, ScrambledZipfianChooser, Zipfian, fnvMod, keyNumber, keyOf, zeta,
} from '../../bench/ycsb/generators.js';
import { Histogram } from '../../bench/ycsb/histogram.js';
import { decodeValue, makeValue } from '../../bench/ycsb/values.js';
import { OpChooser, WORKLOADS, parseWorkload } from '../../bench/ycsb/workload.js';

function fnvReference(v: number, n: number): number {
  let h = 0xcbf29ce484222325n;
  let x = BigInt(v);
  for (let i = 0; i < 8; i++) {
    h ^= x & 0xffn;
    x >>= 8n;
    h = BigInt.asUintN(64, h * 1099511628211n);
  }
  const signed = BigInt.asIntN(64, h);
  const abs = signed < 0n ? -signed : signed;
  return Number(abs % BigInt(n));
}

describe('ycsb generators', () => {
  it('draws Zipfian items with the analytic frequencies', () => {
    const n = 1000;
    const theta = 0.99;
    const z = new Zipfian(new Random(3), n, theta);
    const draws = 400_000;
    const counts = new Float64Array(n);
    for (let i = 0; i < draws; i++) counts[z.next()]++;
    const zn = zeta(0, n, theta);
    // Gray et al.'s method (YCSB's) is exact for items 0 and 1 and approximate after:
    // it gives items 2-4 up to ~16% more than 1/(i+1)^θ/ζ(n), then converges.
    for (let i = 0; i < 10; i++) {
      const expected = 1 / (i + 1) ** theta / zn;
      const tolerance = i < 2 ? 0.03 : 0.2;
      expect(Math.abs(counts[i] / draws - expected) / expected, `item ${i}`).toBeLessThan(tolerance);
    }
    // The top 10 and top 100 hold their analytic share of all draws, within 2 points.
    for (const k of [10, 100]) {
      let top = 0;
      let expectedTop = 0;
      for (let i = 0; i < k; i++) { top += counts[i]; expectedTop += 1 / (i + 1) ** theta / zn; }
      expect(Math.abs(top / draws - expectedTop), `top ${k}`).toBeLessThan(0.02);
    }
  });

  it('hashes like YCSB\'s fnvhash64', () => {
    const r = new Random(9);
    for (const v of [0, 1, 255, 256, 2 ** 32 - 1, 2 ** 32, 9_999_999_999, 123456789012]) {
      expect(fnvMod(v, 1_000_000), `v ${v}`).toBe(fnvReference(v, 1_000_000));
    }
    for (let i = 0; i < 2000; i++) {
      const v = Math.floor(r.next() * 1e10);
      const n = 1 + Math.floor(r.next() * 1e9);
      expect(fnvMod(v, n)).toBe(fnvReference(v, n));
    }
  });

  it('scatters the scrambled Zipfian\'s popular keys', () => {
    // Skewed but scattered: the most popular key is drawn often and is not key 0.
    const s = new ScrambledZipfianChooser(new Random(7), 100_000);
    const counts = new Map<number, number>();
    for (let i = 0; i < 100_000; i++) { const k = s.next(100_000); counts.set(k, (counts.get(k) ?? 0) + 1); }
    const [hot, hits] = [...counts.entries()].sort((a, b) => b[1] - a[1])[0];
    expect(hits).toBeGreaterThan(1000);
    expect(hot).not.toBe(0);
    for (const k of counts.keys()) expect(k >= 0 && k < 100_000).toBe(true);
  });

  it('favours the newest keys with latest, following inserts', () => {
    const l = new LatestChooser(new Random(5), 10_000);
    let newest = 0;
    for (let i = 0; i < 20_000; i++) if (l.next(10_000) >= 9_000) newest++;
    expect(newest / 20_000).toBeGreaterThan(0.5);
    // After inserts the newest keys are the new ones.
    let picks = 0;
    for (let i = 0; i < 5000; i++) if (l.next(12_000) >= 11_000) picks++;
    expect(picks / 5000).toBeGreaterThan(0.5);
  });

  it('sends hotspot operations to the hot set in their proportion', () => {
    const h = new HotspotChooser(new Random(8), 0.2, 0.8);
    let hot = 0;
    for (let i = 0; i < 50_000; i++) if (h.next(1000) < 200) hot++;
    // 80% aimed at the hot set, plus the cold draws never land there.
    expect(Math.abs(hot / 50_000 - 0.8)).toBeLessThan(0.01);
  });

  it('mixes operations in the workload\'s proportions, and parses custom mixes', () => {
    for (const name of ['A', 'B', 'E', 'F', 'SW50']) {
      const w = WORKLOADS[name];
      const c = new OpChooser(w.mix, new Random(11));
      const counts: Record<string, number> = {};
      for (let i = 0; i < 100_000; i++) { const op = c.next(); counts[op] = (counts[op] ?? 0) + 1; }
      for (const [op, p] of Object.entries(w.mix)) expect(Math.abs((counts[op] ?? 0) / 100_000 - p), `${name} ${op}`).toBeLessThan(0.01);
    }
    expect(parseWorkload('read=0.7, update=0.2,scan=0.1').mix).toMatchObject({ read: 0.7, update: 0.2, scan: 0.1, insert: 0, rmw: 0 });
    expect(parseWorkload('rw50').name).toBe('RW50');
    expect(() => parseWorkload('Q')).toThrow(/unknown workload "Q"/);
    expect(() => parseWorkload('read=0.7')).toThrow(/add up to 0.7/);
    expect(() => parseWorkload('fly=1')).toThrow(/unknown operation "fly"/);
  });

  it('makes keys whose byte order is numeric order, and values that say their key and version', () => {
    expect(keyOf(42).toString()).toBe('user000000000042');
    expect(Buffer.compare(keyOf(9), keyOf(10))).toBeLessThan(0);
    expect(keyNumber(keyOf(123456789))).toBe(123456789);
    const v = makeValue(77, 5, 1024, true);
    expect(decodeValue(v, 1024)).toEqual({ ok: true, keyNum: 77, version: 5 });
    for (const at of [0, 5, 13, 17, 500, 1023]) {
      const bad = Buffer.from(v);
      bad[at] ^= 1;
      expect(decodeValue(bad, 1024).ok, `byte ${at}`).toBe(false);
    }
    expect(decodeValue(v.subarray(0, 1000), 1024)).toMatchObject({ ok: false, why: /length/ });
  });

  it('reports latency percentiles within the histogram\'s precision', () => {
    const h = new Histogram();
    for (let i = 1; i <= 100_000; i++) h.record(i / 10); // 0.1 … 10,000 µs, uniform
    for (const q of [0.5, 0.99, 0.999]) expect(Math.abs(h.percentile(q) - q * 10_000) / (q * 10_000), `q ${q}`).toBeLessThan(0.02);
    expect(h.max).toBe(10_000);
  });
});
