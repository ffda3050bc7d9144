/**
 * Tests of `--cap` on the machine's cgroups: where the caps can be applied, the test goes on;
 * where they cannot (no root, no cgroups), it checks that `nova up` refuses them before anything
 * starts, so the test proves something either way.
 */
import { expect } from 'vitest';
import { readClusterFile, up } from '../../src/control/cluster-control.js';
import type { Caps } from '../../src/control/caps.js';
import { cgroupHost } from '../../src/control/cgroups.js';
import { BIN } from './cluster.js';

/** True if `caps` can be applied here; false once `nova up` in `dir` was seen to refuse them. */
export async function capsApplicable(dir: string, caps: Caps): Promise<boolean> {
  try {
    cgroupHost(caps);
    return true;
  } catch {
    await expect(up({ dir, host: '127.0.0.1', bin: BIN, coordinatorArgs: [], caps })).rejects.toThrow(/--cap: .*leave out --cap/);
    expect(readClusterFile(dir)).toBeUndefined();
    return false;
  }
}
