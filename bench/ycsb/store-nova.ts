/** `nova`: a Nova cluster through NovaClient, started in the run's directory or given. */
import { readSecretFile } from '../../src/common/cluster-secret.js';
import { NovaClient } from '../../src/client/nova-client.js';
import { memoryBudget } from '../../src/control/budgets.js';
import { NOVA_BIN, type ComponentRole, addComponent, capCluster, down, fetchStatus, moveRange, readClusterFile, rebalance, removeLtc, removeStocFrom, restartComponent, up } from '../../src/control/cluster-control.js';
import type { ActionOutcome, ScheduledAction } from './schedule.js';
import type { MoveReport } from '../../src/coordinator/coordinator.js';
import { rangeOf } from '../../src/cluster/config.js';
import { KNOBS } from '../../src/cluster/knobs.js';
import { INGEST_LOAD_BATCH, type EngineAdapter } from './kv-store.js';
import { isCacheMode, type CacheMode } from '../../src/cluster/gemini.js';
import { TcpRpcClient } from '../../src/net/tcp-rpc-client.js';
import type { CacheServerStats } from '../../src/stoc/cache-server.js';
import { capsText, parseCaps } from '../../src/control/caps.js';
import { cgroupHost } from '../../src/control/cgroups.js';
import { PAUSE_WINDOW_S, type Pauses } from '../../src/common/pauses.js';

/** Bytes per table ingested in the load: a memtable's worth. */
const LOAD_CHUNK_BYTES = 16 * 1024 * 1024;

/** Every instance's discarded entries (those unreachable count nothing). */
async function discardedEntries(client: NovaClient): Promise<number> {
  let n = 0;
  for (const m of client.configuration.members.filter((x) => x.role === 'cache')) {
    try {
      const link = await TcpRpcClient.connect(m.address, { timeoutMs: 2_000 });
      try {
        n += (await link.call<CacheServerStats>('stats', [], 2_000)).counters.discarded;
      } finally {
        link.close();
      }
    } catch {
      // down: what it discarded is counted once it is back
    }
  }
  return n;
}

