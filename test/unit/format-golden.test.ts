/**
 * Formats pinned by golden files (test/fixtures/format/v1/): each format version's bytes as
 * they were first written, and a corrupted copy of each. Today's encoder must write the same
 * bytes (a format change that is not versioned fails here), today's reader must read them,
 * and the corrupted copy must fail with CORRUPTION naming the file and offset. The worked
 * examples in doc/format/ are generated from the same bytes, so they cannot drift.
 * NOVA_REWRITE=1 writes the fixtures and the examples anew: only for a new format version.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { ValueType, makeInternalKey } from '../../src/common/internal-key.js';
import { LogFramer, readLog } from '../../src/log/log-format.js';
import { decodeEdit, encodeEdit, type VersionEdit } from '../../src/log/version-edit.js';
import { WriteBatch, decodeBatch } from '../../src/log/write-batch.js';
import { FrameReader, encodeFrame } from '../../src/net/frames.js';
import { readFooter } from '../../src/sstable/format.js';
import { TableBuilder } from '../../src/sstable/table-builder.js';
import { TableReader } from '../../src/sstable/table-reader.js';
import { CACHE_FRAME, CACHE_LOG_HEADER, cacheLogHeader, encodeCacheRecord, readCacheLog, type CacheRecord } from '../../src/stoc/cache-log.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const FIXTURES = join(ROOT, 'test', 'fixtures', 'format', 'v1');
const REWRITE = process.env.NOVA_REWRITE === '1';

/** `bytes` as lines of `offset  hex  label`, 16 bytes a line, a region's label on its first line. */
function dump(bytes: Buffer, regions: Array<[number, number, string]>): string {
  const lines: string[] = [];
  for (const [start, end, label] of regions) {
    for (let at = start; at < end; at += 16) {
      const hex = [...bytes.subarray(at, Math.min(end, at + 16))].map((b) => b.toString(16).padStart(2, '0')).join(' ');
      lines.push(`${String(at).padStart(5)}  ${hex.padEnd(47)}  ${at === start ? label : ''}`.trimEnd());
    }
  }
  return lines.join('\n');
}

function varint(b: Buffer, at: number): [number, number] {
  let v = 0;
  let shift = 0;
  for (;;) {
    const x = b[at++];
    v += (x & 0x7f) * 2 ** shift;
    if (x < 0x80) return [v, at];
    shift += 7;
  }
}

interface Golden {
  file: string;
  /** The bytes as today's encoder writes them; absent for an older version it no longer writes (read only). */
  make?(): Buffer;
  /** Reads `bytes` (named `name`) and checks what they hold. */
  read(bytes: Buffer, name: string): void;
  /** Where the corrupted copy has a byte flipped. */
  flipAt: (bytes: Buffer) => number;
  /** Reads the corrupted copy: must throw. */
  readCorrupt(bytes: Buffer, name: string): void;
  /** The worked example: doc file, and the annotated dump of the bytes (today's version only). */
  example?: { doc: string; marker: string; dump(bytes: Buffer): string };
}

const a1 = makeInternalKey(Buffer.from('a'), 1, ValueType.Put);
const b2 = makeInternalKey(Buffer.from('b'), 2, ValueType.Put);

function batchV2(): Buffer {
  const b = new WriteBatch();
  b.put(Buffer.from('k'), Buffer.from('v')).delete(Buffer.from('gone'));
  return Buffer.from(b.encode(5, 100, { idHigh: 0x1234, idLow: 0x5678, seq: 3, floor: 2, open: false }));
}

function batchPlain(): Buffer {
  const b = new WriteBatch();
  b.put(Buffer.from('z'), Buffer.from('last'));
  return Buffer.from(b.encode(5, 102));
}

function framed(records: Buffer[]): Buffer {
  const f = new LogFramer();
  return Buffer.concat(records.map((r) => Buffer.from(f.frame(r))));
}

