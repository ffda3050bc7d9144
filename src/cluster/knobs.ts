/**
 * Every cluster knob, declared once (STYLE.md 5): its key in the cluster's settings
 * (config.json), its flag, type, default, meaning and trade-off. The cluster's defaults
 * (DEFAULT_SETTINGS), the flags of `nova up` and `nova coordinator`, the engine's defaults for
 * the knobs it shares (engine-options.ts) and the knob table in README.md derive from it.
 *
 * A cluster's settings are fixed when it is created: none can change live yet, so a knob given
 * to an existing cluster must equal what it has (settingsConflicts), else the command refuses.
 */
import { NovaError } from '../common/errors.js';
import type { ClusterConfig, Settings } from './config.js';
import { CACHE_MODES } from './gemini.js';

/** bool: a flag, off unless given (--sync); switch: --flag on|off, for what is on by default. */
export type KnobType = 'bytes' | 'count' | 'ms' | 'bool' | 'switch' | 'choice';

export interface Knob<K extends keyof Settings = keyof Settings> {
  key: K;
  /** The flag of `nova up` and `nova coordinator`, without its dashes. */
  flag: string;
  /** The paper's name for it, when it has one (DESIGN.md §9). */
  greek?: string;
  type: KnobType;
  /** The smallest value a count, size or duration may take. */
  min?: 0 | 1;
  /** The largest, where there is one. */
  max?: number;
  choices?: readonly string[];
  default: Settings[K];
  /** How the default reads when it is derived from another knob. */
  defaultText?: string;
  meaning: string;
  /** What a larger value (or the other choice) buys and costs, in a clause. */
  tradeoff: string;
  /** Each range's engine opens with it (EngineOptions has the same name). */
  engine?: true;
}

const MiB = 1024 * 1024;

function knob<K extends keyof Settings>(k: Knob<K>): Knob<K> {
  return k;
}