export const nova: EngineAdapter = {
  name: 'nova',
  describe: 'a Nova cluster through NovaClient (started in the run\'s directory: 1 LTC, 3 StoCs by default)',
  available: async () => undefined,
  // The cluster's knobs, by their flags (nova up --help); `nova up` checks the values.
  checkSetting: (flag, value) => {
    const k = KNOBS.find((x) => x.flag === flag);
    if (!k) return `nova takes the knobs of nova up (${KNOBS.map((x) => x.flag).join(', ')}), not "${flag}"`;
    if (k.type === 'bool' && value !== 'true' && value !== 'false') return `${flag} is true or false, not "${value}"`;
    if (k.type === 'switch' && value !== 'on' && value !== 'off') return `${flag} is on or off, not "${value}"`;
    return undefined;
  },
  async open(dir, o) {
    const c = o.cluster ?? {};
    if (o.settings && c.coordinator) throw new Error('a running cluster (--coordinator) has its settings: an engine name cannot set them');
    const given = o.settings?.find(([flag]) => flag === 'cache-mode')?.[1] ?? c.cache;
    if (given !== undefined && given !== 'none' && !isCacheMode(given)) throw new Error(`cache mode "${given}": use none or a mode of --cache-mode`);
    const cache: CacheMode | undefined = given === undefined || given === 'none' ? undefined : given as CacheMode;
    const caps = c.cap === undefined ? undefined : parseCaps(c.cap);
    if (caps) {
      if (c.coordinator) throw new Error('--cap caps the cluster the bench starts, not one given by --coordinator (cap it with nova up --cap)');
      cgroupHost(caps); // refused before the load, not after it
    }
    if (!c.coordinator) {
      const args = ['--ranges', String(c.ranges ?? 1), '--bench-records', String(o.records ?? 1_000_000)];
      if (cache && !o.settings?.some(([flag]) => flag === 'cache-mode')) args.push('--cache-mode', cache);
      if (o.sync) args.push('--sync');
      if (c.logMode) args.push('--log-mode', c.logMode);
      if (c.compaction) args.push('--compaction', c.compaction);
      if (cache && c.cacheMemoryBytes !== undefined && !o.settings?.some(([flag]) => flag === 'cache-memory')) args.push('--cache-memory', String(c.cacheMemoryBytes));
      for (const [flag, value] of o.settings ?? []) {
        const bool = KNOBS.find((k) => k.flag === flag)?.type === 'bool';
        if (!bool) args.push(`--${flag}`, value);
        else if (value === 'true') args.push(`--${flag}`);
      }
      // With a cache, up waits until every instance holds fragments: none joins mid-run.
      await up({ dir, ltcs: c.ltcs ?? 1, stocs: c.stocs ?? 3, host: '127.0.0.1', bin: NOVA_BIN, coordinatorArgs: args,
        ...(cache ? { caches: c.cacheInstances ?? 3 } : {}) });
    }
    const secretFile = c.secretFile ?? process.env.NOVA_SECRET_FILE;
    const ingestTotals = { tables: 0, written: 0, refusals: new Set<string>() };
    const client = await NovaClient.connect(c.coordinator
      ? { coordinator: c.coordinator, ...(secretFile ? { secret: readSecretFile(secretFile) } : {}), cache }
      : { dir, cache });
    return {
      put: (k, v) => client.put(k, v),
      get: (k) => client.get(k),
      scan: (start, count) => client.scan(start, { limit: count }),
      // The bulk path: each range's run as tables its LTC ingests (NovaClient.ingest).
      putMany: async (entries) => {
        const r = await client.ingest(entries, { chunkBytes: LOAD_CHUNK_BYTES });
        ingestTotals.tables += r.tables;
        ingestTotals.written += r.written;
        for (const why of r.refusals) ingestTotals.refusals.add(why);
      },
      loadBatch: INGEST_LOAD_BATCH,
      settle: async () => {
        await client.compact();
        if (caps) capCluster(dir, caps);
        const refused = ingestTotals.written > 0 ? `, ${ingestTotals.written} records written as batches (${[...ingestTotals.refusals].join('; ')})` : '';
        return `loaded as ${ingestTotals.tables} ingested tables${refused}; memtables flushed and every range compacted into its deepest level${caps ? `; then capped (${capsText(caps)})` : ''}`;
      },
      report: async () => {
        const rows = (await client.stats()) as Array<{ range: number; dranges: number; duplicatedDranges?: number; loadImbalance?: number; minorReorganizations?: number; majorReorganizations?: number; mergesInsteadOfFlush?: number; lookupHits?: number; lookupMisses?: number; flushes: number; compactions: number; offloadedCompactions: number; idleCompactions?: number; maxJobsInParallel?: number; meanJobsInParallel?: number;
          tablesToStocs: number; bytesToStocs: number; msToStocs: number; stalls: number; l0Stalls?: number; stallMs: number; delayedRounds?: number; delayMs?: number }>;
        return rows.map((r) => `range ${r.range}: ${r.dranges} Dranges, ${r.duplicatedDranges ?? 0} duplicated (imbalance ${(r.loadImbalance ?? 0).toFixed(4)}; ` +
          `${r.minorReorganizations ?? 0} minor, ${r.majorReorganizations ?? 0} major reorganizations), ${r.flushes} flushes, ${r.mergesInsteadOfFlush ?? 0} merges instead of flush, ` +
          `lookup index ${r.lookupHits ?? 0} hits / ${r.lookupMisses ?? 0} misses, ${r.compactions} compactions (${r.offloadedCompactions} on StoCs, ${r.idleCompactions ?? 0} of L0 begun when writes paused; ` +
          `jobs at once: max ${r.maxJobsInParallel ?? 1}, mean ${(r.meanJobsInParallel ?? 1).toFixed(2)}); ` +
          `${r.tablesToStocs} SSTables from the LTC to StoCs (${(r.bytesToStocs / 2 ** 20).toFixed(1)} MiB), ` +
          `transport ${r.tablesToStocs ? (r.msToStocs / r.tablesToStocs).toFixed(1) : '-'} ms per SSTable; ${r.delayedRounds ?? 0} commit rounds slowed before L0's stop (${Math.round(r.delayMs ?? 0)} ms); ${r.stalls} write stalls (${Math.round(r.stallMs)} ms; ${r.l0Stalls ?? 0} on L0, the rest on a flush)`).join('; ');
      },
      watchRun: async () => {
        const before = figuresOf(await client.stats());
        return async () => {
          const rows = await client.stats();
          const after = figuresOf(rows);
          return [...after].map(([range, a]) => {
            const b = before.get(range) ?? {};
            // A range opened again during the run (it moved) counts from zero: no difference to take.
            if ((a.flushes ?? 0) < (b.flushes ?? 0)) return `range ${range}: opened again during the run (it moved), its figures since: ${a.flushes ?? 0} flushes, ${a.compactions ?? 0} compactions`;
            const d = (k: string): number => (a[k] ?? 0) - (b[k] ?? 0);
            const writes = d('imbalanceWrites');
            return `range ${range}: imbalance ${writes > 0 ? (d('imbalanceTimesWrites') / writes).toFixed(4) : '-'} over ${writes} counted writes, ` +
              `${d('minorReorganizations')} minor and ${d('majorReorganizations')} major reorganizations (${a.duplicatedDranges ?? 0} Dranges duplicated at the end), ${d('mergesInsteadOfFlush')} merges instead of flush, ${d('flushes')} flushes`;
          }).join('; ') + ltcNote(rows as Parameters<typeof ltcNote>[0]);
        };
      },
      // The LTCs and StoCs (the coordinator writes only its small config file). A member on
      // another machine has no /proc entry here, and then no figure is reported.
      processes: () => client.configuration.members.map((m) => m.pid),
      // A cluster the bench started: every process of it, the coordinator's too.
      namedProcesses: () => {
        const budget = (role: ComponentRole): { budget?: number } => {
          const b = memoryBudget(role, client.configuration.settings);
          return b === undefined ? {} : { budget: b };
        };
        return c.coordinator ? client.configuration.members.map((m) => ({ pid: m.pid, name: `${m.role}-${m.id}`, ...budget(m.role) }))
          : (readClusterFile(dir)?.components ?? []).map((x) => ({ pid: x.pid, name: x.role === 'coordinator' ? 'coordinator' : `${x.role}-${x.id}`, ...budget(x.role) }));
      },
      ...(cache ? {
        cacheCounters: () => {
          const k = client.cacheCounters!;
          return { gets: k.gets, hits: k.hits, byInstance: Object.fromEntries([...k.byInstance].map(([id, x]) => [id, { ...x }])) };
        },
        cacheDiscarded: () => discardedEntries(client),
      } : {}),
      act: (a) => {
        if (c.coordinator) throw new Error('a schedule needs the cluster the bench starts, not --coordinator');
        return act(dir, a);
      },
      close: async () => {
        client.close();
        if (!c.coordinator) await down(dir);
      },
    };
  },
};

