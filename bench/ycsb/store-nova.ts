/** `nova`: a Nova cluster through NovaClient, started in the run's directory or given. */
import { NovaClient } from '../../src/client/nova-client.js';
import { NOVA_BIN, down, up } from '../../src/control/cluster-control.js';
import { rangeOf } from '../../src/cluster/config.js';
import type { EngineAdapter } from './kv-store.js';

export const nova: EngineAdapter = {
  name: 'nova',
  describe: 'a Nova cluster through NovaClient (started in the run\'s directory: 1 LTC, 3 StoCs by default)',
  available: async () => undefined,
  async open(dir, o) {
    const c = o.cluster ?? {};
    if (!c.coordinator) {
      const args = ['--ranges', String(c.ranges ?? 1), '--bench-records', String(o.records ?? 1_000_000)];
      if (o.sync) args.push('--sync');
      if (c.logMode) args.push('--log-mode', c.logMode);
      if (c.compaction) args.push('--compaction', c.compaction);
      await up({ dir, ltcs: c.ltcs ?? 1, stocs: c.stocs ?? 3, host: '127.0.0.1', bin: NOVA_BIN, coordinatorArgs: args });
    }
    const client = await NovaClient.connect(c.coordinator ? { coordinator: c.coordinator } : { dir });
    return {
      put: (k, v) => client.put(k, v),
      get: (k) => client.get(k),
      scan: (start, count) => client.scan(start, { limit: count }),
      putMany: async (entries) => {
        // A batch is atomic within a range: cut the load's batches at range boundaries.
        const byRange = new Map<number, ReturnType<NovaClient['batch']>>();
        for (const [k, v] of entries) {
          const r = rangeOf(client.configuration, k).id;
          let b = byRange.get(r);
          if (!b) byRange.set(r, b = client.batch());
          b.put(k, v);
        }
        await Promise.all([...byRange.values()].map((b) => client.write(b)));
      },
      settle: async () => {
        await client.compact();
        return 'memtables flushed and every range compacted into its deepest level';
      },
      report: async () => {
        const rows = (await client.stats()) as Array<{ range: number; flushes: number; compactions: number; offloadedCompactions: number; idleCompactions?: number; tablesToStocs: number; bytesToStocs: number; msToStocs: number; stalls: number; l0Stalls?: number; stallMs: number }>;
        return rows.map((r) => `range ${r.range}: ${r.flushes} flushes, ${r.compactions} compactions (${r.offloadedCompactions} on StoCs, ${r.idleCompactions ?? 0} of L0 begun when writes paused); ` +
          `${r.tablesToStocs} SSTables from the LTC to StoCs (${(r.bytesToStocs / 2 ** 20).toFixed(1)} MiB), ` +
          `transport ${r.tablesToStocs ? (r.msToStocs / r.tablesToStocs).toFixed(1) : '-'} ms per SSTable; ${r.stalls} write stalls (${Math.round(r.stallMs)} ms; ${r.l0Stalls ?? 0} on L0, the rest on a flush)`).join('; ');
      },
      // The LTCs and StoCs (the coordinator writes only its small config file). A member on
      // another machine has no /proc entry here, and then no figure is reported.
      processes: () => client.configuration.members.map((m) => m.pid),
      close: async () => {
        client.close();
        if (!c.coordinator) await down(dir);
      },
    };
  },
};

// ---- LevelDB: classic-level (abstract-level API) ----
