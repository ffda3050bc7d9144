/**
 * SSTable format: blocks, filter, tables. Round trips with edge cases, reads under
 * snapshots against a sorted oracle, and corruption of every byte of a small table.
 */
import { describe, expect, it } from 'vitest';
import { checksum32 } from '../../src/common/checksum.js';
import { NovaError } from '../../src/common/errors.js';
import {
  ValueType, compareInternalKeys, makeInternalKey, sequenceOf, typeOf, userKeyOf,
} from '../../src/common/internal-key.js';
import { Block, BlockBuilder } from '../../src/sstable/block.js';
import { buildFilter, filterHash, filterMayContain } from '../../src/sstable/filter.js';
import { TableBuilder } from '../../src/sstable/table-builder.js';
import { BlockCache } from '../../src/sstable/block-cache.js';
import { TRAILER_BYTES, metadataStart } from '../../src/sstable/format.js';
import { BlockMiss, TableReader } from '../../src/sstable/table-reader.js';
import { rng } from '../helpers/rng.js';


type Entry = { key: Buffer; value: Buffer };

/** Random entries (user keys with shared prefixes, several versions each), sorted. */
function entries(seed: number, users: number, maxVersions = 3, valueSize = 20): Entry[] {
  const r = rng(seed);
  const out: Entry[] = [];
  let seq = 1;
  for (let u = 0; u < users; u++) {
    const user = Buffer.from(`user-${'p'.repeat(Math.floor(r() * 40))}${String(Math.floor(r() * 1e9)).padStart(9, '0')}`);
    const versions = 1 + Math.floor(r() * maxVersions);
    for (let v = 0; v < versions; v++) {
      const type = r() < 0.2 ? ValueType.Delete : ValueType.Put;
      const value = type === ValueType.Put ? Buffer.alloc(Math.floor(r() * valueSize), seq & 0xff) : Buffer.alloc(0);
      out.push({ key: makeInternalKey(user, seq++, type), value });
    }
  }
  out.sort((a, b) => compareInternalKeys(a.key, b.key));
  return out.filter((e, i) => i === 0 || compareInternalKeys(out[i - 1].key, e.key) !== 0);
}

function build(list: Entry[], blockSize = 4096): Buffer {
  const b = new TableBuilder({ blockSize });
  for (const e of list) b.add(e.key, e.value);
  return b.finish().bytes;
}

function scan(t: TableReader): Entry[] {
  const out: Entry[] = [];
  const it = t.iterator();
  for (it.first(); it.valid; it.next()) out.push({ key: Buffer.from(it.key), value: Buffer.from(it.value) });
  return out;
}

describe('internal keys', () => {
  it('order by user key, then newest first, and keep sequence and type', () => {
    const a = makeInternalKey(Buffer.from('a'), 5, ValueType.Put);
    const a9 = makeInternalKey(Buffer.from('a'), 9, ValueType.Delete);
    const b = makeInternalKey(Buffer.from('b'), 1, ValueType.Put);
    expect([b, a, a9].sort(compareInternalKeys)).toEqual([a9, a, b]);
    const big = makeInternalKey(Buffer.from('k'), 2 ** 53 - 1, ValueType.Delete);
    expect(sequenceOf(big)).toBe(2 ** 53 - 1);
    expect(typeOf(big)).toBe(ValueType.Delete);
    expect(userKeyOf(big).toString()).toBe('k');
  });
});

