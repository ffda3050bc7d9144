/**
 * How a table is cut over StoCs (src/compaction/fragments.ts): data blocks into ρ fragments at block
 * boundaries, metadata as a fragment of its own when there is a StoC for it.
 */
import { describe, expect, it } from 'vitest';
import { ValueType, makeInternalKey } from '../../src/common/internal-key.js';
import { copiesMissing, cutTable, parityBytes, parityOf, piecesOf, readFragments, shapeStocs, tableLost, tableShape, writeFragments, xorOf } from '../../src/compaction/fragments.js';
import type { Fragment } from '../../src/log/version-edit.js';
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
    // Its empty pieces are no copies of the piece at their offset: it reads back, and none is lost with their StoCs.
    return readFragments(cutTable(small, [1, 2, 3, 4, 5, 6, 7, 8], 3, 'small', 2), 'small', async (x, into) => { small.copy(into, 0, x.offset, x.offset + x.size); })
      .then((b) => {
        expect(b.equals(small)).toBe(true);
        expect(tableLost(f, (s) => s === 2 || s === 3)).toBe(false);
        expect(copiesMissing(f, 1)).toBe(0);
      });
  });
});

describe('copies of a table\'s fragments', () => {
  const bytes = table(2000);

  it('the shape: R copies where StoCs allow, the metadata apart only when its copies fit too, at least one copy', () => {
    const cases: Array<[number, number, number, [number, number]]> = [
      // up, ρ, R → [width, copies]
      [3, 1, 1, [2, 1]], [1, 1, 1, [1, 1]], [3, 1, 2, [1, 2]], [4, 1, 2, [2, 2]], [5, 2, 2, [2, 2]],
      [6, 2, 2, [3, 2]], [3, 2, 2, [3, 1]], [2, 1, 3, [1, 2]], [1, 1, 2, [1, 1]], [9, 2, 3, [3, 3]],
    ];
    for (const [up, rho, r, want] of cases) {
      const s = tableShape(up, rho, r);
      expect([s.width, s.copies], `up ${up}, ρ ${rho}, R ${r}`).toEqual(want);
      expect(s.width * s.copies).toBeLessThanOrEqual(Math.max(up, rho));
    }
  });

  it('each copy holds every piece, on distinct StoCs, with the same checksum; put back together from any mix of copies, it is the table', () => {
    const f = cutTable(bytes, [1, 2, 3, 4, 5, 6], 2, 't', 2);
    expect(f.map((x) => x.stoc)).toEqual([1, 2, 3, 4, 5, 6]);
    const pieces = piecesOf(f, 't');
    expect(pieces.map((p) => p.copies.map((c) => c.stoc))).toEqual([[1, 4], [2, 5], [3, 6]]);
    for (const p of pieces) expect(new Set(p.copies.map((c) => c.crc)).size).toBe(1);
    expect(() => cutTable(bytes, [1, 2, 3], 2, 't', 2)).toThrow(/3 StoCs for ρ = 2 data fragments in 2 copies/);
    expect(() => cutTable(bytes, [1, 2, 1, 2], 2, 't', 2)).toThrow(/a StoC named twice/);
  });

  it('a piece is lost only when every copy is; the copies missing are counted', () => {
    const f = cutTable(bytes, [1, 2, 3, 4], 1, 't', 2); // data on 1 and 3, metadata on 2 and 4
    expect(tableLost(f, (s) => s === 1)).toBe(false);
    expect(tableLost(f, (s) => s === 1 || s === 4)).toBe(false);
    expect(tableLost(f, (s) => s === 1 || s === 3)).toBe(true);
    expect(copiesMissing(f, 2)).toBe(0);
    expect(copiesMissing(f, 2, (s) => s === 2)).toBe(1);
    expect(copiesMissing(f, 2, (s) => s === 2 || s === 3)).toBe(2);
    expect(copiesMissing(f, 3)).toBe(2);
  });

  it('pieces that do not tile, or copies that differ in size, are corruption', () => {
    expect(() => piecesOf([{ stoc: 1, offset: 0, size: 10 }, { stoc: 2, offset: 11, size: 5 }], 't')).toThrow(/expected one at 10/);
    expect(() => piecesOf([{ stoc: 1, offset: 0, size: 10 }, { stoc: 2, offset: 0, size: 9 }], 't')).toThrow(/differ in size/);
  });

  it('a read takes the next copy when one fails or fails its checksum, and says what each copy did when all fail', async () => {
    const f = cutTable(bytes, [1, 2, 3, 4], 1, 't', 2);
    const bad: number[] = [];
    const read = (broken: Record<number, 'down' | 'damaged'>) => readFragments(f, 't', async (x: Fragment, into: Buffer) => {
      if (broken[x.stoc] === 'down') throw Object.assign(new Error(`StoC ${x.stoc} is down`), { code: 'UNAVAILABLE' });
      bytes.copy(into, 0, x.offset, x.offset + x.size);
      if (broken[x.stoc] === 'damaged') into[0] ^= 1;
    }, undefined, (x) => bad.push(x.stoc));
    expect((await read({ 1: 'down', 2: 'damaged' })).equals(bytes)).toBe(true); // data from 3, metadata from 4
    expect(bad.sort()).toEqual([1, 2]);
    await expect(read({ 1: 'down', 3: 'damaged' })).rejects.toMatchObject({ code: 'UNAVAILABLE', message: expect.stringMatching(/every copy failed: StoC 1 is down; .*copy on StoC 3 .* fails its checksum/) });
    await expect(read({ 1: 'damaged', 3: 'damaged' })).rejects.toMatchObject({ code: 'CORRUPTION' });
  });
});

