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

/**
 * The engine `spec` names: an engine's name, or for an engine that takes settings its name and
 * `:flag=value` pairs (`nova:active-memtables=4:compaction-jobs=1`), the whole spec then its
 * name in reports, so one compare runs variants side by side.
 */
export function engineByName(spec: string): EngineAdapter {
  const [name, ...pairs] = spec.split(':');
  const e = ENGINES.find((x) => x.name === name);
  if (!e) throw new Error(`unknown engine "${name}": use one of ${ENGINES.map((x) => x.name).join(', ')}`);
  if (pairs.length === 0) return e;
  if (!e.checkSetting) throw new Error(`engine ${name} takes no settings ("${spec}")`);
  const settings = pairs.map((p): [string, string] => {
    const at = p.indexOf('=');
    if (at <= 0) throw new Error(`engine "${spec}": a setting is flag=value, not "${p}"`);
    const [flag, value] = [p.slice(0, at), p.slice(at + 1)];
    const why = e.checkSetting!(flag, value);
    if (why) throw new Error(`engine "${spec}": ${why}`);
    return [flag, value];
  });
  return { ...e, name: spec, open: (dir, o) => e.open(dir, { ...o, settings }) };
}
