import { describe, expect, it } from 'vitest';
import { ValueType, makeInternalKey } from '../../src/common/internal-key.js';
import { ManifestState, decodeEdit, emptyEdit, encodeEdit, type VersionEdit } from '../../src/log/version-edit.js';

function sample(): VersionEdit {
  const e = emptyEdit();
  e.nextFile = 2 ** 40;
  e.lastSequence = 123456789;
  e.removed.push({ level: 0, file: 7 }, { level: 3, file: 2 ** 33 });
  e.added.push({
    level: 1, file: 9, size: 16 << 20, entries: 12345,
    smallest: makeInternalKey(Buffer.from('a'), 5, ValueType.Put),
    largest: makeInternalKey(Buffer.from('m'.repeat(300)), 99, ValueType.Delete),
    fragments: [{ stoc: 0, offset: 0, size: 8 << 20 }, { stoc: 3, offset: 4096, size: 8 << 20 }],
  });
  e.boundLogs.push({ memtable: 4, log: 11 });
  e.releasedLogs.push(2, 3);
  e.dranges = [Buffer.from('g'), Buffer.alloc(0), Buffer.from('user\xff')];
  e.sessions = Buffer.from([1, 0]);
  return e;
}

describe('version edit', () => {
  it('round-trips every field, and an empty edit', () => {
    expect(decodeEdit(encodeEdit(sample()), 'MANIFEST')).toEqual(sample());
    expect(decodeEdit(encodeEdit(emptyEdit()), 'MANIFEST')).toEqual(emptyEdit());
  });

  it('reports truncations and unknown tags as corruption with where and offset', () => {
    const bytes = encodeEdit(sample());
    let caught = 0;
    for (let n = 1; n < bytes.length; n++) {
      try {
        decodeEdit(bytes.subarray(0, n), 'MANIFEST-000001@64');
      } catch (err) {
        expect((err as Error).message).toMatch(/MANIFEST-000001@64: version edit .* at offset \d+/);
        caught++;
      }
    }
    // Cuts that fall exactly between fields decode to a prefix of the edit; the MANIFEST's
    // record checksum (log framing) is what catches those.
    expect(caught).toBeGreaterThan(bytes.length * 0.8);
    const badTag = Buffer.from(bytes);
    badTag[1] = 99;
    expect(() => decodeEdit(badTag, 'M')).toThrow(/unknown tag 99 at offset 1/);
    expect(() => decodeEdit(Buffer.from([7]), 'M')).toThrow(/unsupported version 7/);
    expect(() => decodeEdit(Buffer.from([0]), 'M')).toThrow(/unsupported version 0/);
  });

  it('reads version 1 edits, which have no session table, and refuses one that claims it', () => {
    const v1 = Buffer.from([1, 1, 5, 2, 9]); // nextFile 5, lastSequence 9
    expect(decodeEdit(v1, 'M')).toEqual({ ...emptyEdit(), nextFile: 5, lastSequence: 9 });
    expect(() => decodeEdit(Buffer.from([1, 8, 2, 1, 0]), 'M')).toThrow(/tag 8, which version 1 does not have at offset 1/);
    expect(() => decodeEdit(Buffer.from([2, 9, 1, 1, 0x61]), 'M')).toThrow(/tag 9, which version 2 does not have at offset 1/);
    expect(decodeEdit(Buffer.from([3, 9, 1, 1, 0x61]), 'M').tranges).toEqual([Buffer.from('a')]);
    expect(() => decodeEdit(Buffer.from([3, 10, 1, 2]), 'M')).toThrow(/tag 10, which version 3 does not have at offset 1/);
  });

  it('fragment checksums and copies (version 5) round-trip; version 4 fragments have none; unknown fragment flags are corruption', () => {
    const added = (crc?: number) => ({ level: 1, file: 3, size: 10, entries: 1, smallest: Buffer.alloc(8), largest: Buffer.alloc(8),
      fragments: [{ stoc: 1, offset: 0, size: 10, ...(crc === undefined ? {} : { crc }) }, { stoc: 2, offset: 0, size: 10, ...(crc === undefined ? {} : { crc }) }] });
    const withCrc = { ...emptyEdit(), added: [added(0xfedcba98)] };
    expect(decodeEdit(encodeEdit(withCrc), 'M')).toEqual(withCrc);
    const without = { ...emptyEdit(), added: [added()] };
    expect(decodeEdit(encodeEdit(without), 'M')).toEqual(without);
    // A version-4 add-table: stoc, offset, size per fragment, no flags.
    const v4 = Buffer.from([4, 4, 1, 3, 10, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 1, 7, 0, 10]);
    expect(decodeEdit(v4, 'M').added[0].fragments).toEqual([{ stoc: 7, offset: 0, size: 10 }]);
    const v5 = Buffer.from(v4);
    v5[0] = 5;
    expect(() => decodeEdit(Buffer.concat([v5, Buffer.from([4])]), 'M')).toThrow(/fragment flags 4 at offset 28/);
    expect(() => decodeEdit(Buffer.concat([v5, Buffer.from([1, 1, 2])]), 'M')).toThrow(/ends inside a fragment checksum/);
    // The parity flag is version 6's: corruption in a version-5 edit.
    expect(() => decodeEdit(Buffer.concat([v5, Buffer.from([2])]), 'M')).toThrow(/fragment flags 2 at offset 28/);
    const v6 = Buffer.from(v5);
    v6[0] = 6;
    expect(decodeEdit(Buffer.concat([v6, Buffer.from([2])]), 'M').added[0].fragments).toEqual([{ stoc: 7, offset: 0, size: 10, parity: true }]);
    const parity = { ...emptyEdit(), added: [{ ...added(1), fragments: [...added(1).fragments, { stoc: 3, offset: 0, size: 10, crc: 5, parity: true }] }] };
    expect(decodeEdit(encodeEdit(parity), 'M')).toEqual(parity);
  });

  it('copies per Drange (version 4): one per Drange, each 1 to 1024, or corruption', () => {
    const e = { ...emptyEdit(), dranges: [Buffer.from('m'), Buffer.from('m\0')], copies: [1, 3, 1] };
    expect(decodeEdit(encodeEdit(e), 'M')).toEqual(e);
    const state = new ManifestState();
    state.apply(e);
    state.apply({ ...emptyEdit(), nextFile: 3 });
    expect(state.snapshot().copies).toEqual([1, 3, 1]);
    state.apply({ ...emptyEdit(), dranges: [Buffer.from('q')] }); // new bounds without copies: one each
    expect(state.snapshot().copies).toBeUndefined();
    expect(() => decodeEdit(encodeEdit({ ...e, copies: [1, 3] }), 'M')).toThrow(/gives 2 Dranges copies, not 3 at offset/);
    expect(() => decodeEdit(encodeEdit({ ...e, copies: [1, 0, 1] }), 'M')).toThrow(/gives a Drange 0 active memtables \(1 in all; at most 1024\) at offset/);
    expect(() => decodeEdit(encodeEdit({ ...e, copies: [1, 5000, 1] }), 'M')).toThrow(/gives a Drange 5000 active memtables/);
    // Many Dranges of many copies each: bounded in all, before any memtable is made of them.
    const many = { ...emptyEdit(), dranges: Array.from({ length: 999 }, (_, i) => Buffer.from(`k${String(i).padStart(4, '0')}`)), copies: new Array(1000).fill(1000) };
    expect(() => decodeEdit(encodeEdit(many), 'M')).toThrow(/gives a Drange 1000 active memtables \(2000 in all; at most 1024\)/);
    expect(() => decodeEdit(encodeEdit({ ...many, copies: new Array(2000).fill(1) }), 'M')).toThrow(/claims 2000 Dranges' copies/);
  });

  it('a MANIFEST\'s state keeps the last session table and states it in a snapshot', () => {
    const state = new ManifestState();
    state.apply({ ...emptyEdit(), sessions: Buffer.from([1, 0]) });
    state.apply({ ...emptyEdit(), nextFile: 3 });
    expect(state.snapshot().sessions).toEqual(Buffer.from([1, 0]));
    state.apply({ ...emptyEdit(), sessions: Buffer.from([1, 0, 0]) });
    expect(decodeEdit(encodeEdit(state.snapshot()), 'M').sessions).toEqual(Buffer.from([1, 0, 0]));
  });
});
