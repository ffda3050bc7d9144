/** The bench's page-cache warm-up reads every file of a store, however large (runner.ts warmPageCache). */
import { closeSync, mkdirSync, openSync, ftruncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { warmPageCache } from '../../bench/ycsb/runner.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-warm-');

describe('warmPageCache', () => {
  it('reads a file larger than a Buffer can hold (LMDB keeps one), and every file below the directory', () => {
    const dir = tempDir();
    mkdirSync(join(dir, 'sub'));
    writeFileSync(join(dir, 'sub', 'small'), Buffer.alloc(1000, 1));
    const big = join(dir, 'data.mdb');
    const fd = openSync(big, 'w');
    ftruncateSync(fd, 2 ** 31 + 4096); // sparse: no disk, and past Node's 2 GiB read-whole limit
    closeSync(fd);
    expect(warmPageCache(dir)).toBe(2 ** 31 + 4096 + 1000);
  }, 60_000);
});
