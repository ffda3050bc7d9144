/**
 * The cluster configuration the coordinator holds (DESIGN.md §7): ranges (key intervals) →
 * LTC, the members and their addresses, LogC and placement settings. Its `id` grows with
 * every change; clients and LTCs compare ids to notice they are out of date.
 *
 * Pure functions only: the coordinator persists and serves configurations, everyone else
 * reads them.
 */
import { NovaError } from '../common/errors.js';
import { compareBytes } from '../common/internal-key.js';
import { defaultSettings } from './knobs.js';
import { layerFrom, type CacheLayer, type CacheMode } from './gemini.js';

export type Role = 'ltc' | 'stoc' | 'cache';
export type LogMode = 'disk' | 'memory' | 'memory+disk' | 'none';
export type Placement = 'power-of-d' | 'random' | 'round-robin';
/** Where compaction merges run: offloaded to StoCs, or on the LTC (for comparison). */
export type CompactionSite = 'stoc' | 'ltc';

export interface Member {
  role: Role;
  id: number;
  /** LTC: HOST:PORT of its client server. StoC: its sealed fabric worker address, base64. */
  address: string;
  pid: number;
  host: string;
  /** Which process registered it (random per process): a new one means a restart. */
  incarnation?: string;
  /** StoC: being drained (`nova stoc remove`): its files are read and copied away, and no new one goes to it. */
  draining?: boolean;
  /**
   * StoC: registered and not yet heard from by a heartbeat. No file is placed on it meanwhile, so
   * it holds none, and a range's open does not wait for it (one that never comes up blocks nothing).
   */
  fresh?: boolean;
}

export interface RangeInfo {
  id: number;
  /** Inclusive lower bound; empty for the first range. */
  start: Buffer;
  /** Exclusive upper bound; undefined for the last range. */
  end?: Buffer;
  ltc: number;
  /**
   * Grows each time the range gets a new LTC (the configuration id that gave it): StoCs refuse
   * writes to the range's files from an LTC that opened it under an older one (fencing).
   */
  epoch: number;
  /**
   * A move in progress: the LTC that still holds the range. `ltc` opens it only once this one
   * has let it go (closed its engine, so its logs and MANIFEST are final) and the coordinator
   * has cleared the field (doc/decisions/range-moves.md).
   */
  from?: number;
  /**
   * A split or merge in progress: keys [start, end) of this range are still being copied in from
   * range `from`'s engine, on the same LTC. Until the coordinator clears the field they are read
   * there and their writes refused (doc/decisions/range-splits.md).
   */
  fill?: Fill;
}

export interface Fill {
  from: number;
  start: Buffer;
  end?: Buffer;
}

/** The cluster's knobs: what each means, its flag and default are in knobs.ts. */
export type LtcVariant = 'nova' | 'nova-r' | 'nova-s';

