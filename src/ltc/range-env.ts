/**
 * What a range's engine runs on in the cluster: its tables on StoCs (ρ fragments, placed by
 * the cluster's policy), its logs through LogC in the cluster's mode, its MANIFEST on StoCs,
 * compactions offloaded to StoCs when the cluster says so; and the engine options the
 * cluster's settings give it (the knobs marked `engine` in cluster/knobs.ts).
 */
import type { Settings } from '../cluster/config.js';
import { engineSettings } from '../cluster/knobs.js';
import type { LogStore } from '../logc/log-store.js';
import { MemoryDiskLogStore, MemoryLogStore } from '../logc/memory-log-store.js';
import { NoLogStore } from '../logc/no-log-store.js';
import { StocLogStore } from '../logc/stoc-log-store.js';
import { StocManifestStore } from '../logc/stoc-manifest-store.js';
import type { StocPool } from '../stoc/stoc-pool.js';
import type { EngineOptions } from './engine-options.js';
import { LocalManifestStore } from './local-store.js';
import { StocBlockStore } from './stoc-block-store.js';
import { StocCompactor } from './stoc-compactor.js';

export interface RangeEnv {
  store: StocBlockStore;
  compactor: StocCompactor | undefined;
  /** The engine's options, its environment included. */
  options: EngineOptions;
}

/**
 * The environment and options of range `range`, whose local directory is `dir`.
 * `strictUntil`: until then, a log is read only once every configured StoC answered.
 * `memoryBytes`: the range's share of its LTC's memory (EngineOptions.memoryBudgetBytes).
 * `mayAcknowledge`: EngineEnv.mayAcknowledge (the LTC's lease); `isLost`: EngineEnv.isLost
 * (StoCs removed as dead).
 */
export function rangeEnv(pool: StocPool, settings: Settings, range: number, dir: string, onLog: (line: string) => void,
  strictUntil: number, memoryBytes: number, mayAcknowledge?: () => Error | undefined, isLost?: (stoc: number) => boolean): RangeEnv {
  const store = new StocBlockStore(pool, range, settings);
  const compactor = settings.compaction === 'stoc' ? new StocCompactor(pool, range, settings, onLog) : undefined;
  const options: EngineOptions = {
    ...(engineSettings(settings) as EngineOptions),
    memoryBudgetBytes: memoryBytes,
    env: {
      store,
      logs: logStoreFor(pool, settings, range, onLog, strictUntil),
      manifests: new StocManifestStore(pool, range, settings.logReplicas, onLog, new LocalManifestStore(dir)),
      compactor,
      mayAcknowledge,
      isLost,
    },
    onWarning: (m) => onLog(`range ${range}: ${m}`),
    onNote: (m) => onLog(`range ${range}: ${m}`),
  };
  return { store, compactor, options };
}

/** Where range `range`'s memtable logs go, by LogC mode (doc/durability.md: what each mode survives). */
export function logStoreFor(pool: StocPool, settings: Settings, range: number, onLog: (line: string) => void, strictUntil: number): LogStore {
  const { logMode, logReplicas, memtableBytes } = settings;
  switch (logMode) {
    case 'disk': return new StocLogStore(pool, range, logReplicas, onLog, strictUntil);
    case 'memory': return new MemoryLogStore(pool, range, logReplicas, { regionBytes: memtableBytes, onLog, strictUntil });
    case 'memory+disk': return new MemoryDiskLogStore(pool, range, logReplicas, { regionBytes: memtableBytes, onLog, strictUntil });
    case 'none': return new NoLogStore();
  }
}