const EDIT: VersionEdit = {
  nextFile: 12, lastSequence: 345,
  removed: [{ level: 0, file: 7 }],
  added: [{ level: 1, file: 11, size: 4096, entries: 20, smallest: a1, largest: b2, fragments: [{ stoc: 2, offset: 0, size: 4096 }] }],
  boundLogs: [{ memtable: 9, log: 9 }], releasedLogs: [8], dranges: [Buffer.from('m')],
};
/** Version 3 adds the Tranges. */
const EDIT3: VersionEdit = { ...EDIT, tranges: [Buffer.from('f'), Buffer.from('m'), Buffer.from('t')] };
/** Version 4 adds copies per Drange: [m, m\0) is one key's, duplicated three times. */
const EDIT4: VersionEdit = {
  ...EDIT, dranges: [Buffer.from('m'), Buffer.from('m\0')], tranges: [Buffer.from('f'), Buffer.from('m'), Buffer.from('m\0'), Buffer.from('t')], copies: [1, 3, 1],
};
/** Version 5 adds fragment checksums: table 11 in two copies, its metadata apart, on four StoCs. */
const EDIT5: VersionEdit = {
  ...EDIT4,
  added: [{
    ...EDIT.added[0],
    fragments: [
      { stoc: 2, offset: 0, size: 3000, crc: 0x01234567 }, { stoc: 3, offset: 3000, size: 1096, crc: 0x89abcdef },
      { stoc: 4, offset: 0, size: 3000, crc: 0x01234567 }, { stoc: 5, offset: 3000, size: 1096, crc: 0x89abcdef },
    ],
  }],
};

/** Version 6 adds parity: table 11's data in two pieces (StoCs 2 and 3), their parity on 6, the metadata on 4 and 5. */
const EDIT6: VersionEdit = {
  ...EDIT4,
  added: [{
    ...EDIT.added[0],
    fragments: [
      { stoc: 2, offset: 0, size: 1600, crc: 0x01234567 }, { stoc: 3, offset: 1600, size: 1400, crc: 0x02468ace },
      { stoc: 4, offset: 3000, size: 1096, crc: 0x89abcdef }, { stoc: 5, offset: 3000, size: 1096, crc: 0x89abcdef },
      { stoc: 6, offset: 0, size: 1600, crc: 0x13579bdf, parity: true },
    ],
  }],
};

const packr = new Packr({ useRecords: false, moreTypes: false });

/** A MANIFEST golden of two edits, `first` and a release of log 9: how it is read, and corrupted. */
function manifestEdits(first: VersionEdit): Pick<Golden, 'read' | 'flipAt' | 'readCorrupt'> {
  return {
    read: (bytes, name) => {
      const { records } = readLog(bytes, name);
      expect(records.length).toBe(2);
      expect(decodeEdit(records[0], name)).toEqual({ ...first });
      expect(decodeEdit(records[1], name)).toMatchObject({ releasedLogs: [9], nextFile: 13 });
    },
    flipAt: () => 7 + 2,
    readCorrupt: (bytes, name) => readLog(bytes, name),
  };
}

