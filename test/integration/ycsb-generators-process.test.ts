/**
 * The scrambled Zipfian draws the same keys in another process (the bench's client processes
 * must agree on the key order): the built generator run in a child.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Random, ScrambledZipfianChooser } from '../../bench/ycsb/generators.js';
import { ROOT } from '../helpers/peer-process.js';

describe('ycsb generators in another process', () => {
  it('the scrambled Zipfian draws the same keys in a child process', () => {
    const s = new ScrambledZipfianChooser(new Random(42), 100_000);
    const mine = Array.from({ length: 50 }, () => s.next(100_000));
    const script = `import { Random, ScrambledZipfianChooser } from '${join(ROOT, 'dist', 'bench', 'ycsb', 'generators.js')}';
      const s = new ScrambledZipfianChooser(new Random(42), 100_000);
      console.log(JSON.stringify(Array.from({ length: 50 }, () => s.next(100_000))));`;
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(child.stderr).toBe('');
    expect(JSON.parse(child.stdout)).toEqual(mine);
  });
});