export interface Settings {
  /** LogC mode and replicas of each log. */
  logMode: LogMode;
  logReplicas: number;
  /** ρ: StoCs one SSTable's bytes are scattered over, and how they are chosen. */
  scatter: number;
  /** R: copies of each fragment of a table, on distinct StoCs. */
  tableReplicas: number;
  /** Data fragments kept once with an XOR parity fragment, the metadata in R copies (fragments.ts). */
  parity: boolean;
  /** A StoC silent this long is removed as dead (with more than one copy of each table; 0: never). */
  stocDeadMs: number;
  /** Bytes per second an LTC re-reads of its tables' copies to find damage (0: none). */
  scrubBytesPerSec: number;
  placement: Placement;
  /** Engine knobs each range's LSM-tree opens with. */
  memtableBytes: number;
  activeMemtables: number;
  /** A memtable with fewer unique keys is merged instead of flushed (EngineOptions.mergeUnderKeys; 0: never). */
  mergeUnderKeys: number;
  /** Memory of each range's lookup index (EngineOptions.lookupIndexBytes; 0: none). */
  lookupIndexBytes: number;
  /** Which LTC: Nova-LSM's, or an ablation of the paper's Figure 4.8 (EngineOptions.ltcVariant). */
  ltcVariant: LtcVariant;
  /** Scans merge only the sources of each Drange's interval (EngineOptions.rangeIndex). */
  rangeIndex: boolean;
  /** Dranges follow the writes (EngineOptions.reorganization). */
  reorganization: boolean;
  /** γ: Tranges per Drange (EngineOptions.trangesPerDrange). */
  trangesPerDrange: number;
  maxMemtables: number;
  l0Trigger: number;
  /** L0 tables from which writes are slowed (EngineOptions.l0SlowdownTrigger; 0: 2 × l0Trigger). */
  l0SlowdownTrigger: number;
  /** L0 tables that start a compaction once scans read L0 (EngineOptions.l0ScanTrigger). */
  l0ScanTrigger: number;
  /** Milliseconds without a write after which L0 is merged whatever its size (EngineOptions.idleCompactionMs). */
  idleCompactionMs: number;
  /** A client session that sent a range no write for this long expires there (EngineOptions.sessionTimeoutMs). */
  sessionTimeoutMs: number;
  /** An LTC silent this long loses its ranges; one that has not renewed its lease this long serves nothing. */
  ltcLeaseMs: number;
  /** Rebalancing moves ranges off LTCs loaded more than this percent above the mean. */
  rebalanceThresholdPct: number;
  /** The coordinator rebalances this often on its own (0: never). */
  autoRebalanceMs: number;
  sync: boolean;
  compaction: CompactionSite;
  /** Compaction jobs one range runs at once (EngineOptions.compactionJobs). */
  compactionJobs: number;
  /** Offloaded compactions a StoC runs at once; more are answered BUSY. */
  stocCompactions: number;
  /** Free disk a StoC keeps for logs and MANIFESTs: tables that would leave less are refused. */
  stocReserveBytes: number;
  /** Memory of each StoC for offloaded compactions (jobs beyond it while another runs are BUSY). */
  stocMemoryBytes: number;
  /** Memory each StoC lends to in-memory logs. */
  stocLogMemoryBytes: number;
  /** The coordinator's JavaScript heap at most. */
  coordinatorMemoryBytes: number;
  /** Gemini: each cache instance's memory for entries. */
  cacheMemoryBytes: number;
  /** Memory of each LTC, shared by its ranges (EngineOptions.memoryBudgetBytes each); 0: tables held whole. */
  ltcMemoryBytes: number;
  /** Gemini: fragments the key space is hashed into (gemini.ts). */
  cacheFragments: number;
  /** Gemini: how instances recover (gemini.ts CACHE_MODES). */
  cacheMode: CacheMode;
  /** Gemini: a cache instance silent this long loses its fragments to a secondary; one that has not renewed serves nothing. */
  cacheLeaseMs: number;
}

export interface ClusterConfig {
  id: number;
  ranges: RangeInfo[];
  /** The largest range id ever given: ids are never used twice (a range's files carry its id). */
  lastRange: number;
  /** StoCs removed from the cluster (`nova stoc remove`); their ids are never used again. */
  removedStocs?: number[];
  /**
   * Of them, those removed as dead (`--dead`): a table with a fragment on one is lost. A table
   * on a drained one is not (a drain leaves none there): reading it fails, loudly.
   */
  deadStocs?: number[];
  members: Member[];
  settings: Settings;
  /** The Gemini cache layer, once a cache instance registered (gemini.ts). */
  cache?: CacheLayer;
}

/** Every knob's default (knobs.ts). */
export const DEFAULT_SETTINGS: Settings = defaultSettings();

/** Ranges cut at `splits` (ascending, distinct), assigned round-robin to LTCs 1..ltcs. */
export function makeRanges(splits: Buffer[], ltcs: number): RangeInfo[] {
  for (let i = 1; i < splits.length; i++) {
    if (compareBytes(splits[i - 1], 0, splits[i - 1].length, splits[i], 0, splits[i].length) >= 0) {
      throw new NovaError('BAD_ARGUMENT', 'split keys must be distinct and in ascending order');
    }
  }
  if (splits.some((s) => s.length === 0)) throw new NovaError('BAD_ARGUMENT', 'a split key cannot be empty');
  const bounds = [Buffer.alloc(0), ...splits];
  return bounds.map((start, i) => ({ id: i + 1, start, end: splits[i], ltc: (i % ltcs) + 1, epoch: 1 }));
}

