/**
 * A StoC's fences file (doc/format/fences.md): round trip, and every kind of damage reported
 * as CORRUPTION naming the file and offset; the range of a file name.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checksum32 } from '../../src/common/checksum.js';
import { decodeFences, encodeFences, Fences, FENCES_FILE, rangeOfFile } from '../../src/stoc/fences.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-fences-');

describe('StoC fences', () => {
  it('round-trips, sorted by range, with a checksum line', () => {
    const m = new Map([[12, 40], [1, 7]]);
    const text = encodeFences(m);
    expect(text).toMatch(/^nova-fences 1\n1 7\n12 40\nxxh32 [0-9a-f]{8}\n$/);
    expect(decodeFences(text, 'F')).toEqual(m);
    expect(decodeFences(encodeFences(new Map()), 'F')).toEqual(new Map());
  });

  it('reports damage as CORRUPTION with the file and the offset', () => {
    const text = encodeFences(new Map([[1, 7], [2, 9]]));
    const bad = (t: string) => () => decodeFences(t, '/d/FENCES');
    expect(bad(text.replace('2 9', '2 8'))).toThrow(/\/d\/FENCES: checksum mismatch at byte 22;/);
    expect(bad(text.slice(0, text.length - 5))).toThrow(/no checksum line at the end \(a torn write\?\)/);
    expect(bad('nova-fences 2\n' + text.slice(14))).toThrow(/not a fences file of version 1 .* at byte 0/);
    expect(bad('')).toThrow(/not a fences file/);
    // A bad line under a checksum that matches it: the line is named, with its offset.
    const body = 'nova-fences 1\n1 7\n2 x\n';
    const forged = `${body}xxh32 ${checksum32(Buffer.from(body)).toString(16).padStart(8, '0')}\n`;
    expect(bad(forged)).toThrow(/bad line "2 x" at byte 18/);
  });

  it('raises durably and only upwards', () => {
    const dir = tempDir();
    const f = new Fences(dir);
    expect(f.epoch(3)).toBe(0);
    expect(f.raise(3, 5)).toBe(true);
    expect(f.raise(3, 5)).toBe(false);
    expect(f.raise(3, 4)).toBe(false);
    expect(new Fences(dir).epoch(3)).toBe(5);
    writeFileSync(join(dir, FENCES_FILE), 'junk');
    expect(() => new Fences(dir)).toThrow(/FENCES: not a fences file/);
  });

  it('reads the range from the names of a range\'s files, and nothing from other names', () => {
    expect(rangeOfFile('r1-000001.log')).toBe(1);
    expect(rangeOfFile('r42-000123.sst')).toBe(42);
    expect(rangeOfFile('r7-000002.manifest')).toBe(7);
    for (const n of ['r-1.log', 'rx-1.log', 'plain.log', 'R1-000001.log', 'r12345678901234567-1.log', 'r1']) expect(rangeOfFile(n)).toBeUndefined();
  });
});
