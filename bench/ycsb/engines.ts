/**
 * The stores the runner drives, behind one small interface. `nova-embedded` is Nova's
 * one-range engine in-process; the peers are the stores a user would pick instead, loaded
 * from optional dependencies: a missing one is reported by `available()`, never a crash.
 *
 * Every adapter gets the same treatment: Buffer keys and values, the same `sync` setting,
 * scans that return `count` entries from `start`, batched loads, and `settle()` after the
 * load (a full compaction, as a fair operator would run; LMDB has none to run).
 */
import type { EngineAdapter } from './kv-store.js';
import { leveldb, rocksdb9 } from './store-level.js';
import { lmdb } from './store-lmdb.js';
import { nova } from './store-nova.js';
import { novaEmbedded } from './store-nova-embedded.js';
import { rocksdb6 } from './store-rocksdb6.js';

export type { ClusterBenchOptions, EngineAdapter, KvStore, StoreOptions } from './kv-store.js';

export const ENGINES: readonly EngineAdapter[] = [nova, novaEmbedded, leveldb, rocksdb6, rocksdb9, lmdb];

export function engineByName(name: string): EngineAdapter {
  const e = ENGINES.find((x) => x.name === name);
  if (!e) throw new Error(`unknown engine "${name}": use one of ${ENGINES.map((x) => x.name).join(', ')}`);
  return e;
}