/** The range holding `key`. */
export function rangeOf(config: ClusterConfig, key: Uint8Array): RangeInfo {
  const rs = config.ranges;
  let lo = 0;
  let hi = rs.length - 1;
  while (lo < hi) { // the last range whose start <= key
    const mid = (lo + hi + 1) >> 1;
    const s = rs[mid].start;
    if (compareBytes(s, 0, s.length, key, 0, key.length) <= 0) lo = mid;
    else hi = mid - 1;
  }
  return rs[lo];
}

export function memberOf(config: ClusterConfig, role: Role, id: number): Member | undefined {
  return config.members.find((m) => m.role === role && m.id === id);
}

/**
 * The configuration after range `range` starts moving to LTC `to`: the next id, the range on
 * `to`, and `from` naming its LTC until that one lets it go. BAD_ARGUMENT for a range or LTC the
 * configuration does not have; BUSY for a range already moving.
 */
export function startMove(config: ClusterConfig, range: number, to: number): ClusterConfig {
  const r = rangeById(config, range);
  if (!memberOf(config, 'ltc', to)) throw new NovaError('BAD_ARGUMENT', `there is no LTC ${to} (LTCs: ${config.members.filter((m) => m.role === 'ltc').map((m) => m.id).join(', ') || 'none'})`);
  if (r.from !== undefined) throw new NovaError('BUSY', `range ${range} is moving from LTC ${r.from} to LTC ${r.ltc}; wait until it is done`);
  refuseFilling(config, r);
  if (r.ltc === to) throw new NovaError('BAD_ARGUMENT', `range ${range} is on LTC ${to} already`);
  return withRange(config, { ...r, ltc: to, from: r.ltc });
}

/**
 * The configuration after the LTC a moving range was leaving let it go (or died): its new LTC
 * may open it, under a new epoch. Undefined if it is not moving.
 */
export function endMove(config: ClusterConfig, range: number): ClusterConfig | undefined {
  const r = config.ranges.find((x) => x.id === range);
  if (r?.from === undefined) return undefined;
  return withRange(config, { ...settled(r), epoch: config.id + 1 });
}

/**
 * The configuration after a move of `range` away from LTC `from` is given up: the range stays
 * there, under a new epoch (that LTC reopens what it was closing). Undefined if the range is
 * not moving away from `from` (the move ended some other way).
 */
export function abandonMove(config: ClusterConfig, range: number, from: number): ClusterConfig | undefined {
  const r = config.ranges.find((x) => x.id === range);
  if (r?.from !== from) return undefined;
  return withRange(config, { ...settled(r), ltc: from, epoch: config.id + 1 });
}

/** BUSY if `r` is being filled, or is what another range is filled from (the two stay on one LTC until it is done). */
function refuseFilling(config: ClusterConfig, r: RangeInfo): void {
  if (r.fill) throw new NovaError('BUSY', `range ${r.id} is taking in keys from range ${r.fill.from} (a split or merge); wait until it is done`);
  const into = config.ranges.find((x) => x.fill?.from === r.id);
  if (into) throw new NovaError('BUSY', `range ${into.id} is taking in keys from range ${r.id} (a split or merge); wait until it is done`);
}

/**
 * The configuration after range `range` starts splitting at `at`: it keeps [start, at), and a
 * new range (the next id) takes [at, end) on the same LTC, filled from it. BAD_ARGUMENT for a
 * range the configuration does not have or a key not strictly inside it; BUSY while it moves
 * or fills.
 */