describe('block', () => {
  it('round-trips entries and seeks to every key and between keys', () => {
    const list = entries(1, 300);
    const builder = new BlockBuilder(16);
    for (const e of list) builder.add(e.key, e.value);
    const block = new Block(builder.finish(), 'test block');
    const it = block.iterator(compareInternalKeys);
    const got: Entry[] = [];
    for (it.first(); it.valid; it.next()) got.push({ key: Buffer.from(it.key), value: Buffer.from(it.value) });
    expect(got).toEqual(list);
    for (let i = 0; i < list.length; i++) {
      it.seek(list[i].key);
      expect(it.valid && it.key.equals(list[i].key)).toBe(true);
    }
    it.seek(makeInternalKey(Buffer.from('zzzz'), 1, ValueType.Put));
    expect(it.valid).toBe(false);
    it.seek(makeInternalKey(Buffer.from(''), 1, ValueType.Put));
    expect(it.valid && it.key.equals(list[0].key)).toBe(true);
  });

  it('a restart entry that claims to share key bytes is corruption, found by a seek', () => {
    const list = entries(1, 40);
    const builder = new BlockBuilder(1); // every entry a restart point, as in index blocks
    for (const e of list) builder.add(e.key, e.value);
    const bytes = builder.finish();
    const restarts = bytes.readUInt32LE(bytes.length - 4);
    const at = bytes.readUInt32LE(bytes.length - 4 - restarts * 4 + 20 * 4); // entry 20
    expect(bytes[at]).toBe(0); // its shared-length varint
    bytes[at] = 1;
    const it = new Block(bytes, 'damaged block').iterator(compareInternalKeys);
    expect(() => it.seek(list[20].key)).toThrow(expect.objectContaining({ code: 'CORRUPTION', message: expect.stringContaining(`damaged block`) }));
  });

  it('refuses a malformed restart array', () => {
    expect(() => new Block(Buffer.from([1, 0, 0]), 'b')).toThrow(expect.objectContaining({ code: 'CORRUPTION' }));
    expect(() => new Block(Buffer.from([0, 0, 0, 0]), 'b')).toThrow(/restart count 0/);
    expect(() => new Block(Buffer.from([9, 0, 0, 0, 1, 0, 0, 0]), 'b')).toThrow(/bad restart point/);
  });
});

describe('bloom filter', () => {
  it('has no false negatives and about 1% false positives at 10 bits per key', () => {
    const keys = Array.from({ length: 10_000 }, (_, i) => Buffer.from(`key-${i}`));
    const f = buildFilter(keys.map((k) => filterHash(k)), 10);
    for (const k of keys) expect(filterMayContain(f, filterHash(k))).toBe(true);
    let fp = 0;
    for (let i = 0; i < 10_000; i++) if (filterMayContain(f, filterHash(Buffer.from(`other-${i}`)))) fp++;
    expect(fp / 10_000).toBeLessThan(0.02);
  });
});