export const KNOBS: readonly Knob[] = [
  knob({
    key: 'memtableBytes', engine: true, flag: 'memtable-bytes', greek: 'τ', type: 'bytes', min: 1, default: 16 * MiB,
    meaning: 'a memtable is retired (and becomes an L0 table) once it holds this many bytes; also the target size of SSTables',
    tradeoff: 'larger: fewer, larger flushes and compactions; more memory per range and a longer log to replay',
  }),
  knob({
    key: 'activeMemtables', engine: true, flag: 'active-memtables', greek: 'α', type: 'count', min: 1, default: 1,
    meaning: 'active memtables per range, one per Drange, cut from a sample of the first memtable to fill',
    tradeoff: 'more: L0 tables that do not overlap, for parallel L0 compactions; more logs, and with --sync more fdatasyncs per group commit',
  }),
  knob({
    key: 'maxMemtables', engine: true, flag: 'max-memtables', greek: 'δ', type: 'count', min: 1, default: 2, defaultText: '2α',
    meaning: 'memtables per range, active and waiting for their flush; writes stall when a full one cannot be retired',
    tradeoff: 'more: bursts ride out slow flushes; more memory: δ × τ per range (32 MiB by default), reserved from --ltc-memory',
  }),
  knob({
    key: 'trangesPerDrange', engine: true, flag: 'tranges-per-drange', greek: 'γ', type: 'count', min: 1, default: 16,
    meaning: 'Tranges each Drange is cut into; writes are counted per Trange, and a hot Drange hands edge Tranges to a neighbour (a minor reorganization)',
    tradeoff: 'more: finer moves, closer balance without a major reorganization; a counter and a split key per Trange (γ × θ of them per range, a few KiB)',
  }),
  knob({
    key: 'reorganization', engine: true, flag: 'reorganization', type: 'switch', default: true,
    meaning: 'Dranges follow the writes: minor and major reorganizations (off: the Dranges cut from the first memtable stay)',
    tradeoff: 'off: for comparison (Nova-LSM-S keeps its Dranges)',
  }),
  knob({
    key: 'mergeUnderKeys', engine: true, flag: 'merge-under-keys', type: 'count', min: 0, default: 100,
    meaning: 'an immutable memtable of one Drange holding fewer unique keys than this is merged with its Drange\'s other immutable ones into a new memtable with a new log, instead of written to L0 (0: never)',
    tradeoff: 'more: hot keys rewritten in memory instead of in L0 and every compaction below; a merged memtable waits in memory (at most one per Drange)',
  }),
  knob({
    key: 'lookupIndexBytes', engine: true, flag: 'lookup-index-bytes', type: 'bytes', min: 0, default: 0,
    meaning: 'memory of each range\'s lookup index: for each key in a memtable or L0 table, which one holds its newest version, so a get reads that one only (0: no index); past it the index stops taking keys and gets search as without one',
    tradeoff: 'more: the index covers more keys (about 100 bytes each); a write costs a map update',
  }),
  knob({
    key: 'rangeIndex', engine: true, flag: 'range-index', type: 'switch', default: true,
    meaning: 'a scan merges, one Drange\'s interval at a time, only the memtables of that Drange and the L0 tables meeting it (off: every memtable and L0 table)',
    tradeoff: 'off: for comparison (Nova-LSM-S has no range index)',
  }),
  knob({
    key: 'ltcVariant', engine: true, flag: 'ltc-variant', type: 'choice', choices: ['nova', 'nova-r', 'nova-s'], default: 'nova',
    meaning: 'the LTC: nova; or the paper\'s ablations (Figure 4.8), nova-r (no Dranges: a write goes to any active memtable, in turn; gets search every memtable) and nova-s (Dranges cut once, no reorganization, no merge instead of flush, no lookup or range index)',
    tradeoff: 'nova-r, nova-s: for comparison only; they turn the features off whatever their own knobs say',
  }),
  knob({
    key: 'l0Trigger', engine: true, flag: 'l0-trigger', type: 'count', min: 1, default: 8,
    meaning: 'L0 tables that make L0 due for a compaction into L1 while nothing scans (a table of several memtables flushed as one, as Nova-LSM-R and duplicated Dranges write, counts as that many)',
    tradeoff: 'more: L1 is rewritten less often per byte written; reads probe more L0 tables',
  }),
  knob({
    key: 'l0SlowdownTrigger', engine: true, flag: 'l0-slowdown-trigger', type: 'count', min: 0, default: 0, defaultText: '0: 2 × l0Trigger',
    meaning: 'L0 tables from which each range slows its writes to a rate that every flush and compaction adjusts, down while L0 grows, up once it shrinks (doc/decisions/write-slowdown.md); 3 × l0Trigger, where writes stop for L0, turns it off',
    tradeoff: 'fewer: compactions that fall behind cost every write a little sooner, and writes seldom stop at L0\'s stop trigger; more: short bursts run at full speed into deeper compaction debt',
  }),
  knob({
    key: 'l0ScanTrigger', engine: true, flag: 'l0-scan-trigger', type: 'count', min: 1, default: 4,
    meaning: 'the same once scans have used up the oldest L0 table\'s allowance (one scan per 16 KiB of it, at least 100); lowered to l0Trigger if above it',
    tradeoff: 'fewer: scans, which seek every L0 table, meet fewer of them; more rewriting of L1',
  }),
  knob({
    key: 'idleCompactionMs', engine: true, flag: 'idle-compaction-ms', type: 'ms', min: 0, default: 250,
    meaning: 'once no write has reached a range for this long, its L0 is merged into L1 whatever its size (0: never)',
    tradeoff: 'shorter: reads stop probing L0 sooner after a burst; a pause with few L0 tables rewrites L1 for little new data',
  }),
  knob({
    key: 'sessionTimeoutMs', engine: true, flag: 'session-timeout-ms', type: 'ms', min: 1, default: 300_000,
    meaning: 'a client session that sent a range no write for this long (the range\'s running time) expires there; the client starts a new one. A NovaClient\'s deadline must be under half of it',
    tradeoff: 'longer: clients may retry for longer; the session table holds idle clients longer',
  }),
  knob({
    key: 'ltcLeaseMs', flag: 'ltc-lease-ms', type: 'ms', min: 1, default: 3_000,
    meaning: 'an LTC whose heartbeats stop for this long loses its ranges to the live LTCs; one that has not renewed its lease for this long serves nothing until it does',
    tradeoff: 'longer: a pause (GC, a slow coordinator) costs no failover; a dead LTC\'s ranges wait longer for another',
  }),
  knob({
    key: 'rebalanceThresholdPct', flag: 'rebalance-threshold-pct', type: 'count', min: 1, default: 20,
    meaning: 'nova rebalance moves ranges off LTCs whose load (requests/s, plus bytes written/s per KiB, over 10 s) is more than this percent above the mean',
    tradeoff: 'larger: fewer moves (each refuses its range\'s requests for a moment); a less even load',
  }),
  knob({
    key: 'autoRebalanceMs', flag: 'auto-rebalance-ms', type: 'ms', min: 0, default: 0,
    meaning: 'the coordinator rebalances this often on its own (0: only when asked, and when an LTC joins or leaves)',
    tradeoff: 'shorter: load followed sooner; more moves',
  }),
  knob({
    key: 'scatter', flag: 'scatter', greek: 'ρ', type: 'count', min: 1, default: 1,
    meaning: 'StoCs one SSTable\'s data blocks are cut over (its filter and index go to one more)',
    tradeoff: 'more: a table\'s reads and writes spread over more disks; more requests per table',
  }),
  knob({
    key: 'tableReplicas', flag: 'table-replicas', type: 'count', min: 1, default: 2,
    meaning: 'copies of each fragment of an SSTable (data and metadata), each on a StoC of its own; reads go to another copy when a StoC is down or a copy fails its checksum, and a StoC removed as dead has its copies made again elsewhere. With fewer than ρ × this StoCs up, tables are written with the copies there is room for',
    tradeoff: 'more: survives more StoCs lost for good; each flush and compaction writes that many times the bytes (doc/decisions/table-redundancy.md)',
  }),
  knob({
    key: 'parity', flag: 'parity', type: 'bool', default: false,
    meaning: 'each SSTable\'s ρ data fragments are kept once and one XOR parity fragment over them on a StoC of its own, the metadata in --table-replicas copies (the paper\'s hybrid); a lost or damaged data fragment is rebuilt from the parity and the others. Needs ρ + R + 1 StoCs up, else tables are written with copies',
    tradeoff: 'on: writes 1 + 1/ρ times a table\'s data instead of R times; a read of a lost fragment reads all the others (doc/decisions/table-redundancy.md)',
  }),
  knob({
    key: 'stocDeadMs', flag: 'stoc-dead-ms', type: 'ms', min: 0, default: 600_000,
    meaning: 'a StoC silent this long is removed as dead, as `nova stoc remove --dead` does, and the copies it held are stored again on the others; never with --table-replicas 1, where that would drop tables (0: only by hand)',
    tradeoff: 'shorter: full redundancy back sooner after a disk dies; a StoC down for longer maintenance is taken out and its data copied again',
  }),
  knob({
    key: 'scrubBytesPerSec', flag: 'scrub-rate', type: 'bytes', min: 0, default: 4 * MiB,
    meaning: 'bytes per second each LTC re-reads of its tables\' copies on the StoCs, checking each against the checksum its MANIFEST records; a damaged copy is written again from a good one (0: no scrub; reads still find damage)',
    tradeoff: 'more: damage found sooner; more reads from the StoCs\' disks',
  }),
  knob({
    key: 'placement', flag: 'placement', type: 'choice', choices: ['power-of-d', 'random', 'round-robin'], default: 'power-of-d',
    meaning: 'how the StoCs of a table are chosen: power-of-d samples 2ρ and keeps the least loaded',
    tradeoff: 'power-of-d: follows load at the cost of a load report per StoC',
  }),
  knob({
    key: 'logMode', flag: 'log-mode', type: 'choice', choices: ['disk', 'memory', 'memory+disk', 'none'], default: 'disk',
    meaning: 'LogC: where memtable logs live: StoC files (disk), StoC memory, both, or nowhere (doc/durability.md: what each survives)',
    tradeoff: 'memory: faster appends; a write is lost if every replica\'s StoC dies',
  }),
  knob({
    key: 'logReplicas', flag: 'log-replicas', greek: 'R', type: 'count', min: 1, default: 3,
    meaning: 'StoCs each memtable log and each range\'s MANIFEST is replicated on; an append is acknowledged by a majority',
    tradeoff: 'more: survives more StoC failures; more bytes written per write',
  }),
  knob({
    key: 'sync', engine: true, flag: 'sync', type: 'bool', default: false,
    meaning: 'fdatasync each write\'s log record on its StoCs before acknowledging it (off: a write survives the crash of any process, not a power loss of a majority of its log\'s StoCs)',
    tradeoff: 'on: survives power loss; an fdatasync per group commit per log',
  }),
  knob({
    key: 'compaction', flag: 'compaction', type: 'choice', choices: ['stoc', 'ltc'], default: 'stoc',
    meaning: 'where compaction merges run: stoc (each job offloaded to the least loaded StoC; the LTC merges a job no StoC could run) or ltc',
    tradeoff: 'stoc: the LTC\'s CPU stays with reads and writes; tables cross the fabric twice',
  }),
  knob({
    key: 'compactionJobs', engine: true, flag: 'compaction-jobs', type: 'count', min: 1, default: 1,
    meaning: 'compaction jobs one range runs at once: L0 cut at the gaps between Dranges, and deeper levels, in jobs that share no table',
    tradeoff: 'more: L0 drains faster after a burst, on more StoCs at once; more inputs held in memory at once',
  }),
  knob({
    key: 'stocCompactions', flag: 'stoc-compactions', type: 'count', min: 1, default: 2,
    meaning: 'offloaded compactions one StoC runs at once; a job sent to a StoC running this many is merged by its LTC instead',
    tradeoff: 'more: more L0 jobs merge in parallel; each holds its inputs in the StoC\'s memory, and the StoC\'s merge worker takes one at a time',
  }),
  knob({
    key: 'stocReserveBytes', flag: 'stoc-reserve', type: 'bytes', min: 0, default: 256 * MiB,
    meaning: 'free disk a StoC keeps for logs and MANIFESTs: it refuses a table (DISK_FAILED, as ENOSPC) that would leave less, so with every disk full flushes wait and writes are refused while logs, MANIFESTs and reads go on',
    tradeoff: 'more: room for more ranges\' logs while the disks are full; less of each disk for tables',
  }),
  knob({
    key: 'stocMemoryBytes', flag: 'stoc-memory', type: 'bytes', min: 1, default: 1024 * MiB,
    meaning: 'memory of each StoC for offloaded compactions: the inputs a job holds whole while it merges, and its outputs; a job that would take the StoC past it while another runs is answered BUSY and its LTC merges it (a job alone always runs, since its LTC would hold the same inputs); a quarter of it at most is kept between jobs. The StoC\'s file buffer (an 8 MiB window per peer) and memory logs come on top',
    tradeoff: 'more: larger jobs run side by side on one StoC; more of the machine\'s memory',
  }),
  knob({
    key: 'stocLogMemoryBytes', flag: 'stoc-log-memory', type: 'bytes', min: 1, default: 1024 * MiB,
    meaning: 'memory each StoC lends to in-memory log files (--log-mode memory and memory+disk): R × τ per memtable whose log it keeps; a log past it is refused BUSY',
    tradeoff: 'more: more ranges\' memtables logged in one StoC\'s memory; more of the machine\'s memory, pinned',
  }),
  knob({
    key: 'coordinatorMemoryBytes', flag: 'coordinator-memory', type: 'bytes', min: 1, default: 256 * MiB,
    meaning: 'the coordinator\'s JavaScript heap at most (Node\'s --max-old-space-size, set by nova up when it starts the coordinator); what it keeps is bounded by its limits on members, ranges and history',
    tradeoff: 'more: room for more ranges and members; less: a leak shows sooner, as the coordinator\'s out-of-memory exit (nova up starts it again from its configuration) rather than as a machine short of memory',
  }),
  knob({
    key: 'cacheMemoryBytes', flag: 'cache-memory', type: 'bytes', min: 1, max: 1023 * MiB, default: 256 * MiB,
    meaning: 'Gemini cache: each instance\'s memory for entries, the least recently used evicted past it (its disk file may take four times it, under 2 GiB)',
    tradeoff: 'more: more of the working set cached, fewer reads reach the LTCs; more memory per instance and a longer recovery scan',
  }),
  knob({
    key: 'ltcMemoryBytes', flag: 'ltc-memory', type: 'bytes', min: 0, default: 2048 * MiB,
    meaning: 'memory of each LTC, shared evenly by the ranges it serves: their memtables (δ × τ), lookup indexes, tables\' filters and indexes, and a block cache in the rest, which keeps each table the LTC writes or opens whole while it has room and evicts the least recently used; blocks not cached are read from the StoCs (0: no budget, every table held whole)',
    tradeoff: 'more: more of the data cached, fewer reads wait for a StoC; more of the machine\'s memory. With one copy of each table (--table-replicas 1), a block not cached cannot be read while its StoC is down',
  }),
  knob({
    key: 'cacheFragments', flag: 'cache-fragments', type: 'count', min: 1, default: 64,
    meaning: 'Gemini cache: fragments the key space is hashed into; each has a primary cache instance, and a secondary while the primary is down',
    tradeoff: 'more: a failed instance\'s load spreads over more secondaries, and a lost dirty list discards less; more state in the configuration',
  }),
  knob({
    key: 'cacheMode', flag: 'cache-mode', type: 'choice', choices: CACHE_MODES, default: 'gemini-o+w',
    meaning: 'Gemini cache: how a returning instance\'s entries are recovered: dirty keys invalidated (gemini-i) or overwritten from the secondary (gemini-o), with the working set migrated from the secondary (+w) or not; volatile discards them, stale trusts them as they are (the unsafe strawman: it serves overwritten values)',
    tradeoff: 'o: fewer misses after a return; +w: the working set follows a shifting access pattern, at an extra lookup per miss while it migrates',
  }),
  knob({
    key: 'cacheLeaseMs', flag: 'cache-lease-ms', type: 'ms', min: 1, default: 3_000,
    meaning: 'Gemini cache: an instance whose heartbeats stop for this long loses its fragments to secondaries (transient mode); one that has not renewed its lease for this long serves nothing until it does',
    tradeoff: 'longer: a pause costs no failover; writes to a dead instance\'s fragments wait longer for a secondary',
  }),
];