export function startSplit(config: ClusterConfig, range: number, at: Buffer): ClusterConfig {
  const r = rangeById(config, range);
  if (r.from !== undefined) throw new NovaError('BUSY', `range ${range} is moving from LTC ${r.from} to LTC ${r.ltc}; wait until it is done`);
  refuseFilling(config, r);
  const inside = compareBytes(r.start, 0, r.start.length, at, 0, at.length) < 0 &&
    (r.end === undefined || compareBytes(at, 0, at.length, r.end, 0, r.end.length) < 0);
  if (!inside) throw new NovaError('BAD_ARGUMENT', `a split key must lie strictly inside range ${range}'s interval, after its first key`);
  const id = config.lastRange + 1;
  const next = config.id + 1;
  const right: RangeInfo = { id, start: at, end: r.end, ltc: r.ltc, epoch: next, fill: { from: range, start: at, end: r.end } };
  const ranges = config.ranges.flatMap((x) => (x.id === range ? [{ ...x, end: at }, right] : [x]));
  return { ...config, id: next, lastRange: id, ranges };
}

/**
 * The configuration after range `into` starts taking in the adjacent range `from` on its LTC:
 * `into` covers both intervals and is filled from `from`, which leaves the configuration (its
 * LTC keeps its engine open for the fill). BAD_ARGUMENT unless both exist, are adjacent and on
 * one LTC; BUSY while either moves or fills.
 */
export function startMerge(config: ClusterConfig, into: number, from: number): ClusterConfig {
  const a = rangeById(config, into);
  const b = rangeById(config, from);
  if (into === from) throw new NovaError('BAD_ARGUMENT', 'a range cannot be merged with itself');
  for (const r of [a, b]) {
    if (r.from !== undefined) throw new NovaError('BUSY', `range ${r.id} is moving from LTC ${r.from} to LTC ${r.ltc}; wait until it is done`);
    refuseFilling(config, r);
  }
  if (a.ltc !== b.ltc) throw new NovaError('BAD_ARGUMENT', `ranges ${into} and ${from} are on LTCs ${a.ltc} and ${b.ltc}: move one first (nova range move ${from} --to ${a.ltc})`);
  const same = (x: Buffer | undefined, y: Buffer): boolean => x !== undefined && x.equals(y);
  const before = same(b.end, a.start);
  if (!before && !same(a.end, b.start)) throw new NovaError('BAD_ARGUMENT', `ranges ${into} and ${from} are not adjacent`);
  const merged: RangeInfo = { ...a, start: before ? b.start : a.start, end: before ? a.end : b.end, fill: { from, start: b.start, end: b.end } };
  return { ...config, id: config.id + 1, ranges: config.ranges.filter((x) => x.id !== from).map((x) => (x.id === into ? merged : x)) };
}

/**
 * The configuration with StoC `stoc` draining: no new file goes to it, and the LTCs copy what
 * it holds elsewhere. BAD_ARGUMENT for a StoC the configuration does not have, or the last one.
 */
export function startDrain(config: ClusterConfig, stoc: number): ClusterConfig {
  refuseStocRemoval(config, stoc);
  return { ...config, id: config.id + 1, members: config.members.map((m) => (m.role === 'stoc' && m.id === stoc ? { ...m, draining: true } : m)) };
}

/**
 * The configuration without StoC `stoc`, whose id is never used again; `dead`: what it held is
 * lost (deadStocs). BAD_ARGUMENT as startDrain.
 */
export function removeStoc(config: ClusterConfig, stoc: number, dead: boolean): ClusterConfig {
  refuseStocRemoval(config, stoc);
  const plus = (ids: number[] | undefined): number[] => [...new Set([...(ids ?? []), stoc])].sort((a, b) => a - b);
  return {
    ...config, id: config.id + 1,
    members: config.members.filter((m) => !(m.role === 'stoc' && m.id === stoc)),
    removedStocs: plus(config.removedStocs),
    ...(dead ? { deadStocs: plus(config.deadStocs) } : {}),
  };
}