describe('table', () => {
  it('round-trips across many blocks and answers gets under every snapshot like the oracle', () => {
    const list = entries(2, 2000);
    const t = new TableReader(build(list, 1024), 'test.sst');
    expect(t.entries).toBe(list.length);
    expect(scan(t)).toEqual(list);
    const r = rng(3);
    for (let i = 0; i < 2000; i++) {
      const e = list[Math.floor(r() * list.length)];
      const user = userKeyOf(e.key);
      const snapshot = Math.floor(r() * (list.length + 10));
      // Oracle: newest version of `user` with sequence <= snapshot.
      const versions = list.filter((x) => userKeyOf(x.key).equals(user) && sequenceOf(x.key) <= snapshot);
      const want = versions[0];
      const got = t.get(user, snapshot);
      if (!want) expect(got).toBeUndefined();
      else if (typeOf(want.key) === ValueType.Delete) expect(got).toEqual({ type: 'delete' });
      else expect(got).toEqual({ type: 'put', value: want.value });
    }
    expect(t.get(Buffer.from('absent-key'), 1e9)).toBeUndefined();
  });

  it('seeks like the oracle to every key, between keys and past the end, whole or through a block cache', () => {
    // Small blocks and shared prefixes: many targets tie on the index's abbreviated keys (6
    // bytes after the prefix all index keys share, zero-padded: `a`, `a\0` and `ab` tie). One
    // table whose keys share no prefix, one whose keys all start `user-`, with targets that
    // differ within it (`user`, `usf`, `a`).
    const short = ['a', 'a\0', 'a\0\0', 'ab', 'abcdef', 'abcdef\0', 'abcdeg'].map((u, i) => ({
      key: makeInternalKey(Buffer.from(u, 'latin1'), 5000 + i, ValueType.Put), value: Buffer.from(u),
    }));
    const prefixed = entries(5, 600, 3, 40);
    const mixed = [...prefixed, ...short].sort((x, y) => compareInternalKeys(x.key, y.key));
    for (const list of [mixed, prefixed]) {
      const bytes = build(list, 256);
      const whole = new TableReader(bytes, 'seek.sst');
      const start = metadataStart(whole.footer);
      const cached = TableReader.metadataOnly(bytes.subarray(start), start, 'seek.sst', new BlockCache(64 << 20));
      const oracle = (target: Buffer): number => {
        let lo = 0;
        let hi = list.length;
        while (lo < hi) {
          const mid = (lo + hi) >>> 1;
          if (compareInternalKeys(list[mid].key, target) < 0) lo = mid + 1;
          else hi = mid;
        }
        return lo;
      };
      const r = rng(6);
      const targets = list.flatMap((e) => {
        const user = userKeyOf(e.key);
        return [e.key, makeInternalKey(user, sequenceOf(e.key) + 1, ValueType.Put), makeInternalKey(Buffer.concat([user, Buffer.from([r() * 256])]), 1, ValueType.Put)];
      });
      for (const u of ['', 'a', 'user', 'user-', 'usf', 'zzz']) targets.push(makeInternalKey(Buffer.from(u), 1, ValueType.Put));
      for (const reader of [whole, cached]) {
        const it = reader.iterator();
        for (const target of targets) {
          const want = oracle(target);
          // The seek and the next three entries (across block boundaries); a cached reader's
          // miss loads the block and starts over, as a scan does.
          let got: string[] = [];
          for (;;) {
            try {
              got = [];
              for (it.seek(target); it.valid && got.length < 4; it.next()) got.push(Buffer.concat([it.key, it.value]).toString('hex'));
              break;
            } catch (err) {
              if (!(err instanceof BlockMiss)) throw err;
              reader.insert(err.handle, bytes.subarray(err.handle.offset, err.handle.offset + err.handle.size + TRAILER_BYTES));
            }
          }
          const expected = list.slice(want, want + 4).map((e) => Buffer.concat([e.key, e.value]).toString('hex'));
          expect(got, `seek in the ${reader.whole ? 'whole' : 'cached'} table`).toEqual(expected);
        }
      }
      // A walk that reaches a block the cache lacks throws the miss and is left not valid, never
    // on the last entry of the block before.
    const fresh = TableReader.metadataOnly(bytes.subarray(start), start, 'seek.sst', new BlockCache(64 << 20));
    const ends = whole.dataBlockEnds();
    fresh.insert({ offset: 0, size: ends[0] - TRAILER_BYTES }, bytes.subarray(0, ends[0]));
    const walk = fresh.iterator();
    walk.first();
    let walked = 0;
    expect(() => { for (; walk.valid; walk.next()) walked++; }).toThrow(BlockMiss);
    expect(walked).toBeGreaterThan(0);
    expect(walk.valid).toBe(false);
    walk.first(); // on an entry of the cached block, then a seek into one not cached
    expect(walk.valid).toBe(true);
    expect(() => walk.seek(list[list.length - 1].key)).toThrow(BlockMiss);
    expect(walk.valid).toBe(false);
    // Two iterators over the whole table, stepped in turn with point lookups between their
      // steps: each re-points a Block of its own, and lookups another.
      const its = [whole.iterator(), whole.iterator()];
      const at = [0, Math.floor(list.length / 2)];
      its[0].first();
      its[1].seek(list[at[1]].key);
      for (let step = 0; at[1] < list.length; step++) {
        for (let k = 0; k < 2; k++) {
          expect(its[k].valid && Buffer.compare(its[k].key, list[at[k]].key) === 0, `iterator ${k} at entry ${at[k]}`).toBe(true);
          expect(whole.get(userKeyOf(list[(step * 7919) % list.length].key), 1e9)).toBeDefined();
          its[k].next();
          at[k]++;
        }
      }
    }
  });

  it('an entry whose key has an unknown type, in a block whose checksum holds, is CORRUPTION naming table and block', () => {
    const bytes = build([{ key: makeInternalKey(Buffer.from('k'), 1, ValueType.Put), value: Buffer.from('v') }]);
    const size = new TableReader(bytes, 'good.sst').dataBlockEnds()[0] - TRAILER_BYTES;
    bytes[3 + 1] = 7; // entry = 3 one-byte varints, the user key `k`, then the trailer's type byte
    bytes.writeUInt32LE(checksum32(bytes.subarray(0, size + 1)), size + 1);
    const t = new TableReader(bytes, 'typed.sst');
    const corrupt = expect.objectContaining({ code: 'CORRUPTION', message: expect.stringContaining('typed.sst data block at offset 0') });
    expect(() => t.iterator().first()).toThrow(corrupt);
    expect(() => t.get(Buffer.from('k'), 10)).toThrow(corrupt);
  });

  it('handles an empty table, one key, huge values and long shared prefixes', () => {
    const empty = new TableReader(build([]), 'empty.sst');
    expect(empty.entries).toBe(0);
    expect(scan(empty)).toEqual([]);
    expect(empty.get(Buffer.from('x'), 10)).toBeUndefined();

    const one = [{ key: makeInternalKey(Buffer.from('only'), 1, ValueType.Put), value: Buffer.from('v') }];
    expect(scan(new TableReader(build(one), 'one.sst'))).toEqual(one);

    const huge = [
      { key: makeInternalKey(Buffer.from('a'), 1, ValueType.Put), value: Buffer.alloc(3 << 20, 7) },
      { key: makeInternalKey(Buffer.from('b'), 2, ValueType.Put), value: Buffer.alloc(0) },
    ];
    const ht = new TableReader(build(huge), 'huge.sst');
    const a = ht.get(Buffer.from('a'), 5);
    // Buffer.equals, not toEqual: deep equality walks megabytes element by element.
    expect(a?.type === 'put' && a.value.equals(huge[0].value)).toBe(true);
    expect(ht.get(Buffer.from('b'), 5)).toEqual({ type: 'put', value: Buffer.alloc(0) });

    const prefix = 'x'.repeat(4000);
    const shared = Array.from({ length: 50 }, (_, i) => ({
      key: makeInternalKey(Buffer.from(prefix + String(i).padStart(3, '0')), i + 1, ValueType.Put),
      value: Buffer.from(String(i)),
    }));
    const st = new TableReader(build(shared, 512), 'prefix.sst');
    expect(scan(st)).toEqual(shared);
    expect(st.get(Buffer.from(prefix + '017'), 100)).toEqual({ type: 'put', value: Buffer.from('17') });
  });

  it('refuses keys out of order', () => {
    const b = new TableBuilder();
    b.add(makeInternalKey(Buffer.from('b'), 1, ValueType.Put), Buffer.alloc(0));
    expect(() => b.add(makeInternalKey(Buffer.from('a'), 2, ValueType.Put), Buffer.alloc(0)))
      .toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
    // Within one user key, newer versions first; the same version twice is out of order too.
    b.add(makeInternalKey(Buffer.from('b'), 0, ValueType.Put), Buffer.alloc(0));
    for (const seq of [0, 5]) {
      expect(() => b.add(makeInternalKey(Buffer.from('b'), seq, ValueType.Put), Buffer.alloc(0)))
        .toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
    }
    b.add(makeInternalKey(Buffer.from('bb'), 9, ValueType.Put), Buffer.alloc(0)); // a longer key after its prefix
    expect(b.finish().entries).toBe(3);
  });

  it('detects corruption of every byte of a small table, naming table and offset', () => {
    const list = entries(4, 12, 2, 12);
    const good = build(list, 64); // several data blocks
    const users = [...new Set(list.map((e) => userKeyOf(e.key).toString()))];
    for (let at = 0; at < good.length; at++) {
      const bad = Buffer.from(good);
      bad[at] ^= 0x20;
      let error: unknown;
      try {
        const t = new TableReader(bad, 'corrupt.sst');
        scan(t);
        for (const u of users) t.get(Buffer.from(u), 1e9);
      } catch (err) {
        error = err;
      }
      expect(error, `byte ${at} of ${good.length}`).toBeInstanceOf(NovaError);
      expect((error as NovaError).code).toBe('CORRUPTION');
      expect((error as NovaError).message).toMatch(/corrupt\.sst.*offset \d+/);
    }
  });

  it('point lookups alone either answer as from the good table or report CORRUPTION, for every corrupted byte', () => {
    const list = entries(4, 12, 2, 12);
    const good = build(list, 64);
    const users = [...new Set(list.map((e) => userKeyOf(e.key).toString()))];
    const reader = new TableReader(good, 'good.sst');
    const want = users.map((u) => reader.get(Buffer.from(u), 1e9));
    let detected = 0;
    for (let at = 0; at < good.length; at++) {
      const bad = Buffer.from(good);
      bad[at] ^= 0x20;
      try {
        const t = new TableReader(bad, 'corrupt.sst');
        // Twice: the second pass reads blocks whose checksums the first already checked.
        for (let pass = 0; pass < 2; pass++) users.forEach((u, i) => expect(t.get(Buffer.from(u), 1e9), `byte ${at}, key ${u}`).toEqual(want[i]));
      } catch (err) {
        if (!(err instanceof NovaError)) throw err;
        expect(err.code).toBe('CORRUPTION');
        expect(err.message).toMatch(/corrupt\.sst.*offset \d+/);
        detected++;
      }
    }
    expect(detected).toBeGreaterThan(good.length * 0.85); // the rest: blocks no lookup needs
  });
});
