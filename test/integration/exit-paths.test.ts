/**
 * A process with open fabrics ends cleanly however it ends: process.exit, an unref'd
 * fabric, GC of closed regions, or an uncaught exception (STYLE.md #10).
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, tlsEnv } from '../helpers/peer-process.js';

const SCRIPT = join(ROOT, 'dist', 'test', 'fixtures', 'exit-paths.js');

function run(mode: string) {
  return spawnSync(process.execPath, ['--expose-gc', SCRIPT, mode], {
    env: { ...process.env, ...tlsEnv('sm') }, timeout: 20_000, encoding: 'utf8',
  });
}

describe('exit paths with live fabrics', () => {
  it.each(['exit-with-open-fabric', 'unref', 'gc-regions'])('%s exits 0 without a signal', (mode) => {
    const r = run(mode);
    expect(r.error).toBeUndefined();
    expect(r.signal).toBeNull();
    expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
  });

  it('an uncaught exception exits 1 with the error, not a hang or a crash', () => {
    const r = run('uncaught');
    expect(r.signal).toBeNull();
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('user code failed');
  });
});