/** The settings each range's engine opens with: the knobs marked `engine`. */
export function engineSettings(s: Settings): Partial<Settings> {
  return Object.fromEntries(KNOBS.filter((k) => k.engine).map((k) => [k.key, s[k.key]]));
}

/** The cluster's defaults, every knob's. */
export function defaultSettings(): Settings {
  return Object.fromEntries(KNOBS.map((k) => [k.key, k.default])) as unknown as Settings;
}

/** Settings of a new cluster from the knobs given (δ defaults to 2α). */
export function newSettings(given: Partial<Settings>): Settings {
  const s = { ...defaultSettings(), ...given };
  if (given.maxMemtables === undefined) s.maxMemtables = 2 * s.activeMemtables;
  const slow = s.l0SlowdownTrigger;
  if (slow !== 0 && !(slow > s.l0Trigger && slow <= 3 * s.l0Trigger)) {
    throw new NovaError('BAD_ARGUMENT', `--l0-slowdown-trigger ${slow} must be above --l0-trigger (${s.l0Trigger}) and at most 3 × it (${3 * s.l0Trigger}, where writes stop for L0), or 0 for 2 × --l0-trigger`);
  }
  return s;
}

/** Each knob given that differs from what the cluster has, as `--flag value (the cluster has X)`. */
export function settingsConflicts(stored: Settings, given: Partial<Settings>): string[] {
  const out: string[] = [];
  for (const k of KNOBS) {
    const v = given[k.key];
    if (v === undefined || v === stored[k.key]) continue;
    out.push(`--${k.flag} ${String(v)} (the cluster has ${String(stored[k.key])})`);
  }
  return out;
}

