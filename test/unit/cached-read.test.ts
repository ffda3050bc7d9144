/**
 * readCached (src/common/cached-read.ts): a read served from the page cache on the spot returns
 * exactly the file's bytes, stops at the file's end, and says -1 for what it cannot do.
 */
import { closeSync, openSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readCached } from '../../src/common/cached-read.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-cached-read-');

describe('readCached', () => {
  it('reads a just-written (cached) file exactly, short at its end, 0 past it, and -1 for what it cannot read', () => {
    const path = join(tempDir(), 'f');
    const bytes = Buffer.from(Array.from({ length: 100_000 }, (_, i) => (i * 31) % 251));
    writeFileSync(path, bytes);
    const fd = openSync(path, 'r');
    try {
      for (const [position, length] of [[0, 4096], [12_345, 8000], [99_000, 4096], [100_000, 10], [200_000, 10]]) {
        const into = Buffer.alloc(length, 0xee);
        const n = readCached(fd, into, position);
        const expected = bytes.subarray(position, position + length);
        expect(n, `${position}+${length}`).toBe(expected.length);
        expect(into.subarray(0, n).equals(expected)).toBe(true);
      }
      const view = Buffer.alloc(8192).subarray(100, 4196); // a view into a larger buffer reads into the view only
      expect(readCached(fd, view, 0)).toBe(4096);
      expect(view.equals(bytes.subarray(0, 4096))).toBe(true);
      expect(readCached(fd, Buffer.alloc(16), -1)).toBe(-1);
      expect(readCached(fd, Buffer.alloc(0), 0)).toBe(-1);
    } finally {
      closeSync(fd);
    }
    expect(readCached(1_000_000, Buffer.alloc(16), 0)).toBe(-1); // not a file descriptor
  });
});
