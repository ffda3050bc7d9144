/**
 * StoC servers, fabrics and StoC pools in the test's own process (over shared memory), and
 * temp directories, each closed or removed after its test (directories after the file).
 * Call `stocHarness()` once at the top of a test file: it registers the hooks.
 */
import { afterEach } from 'vitest';
import { DEFAULT_SETTINGS, type ClusterConfig } from '../../src/cluster/config.js';
import { StocClient } from '../../src/stoc/stoc-client.js';
import { StocPool } from '../../src/stoc/stoc-pool.js';
import { StocServer, type StocServerOptions } from '../../src/stoc/stoc-server.js';
import { Fabric } from '../../src/transport/fabric.js';
import { Rpc } from '../../src/transport/rpc.js';
import { useTls } from './peer-process.js';
import { tempDirs } from './temp.js';

const MiB = 1024 * 1024;

export interface StocHarness {
  /** The servers started and not yet closed (a test that stops one takes it out first). */
  servers: StocServer[];
  tempDir(): string;
  /** A StoC with an 8 MiB file buffer in 2 MiB windows, unless `extra` says otherwise. */
  startServer(id: number, extra?: Partial<StocServerOptions>, dir?: string): Promise<StocServer>;
  openFabric(): { fabric: Fabric; rpc: Rpc };
  /** A configuration whose StoCs are `stocs`. */
  config(stocs: StocServer[]): ClusterConfig;
  makePool(stocs: StocServer[]): StocPool;
  /** A client of `s` on a fabric of its own. */
  connect(s: StocServer, options?: { timeoutMs?: number }): Promise<StocClient>;
}

export function stocHarness(prefix: string): StocHarness {
  const tempDir = tempDirs(prefix, 'all');
  const servers: StocServer[] = [];
  const fabrics: Fabric[] = [];
  const pools: StocPool[] = [];
  afterEach(async () => {
    for (const p of pools.splice(0)) p.close();
    for (const f of fabrics.splice(0)) await f.close();
    for (const s of servers.splice(0)) await s.close();
  });
  const h: StocHarness = {
    servers,
    tempDir: () => tempDir(),
    async startServer(id, extra = {}, dir = h.tempDir()) {
      useTls('sm');
      const s = await StocServer.start({ dir, id, bufferBytes: 8 * MiB, windowBytes: 2 * MiB, memoryGraceMs: 50, ...extra });
      servers.push(s);
      return s;
    },
    openFabric() {
      useTls('sm');
      const fabric = Fabric.open();
      fabrics.push(fabric);
      return { fabric, rpc: new Rpc(fabric) };
    },
    config(stocs) {
      return {
        id: 1, ranges: [], lastRange: 0, settings: DEFAULT_SETTINGS,
        members: stocs.map((s) => ({ role: 'stoc' as const, id: s.id, address: s.address.toString('base64'), pid: 0, host: 'local' })),
      };
    },
    makePool(stocs) {
      const { fabric, rpc } = h.openFabric();
      const pool = new StocPool(fabric, rpc);
      pool.update(h.config(stocs));
      pools.push(pool);
      return pool;
    },
    async connect(s, options) {
      const { fabric, rpc } = h.openFabric();
      return StocClient.connect(fabric, rpc, s.address, options);
    },
  };
  return h;
}
