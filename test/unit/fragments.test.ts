/**
 * How a table is cut over StoCs (src/compaction/fragments.ts): data blocks into ρ fragments at block
 * boundaries, metadata as a fragment of its own when there is a StoC for it.
 */
import { describe, expect, it } from 'vitest';
import { ValueType, makeInternalKey } from '../../src/common/internal-key.js';
import { cutTable } from '../../src/compaction/fragments.js';
import { TableBuilder } from '../../src/sstable/table-builder.js';
import { TableReader } from '../../src/sstable/table-reader.js';

function table(n: number): Buffer {
  const b = new TableBuilder({});
  for (let i = 0; i < n; i++) b.add(makeInternalKey(Buffer.from(`key${String(i).padStart(6, '0')}`), 1, ValueType.Put), Buffer.alloc(300, i));
  return b.finish().bytes;
}

describe('cutting a table into fragments', () => {
  const bytes = table(2000);
  const reader = new TableReader(bytes, 't');
  const ends = new Set(reader.dataBlockEnds());
  const dataEnd = reader.footer.filter.offset;

  for (const rho of [1, 2, 3, 5]) {
    for (const extra of [0, 1]) {
      it(`ρ = ${rho} ${extra ? 'with' : 'without'} a StoC for the metadata`, () => {
        const stocs = Array.from({ length: rho + extra }, (_, i) => 10 + i);
        const f = cutTable(bytes, stocs, rho, 't');
        expect(f.map((x) => x.stoc)).toEqual(stocs);
        // Contiguous, in order, covering the whole table.
        expect(f[0].offset).toBe(0);
        for (let i = 1; i < f.length; i++) expect(f[i].offset).toBe(f[i - 1].offset + f[i - 1].size);
        expect(f[f.length - 1].offset + f[f.length - 1].size).toBe(bytes.length);
        // Data fragments end between blocks and are about equal.
        for (let i = 0; i < rho - 1; i++) expect(ends.has(f[i].offset + f[i].size)).toBe(true);
        for (let i = 0; i < rho; i++) expect(Math.abs(Math.min(f[i].size, dataEnd) - dataEnd / rho)).toBeLessThan(dataEnd / rho / 2 + 8192);
        if (extra) expect([f[rho].offset, f[rho].size]).toEqual([dataEnd, bytes.length - dataEnd]);
        // Put back together, it is the table.
        expect(Buffer.concat(f.map((x) => bytes.subarray(x.offset, x.offset + x.size))).equals(bytes)).toBe(true);
      });
    }
  }

  it('a table of one block leaves later data fragments empty; a wrong StoC count is refused', () => {
    const small = table(3);
    const f = cutTable(small, [1, 2, 3, 4], 3, 'small');
    expect(f.map((x) => x.size > 0)).toEqual([true, false, false, true]);
    expect(() => cutTable(small, [1, 2], 4, 'small')).toThrow(/2 StoCs for ρ = 4/);
  });
});
