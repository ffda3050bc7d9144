import { describe, expect, it } from 'vitest';
import { ValueType } from '../../src/common/internal-key.js';
import { WriteBatch, decodeBatch } from '../../src/log/write-batch.js';
import type { SessionRef } from '../../src/common/write-id.js';

describe('write batch', () => {
  it('round-trips puts and deletes with the memtable id and first sequence', () => {
    const b = new WriteBatch();
    b.put(Buffer.from('a'), Buffer.from('1')).delete(Buffer.from('b')).put(Buffer.alloc(0), Buffer.alloc(70_000, 3));
    const d = decodeBatch(b.encode(42, 2 ** 40 + 5), 'x.log');
    expect(d.memtableId).toBe(42);
    expect(d.firstSequence).toBe(2 ** 40 + 5);
    expect(d.entries).toEqual([
      { type: ValueType.Put, key: Buffer.from('a'), value: Buffer.from('1') },
      { type: ValueType.Delete, key: Buffer.from('b'), value: Buffer.alloc(0) },
      { type: ValueType.Put, key: Buffer.alloc(0), value: Buffer.alloc(70_000, 3) },
    ]);
    b.clear();
    expect(decodeBatch(b.encode(1, 1), 'x').entries).toEqual([]);
  });

  it('refuses oversize keys and values, saying the limit', () => {
    const b = new WriteBatch({ maxKeyBytes: 8, maxValueBytes: 16 });
    expect(() => b.put(Buffer.alloc(9), Buffer.alloc(1))).toThrow(/key of 9 bytes exceeds the limit of 8 bytes/);
    expect(() => b.put(Buffer.alloc(1), Buffer.alloc(17))).toThrow(/value of 17 bytes exceeds the limit of 16 bytes/);
    expect(() => b.delete(Buffer.alloc(9))).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
    expect(b.count).toBe(0);
    expect(() => new WriteBatch().put(Buffer.alloc(4097), Buffer.alloc(0))).toThrow(/4096 bytes/);
  });

  it('reports every truncation and bad field as corruption with where and offset', () => {
    const rec = new WriteBatch().put(Buffer.from('key'), Buffer.from('value')).delete(Buffer.from('k2')).encode(1, 9);
    for (let n = 0; n < rec.length; n++) {
      expect(() => decodeBatch(rec.subarray(0, n), 'w.log@100'), `cut at ${n}`).toThrow(/w\.log@100: write batch .* at offset \d+/);
    }
    const badType = Buffer.from(rec);
    badType[18] = 7;
    expect(() => decodeBatch(badType, 'w')).toThrow(/unknown entry type 7 at offset 18/);
    const badVersion = Buffer.from(rec);
    badVersion[0] = 3;
    expect(() => decodeBatch(badVersion, 'w')).toThrow(/unsupported version 3/);
    const badFlags = Buffer.from(rec);
    badFlags[17] = 2;
    expect(() => decodeBatch(badFlags, 'w')).toThrow(/unknown flags 2 at offset 17/);
    const badCount = Buffer.from(rec);
    badCount[13] = 3;
    expect(() => decodeBatch(badCount, 'w')).toThrow(/says 3 entries but holds 2/);
  });

  it('encodes in place (a re-encode renumbers it), a clone is independent, putBytes is exact', () => {
    for (const [k, v] of [[1, 0], [127, 128], [200, 70_000]]) {
      const key = Buffer.alloc(k, 7);
      const value = Buffer.alloc(v, 9);
      const b = new WriteBatch(undefined, WriteBatch.putBytes(key, value)).put(key, value);
      expect(b.byteSize).toBe(WriteBatch.putBytes(key, value));
    }
    const b = new WriteBatch().put(Buffer.from('a'), Buffer.from('1')).delete(Buffer.from('b'));
    const c = b.clone();
    const first = Buffer.from(b.encode(3, 2 ** 40 + 5));
    expect(decodeBatch(first, 'first')).toMatchObject({ memtableId: 3, firstSequence: 2 ** 40 + 5 });
    const again = decodeBatch(b.encode(4, 9), 'again');
    expect(again).toMatchObject({ memtableId: 4, firstSequence: 9 });
    expect(again.entries.map((e) => [e.type, e.key.toString()])).toEqual([[ValueType.Put, 'a'], [ValueType.Delete, 'b']]);
    b.clear();
    b.put(Buffer.from('z'), Buffer.from('9'));
    expect(decodeBatch(c.encode(1, 1), 'clone').entries.map((e) => e.key.toString())).toEqual(['a', 'b']);
    expect(b.firstKey()?.toString()).toBe('z');
    expect(decodeBatch(b.encode(1, 1), 'cleared').entries).toHaveLength(1);
  });

  it('carries the client\'s write (session, number, floor) when there is one, and reads version 1 records', () => {
    const session: SessionRef = { idHigh: 2 ** 52 + 3, idLow: 7, seq: 2 ** 40 + 7, floor: 2 ** 40, open: true };
    const b = new WriteBatch().put(Buffer.from('k'), Buffer.from('v'));
    const withSession = Buffer.from(b.encode(5, 77, session));
    expect(withSession.length).toBe(b.encode(5, 77).length + 32);
    const d = decodeBatch(withSession, 'w');
    expect(d.session).toEqual({ ...session, open: false }); // `open` is an admission flag, not logged
    expect(d.entries.map((e) => e.key.toString())).toEqual(['k']);
    expect(decodeBatch(b.encode(5, 77), 'w').session).toBeUndefined();
    // Every cut of a record with a session is corruption with where and offset.
    for (let n = 0; n < withSession.length; n++) {
      expect(() => decodeBatch(withSession.subarray(0, n), 'w.log'), `cut at ${n}`).toThrow(/w\.log: write batch .* at offset \d+/);
    }
    const under = Buffer.from(withSession);
    under.writeUInt32LE(5, 18 + 16);
    under.writeUInt32LE(0, 18 + 20); // write 5, floor 2^40
    expect(() => decodeBatch(under, 'w')).toThrow(/under floor/);
    // Version 1: no flags byte (logs written before sessions replay as they are).
    const v1 = Buffer.concat([Buffer.from([1]), Buffer.alloc(4), Buffer.alloc(8), Buffer.from([1, 0, 0, 0]), b.encode(0, 0).subarray(18)]);
    v1.writeUInt32LE(9, 1);
    v1.writeUInt32LE(42, 5);
    expect(decodeBatch(v1, 'old.log')).toEqual({ memtableId: 9, firstSequence: 42, entries: [{ type: ValueType.Put, key: Buffer.from('k'), value: Buffer.from('v') }] });
  });
});