const GOLDEN: Golden[] = [
  {
    file: 'table.sst',
    make: () => {
      const t = new TableBuilder();
      t.add(a1, Buffer.from('x'));
      t.add(b2, Buffer.from('yy'));
      return Buffer.from(t.finish().bytes);
    },
    read: (bytes, name) => {
      const r = new TableReader(bytes, name);
      expect(r.entries).toBe(2);
      expect(r.get(Buffer.from('a'), 10)).toMatchObject({ type: 'put', value: Buffer.from('x') });
      expect(r.get(Buffer.from('b'), 10)).toMatchObject({ type: 'put', value: Buffer.from('yy') });
      expect(readFooter(bytes, name).version).toBe(1);
    },
    flipAt: () => 3, // the first key's first byte, in the data block
    readCorrupt: (bytes, name) => new TableReader(bytes, name).get(Buffer.from('a'), 10),
    example: {
      doc: 'doc/format/sstable.md', marker: 'sstable',
      dump: (bytes) => {
        const f = readFooter(bytes, 'example');
        const dataEnd = f.filter.offset - 5;
        const regions: Array<[number, number, string]> = [];
        let at = 0;
        for (let i = 0; i < 2; i++) {
          const start = at;
          const [shared, a] = varint(bytes, at);
          const [unshared, b] = varint(bytes, a);
          const [valueLength, c] = varint(bytes, b);
          at = c + unshared + valueLength;
          regions.push([start, at, `entry: shared ${shared}, unshared ${unshared}, value ${valueLength} | key (user key, u64 trailer seq*256+type) | value`]);
        }
        regions.push([at, dataEnd, 'restart offsets (u32 each) | u32 count']);
        regions.push([dataEnd, f.filter.offset, 'trailer: u8 compression | u32 xxh32']);
        regions.push([f.filter.offset, f.filter.offset + f.filter.size, 'filter: bit array | u8 probes']);
        regions.push([f.filter.offset + f.filter.size, f.index.offset, 'trailer']);
        regions.push([f.index.offset, f.index.offset + f.index.size, 'index block: last key of the data block -> varint offset | varint size']);
        regions.push([f.index.offset + f.index.size, bytes.length - 48, 'trailer']);
        regions.push([bytes.length - 48, bytes.length, 'footer: index handle, filter handle, entries, version, xxh32, "SST1" "NOVA"']);
        return dump(bytes, regions);
      },
    },
  },
  {
    file: 'log-batch-v2.log',
    make: () => framed([batchV2(), batchPlain()]),
    read: (bytes, name) => {
      const { records, tornAt } = readLog(bytes, name);
      expect(tornAt).toBeUndefined();
      expect(records.length).toBe(2);
      const b = decodeBatch(records[0], name);
      expect(b).toMatchObject({ memtableId: 5, firstSequence: 100, session: { idHigh: 0x1234, idLow: 0x5678, seq: 3, floor: 2 } });
      expect(b.entries.map((e) => [e.type, e.key.toString(), e.value.toString()])).toEqual([[ValueType.Put, 'k', 'v'], [ValueType.Delete, 'gone', '']]);
      expect(decodeBatch(records[1], name)).toMatchObject({ firstSequence: 102, entries: [{ key: Buffer.from('z'), value: Buffer.from('last') }] });
      expect(decodeBatch(records[1], name).session).toBeUndefined();
    },
    flipAt: () => 7 + 1, // the first record's memtable id: damage before a whole record
    readCorrupt: (bytes, name) => readLog(bytes, name),
    example: {
      doc: 'doc/format/log.md', marker: 'log',
      dump: (bytes) => {
        const r1 = batchV2().length;
        const regions: Array<[number, number, string]> = [
          [0, 7, 'fragment header: u32 xxh32 | u16 length | u8 type (1 FULL)'],
          [7, 8, 'write batch: u8 version (2)'],
          [8, 12, 'u32 memtableId'],
          [12, 20, 'u64 firstSequence'],
          [20, 24, 'u32 count'],
          [24, 25, 'u8 flags (bit 0: session)'],
          [25, 57, 'session: u64 idHigh | u64 idLow | u64 write number | u64 floor'],
          [57, 7 + r1, 'entries: put k=v, delete gone'],
          [7 + r1, 14 + r1, 'fragment header'],
          [14 + r1, bytes.length, 'write batch v2, flags 0 (no session): put z=last'],
        ];
        return dump(bytes, regions);
      },
    },
  },
  {
    file: 'write-batch-v1.bin',
    // Version 1 (no flags byte, no session), as logs written before version 2 hold it.
    make: () => Buffer.from('01' + '07000000' + '0a00000000000000' + '02000000' + '01026b31027631' + '00026b32', 'hex'),
    read: (bytes, name) => {
      const b = decodeBatch(bytes, name);
      expect(b).toMatchObject({ memtableId: 7, firstSequence: 10 });
      expect(b.session).toBeUndefined();
      expect(b.entries.map((e) => [e.type, e.key.toString(), e.value.toString()])).toEqual([[ValueType.Put, 'k1', 'v1'], [ValueType.Delete, 'k2', '']]);
    },
    flipAt: () => 13, // the count
    readCorrupt: (bytes, name) => decodeBatch(bytes, name),
    example: {
      doc: 'doc/format/log.md', marker: 'write-batch-v1',
      dump: (bytes) => dump(bytes, [[0, 1, 'u8 version (1)'], [1, 5, 'u32 memtableId'], [5, 13, 'u64 firstSequence'],
        [13, 17, 'u32 count'], [17, bytes.length, 'entries: put k1=v1, delete k2']]),
    },
  },
  // Version 2, as it was written: today's reader must still read it.
  { file: 'manifest-edits-v2.log', ...manifestEdits(EDIT) },
  // Version 3, as it was written.
  { file: 'manifest-edits-v3.log', ...manifestEdits(EDIT3) },
  // Version 4, as it was written.
  { file: 'manifest-edits-v4.log', ...manifestEdits(EDIT4) },
  // Version 5, as it was written.
  { file: 'manifest-edits-v5.log', ...manifestEdits(EDIT5) },
  {
    file: 'manifest-edits-v6.log',
    make: () => framed([encodeEdit(EDIT6), encodeEdit({ removed: [], added: [], boundLogs: [], releasedLogs: [9], nextFile: 13 })]),
    ...manifestEdits(EDIT6),
    example: {
      doc: 'doc/format/manifest.md', marker: 'manifest',
      dump: (bytes) => {
        const e1 = encodeEdit(EDIT6).length;
        return dump(bytes, [[0, 7, 'fragment header (log format)'], [7, 7 + e1, 'version edit: tagged fields (the grammar above)'],
          [7 + e1, 14 + e1, 'fragment header'], [14 + e1, bytes.length, 'version edit: released log 9, next file 13']]);
      },
    },
  },
  {
    file: 'tcp-frame.bin',
    make: () => encodeFrame(packr.pack([[1, 'put', [3, Buffer.from('k'), Buffer.from('v'), 0x1234, 0x5678, 3, 2, 0]]])),
    read: (bytes, name) => {
      const payloads = new FrameReader(name).push(bytes);
      expect(payloads.length).toBe(1);
      expect(packr.unpack(payloads[0])).toEqual([[1, 'put', [3, Buffer.from('k'), Buffer.from('v'), 0x1234, 0x5678, 3, 2, 0]]]);
    },
    flipAt: (bytes) => bytes.length - 1,
    readCorrupt: (bytes, name) => new FrameReader(name).push(bytes),
    example: {
      doc: 'doc/format/wire.md', marker: 'tcp-frame',
      dump: (bytes) => dump(bytes, [[0, 4, 'u32 magic "NVCF"'], [4, 8, 'u8 version (1), three zero bytes'], [8, 12, 'u32 payload length'],
        [12, 16, 'u32 xxh32(payload)'], [16, bytes.length, 'msgpack: [[id 1, "put", [configId 3, key, value, idHigh, idLow, write 3, floor 2, open 0]]]']]),
    },
  },
];