/** The LTCs' pauses over their last seconds (the worst LTC's) and the largest LTC's memory, as the end of a run's line. */
function ltcNote(rows: Array<{ ltcPauses?: Pauses; ltcRssBytes?: number; ltcHeapBytes?: number; ltcExternalBytes?: number; memoryBytes?: number; memoryBudgetBytes?: number; ltcMemoryLimitBytes?: number; ltcRuntimeBytes?: number }>): string {
  const p = rows.map((r) => r.ltcPauses).filter((x): x is Pauses => x !== undefined);
  if (p.length === 0) return '';
  const max = (f: (x: Pauses) => number): number => Math.max(...p.map(f));
  const mib = (b: number | undefined): string => ((b ?? 0) / 2 ** 20).toFixed(0);
  // What the largest LTC holds at the run's end beyond what its budget counts: the JavaScript heap, and memory
  // outside it (Buffers). Its ranges' rows carry the same snapshot of its process.
  const r = rows.reduce((a, b) => ((b.ltcRssBytes ?? 0) > (a.ltcRssBytes ?? 0) ? b : a));
  const mine = rows.filter((x) => x.ltcRssBytes === r.ltcRssBytes);
  return `; LTC pauses over the last ${PAUSE_WINDOW_S} s: event loop delay p99 ${max((x) => x.loopDelayP99Ms)} ms, max ${max((x) => x.loopDelayMaxMs)} ms; ` +
    `GC ${max((x) => x.gcMs)} ms in ${max((x) => x.gcCount)} (major ${max((x) => x.gcMajorMs)} ms), the longest ${max((x) => x.gcMaxMs)} ms; ` +
    `LTC memory at the end: RSS ${mib(r.ltcRssBytes)} MiB, heap ${mib(r.ltcHeapBytes)}, outside the heap ${mib(r.ltcExternalBytes)}, counted by its budget ${mib(mine.reduce((n, x) => n + (x.memoryBytes ?? 0), 0))}` +
    ((r.ltcMemoryLimitBytes ?? 0) > 0 ? ` of ${mib(mine.reduce((n, x) => n + (x.memoryBudgetBytes ?? 0), 0))} (under a memory limit of ${mib(r.ltcMemoryLimitBytes)} MiB, holding ${mib(r.ltcRuntimeBytes)} beside its ranges)` : '');
}

