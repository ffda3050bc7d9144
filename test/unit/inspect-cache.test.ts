/** `nova tool cache dump|check` as library functions (src/tools/inspect.ts) on the golden cache logs, whole, corrupted and torn. */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkFile, dumpFile } from '../../src/tools/inspect.js';
import { tempDirs } from '../helpers/temp.js';

const FIXTURES = join(import.meta.dirname, '..', 'fixtures', 'format', 'v1');
const temp = tempDirs('nova-inspect-cache-');

describe('nova tool cache', () => {
  it('dumps every record of a cache log and checks it', () => {
    const file = join(FIXTURES, 'cache-v1.log');
    expect(dumpFile('cache', file)).toEqual([
      `cache log ${file}: 115 bytes, 5 records`,
      'set "user1" = "Ann" (fragment 3, config 7)',
      'delete "user2"',
      'dirty list of fragment 3 started with its marker (config 8)',
      'dirty list of fragment 3 += "user1"',
      'dirty list of fragment 3 processed',
    ]);
    expect(checkFile('cache', file)).toMatch(/OK \(cache log .*: 115 bytes, 5 records\)/);
  });

  it('names the offset of a damaged record, and reports a torn tail without failing', () => {
    expect(() => checkFile('cache', join(FIXTURES, 'cache-v1.corrupt.log'))).toThrow(/cache-v1\.corrupt\.log: offset 16/);
    const torn = join(temp(), 'cache.log');
    const bytes = readFileSync(join(FIXTURES, 'cache-v1.log'));
    writeFileSync(torn, bytes.subarray(0, bytes.length - 2));
    expect(checkFile('cache', torn)).toMatch(/4 records; .*offset 102: .*torn tail/);
  });
});