function refuseStocRemoval(config: ClusterConfig, stoc: number): void {
  const stocs = config.members.filter((m) => m.role === 'stoc');
  if (!stocs.some((m) => m.id === stoc)) {
    const gone = config.removedStocs?.includes(stoc) ? ' (it was removed already)' : '';
    throw new NovaError('BAD_ARGUMENT', `there is no StoC ${stoc}${gone} (StoCs: ${stocs.map((m) => m.id).join(', ') || 'none'})`);
  }
  if (stocs.length === 1) throw new NovaError('BAD_ARGUMENT', `StoC ${stoc} is the only StoC: its files would have nowhere to go (add a StoC first)`);
}

/**
 * The configuration after range `range`'s fill is done: it serves all its interval. Undefined
 * if it is not filling, or (given `expect`) is filling something else: a late answer about an
 * earlier fill must not end a later one.
 */
export function endFill(config: ClusterConfig, range: number, expect?: Fill): ClusterConfig | undefined {
  const r = config.ranges.find((x) => x.id === range);
  if (!r?.fill) return undefined;
  const same = (a: Buffer | undefined, b: Buffer | undefined): boolean => (a === undefined ? b === undefined : b !== undefined && a.equals(b));
  if (expect && (r.fill.from !== expect.from || !same(r.fill.start, expect.start) || !same(r.fill.end, expect.end))) return undefined;
  const { fill: _, ...rest } = r;
  return withRange(config, rest);
}

function rangeById(config: ClusterConfig, range: number): RangeInfo {
  const r = config.ranges.find((x) => x.id === range);
  if (!r) throw new NovaError('BAD_ARGUMENT', `there is no range ${range} (ranges: ${config.ranges.map((x) => x.id).join(', ')})`);
  return r;
}

/** `r` with no move in progress. */
function settled(r: RangeInfo): RangeInfo {
  const { from: _, ...rest } = r;
  return rest;
}

/**
 * The configuration after LTCs `dead` lost their leases: moves away from them end, and each of
 * their ranges goes, under a new epoch, to the live LTC (of `live`) with the fewest ranges.
 * Undefined when nothing changes (no range of theirs, or no live LTC to take one).
 */
export function failOver(config: ClusterConfig, dead: ReadonlySet<number>, live: readonly number[]): ClusterConfig | undefined {
  const id = config.id + 1;
  const count = new Map(live.map((l) => [l, 0]));
  for (const r of config.ranges) if (count.has(r.ltc)) count.set(r.ltc, count.get(r.ltc)! + 1);
  let changed = false;
  const ranges = config.ranges.map((r) => {
    let x = r;
    if (x.from !== undefined && dead.has(x.from)) x = { ...settled(x), epoch: id };
    if (dead.has(x.ltc) && x.from !== undefined && count.has(x.from)) {
      x = { ...settled(x), ltc: x.from, epoch: id }; // moving into a dead LTC: the one it was leaving keeps it
    } else if (dead.has(x.ltc) && count.size > 0) {
      const to = [...count].sort((a, b) => a[1] - b[1] || a[0] - b[0])[0][0];
      count.set(to, count.get(to)! + 1);
      x = { ...x, ltc: to, epoch: id };
    }
    changed ||= x !== r;
    return x;
  });
  // A range being filled stays with the range it is filled from.
  const together = ranges.map((x) => {
    const src = x.fill ? ranges.find((y) => y.id === x.fill!.from) : undefined;
    return src && src.ltc !== x.ltc ? { ...x, ltc: src.ltc, epoch: id } : x;
  });
  return changed ? { ...config, id, ranges: together } : undefined;
}

function withRange(config: ClusterConfig, r: RangeInfo): ClusterConfig {
  return { ...config, id: config.id + 1, ranges: config.ranges.map((x) => (x.id === r.id ? r : x)) };
}

/** JSON form: keys as hex. */
export function configToJson(c: ClusterConfig): unknown {
  const hex = (b: Buffer | undefined): string | undefined => b?.toString('hex');
  return { ...c, ranges: c.ranges.map((r) => ({ ...r, start: hex(r.start), end: hex(r.end), ...(r.fill ? { fill: { ...r.fill, start: hex(r.fill.start), end: hex(r.fill.end) } } : {}) })) };
}

