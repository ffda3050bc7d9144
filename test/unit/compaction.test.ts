/**
 * Compaction rules as pure functions: which level is picked, and what a merge keeps under
 * snapshots and at the bottom of the tree.
 */
import { describe, expect, it } from 'vitest';
import { ValueType, compareInternalKeys, makeInternalKey, sequenceOf, typeOf, userKeyOf } from '../../src/common/internal-key.js';
import { compactionEntries } from '../../src/compaction/merge-rule.js';
import { pickCompactions } from '../../src/compaction/picker.js';
import { Memtable } from '../../src/memtable/memtable.js';
import type { TableMeta } from '../../src/log/version-edit.js';
import { leftovers, mergeTables, type MergeJob } from '../../src/compaction/merge.js';
import { mergeOnWorker } from '../../src/compaction/worker-pool.js';
import { TableBuilder } from '../../src/sstable/table-builder.js';
import { TableReader } from '../../src/sstable/table-reader.js';
import { table } from '../fixtures/tables.js';

function meta(file: number, level: number, from: string, to: string, size: number): TableMeta {
  return {
    level, file, size, entries: 1, fragments: [],
    smallest: makeInternalKey(Buffer.from(from), 100, ValueType.Put), largest: makeInternalKey(Buffer.from(to), 1, ValueType.Put),
  };
}

function merged(entries: Array<[string, number, ValueType]>, smallestSnapshot: number, bottom: boolean): string[] {
  const m = new Memtable(1);
  for (const [k, seq, type] of entries) m.add(seq, type, Buffer.from(k), Buffer.from(`${k}@${seq}`));
  const out: string[] = [];
  for (const [key] of compactionEntries(m.iterator(), { smallestSnapshot, isBottomFor: () => bottom })) {
    out.push(`${userKeyOf(key).toString()}@${sequenceOf(key)}${typeOf(key) === ValueType.Delete ? 'D' : ''}`);
  }
  return out;
}

describe('compaction picking', () => {
  const o = { l0Trigger: 4, l1Bytes: 1000 };
  const pickCompaction = (levels: TableMeta[][], opts: typeof o, cursor: Array<Buffer | undefined>) => pickCompactions(levels, opts, cursor, new Set(), 1)[0];
  it('picks nothing while every level is within target', () => {
    expect(pickCompaction([[meta(1, 0, 'a', 'b', 10)], [meta(2, 1, 'a', 'z', 900)], [], [], [], [], []], o, [])).toBeUndefined();
  });
  it('picks L0 with every L0 table and the overlapping L1 tables', () => {
    const levels = [
      [1, 2, 3, 4].map((f) => meta(f, 0, 'c', 'f', 10)),
      [meta(5, 1, 'a', 'b', 10), meta(6, 1, 'd', 'e', 10), meta(7, 1, 'g', 'h', 10)],
      [], [], [], [], [],
    ];
    const job = pickCompaction(levels, o, [])!;
    expect(job.level).toBe(0);
    expect(job.inputs.map((t) => t.file)).toEqual([1, 2, 3, 4]);
    expect(job.overlapping.map((t) => t.file)).toEqual([6]);
  });
  it('picks the level with the highest size/target ratio, rotating through keys', () => {
    const l1 = [meta(1, 1, 'a', 'c', 800), meta(2, 1, 'd', 'f', 800)]; // 1.6 x target
    const l2 = [meta(3, 2, 'a', 'z', 11_000)]; // 1.1 x target
    const levels = [[], l1, l2, [], [], [], []];
    const first = pickCompaction(levels, o, [])!;
    expect([first.level, first.inputs[0].file, first.overlapping[0].file]).toEqual([1, 1, 3]);
    const next = pickCompaction(levels, o, [undefined, l1[0].largest])!;
    expect(next.inputs[0].file).toBe(2);
  });
});

