/**
 * A local cluster's process control: a component known by its directory (a real child process).
 */
import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { componentDir, isRunning } from '../../src/control/cluster-control.js';

describe('isRunning', () => {
  it('knows a component by its directory, so a reused pid is not taken for it', async () => {
    const home = componentDir('/tmp/nova-cluster-test', 'stoc', 2);
    expect(home).toBe('/tmp/nova-cluster-test/stoc-2');
    expect(componentDir('/tmp/nova-cluster-test', 'coordinator', 1)).toBe('/tmp/nova-cluster-test/coordinator');
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 20000)', 'stoc', '--dir', home]);
    try {
      await new Promise((r) => child.once('spawn', r));
      expect(isRunning(child.pid!, home)).toBe(true);
      // Another component's directory (another cluster's, or a sibling's) is not this process.
      expect(isRunning(child.pid!, componentDir('/tmp/nova-cluster-other', 'stoc', 2))).toBe(false);
      expect(isRunning(child.pid!, componentDir('/tmp/nova-cluster-test', 'stoc', 1))).toBe(false);
    } finally {
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    }
    expect(isRunning(child.pid!, home)).toBe(false);
  });
});