describe('parity over a table\'s data fragments', () => {
  const bytes = table(3000);
  /** Reads each fragment from `store` (StoC → its bytes), failing for StoCs in `down`. */
  const reader = (store: Map<number, Buffer>, down: Set<number>) => async (f: Fragment, into: Buffer): Promise<void> => {
    if (down.has(f.stoc)) throw Object.assign(new Error(`StoC ${f.stoc} is down`), { code: 'UNAVAILABLE' });
    store.get(f.stoc)!.copy(into, 0, 0, f.size);
  };
  const written = async (f: Fragment[]): Promise<Map<number, Buffer>> => {
    const store = new Map<number, Buffer>();
    await writeFragments(bytes, f, async (x, part) => { store.set(x.stoc, Buffer.from(part)); });
    return store;
  };

  it('the shape: ρ data StoCs, R for the metadata and one for parity, when that many are up; else copies', () => {
    expect(tableShape(6, 3, 2, true)).toEqual({ width: 4, copies: 2, parity: true });
    expect(shapeStocs(tableShape(6, 3, 2, true))).toBe(6);
    expect(tableShape(5, 3, 2, true).parity).toBeUndefined();
    expect(shapeStocs(tableShape(4, 1, 2, true))).toBe(4);
  });

  it('cut with parity: one copy of each data piece, R of the metadata, and the XOR of the data pieces', async () => {
    const f = cutTable(bytes, [1, 2, 3, 4, 5, 6], 3, 't', 2, true);
    expect(f.map((x) => x.stoc)).toEqual([1, 2, 3, 4, 5, 6]);
    const pieces = piecesOf(f, 't');
    expect(pieces.map((p) => p.copies.map((c) => c.stoc))).toEqual([[1], [2], [3], [4, 5]]);
    const p = parityOf(f)!;
    expect(p).toMatchObject({ stoc: 6, parity: true });
    const data = pieces.slice(0, 3).map((x) => bytes.subarray(x.offset, x.offset + x.size));
    expect(p.size).toBe(Math.max(...data.map((d) => d.length)));
    const store = await written(f);
    expect(store.get(6)!.equals(xorOf(data))).toBe(true);
    expect(parityBytes(bytes, f, 't').equals(xorOf(data))).toBe(true);
    expect(() => cutTable(bytes, [1, 2, 3, 4, 5], 3, 't', 2, true)).toThrow(/want 6/);
  });

  it('any one data piece lost or damaged is rebuilt from the parity and the others; two, or the parity with one, are not', async () => {
    const f = cutTable(bytes, [1, 2, 3, 4, 5, 6], 3, 't', 2, true);
    const store = await written(f);
    for (const lost of [1, 2, 3]) {
      expect((await readFragments(f, 't', reader(store, new Set([lost])))).equals(bytes), `data on StoC ${lost} down`).toBe(true);
    }
    const damaged = new Map(store);
    damaged.set(2, Buffer.from(store.get(2)!).fill(7, 10, 20));
    const bad: number[] = [];
    expect((await readFragments(f, 't', reader(damaged, new Set()), undefined, (x) => bad.push(x.stoc))).equals(bytes)).toBe(true);
    expect(bad).toEqual([2]);
    await expect(readFragments(f, 't', reader(store, new Set([1, 2])))).rejects.toThrow(/down/);
    await expect(readFragments(f, 't', reader(store, new Set([1, 6])))).rejects.toThrow(/down/);
    // The metadata has copies, not parity.
    expect((await readFragments(f, 't', reader(store, new Set([4, 1])))).equals(bytes)).toBe(true);
  });

  it('lost only beyond what parity rebuilds; copies missing count one data copy, R metadata copies and the parity', () => {
    const f = cutTable(bytes, [1, 2, 3, 4, 5, 6], 3, 't', 2, true);
    expect(tableLost(f, (s) => s === 2)).toBe(false);
    expect(tableLost(f, (s) => s === 2 || s === 6)).toBe(true);
    expect(tableLost(f, (s) => s === 1 || s === 3)).toBe(true);
    expect(tableLost(f, (s) => s === 4 || s === 5)).toBe(true);
    expect(tableLost(f, (s) => s === 4 || s === 6)).toBe(false);
    expect(copiesMissing(f, 2)).toBe(0);
    expect(copiesMissing(f, 2, (s) => s === 2)).toBe(1);
    expect(copiesMissing(f, 2, (s) => s === 6 || s === 4)).toBe(2);
  });
});