describe('compaction merge', () => {
  const D = ValueType.Delete;
  const P = ValueType.Put;
  it('keeps only the newest version when no snapshot needs older ones', () => {
    expect(merged([['a', 1, P], ['a', 5, P], ['b', 2, P]], 100, false)).toEqual(['a@5', 'b@2']);
  });
  it('keeps what each snapshot can see', () => {
    // Snapshot 3 sees a@2; the present sees a@7. a@1 is shadowed for everyone.
    expect(merged([['a', 1, P], ['a', 2, P], ['a', 7, P]], 3, false)).toEqual(['a@7', 'a@2']);
  });
  it('drops tombstones only at the bottom, and the versions they hide', () => {
    expect(merged([['a', 1, P], ['a', 4, D], ['b', 2, P]], 100, false)).toEqual(['a@4D', 'b@2']);
    expect(merged([['a', 1, P], ['a', 4, D], ['b', 2, P]], 100, true)).toEqual(['b@2']);
    // A snapshot older than the tombstone still needs the value under it.
    expect(merged([['a', 1, P], ['a', 4, D]], 2, true)).toEqual(['a@4D', 'a@1']);
  });
  it('emits identical internal keys once', () => {
    const m1 = new Memtable(1);
    m1.add(3, P, Buffer.from('k'), Buffer.from('v'));
    const it = m1.iterator();
    const twice = { // the same entry seen from two sources
      get valid() { return it.valid; }, get key() { return it.key; }, get value() { return it.value; },
      first() { it.first(); this.n = 0; }, seek() {}, n: 0,
      next() { if (this.n++ === 0) it.first(); else it.next(); },
    };
    const out: Buffer[] = [];
    for (const [k] of compactionEntries(twice, { smallestSnapshot: 10, isBottomFor: () => false })) out.push(Buffer.from(k));
    expect(out.length).toBe(1);
    expect(compareInternalKeys(out[0], makeInternalKey(Buffer.from('k'), 3, P))).toBe(0);
  });
});