/** A Gemini cache log: an entry, a delete, and a dirty list processed by recovery. */
const CACHE_RECORDS: CacheRecord[] = [
  { type: 'set', fragment: 3, configId: 7, key: Buffer.from('user1'), value: Buffer.from('Ann') },
  { type: 'delete', key: Buffer.from('user2') },
  { type: 'dirtyInit', fragment: 3, configId: 8 },
  { type: 'dirtyAdd', fragment: 3, key: Buffer.from('user1') },
  { type: 'dirtyDone', fragment: 3 },
];
const CACHE_LABELS = ['SET fragment 3, configId 7, user1=Ann', 'DELETE user2', 'DIRTY_INIT fragment 3, configId 8', 'DIRTY_ADD fragment 3, user1', 'DIRTY_DONE fragment 3'];

const cacheRead = (bytes: Buffer, name: string): void => {
  const r = readCacheLog(bytes, name);
  expect(r.tornTail).toBeUndefined();
  expect(r.records).toEqual(CACHE_RECORDS);
};

// Version 1, as it was written: today's reader must still read it (and the store rewrites it as version 2).
GOLDEN.push({
  file: 'cache-v1.log',
  read: cacheRead,
  flipAt: () => CACHE_LOG_HEADER + 8 + 2,
  readCorrupt: (bytes, name) => readCacheLog(bytes, name),
});