export function configFromJson(j: unknown, what: string): ClusterConfig {
  const c = j as Omit<ClusterConfig, 'ranges'> & { ranges: Array<{ id: number; start: string; end?: string | null; ltc: number; epoch?: number; from?: number; fill?: unknown }> };
  if (!c || typeof c.id !== 'number' || !Array.isArray(c.ranges) || !Array.isArray(c.members) || typeof c.settings !== 'object') {
    throw new NovaError('CORRUPTION', `${what}: not a cluster configuration`);
  }
  const hex = (x: unknown): Buffer | undefined => (typeof x === 'string' ? Buffer.from(x, 'hex') : undefined);
  const ranges = c.ranges.map((r) => decodedRange(r, hex(r.start) ?? Buffer.alloc(0), hex(r.end), hex));
  return {
    id: c.id, members: c.members, settings: { ...DEFAULT_SETTINGS, ...c.settings }, ranges, lastRange: lastRangeOf(c.lastRange, ranges),
    ...idsOf('removedStocs', c.removedStocs), ...idsOf('deadStocs', c.deadStocs), ...cacheOf(c.cache, what),
  };
}

function cacheOf(x: unknown, what: string): { cache?: CacheLayer } {
  const cache = layerFrom(x, what);
  return cache ? { cache } : {};
}

/** The wire form (msgpack carries Buffers); normalises what msgpack decodes. */
export function configFromWire(w: unknown): ClusterConfig {
  const c = w as ClusterConfig;
  if (!c || typeof c.id !== 'number' || !Array.isArray(c.ranges)) throw new NovaError('CORRUPTION', 'configuration from the coordinator is malformed');
  const bytes = (x: unknown): Buffer | undefined => (x instanceof Uint8Array ? Buffer.from(x) : undefined);
  const ranges = c.ranges.map((r) => decodedRange(r, bytes(r.start) ?? Buffer.alloc(0), bytes(r.end), bytes));
  const { cache: _, ...rest } = c;
  // Knobs an older coordinator does not know take their defaults, as a configuration file's do.
  return { ...rest, settings: { ...DEFAULT_SETTINGS, ...c.settings }, ranges, lastRange: lastRangeOf(c.lastRange, ranges), ...idsOf('removedStocs', c.removedStocs), ...idsOf('deadStocs', c.deadStocs), ...cacheOf(c.cache, 'configuration from the coordinator') };
}

/** A list of StoC ids as read, under `field` (absent if it is not a list). */
function idsOf<K extends 'removedStocs' | 'deadStocs'>(field: K, x: unknown): Partial<Record<K, number[]>> {
  return Array.isArray(x) ? { [field]: x.filter((n): n is number => typeof n === 'number') } as Partial<Record<K, number[]>> : {};
}

/** A configuration from before `lastRange`: its largest range id. */
function lastRangeOf(stored: unknown, ranges: RangeInfo[]): number {
  return Math.max(typeof stored === 'number' ? stored : 0, ...ranges.map((r) => r.id));
}

/** A range read from a file or the wire, with its bounds decoded: only its own fields, typed. */
function decodedRange(r: { id: number; ltc: number; epoch?: unknown; from?: unknown; fill?: unknown }, start: Buffer, end: Buffer | undefined,
  key: (x: unknown) => Buffer | undefined): RangeInfo {
  const f = r.fill as { from?: unknown; start?: unknown; end?: unknown } | undefined | null;
  return {
    // A configuration from before epochs: every range at its first.
    id: r.id, ltc: r.ltc, epoch: typeof r.epoch === 'number' ? r.epoch : 1, start, end,
    ...(typeof r.from === 'number' ? { from: r.from } : {}),
    ...(f && typeof f.from === 'number' ? { fill: { from: f.from, start: key(f.start) ?? Buffer.alloc(0), end: key(f.end) } } : {}),
  };
}
