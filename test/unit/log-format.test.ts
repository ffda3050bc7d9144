/**
 * Log framing: round trips across block boundaries, torn tails at every cut of the last
 * record, and corruption before a valid record reported with file and offset.
 */
import { describe, expect, it } from 'vitest';
import { LOG_BLOCK, LOG_HEADER, LogFramer, readLog, readLogPrefix } from '../../src/log/log-format.js';

function record(i: number, size: number): Buffer {
  const b = Buffer.alloc(size);
  for (let j = 0; j < size; j++) b[j] = (i * 31 + j) & 0xff;
  return b;
}

function write(sizes: number[]): { file: Buffer; records: Buffer[]; ends: number[] } {
  const f = new LogFramer();
  const parts: Buffer[] = [];
  const records: Buffer[] = [];
  const ends: number[] = [];
  let total = 0;
  sizes.forEach((size, i) => {
    const r = record(i, size);
    records.push(r);
    const bytes = Buffer.from(f.frame(r));
    parts.push(bytes);
    total += bytes.length;
    ends.push(total);
  });
  return { file: Buffer.concat(parts), records, ends };
}

const SIZES = [0, 1, 100, LOG_BLOCK - LOG_HEADER, LOG_BLOCK - LOG_HEADER - 3, 10, 3 * LOG_BLOCK + 5, 7, 1000, 40_000];

describe('log format', () => {
  it('round-trips records of every shape, including ones spanning blocks and block padding', () => {
    const { file, records } = write(SIZES);
    const got = readLog(file, 'test.log');
    expect(got.tornAt).toBeUndefined();
    expect(got.validBytes).toBe(file.length);
    expect(got.records).toEqual(records);
  });

  it('appends to an existing file from its size', () => {
    const a = write([100, 200]);
    const f = new LogFramer(a.file.length);
    const more = Buffer.from(f.frame(record(9, 50_000)));
    expect(readLog(Buffer.concat([a.file, more]), 'x.log').records).toEqual([...a.records, record(9, 50_000)]);
  });

  it('treats every cut of the last record as a torn tail, keeping the records before it', () => {
    const { file, records, ends } = write([100, 5000, 3 * LOG_BLOCK]);
    const lastStart = ends[1];
    for (let cut = lastStart; cut < file.length; cut += 997) {
      const got = readLog(file.subarray(0, cut), 'torn.log');
      expect(got.records).toEqual(records.slice(0, 2));
      if (cut > lastStart) expect(got.tornAt).toBe(lastStart);
      expect(got.validBytes).toBe(lastStart);
    }
    // A garbled last fragment with nothing after it is torn too.
    const garbled = Buffer.from(file);
    garbled[file.length - 3] ^= 1;
    expect(readLog(garbled, 'torn.log').tornAt).toBe(lastStart);
  });

  it('reports damage before a valid record as corruption with file and offset', () => {
    const { file } = write([100, 200, 300, 2 * LOG_BLOCK, 50]);
    for (const at of [0, 3, 4, 6, 7, 50, 110, 400]) {
      const bad = Buffer.from(file);
      bad[at] ^= 0x10;
      expect(() => readLog(bad, 'bad.log'), `byte ${at}`).toThrow(/bad\.log: .* at offset \d+/);
    }
  });

  it('treats a zeroed block inside a record, or before valid fragments, as damage', () => {
    const { file, records } = write([100, 3 * LOG_BLOCK, 50]);
    const zeroed = Buffer.from(file);
    zeroed.fill(0, LOG_BLOCK, 2 * LOG_BLOCK); // the middle of the long record
    expect(() => readLog(zeroed, 'z.log')).toThrow(/z\.log: zeroed block before valid fragments at offset \d+/);
    // Zeros from inside the last record to the end: a torn tail.
    const cut = Buffer.from(file);
    cut.fill(0, 2 * LOG_BLOCK);
    const got = readLog(cut, 'z.log');
    expect(got.records).toEqual(records.slice(0, 1));
    expect(got.tornAt).toBeDefined();
  });

  it('skips zero-filled tails of blocks (preallocated files)', () => {
    const { file, records } = write([100, 200]);
    const padded = Buffer.concat([file, Buffer.alloc(LOG_BLOCK)]);
    const got = readLog(padded, 'pre.log');
    expect(got.records).toEqual(records);
    expect(got.tornAt).toBeUndefined();
  });

  it('readLogPrefix keeps the whole records before a hole and says where it stopped', () => {
    const { file, records, ends } = write([100, 200, 300, 2 * LOG_BLOCK, 50]);
    // A hole where record 2 was (an append in flight when the writer stopped), whole records after it.
    const holed = Buffer.from(file);
    holed.fill(0, ends[1], ends[2]);
    expect(() => readLog(holed, 'h.log')).toThrow(/h\.log: .* at offset \d+/);
    const got = readLogPrefix(holed);
    expect(got.records).toEqual(records.slice(0, 2));
    expect(got.validBytes).toBe(ends[1]);
    expect(got.damage?.offset).toBe(ends[1]);
    // A flipped byte inside record 3 (it spans blocks): records 0..2 are kept.
    const flipped = Buffer.from(file);
    flipped[ends[2] + LOG_HEADER + 10] ^= 1;
    expect(readLogPrefix(flipped).records).toEqual(records.slice(0, 3));
    // Whole and torn files read as readLog reads them.
    expect(readLogPrefix(file)).toEqual(readLog(file, 'f.log'));
    const torn = file.subarray(0, file.length - 3);
    expect(readLogPrefix(torn)).toEqual(readLog(torn, 't.log'));
  });
});
