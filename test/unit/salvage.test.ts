/**
 * Salvaging a damaged table (sstable/salvage.ts) and the stand-in for one no copy of reads
 * (TableReader.damaged): bytes flipped in a data block lose that block only, named with the
 * keys it may have held; a broken index or footer loses the table; the stand-in fails reads
 * within its keys and passes others by.
 */
import { describe, expect, it } from 'vitest';
import { NovaError } from '../../src/common/errors.js';
import { makeInternalKey, ValueType } from '../../src/common/internal-key.js';
import { readFooter } from '../../src/sstable/format.js';
import { salvageTable } from '../../src/sstable/salvage.js';
import { TableBuilder } from '../../src/sstable/table-builder.js';
import { TableReader } from '../../src/sstable/table-reader.js';

function table(n: number): Buffer {
  const b = new TableBuilder({ blockSize: 512 });
  for (let i = 0; i < n; i++) b.add(makeInternalKey(Buffer.from(`key${String(i).padStart(5, '0')}`), i + 1, ValueType.Put), Buffer.from(`value-${i}`.padEnd(40, '.')));
  return b.finish().bytes;
}

describe('salvageTable', () => {
  it('reads every entry of an intact table', () => {
    const s = salvageTable(table(300), 't');
    expect(s.entries).toHaveLength(300);
    expect(s.lost).toEqual([]);
    expect(s.unreadable).toBeUndefined();
  });

  it('a byte flipped in one data block loses that block only, and names the keys it may have held', () => {
    const bytes = table(300);
    const whole = new TableReader(bytes, 't');
    const ends = whole.dataBlockEnds();
    expect(ends.length).toBeGreaterThan(4);
    bytes[ends[1] + 10] ^= 0xff; // inside block 2
    const s = salvageTable(bytes, 't');
    expect(s.blocks).toBe(ends.length);
    expect(s.lost).toHaveLength(1);
    expect(s.lost[0].offset).toBe(ends[1]);
    expect(s.lost[0].why).toMatch(/checksum|CORRUPTION|mismatch/i);
    const kept = s.entries.map(([k]) => k.subarray(0, k.length - 8).toString());
    expect(kept.length).toBeGreaterThan(200);
    expect(kept.length).toBeLessThan(300);
    // What was lost lies between the bounds named.
    const after = s.lost[0].after!.subarray(0, s.lost[0].after!.length - 8).toString();
    const upTo = s.lost[0].upTo.subarray(0, s.lost[0].upTo.length - 8).toString();
    for (let i = 0; i < 300; i++) {
      const k = `key${String(i).padStart(5, '0')}`;
      expect(kept.includes(k)).toBe(!(k > after && k <= upTo));
    }
  });

  it('a broken index or footer makes the whole table unreadable', () => {
    const bytes = table(300);
    const f = readFooter(bytes, 't');
    const index = Buffer.from(bytes);
    index[f.index.offset + 3] ^= 0x01;
    expect(salvageTable(index, 't')).toMatchObject({ entries: [], unreadable: expect.stringMatching(/index/) });
    const footer = Buffer.from(bytes);
    footer[footer.length - 20] ^= 0x01;
    expect(salvageTable(footer, 't').unreadable).toBeDefined();
  });
});

describe('TableReader.damaged', () => {
  const err = new NovaError('CORRUPTION', 'table 7: metadata fragment at offset 4096: checksum mismatch');
  const r = TableReader.damaged('t', err, makeInternalKey(Buffer.from('b'), 9, ValueType.Put), makeInternalKey(Buffer.from('m'), 3, ValueType.Put));

  it('fails reads of keys within its span with the damage, and passes others by', () => {
    expect(() => r.get(Buffer.from('c'), 100)).toThrow(err);
    expect(() => r.get(Buffer.from('b'), 100)).toThrow(err);
    expect(() => r.get(Buffer.from('m'), 100)).toThrow(err);
    expect(r.get(Buffer.from('a'), 100)).toBeUndefined();
    expect(r.get(Buffer.from('n'), 100)).toBeUndefined();
    expect(r.damaged).toBe(err);
    expect(r.ownBytes()).toBeUndefined();
  });

  it('fails a scan that reaches its keys, and one that starts past them finds nothing', () => {
    expect(() => r.iterator().first()).toThrow(err);
    expect(() => r.iterator().seek(makeInternalKey(Buffer.from('a'), 100, ValueType.Put))).toThrow(err);
    const it = r.iterator();
    it.seek(makeInternalKey(Buffer.from('n'), 100, ValueType.Put));
    expect(it.valid).toBe(false);
  });
});
