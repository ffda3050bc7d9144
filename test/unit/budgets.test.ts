/** Each component's memory budget from the cluster's knobs (src/control/budgets.ts). */
import { describe, expect, it } from 'vitest';
import { DEFAULT_SETTINGS, type Settings } from '../../src/cluster/config.js';
import { memoryBudget } from '../../src/control/budgets.js';
import { coordinatorHeapMiB, type ComponentRole } from '../../src/control/cluster-control.js';

const MiB = 2 ** 20;
const FILE_BUFFER = 24 * 8 * MiB; // a StoC's windows, as nova up starts it

const CASES: Array<{ role: ComponentRole; settings: Partial<Settings>; budget: number | undefined; why: string }> = [
  { role: 'ltc', settings: { ltcMemoryBytes: 1024 * MiB }, budget: 1024 * MiB, why: 'the LTC knob' },
  { role: 'ltc', settings: { ltcMemoryBytes: 0 }, budget: undefined, why: 'no budget: tables held whole' },
  { role: 'stoc', settings: { stocMemoryBytes: 512 * MiB, logMode: 'disk' }, budget: 512 * MiB + FILE_BUFFER, why: 'compaction memory and the file buffer' },
  { role: 'stoc', settings: { stocMemoryBytes: 512 * MiB, stocLogMemoryBytes: 256 * MiB, logMode: 'memory' }, budget: 768 * MiB + FILE_BUFFER, why: 'memory logs come on top' },
  { role: 'stoc', settings: { stocMemoryBytes: 512 * MiB, stocLogMemoryBytes: 256 * MiB, logMode: 'memory+disk' }, budget: 768 * MiB + FILE_BUFFER, why: 'both log modes that use memory' },
  { role: 'stoc', settings: { stocMemoryBytes: 512 * MiB, stocLogMemoryBytes: 256 * MiB, logMode: 'none' }, budget: 512 * MiB + FILE_BUFFER, why: 'no logs' },
  { role: 'coordinator', settings: { coordinatorMemoryBytes: 128 * MiB }, budget: 128 * MiB, why: 'its heap' },
  { role: 'cache', settings: { cacheMemoryBytes: 64 * MiB }, budget: 64 * MiB, why: 'its entries' },
];

describe('memory budgets', () => {
  for (const c of CASES) {
    it(`${c.role}: ${c.why}`, () => {
      expect(memoryBudget(c.role, { ...DEFAULT_SETTINGS, ...c.settings })).toBe(c.budget);
    });
  }
});

describe("the coordinator's heap", () => {
  it('takes --coordinator-memory from a new cluster\'s flags, else the default', () => {
    const dir = '/nonexistent/nova-no-cluster'; // no kept configuration
    expect(coordinatorHeapMiB(dir, ['coordinator', '--coordinator-memory', String(512 * MiB)])).toBe(512);
    expect(coordinatorHeapMiB(dir, ['coordinator', '--ltcs', '2'])).toBe(256);
  });
});
