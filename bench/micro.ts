/**
 * `nova bench micro`: single-thread figures for the engine's building blocks (issue 3):
 * memtable inserts and gets, SSTable build, point lookups on a table with warm filter and
 * index, the merge that compactions run, a get that misses through 10 SSTables, and scans.
 * Everything is in memory: this measures CPU cost, not I/O.
 */
import { writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { SEEK_TYPE, ValueType, makeInternalKey } from '../src/common/internal-key.js';
import { Memtable } from '../src/memtable/memtable.js';
import { mergeTables } from '../src/compaction/merge.js';
import { TableBuilder } from '../src/sstable/table-builder.js';
import { TableReader } from '../src/sstable/table-reader.js';
import { MergingIterator, VisibleIterator } from '../src/sstable/merging-iterator.js';
import { levelIterator } from '../src/sstable/two-level-iterator.js';
import { htmlReport, textTable, type Column } from './report.js';

export interface MicroRow {
  name: string;
  value: number;
  unit: 'ops/s' | 'MB/s' | 'µs';
  target?: string;
  met?: boolean;
}

export interface MicroOptions {
  entries: number;
  log: (line: string) => void;
}

/** n distinct 16-byte keys, sorted or in random order (deterministic). */
function keys16(n: number, seed: number, sorted: boolean): Buffer[] {
  let x = seed >>> 0 || 1;
  const out: Buffer[] = [];
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    // 8 hex digits of randomness, then 8 of the index: distinct, not sorted.
    out.push(Buffer.from(x.toString(16).padStart(8, '0') + i.toString(16).padStart(8, '0')));
  }
  if (sorted) out.sort(Buffer.compare);
  return out;
}

/** The keys "user0000" + the 8-digit numbers 0…n−1, in random order (deterministic). */
function ycsbKeys16(n: number, seed: number): Buffer[] {
  let x = seed >>> 0 || 1;
  const nums = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) { // Fisher–Yates
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    const j = x % (i + 1);
    [nums[i], nums[j]] = [nums[j], nums[i]];
  }
  return nums.map((num) => Buffer.from(`user0000${String(num).padStart(8, '0')}`));
}

function time(fn: () => void): number {
  const t = performance.now();
  fn();
  return (performance.now() - t) / 1000;
}

function internalKeys(keys: Buffer[], firstSeq: number): Buffer[] {
  return keys.map((k, i) => makeInternalKey(k, firstSeq + i, ValueType.Put));
}

function buildTable(ikeys: Buffer[], value: Buffer): TableReader {
  const b = new TableBuilder();
  for (const k of ikeys) b.add(k, value);
  return new TableReader(b.finish().bytes, 'bench.sst');
}