GOLDEN.push({
  file: 'cache-v2.log',
  make: () => Buffer.concat([cacheLogHeader(), ...CACHE_RECORDS.map(encodeCacheRecord)]),
  read: cacheRead,
  // Inside the first record's length, with records after it: corruption, not a torn tail.
  flipAt: () => CACHE_LOG_HEADER + 1,
  readCorrupt: (bytes, name) => readCacheLog(bytes, name),
  example: {
    doc: 'doc/format/cache.md', marker: 'cache',
    dump: (bytes) => {
      const regions: Array<[number, number, string]> = [[0, 8, 'magic "NOVACACH"'], [8, 12, 'u32 version (2)'], [12, 16, 'u32 xxh32 of the 12 bytes before']];
      let at = CACHE_LOG_HEADER;
      CACHE_RECORDS.forEach((r, i) => {
        const size = encodeCacheRecord(r).length;
        regions.push([at, at + CACHE_FRAME, `frame: u32 length (${size - CACHE_FRAME}) | u32 xxh32(length) | u32 xxh32(body)`], [at + CACHE_FRAME, at + size, CACHE_LABELS[i]!]);
        at += size;
      });
      return dump(bytes, regions);
    },
  },
});

function corrupted(bytes: Buffer, at: number): Buffer {
  const c = Buffer.from(bytes);
  c[at] ^= 0x40;
  return c;
}

function corruptName(file: string): string {
  const dot = file.indexOf('.');
  return `${file.slice(0, dot)}.corrupt${file.slice(dot)}`;
}

describe.each(GOLDEN)('golden $file', (g) => {
  const path = join(FIXTURES, g.file);
  const badPath = join(FIXTURES, corruptName(g.file));
  if (REWRITE && g.make) {
    mkdirSync(FIXTURES, { recursive: true });
    const bytes = g.make();
    writeFileSync(path, bytes);
    writeFileSync(badPath, corrupted(bytes, g.flipAt(bytes)));
  }

  it('is present, and today\'s encoder writes exactly its bytes', () => {
    expect(existsSync(path), `${path}: run NOVA_REWRITE=1 only when adding a format version`).toBe(true);
    if (g.make) expect(g.make().equals(readFileSync(path)), `${g.file}: the encoder's bytes changed; a format change needs a new version`).toBe(true);
  });

  it('reads back what it holds', () => {
    g.read(readFileSync(path), path);
  });

  it('its corrupted copy fails with CORRUPTION naming the file and offset', () => {
    const bad = readFileSync(badPath);
    let err: unknown;
    try {
      g.readCorrupt(bad, badPath);
    } catch (e) {
      err = e;
    }
    expect(err, 'no error').toBeDefined();
    expect(err).toMatchObject({ code: 'CORRUPTION' });
    expect((err as Error).message).toContain(badPath);
    expect((err as Error).message).toMatch(/offset \d+/);
  });

  const example = g.example;
  if (example) it('the worked example in its doc is generated from these bytes', () => {
    const doc = join(ROOT, example.doc);
    const text = readFileSync(doc, 'utf8');
    const begin = `<!-- example:${example.marker}:begin -->\n`;
    const end = `<!-- example:${example.marker}:end -->`;
    const i = text.indexOf(begin);
    const j = text.indexOf(end);
    expect(i, `${example.doc} lacks the markers of example ${example.marker}`).toBeGreaterThanOrEqual(0);
    const want = text.slice(0, i + begin.length) + '```\n' + example.dump(readFileSync(path)) + '\n```\n' + text.slice(j);
    if (REWRITE) writeFileSync(doc, want);
    else expect(text, `${example.doc}: the example is stale (NOVA_REWRITE=1 regenerates it)`).toBe(want);
  });
});
