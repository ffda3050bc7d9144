/**
 * Which compaction is due, as pure functions (LevelDB db/version_set.cc PickCompaction). The
 * LTC's engine decides; what a compaction keeps is merge-rule.ts.
 *
 * Levels: L0 tables may overlap (newest last); L1 and deeper are sorted and disjoint, with
 * size targets growing ×10 from `l1Bytes`. The picker takes the level with the highest
 * size/target ratio (L0: table count / `l0Trigger`, a table of several memtables counting as
 * that many) once it reaches 1, and a job there that no running compaction touches.
 */
import { TRAILER_BYTES, compareBytes, compareInternalKeys } from '../common/internal-key.js';
import type { TableMeta } from '../log/version-edit.js';

export const LEVELS = 7;

export interface LevelOptions {
  /** L0 table count that makes L0's score 1. */
  l0Trigger: number;
  /**
   * A memtable's bytes (τ): an L0 table larger than this counts as size / τ tables (memtables
   * flushed as one: a generation of Nova-LSM-R, a duplicated Drange's twins), so L0 is due at
   * the same bytes whatever its tables hold. Absent: every table counts as one.
   */
  memtableBytes?: number;
  /** Size target of L1 in bytes; each deeper level ×10. */
  l1Bytes: number;
}

export interface CompactionJob {
  level: number; // inputs come from here, outputs go to level + 1
  inputs: TableMeta[];
  overlapping: TableMeta[]; // from level + 1
}

function compareUser(a: Buffer, b: Buffer): number {
  return compareBytes(a, 0, a.length - TRAILER_BYTES, b, 0, b.length - TRAILER_BYTES);
}

export function levelTarget(level: number, o: LevelOptions): number {
  return o.l1Bytes * 10 ** (level - 1);
}

/**
 * Each level's score: L0's tables not being compacted (in memtables' worth) / l0Trigger; a
 * deeper level's bytes / its target.
 */
export function levelScores(levels: TableMeta[][], o: LevelOptions, busy: ReadonlySet<number> = NONE): number[] {
  // Rounded: a table of one memtable that overshot τ a little is still one.
  const worth = (t: TableMeta): number => (o.memtableBytes ? Math.max(1, Math.round(t.size / o.memtableBytes)) : 1);
  return levels.map((tables, level) =>
    level === 0 ? tables.reduce((n, t) => n + (busy.has(t.file) ? 0 : worth(t)), 0) / o.l0Trigger : tables.reduce((n, t) => n + t.size, 0) / levelTarget(level, o));
}

const NONE: ReadonlySet<number> = new Set();

/** Tables of `tables` whose user-key span meets [smallest, largest] (internal keys). */
export function overlapping(tables: readonly TableMeta[], smallest: Buffer, largest: Buffer): TableMeta[] {
  return tables.filter((t) => compareUser(t.largest, smallest) >= 0 && compareUser(t.smallest, largest) <= 0);
}

/**
 * The jobs due now, none touching a table in `busy` (those of compactions running or waiting
 * to) and none sharing a table with another, so they may run at the same time and their
 * outputs never overlap. Levels go by score, highest first.
 *
 * L0, once due, gives every job it has, whatever `room`: it is cut at the gaps between its
 * tables' key spans (the Drange bounds, as each Drange's memtables flush on their own). Tables
 * that overlap, directly or through a chain, go together, with every L1 table their span
 * meets; spans that meet one L1 table go together too. Jobs with more L0 tables come first.
 * A deeper level gives one job, while fewer than `room` jobs are picked: its table after
 * `cursor[level]` (the largest key last compacted from it, so jobs rotate through the key
 * space) that no job touches.
 */
export function pickCompactions(levels: TableMeta[][], o: LevelOptions, cursor: Array<Buffer | undefined>,
  busy: ReadonlySet<number>, room: number): CompactionJob[] {
  const taken = new Set(busy);
  const scores = levelScores(levels, o, busy);
  const due = scores.map((score, level) => ({ score, level })).filter((x) => x.level < LEVELS - 1 && x.score >= 1)
    .sort((a, b) => b.score - a.score || a.level - b.level);
  const out: CompactionJob[] = [];
  const take = (job: CompactionJob): boolean => {
    const tables = [...job.inputs, ...job.overlapping];
    if (tables.some((t) => taken.has(t.file))) return false;
    for (const t of tables) taken.add(t.file);
    out.push(job);
    return true;
  };
  for (const { level } of due) {
    if (level === 0) {
      for (const job of l0Jobs(levels).sort((a, b) => b.inputs.length - a.inputs.length)) take(job);
      continue;
    }
    if (out.length >= room) break;
    const sorted = levels[level];
    const after = cursor[level];
    const start = Math.max(0, sorted.findIndex((t) => !after || compareInternalKeys(t.smallest, after) > 0));
    for (let i = 0; i < sorted.length && !take(jobFor(levels, level, [sorted[(start + i) % sorted.length]])); i++);
  }
  return out;
}

/** L0's tables cut into jobs that share no table and whose spans do not meet, in key order. */
export function l0Jobs(levels: TableMeta[][]): CompactionJob[] {
  const byStart = [...levels[0]].sort((a, b) => compareUser(a.smallest, b.smallest));
  const groups: TableMeta[][] = [];
  let end: Buffer | undefined;
  for (const t of byStart) {
    if (end && compareUser(t.smallest, end) <= 0) {
      groups[groups.length - 1].push(t);
      if (compareUser(t.largest, end) > 0) end = t.largest;
    } else {
      groups.push([t]);
      end = t.largest;
    }
  }
  const jobs: CompactionJob[] = [];
  for (const g of groups) {
    const job = jobFor(levels, 0, g);
    const last = jobs[jobs.length - 1];
    // Spans in key order meet the L1 tables in key order: only neighbours can share one.
    if (last && job.overlapping.length > 0 && last.overlapping.includes(job.overlapping[0])) {
      jobs[jobs.length - 1] = jobFor(levels, 0, [...last.inputs, ...g]);
    } else {
      jobs.push(job);
    }
  }
  // Inputs in L0's order (oldest first), as the merge and the MANIFEST edit expect.
  const order = new Map(levels[0].map((t, i) => [t.file, i]));
  for (const j of jobs) j.inputs.sort((a, b) => order.get(a.file)! - order.get(b.file)!);
  return jobs;
}

/** A job merging `inputs` (of `level`) with every table of level + 1 their key span meets. */
export function jobFor(levels: TableMeta[][], level: number, inputs: TableMeta[]): CompactionJob {
  const { smallest, largest } = keySpan(inputs);
  return { level, inputs, overlapping: overlapping(levels[level + 1] ?? [], smallest, largest) };
}

/** The internal-key span of `tables` (at least one): the smallest of their smallest keys, the largest of their largest. */
export function keySpan(tables: readonly TableMeta[]): { smallest: Buffer; largest: Buffer } {
  let smallest = tables[0].smallest;
  let largest = tables[0].largest;
  for (const t of tables) {
    if (compareInternalKeys(t.smallest, smallest) < 0) smallest = t.smallest;
    if (compareInternalKeys(t.largest, largest) > 0) largest = t.largest;
  }
  return { smallest, largest };
}