export function runMicroBench(o: MicroOptions): MicroRow[] {
  const rows: MicroRow[] = [];
  const n = o.entries;
  const cases = [
    { label: '16 B key, 100 B value', makeKeys: () => keys16(n, 7, false), valueSize: 100, target: true },
    { label: '16 B key, 1024 B value', makeKeys: () => keys16(n, 7, false), valueSize: 1024, target: false },
    // YCSB's shape: every key starts "user0000", so a plain 6-byte abbreviation would tie.
    { label: '16 B "user0000…" key, 100 B value', makeKeys: () => ycsbKeys16(n, 7), valueSize: 100, target: false },
  ];
  // Keys are made per case and dropped after it: hundreds of thousands of live Buffers
  // would tax the garbage collector in every later measurement.
  for (const { label, makeKeys, valueSize, target } of cases) {
    o.log(`memtable, ${label}, ${n} entries`);
    const keys = makeKeys();
    const value = Buffer.alloc(valueSize, 1);
    let best = { ins: 0, get: 0 };
    for (let round = 0; round < 3; round++) { // best of three: the first pays for JIT warm-up
      const m = new Memtable(1, n * (16 + 8 + valueSize)); // sized like the engine's (τ)
      const ins = n / time(() => { for (let i = 0; i < n; i++) m.add(i + 1, ValueType.Put, keys[i], value); });
      const get = n / time(() => { for (let i = 0; i < n; i++) m.get(keys[i], n + 1); });
      best = { ins: Math.max(best.ins, ins), get: Math.max(best.get, get) };
    }
    const insRow: MicroRow = { name: `memtable insert (${label})`, value: best.ins, unit: 'ops/s' };
    if (target) Object.assign(insRow, { target: '>= 1,000,000', met: best.ins >= 1e6 });
    rows.push(insRow, { name: `memtable get (${label})`, value: best.get, unit: 'ops/s' });
  }

  const kv = 16 + 8 + 1024;
  const tableN = Math.max(1000, Math.floor(n / 4));
  o.log(`SSTable build, ${tableN} entries of 1 KB`);
  const sorted = keys16(tableN, 11, true);
  const sortedInternal = internalKeys(sorted, 1);
  const value = Buffer.alloc(1024, 2);
  let buildMBs = 0;
  let table: TableReader | undefined;
  for (let round = 0; round < 3; round++) {
    const s = time(() => { table = buildTable(sortedInternal, value); });
    buildMBs = Math.max(buildMBs, (tableN * kv) / s / 1e6);
  }
  rows.push({ name: 'SSTable build (1 KB entries)', value: buildMBs, unit: 'MB/s', target: '>= 200', met: buildMBs >= 200 });

  o.log('point lookups on one table, warm filter and index');
  const t = table!;
  for (const k of sorted) t.get(k, 1e9); // warm: every data block read and checked once
  const lookups = Math.min(tableN, 100_000);
  const lookupRate = lookups / time(() => { for (let i = 0; i < lookups; i++) t.get(sorted[(i * 7919) % tableN], 1e9); });
  rows.push({ name: 'SSTable point lookup (hit, warm)', value: lookupRate, unit: 'ops/s' });

  o.log('merge of 4 tables into one (the compaction loop)');
  const parts = [0, 1, 2, 3].map((p) => buildTable(internalKeys(sorted.filter((_, i) => i % 4 === p), 1 + p * tableN), value));
  let mergeMBs = 0;
  for (let round = 0; round < 3; round++) {
    // What a compaction's worker runs: mergeTables, outputs cut at τ = 16 MiB (as the cluster's).
    const s = time(() => {
      for (const out of mergeTables({ tables: parts.map((x) => x.bytes), names: ['a', 'b', 'c', 'd'], smallestSnapshot: 1e12, deeper: [], targetBytes: 16 << 20 })) void out;
    });
    mergeMBs = Math.max(mergeMBs, (tableN * kv) / s / 1e6);
  }
  rows.push({ name: 'merge 4 tables into one (1 KB entries)', value: mergeMBs, unit: 'MB/s', target: '>= 200', met: mergeMBs >= 200 });

  o.log('get that misses through 10 SSTables');
  const ten = Array.from({ length: 10 }, (_, i) => buildTable(internalKeys(keys16(2000, 100 + i, true), 1 + i * 2000), Buffer.alloc(100)));
  const misses = keys16(50_000, 999, false).map((k) => Buffer.from('miss' + k.toString().slice(4)));
  const missGet = (k: Buffer): boolean => {
    for (const tb of ten) if (tb.get(k, 1e9) !== undefined) return true;
    return false;
  };
  for (const k of misses.slice(0, 5000)) missGet(k);
  const us = (time(() => { for (const k of misses) missGet(k); }) / misses.length) * 1e6;
  rows.push({ name: 'get missing through 10 SSTables (filters)', value: us, unit: 'µs', target: '<= 10', met: us <= 10 });

  o.log('scans of 100 rows over 4 L0 tables and a level of 8');
  rows.push({ name: 'scan 100 rows (4 L0 tables + a level of 8)', value: scanRate(), unit: 'ops/s' });
  return rows;
}

/**
 * Scans/s of what an engine's scan runs (read-path scanInto): a seek, then 100 visible rows
 * of a merge over 4 overlapping L0 tables and a sorted level of 8, 100 B values, all warm.
 */
function scanRate(): number {
  const value = Buffer.alloc(100, 3);
  const levelKeys = keys16(80_000, 21, true);
  const levelParts = Array.from({ length: 8 }, (_, i) => internalKeys(levelKeys.slice(i * 10_000, (i + 1) * 10_000), 1 + i * 10_000));
  const level = levelParts.map((part) => ({ reader: buildTable(part, value), largest: part[part.length - 1] }));
  const l0 = Array.from({ length: 4 }, (_, i) => buildTable(internalKeys(keys16(5000, 31 + i, true), 100_000 + i * 5000), value));
  const starts = keys16(20_000, 41, false);
  const scan = (start: Buffer): number => {
    const its = l0.map((t) => t.iterator());
    its.push(levelIterator(level.map((t) => ({ largest: t.largest, iterator: () => t.reader.iterator() }))));
    const it = new VisibleIterator(new MergingIterator(its), 1e12);
    let rows = 0;
    for (it.seek(makeInternalKey(start, 1e12, SEEK_TYPE)); it.valid && rows < 100; it.next()) rows++;
    return rows;
  };
  let best = 0;
  for (let round = 0; round < 3; round++) {
    best = Math.max(best, starts.length / time(() => { for (const k of starts) scan(k); }));
  }
  return best;
}

export const MICRO_COLUMNS: Column<MicroRow>[] = [
  { title: 'measure', value: (r) => r.name, align: 'left' },
  { title: 'value', value: (r) => (r.unit === 'ops/s' ? Math.round(r.value).toLocaleString('en-US') : r.value.toFixed(r.unit === 'µs' ? 2 : 1)) },
  { title: 'unit', value: (r) => r.unit, align: 'left' },
  { title: 'target', value: (r) => r.target ?? '', align: 'left' },
  { title: '', value: (r) => (r.met === undefined ? '' : r.met ? 'met' : 'NOT met'), align: 'left' },
];

export function writeMicroReports(rows: MicroRow[], json: string | undefined, html: string | undefined): void {
  if (json) writeFileSync(json, JSON.stringify(rows, null, 2) + '\n');
  if (html) writeFileSync(html, htmlReport('nova bench micro', [`Measured ${new Date().toISOString()}, Node ${process.version}.`], rows, MICRO_COLUMNS));
}

export function microTable(rows: MicroRow[]): string {
  return textTable(rows, MICRO_COLUMNS);
}
