/**
 * StoC in-memory files: regions WRITTEN and READ by clients, extended, listed and freed.
 * StocServers and LTC-side clients on separate fabrics in this process, over shared memory.
 */
import { describe, expect, it } from 'vitest';
import { pattern } from '../fixtures/pattern.js';
import { until } from '../helpers/until.js';
import { stocHarness } from '../helpers/stocs.js';

const { startServer, connect } = stocHarness('nova-stoc-memory-files-');
const KiB = 1024;
const REGION = 64 * KiB;

describe('StoC in-memory files', () => {
  it('round-trip across regions; extend is idempotent; list and remove', async () => {
    const s = await startServer(1);
    const c = await connect(s);
    const f = await c.createMemory('m.log', REGION);
    expect(f.length).toBe(REGION);
    const data = Buffer.alloc(3 * REGION + 5);
    pattern(data, 9);
    await f.write(100, data);
    expect(f.length).toBe(4 * REGION);
    expect(s.stats()).toMatchObject({ memoryFiles: 1, memoryRegions: 4, memoryBytes: 4 * REGION });
    const again = (await c.openMemory('m.log'))!;
    expect(again.length).toBe(4 * REGION);
    const back = await again.read(0, again.length);
    expect(back.subarray(100, 100 + data.length).equals(data)).toBe(true);
    expect(back.subarray(0, 100).every((b) => b === 0)).toBe(true);
    expect(back.subarray(100 + data.length).every((b) => b === 0)).toBe(true);
    expect(await c.listMemory('m')).toEqual([{ name: 'm.log', size: 4 * REGION }]);
    expect(await c.list('m')).toEqual([]); // a namespace apart from disk files
    await expect(again.read(0, again.length + 1)).rejects.toMatchObject({ code: 'CORRUPTION' });
    again.close();
    f.close();
    await c.removeMemory('m.log');
    expect(await c.openMemory('m.log')).toBeUndefined();
    expect(await c.readMemoryAll('m.log')).toBeUndefined();
    await until(() => s.stats().memoryBytes === 0); // after the grace period
    await c.removeMemory('m.log'); // a missing file is not an error
  });

  it('refuses memory beyond its limit with BUSY', async () => {
    const s = await startServer(1, { memoryBytes: 3 * REGION });
    const c = await connect(s);
    const a = await c.createMemory('a', REGION);
    await c.createMemory('b', REGION);
    await a.write(0, Buffer.alloc(REGION + 1, 1)); // a takes its second region: the limit
    await expect(c.createMemory('c', REGION)).rejects.toMatchObject({ code: 'BUSY', message: expect.stringContaining('memory limit') });
    await expect(a.write(2 * REGION, Buffer.from('x'))).rejects.toMatchObject({ code: 'BUSY' });
    await expect(c.createMemory('tiny', 100)).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    a.close();
    await c.removeMemory('a');
    await until(() => s.stats().memoryBytes === REGION);
    await c.createMemory('c', REGION);
  });

  it("takes the cluster's log memory when it gets the configuration: a lower limit refuses new memory, files past it stay", async () => {
    const s = await startServer(1, { memoryBytes: 4 * REGION });
    const c = await connect(s);
    const a = await c.createMemory('a', REGION);
    await c.createMemory('b', REGION);
    s.setMemory(2 ** 30, REGION);
    await expect(c.createMemory('c', REGION)).rejects.toMatchObject({ code: 'BUSY' });
    await a.write(0, Buffer.from('kept')); // what it holds is not taken away
    expect((await a.read(0, 4)).toString()).toBe('kept');
    s.setMemory(2 ** 30, 3 * REGION);
    await c.createMemory('c', REGION);
  });
});