/** Each range's numeric figures, by range, from NovaClient.stats's rows. */
function figuresOf(stats: unknown[]): Map<number, Record<string, number>> {
  const rows = stats as Array<Record<string, unknown> & { range: number }>;
  return new Map(rows.map((r) => [r.range, Object.fromEntries(Object.entries(r).filter(([, v]) => typeof v === 'number')) as Record<string, number>]));
}

/** What the report keeps of a move. */
function moveOf(m: MoveReport): ActionOutcome['moves'][number] {
  return { range: m.range, from: m.from, to: m.to, unavailableMs: m.unavailableMs, releaseMs: m.releaseMs, engineOpenMs: m.engineOpenMs };
}

/** Carries out one action of a run's schedule on the local cluster in `dir` (schedule.ts). */
async function act(dir: string, a: ScheduledAction): Promise<ActionOutcome> {
  const file = readClusterFile(dir);
  if (!file) throw new Error(`no cluster in ${dir}`);
  const coordinator = file.coordinator;
  const base = { dir, host: '127.0.0.1', bin: NOVA_BIN };
  const since = (await fetchStatus(coordinator)).config.id;
  const movesSince = async (): Promise<ActionOutcome['moves']> =>
    (await fetchStatus(coordinator)).moves.filter((m) => m.configId > since).map(moveOf);
  const moved = (moves: ActionOutcome['moves']): string =>
    moves.map((m) => `range ${m.range} ${m.from}→${m.to} (${m.unavailableMs} ms: letting go ${m.releaseMs}, engine open ${m.engineOpenMs})`).join(', ') || 'no range moved';
  switch (a.name) {
    case 'ltc add': case 'stoc add': {
      const role = a.name === 'ltc add' ? 'ltc' : 'stoc';
      const added = await addComponent(base, role);
      const moves = await movesSince();
      return { detail: `${role} ${added.id} up${role === 'ltc' ? `; ${moved(moves)}` : ''}`, moves };
    }
    case 'rebalance': {
      const r = await rebalance(coordinator, false);
      if (r.error) throw new Error(r.error);
      const moves = r.moves.map(moveOf);
      return { detail: moved(moves), moves };
    }
    case 'ltc remove': {
      // By default the newest LTC that is up (a killed one loses its ranges by failover anyway).
      const live = (await fetchStatus(coordinator)).members.filter((m) => m.role === 'ltc' && m.alive).map((m) => m.id);
      if (a.args[0] === undefined && live.length === 0) throw new Error('no LTC is up');
      const id = a.args[0] ?? Math.max(...live);
      const r = await removeLtc(dir, coordinator, id);
      const moves = r.moves.map(moveOf);
      return { detail: `ltc ${id} removed; ${moved(moves)}`, moves };
    }
    case 'range move': {
      const r = await moveRange(coordinator, a.args[0], a.args[1]);
      return { detail: moved([moveOf(r)]), moves: [moveOf(r)] };
    }
    case 'ltc kill': {
      const status = await fetchStatus(coordinator);
      const id = a.args[0] ?? status.config.ranges[0].ltc;
      const victim = file.components.find((x) => x.role === 'ltc' && x.id === id);
      if (!victim) throw new Error(`no LTC ${id} in ${dir}`);
      const t0 = Date.now();
      process.kill(victim.pid, 'SIGKILL');
      // Failed over: every range served by a live LTC other than the killed one.
      for (;;) {
        const s = await fetchStatus(coordinator);
        const serving = new Map(s.members.filter((m) => m.role === 'ltc' && m.alive && m.id !== id).flatMap((m) => m.serving.map((r) => [r, m.id] as const)));
        if (s.config.ranges.every((r) => serving.get(r.id) === r.ltc)) break;
        if (Date.now() - t0 > 120_000) throw new Error(`LTC ${id}'s ranges were not served elsewhere within 120 s`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const failoverMs = Date.now() - t0;
      return { detail: `ltc ${id} killed; its ranges served elsewhere after ${failoverMs} ms`, moves: [], failoverMs };
    }
    case 'cache kill': {
      const id = a.args[0] ?? 1;
      const victim = file.components.find((x) => x.role === 'cache' && x.id === id);
      if (!victim) throw new Error(`no cache instance ${id} in ${dir} (start the run with --cache MODE)`);
      const t0 = Date.now();
      process.kill(victim.pid, 'SIGKILL');
      // Until a secondary was published for each of its fragments.
      for (;;) {
        const layer = (await fetchStatus(coordinator)).config.cache;
        if (layer && !layer.fragments.some((f) => f.primary === id && f.mode !== 'transient')) break;
        if (Date.now() - t0 > 60_000) throw new Error(`cache instance ${id}'s fragments did not go transient within 60 s`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const failoverMs = Date.now() - t0;
      return { detail: `cache ${id} killed; secondaries served its fragments after ${failoverMs} ms`, moves: [], failoverMs, cacheInstance: id };
    }
    case 'cache start': {
      const id = a.args[0] ?? 1;
      if (!file.components.some((x) => x.role === 'cache' && x.id === id)) throw new Error(`no cache instance ${id} in ${dir} (start the run with --cache MODE)`);
      const t0 = Date.now();
      await restartComponent(base, 'cache', id);
      const layer = (await fetchStatus(coordinator)).config.cache;
      const modes = layer ? layer.fragments.filter((f) => f.primary === id).map((f) => f.mode) : [];
      return { detail: `cache ${id} back after ${Date.now() - t0} ms: its fragments ${modes.filter((m) => m === 'recovery').length} recovering, ${modes.filter((m) => m === 'normal').length} normal, ${modes.filter((m) => m === 'transient').length} transient`, moves: [], cacheInstance: id };
    }
    case 'stoc remove': {
      // By default the newest StoC (drained: nothing is lost).
      const stocs = (await fetchStatus(coordinator)).config.members.filter((m) => m.role === 'stoc').map((m) => m.id);
      const id = a.args[0] ?? Math.max(...stocs);
      const r = await removeStocFrom(dir, coordinator, id, false);
      const copied = r.ltcs.reduce((n, l) => n + l.tablesCopied, 0);
      const merged = r.ltcs.reduce((n, l) => n + l.l0Merged, 0);
      return { detail: `stoc ${id} drained and removed: ${copied} table(s) copied, ${merged} L0 table(s) merged off it`, moves: [] };
    }
  }
}
