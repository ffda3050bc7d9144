/**
 * An LTC under a memory limit (`nova up --cap ltc.memory`) smaller than its budget and the data
 * it is given: it keeps its ranges' memory to what the limit leaves (memory-governor.ts), so it
 * is not OOM-killed, and its reads stay right. Real processes on the machine's cgroups; where
 * they cannot be made, the same command must be refused before anything starts.
 */
import { describe, expect, it } from 'vitest';
import { NovaClient } from '../../src/client/nova-client.js';
import { bulkLoad } from '../../src/client/bulk-load.js';
import { down, up } from '../../src/control/cluster-control.js';
import { parseCaps } from '../../src/control/caps.js';
import type { RangeStats } from '../../src/ltc/ltc-server.js';
import { BIN } from '../helpers/cluster.js';
import { capsApplicable } from '../helpers/caps.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-ltc-limit-');
const LIMIT = 768 * 2 ** 20;
const CAPS = parseCaps(`ltc.memory=${LIMIT}`);
const RECORDS = 900_000; // 1 KiB values: more than the limit, held whole as the 2 GiB budget allows

const key = (i: number): Buffer => Buffer.from(`key${String(i).padStart(8, '0')}`);
const value = (i: number): Buffer => Buffer.alloc(1024, i % 251);

describe('an LTC under a memory limit', () => {
  it('gives its ranges what the limit leaves, is not OOM-killed by more data than the limit, and reads it all back', async () => {
    const dir = tempDir();
    if (!(await capsApplicable(dir, CAPS))) return;
    try {
      const file = await up({ dir, host: '127.0.0.1', bin: BIN, coordinatorArgs: [], caps: CAPS, timeoutMs: 60_000 });
      const ltc = file.components.find((c) => c.role === 'ltc')!.pid;
      const client = await NovaClient.connect({ dir, timeoutMs: 60_000 });
      try {
        function* records(): Iterable<[Buffer, Buffer]> {
          for (let i = 0; i < RECORDS; i++) yield [key(i), value(i)];
        }
        await bulkLoad(client, records());
        for (let i = 0; i < RECORDS; i += 997) expect((await client.get(key(i)))?.equals(value(i)), `key ${i}`).toBe(true);
        const [stats] = (await client.stats()) as RangeStats[];
        expect(stats.ltcMemoryLimitBytes).toBe(LIMIT);
        expect(stats.ltcRuntimeBytes).toBeGreaterThan(0);
        expect(stats.memoryBudgetBytes).toBeLessThan(LIMIT); // the 2 GiB budget, cut to what the limit leaves
        expect(stats.memoryBudgetBytes).toBeGreaterThan(0); // a budget still: not tables held whole
        expect(stats.memoryBytes).toBeLessThan(LIMIT);
        expect(() => process.kill(ltc, 0)).not.toThrow(); // the same process: never OOM-killed and restarted
      } finally {
        client.close();
      }
    } finally {
      await down(dir);
    }
  }, 180_000);
});