describe('merging tables (merge.ts), in this thread and on the merge worker', () => {
  const job = (tables: Buffer[]): MergeJob => ({
    tables, names: tables.map((_, i) => `t${i}.sst`), smallestSnapshot: 1000, deeper: [], targetBytes: 64 * 1024,
  });

  it('cuts outputs at the target, drops shadowed versions and bottom tombstones, and the worker agrees byte for byte', async () => {
    const inputs = [table(3000, 1, 10), table(3000, 2, 20), table(3000, 3, 30, (i) => i % 2 === 0)];
    const here = [...mergeTables(job(inputs))];
    expect(here.length).toBeGreaterThan(5);
    const keys: string[] = [];
    for (const t of here) {
      const it = new TableReader(t.bytes, 'out').iterator();
      for (it.first(); it.valid; it.next()) keys.push(`${userKeyOf(it.key).toString()}@${sequenceOf(it.key)}`);
    }
    // Newest version of each key; keys whose newest is a delete at the bottom are gone.
    const expected: string[] = [];
    for (let i = 0; i < 3000; i++) {
      const seq = i % 3 === 0 ? 30 : i % 2 === 0 ? 20 : 10;
      if (seq === 30 && i % 2 === 0) continue;
      expected.push(`k${String(i).padStart(5, '0')}@${seq}`);
    }
    expect(keys).toEqual(expected);
    const onWorker: Buffer[] = [];
    for await (const t of mergeOnWorker(job(inputs))) onWorker.push(t.bytes);
    expect(onWorker.map((b) => b.toString('hex'))).toEqual(here.map((t) => t.bytes.toString('hex')));
  });

  it('with recycle, outputs are built in the spares sent along, and the inputs and unused spares come back', async () => {
    const inputs = [table(3000, 1, 10), table(3000, 2, 20)];
    const here = [...mergeTables(job(inputs))];
    const spareBytes = 1 << 20;
    const spares = [new ArrayBuffer(spareBytes), new ArrayBuffer(10), new ArrayBuffer(spareBytes)]; // 10: too small, skipped
    const owned = inputs.map((b) => new Uint8Array(b)); // each input in an ArrayBuffer of its own
    const sent = [...owned.map((t) => t.buffer), ...spares];
    let returned: ArrayBuffer[] = [];
    const out: Buffer[] = [];
    for await (const t of mergeOnWorker({ ...job([]), tables: owned, spares }, true, (m) => { returned = m; })) out.push(t.bytes);
    expect(out.map((b) => b.toString('hex'))).toEqual(here.map((t) => t.bytes.toString('hex')));
    // The first two outputs were built in the two big spares, and moved whole (slack and all).
    expect(out.slice(0, 2).map((b) => [b.byteOffset, b.buffer.byteLength])).toEqual([[0, spareBytes], [0, spareBytes]]);
    expect(sent.every((ab) => ab.byteLength === 0)).toBe(true); // all moved to the worker
    // Back: both inputs and the small spare (the big ones went out as outputs).
    expect(returned.map((ab) => ab.byteLength).sort((a, b) => a - b)).toEqual([10, inputs[1].length, inputs[0].length].sort((a, b) => a - b));
  });

  it('with consumeInputs, later outputs are built in inputs read to their end, and are still the merge\'s very bytes', async () => {
    // Disjoint inputs: the first is read to its end halfway through the merge.
    const span = (from: number, to: number, seq: number): Uint8Array => {
      const b = new TableBuilder({});
      for (let i = from; i < to; i++) b.add(makeInternalKey(Buffer.from(`k${String(i).padStart(5, '0')}`), seq, ValueType.Put), Buffer.alloc(200, i));
      return new Uint8Array(b.finish().bytes); // an ArrayBuffer of its own
    };
    const make = (): Uint8Array[] => [span(0, 3000, 10), span(3000, 6000, 20)];
    const plain = [...mergeTables(job(make().map((t) => Buffer.from(t))))].map((t) => t.bytes.toString('hex'));
    expect(plain.length).toBeGreaterThan(6);

    const inputs = make();
    const memory = inputs.map((t) => t.buffer);
    const consuming: MergeJob = { ...job([]), tables: inputs, consumeInputs: true };
    const here = [...mergeTables(consuming)];
    expect(here.map((t) => t.bytes.toString('hex'))).toEqual(plain);
    expect(here.filter((t) => t.bytes.buffer === memory[0]).length).toBe(1);
    expect(here.some((t) => t.bytes.buffer === memory[1])).toBe(false); // read to its end only with the last output
    expect(leftovers(consuming)).toEqual([memory[1]]); // the first is an output's now

    const moved = make();
    const sizes = moved.map((t) => t.byteLength);
    let returned: ArrayBuffer[] = [];
    const out: Buffer[] = [];
    for await (const t of mergeOnWorker({ ...job([]), tables: moved, consumeInputs: true }, true, (m) => { returned = m; })) out.push(t.bytes);
    expect(out.map((b) => b.toString('hex'))).toEqual(plain);
    expect(out.filter((b) => b.buffer.byteLength === sizes[0]).length).toBe(1); // the first input's memory, moved back as an output
    expect(returned.map((ab) => ab.byteLength)).toEqual([sizes[1]]); // and not also returned as an input
  });

  it('a damaged input fails the merge on the worker with CORRUPTION naming the table', async () => {
    const bad = table(500, 1, 10);
    bad[100] ^= 0xff;
    const run = async () => { for await (const _ of mergeOnWorker(job([table(500, 2, 20), bad]))) { /* drain */ } };
    await expect(run()).rejects.toMatchObject({ code: 'CORRUPTION', message: expect.stringContaining('t1.sst') });
    // The worker goes on serving.
    let n = 0;
    for await (const _ of mergeOnWorker(job([table(100, 1, 10)]))) n++;
    expect(n).toBe(1);
  });
});
