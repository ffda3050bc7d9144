/**
 * A StoC with the cluster's secret (cluster-secret.ts) serves only peers that proved it at
 * hello: StocServers and clients in this process, over shared memory.
 */
import { describe, expect, it } from 'vitest';
import { StocClient } from '../../src/stoc/stoc-client.js';
import { Method } from '../../src/stoc/stoc-protocol.js';
import { stocHarness } from '../helpers/stocs.js';

const { startServer, openFabric } = stocHarness('nova-stoc-secret-');
const SECRET = Buffer.alloc(32, 0x5c);

describe('a StoC with the cluster\'s secret', () => {
  it('refuses a hello without its proof or with a wrong one, and any request before a proven hello; serves one that proves it', async () => {
    const logs: string[] = [];
    const s = await startServer(1, { secret: SECRET, onLog: (l) => logs.push(l) });
    const { fabric, rpc } = openFabric();
    await expect(StocClient.connect(fabric, rpc, s.address, { secret: null, timeoutMs: 5_000 })).rejects.toThrow(/did not prove it knows the cluster's secret/);
    await expect(StocClient.connect(fabric, rpc, s.address, { secret: Buffer.alloc(32, 1), timeoutMs: 5_000 })).rejects.toThrow(/did not prove it knows the cluster's secret/);
    expect(logs.filter((l) => /refused a peer/.test(l))).toHaveLength(2);
    // A request with no hello at all.
    const ep = await fabric.connect(s.address, { timeoutMs: 5_000 });
    await expect(rpc.call(ep, Method.list, { prefix: '' }, { timeoutMs: 5_000 })).rejects.toThrow(/before a stoc.hello that proved the cluster's secret/);
    ep.close();
    const c = await StocClient.connect(fabric, rpc, s.address, { secret: SECRET, timeoutMs: 5_000 });
    await c.write('f', 0, Buffer.from('ok'), true);
    expect((await c.readAll('f'))?.toString()).toBe('ok');
    await c.close();
  });
});