/**
 * What flags for a new cluster would change in existing cluster `c`: knobs that differ, and
 * split keys that cut other ranges. Empty when they agree (or were not given).
 */
export function clusterConflicts(c: ClusterConfig, given: Partial<Settings>, splits: Buffer[] | undefined): string[] {
  const out = settingsConflicts(c.settings, given);
  if (splits !== undefined) {
    const has = c.ranges.slice(1).map((r) => r.start.toString('utf8'));
    const asked = splits.map((b) => b.toString('utf8'));
    if (has.join('\u0000') !== asked.join('\u0000')) out.push(`ranges cut at [${asked.join(', ')}] (the cluster has [${has.join(', ')}])`);
  }
  return out;
}

/**
 * BAD_ARGUMENT naming what flags for a new cluster would change in existing cluster `c` (kept
 * at `where`), if anything: its settings are fixed when it is created.
 */
export function refuseConflicts(c: ClusterConfig, given: Partial<Settings>, splits: Buffer[] | undefined, where: string): void {
  const conflicts = clusterConflicts(c, given, splits);
  if (conflicts.length === 0) return;
  throw new NovaError('BAD_ARGUMENT', `${where}: the cluster exists, and its settings are fixed when it is created; ` +
    `not ${conflicts.join(', ')}. Leave those flags out, or start a new cluster in another directory`);
}

/** The default as `--help` and README.md show it. */
export function defaultText(k: Knob): string {
  if (k.defaultText) return k.defaultText;
  if (k.type === 'bool' || k.type === 'switch') return k.default ? 'on' : 'off';
  if (k.type === 'bytes' && typeof k.default === 'number' && k.default >= MiB && k.default % MiB === 0) return `${k.default / MiB} MiB`;
  return String(k.default);
}

/** README.md's knob table (between its knob-table markers), one row per knob. */
export function knobTable(): string {
  const rows = KNOBS.map((k) => {
    const name = `\`--${k.flag}\`${k.greek ? ` (${k.greek})` : ''} [${k.key}]`;
    return `| ${name} | ${defaultText(k)} | ${k.meaning} | ${k.tradeoff} |`;
  });
  return ['| flag [config.json key] | default | meaning | trade-off |', '|---|---|---|---|', ...rows].join('\n') + '\n';
}
