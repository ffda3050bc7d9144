/**
 * Which compaction is due, as pure functions (LevelDB db/version_set.cc PickCompaction). The
 * LTC's engine decides; what a compaction keeps is merge-rule.ts.
 *
 * Levels: L0 tables may overlap (newest last); L1 and deeper are sorted and disjoint, with
 * size targets growing ×10 from `l1Bytes`. The picker takes the level with the highest
 * size/target ratio (L0: table count / `l0Trigger`) once it reaches 1.
 */
import { TRAILER_BYTES, compareBytes, compareInternalKeys } from '../common/internal-key.js';
import type { TableMeta } from '../log/version-edit.js';

export const LEVELS = 7;

export interface LevelOptions {
  /** L0 table count that makes L0's score 1. */
  l0Trigger: number;
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

export function levelScores(levels: TableMeta[][], o: LevelOptions): number[] {
  return levels.map((tables, level) =>
    level === 0 ? tables.length / o.l0Trigger : tables.reduce((n, t) => n + t.size, 0) / levelTarget(level, o));
}

/** Tables of `tables` whose user-key span meets [smallest, largest] (internal keys). */
export function overlapping(tables: TableMeta[], smallest: Buffer, largest: Buffer): TableMeta[] {
  return tables.filter((t) => compareUser(t.largest, smallest) >= 0 && compareUser(t.smallest, largest) <= 0);
}

/**
 * The next job, or undefined when every level is within its target. `cursor[level]` is the
 * largest key of the last table compacted from that level: jobs rotate through the key space.
 */
export function pickCompaction(levels: TableMeta[][], o: LevelOptions, cursor: Array<Buffer | undefined>): CompactionJob | undefined {
  const scores = levelScores(levels, o);
  let level = -1;
  let best = 1;
  for (let l = 0; l < LEVELS - 1; l++) {
    if (scores[l] >= best) {
      best = scores[l];
      level = l;
    }
  }
  if (level < 0) return undefined;
  let inputs: TableMeta[];
  if (level === 0) {
    inputs = [...levels[0]];
  } else {
    const after = cursor[level];
    const sorted = levels[level];
    inputs = [sorted.find((t) => !after || compareInternalKeys(t.smallest, after) > 0) ?? sorted[0]];
  }
  return jobFor(levels, level, inputs);
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
