/**
 * Temporary directories of one test file, removed after each test (`after: 'each'`, the
 * default) or once the file's tests are done (`after: 'all'`). Call at the top of the file:
 * it registers the hook. A directory may take another prefix, to say what it holds.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach } from 'vitest';

export function tempDirs(prefix: string, after: 'each' | 'all' = 'each'): (otherPrefix?: string) => string {
  const dirs: string[] = [];
  (after === 'each' ? afterEach : afterAll)(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  return (otherPrefix) => {
    const d = mkdtempSync(join(tmpdir(), otherPrefix ?? prefix));
    dirs.push(d);
    return d;
  };
}
