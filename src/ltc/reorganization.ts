/**
 * The engine's side of Dranges and Tranges (DESIGN.md §4; the decisions are dranges.ts): writes
 * counted per Trange, and, when a memtable retires, the layout the Dranges should take next,
 * cut from a sample of the memtables' entries (the recent writes, a key written often sampled
 * often: the paper samples the memtables too). Functions over EngineState; make-room.ts
 * switches the memtables.
 */
import { MAX_SEQUENCE, SEEK_TYPE, TRAILER_BYTES, makeInternalKey } from '../common/internal-key.js';
import type { Memtable } from '../memtable/memtable.js';
import { type Layout, REORG, copiesOf, drangeBounds, drangeLoads, drangeOf, imbalance, planReorganization, recut, slotLoads } from './dranges.js';
import type { EngineState } from './engine-state.js';

/**
 * Majors in a row beyond which the wait for the next stops doubling (8 times the first): long
 * enough that keys written in ascending order cost a major per 4θ memtables, short enough that
 * the Dranges follow a new load within a few θ memtables of writes.
 */
const MAX_MAJOR_STREAK = 3;

/** Keys sampled per Trange wanted, for a cut: a few, so the cut follows the load. */
const SAMPLES_PER_TRANGE = 4;

/** Counts a write of `key` (the engine counts only with α > 1). */
export function countWrite(db: EngineState, key: Uint8Array): void {
  db.trangeWrites[db.layout.tranges.length === 0 ? 0 : drangeOf(db.layout.tranges, key)]++;
}

export type NextLayout = { layout: Layout; why: 'first' | 'minor' | 'major' };

/**
 * The layout the Dranges should take as memtable `full` retires, or undefined to keep them.
 * With α > 1 and one Drange, the first full memtable's keys cut α Dranges of γ Tranges; after
 * that, planReorganization over the writes counted since the last reorganization.
 */
export function nextLayout(db: EngineState, full: Memtable): NextLayout | undefined {
  const α = db.options.activeMemtables;
  const γ = db.options.trangesPerDrange;
  // A merge under way places its memtable by today's Dranges: they change at a later retire.
  if (α <= 1 || db.options.ltcVariant === 'nova-r' || db.merging) return undefined;
  const want = α * γ * SAMPLES_PER_TRANGE;
  if (db.memtables.dranges === 1) {
    const layout = recut(sampleRange([full], undefined, undefined, want), α, γ);
    return layout.dranges.length > 0 ? { layout, why: 'first' } : undefined;
  }
  if (!db.options.reorganization) return undefined;
  // Judged once the Dranges have taken about half a memtable each since the last change.
  const minWrites = Math.max(1, (full.entries * α) / 2);
  const plan = planReorganization(db.layout, db.trangeWrites, { ...REORG, minWrites });
  const counted = db.trangeWrites.reduce((a, b) => a + b, 0);
  if (plan.kind !== 'major' && counted >= minWrites) db.majorStreak = 0; // a calm stretch
  if (plan.kind === 'minor') return { layout: { ...db.layout, dranges: plan.dranges }, why: 'minor' };
  if (plan.kind === 'none') return undefined;
  // Majors that keep following majors (keys written in ascending order: every cut is passed
  // at once) wait twice as long each time, so they cost a few memtables, not one per retire.
  if (counted < minWrites * 2 ** db.majorStreak) return undefined;
  const layout = recut(writeSample(db, want), α, γ);
  if (layout.dranges.length === 0 || sameLayout(layout, db.layout)) {
    windowEnds(db); // the memtables cannot show a better cut: count afresh rather than ask again at once
    return undefined;
  }
  return { layout, why: 'major' };
}

/** Makes `next` the layout writes are counted in, and counts the reorganization. */
export function installLayout(db: EngineState, next: NextLayout): void {
  windowEnds(db);
  db.layout = next.layout;
  // δ leaves room for one immutable memtable beside every active one, as at recovery.
  db.memtableLimit = Math.max(db.memtableLimit, copiesOf(next.layout).reduce((a, b) => a + b, 0) + 1);
  db.trangeWrites = new Array(next.layout.tranges.length + 1).fill(0);
  if (next.why === 'minor') db.counts.minorReorgs++;
  if (next.why === 'major') {
    db.counts.majorReorgs++;
    db.majorStreak = Math.min(db.majorStreak + 1, MAX_MAJOR_STREAK);
  }
}

/** Folds the writes counted since the last reorganization into the run's imbalance, and starts afresh. */
function windowEnds(db: EngineState): void {
  const loads = slotLoads(db.layout, db.trangeWrites);
  const writes = loads.reduce((a, b) => a + b, 0);
  db.counts.imbalanceSum += imbalance(loads) * writes;
  db.counts.imbalanceWrites += writes;
  db.trangeWrites.fill(0);
}

/**
 * Each Drange's share of the writes counted since the last reorganization, its copies, and the
 * run's imbalance (write-weighted, over copies: a duplicated Drange's writes spread over them).
 */
export function loadReport(db: EngineState): { shares: number[]; copies: number[]; imbalance: number; weighted: number; writes: number } {
  const loads = drangeLoads(db.layout, db.trangeWrites);
  const writes = loads.reduce((a, b) => a + b, 0);
  const sum = db.counts.imbalanceSum + imbalance(slotLoads(db.layout, db.trangeWrites)) * writes;
  const all = db.counts.imbalanceWrites + writes;
  // One Drange takes every write (uncounted with α = 1).
  const shares = loads.length === 1 ? [1] : loads.map((l) => (writes ? l / writes : 0));
  return { shares, copies: copiesOf(db.layout), imbalance: all ? sum / all : 0, weighted: sum, writes: all };
}

function sameLayout(a: Layout, b: Layout): boolean {
  const [x, y] = [drangeBounds(a), drangeBounds(b)];
  return x.length === y.length && x.every((k, i) => k.equals(y[i])) && copiesOf(a).join() === copiesOf(b).join();
}

/**
 * About `want` user keys written lately, ascending, each Drange's share of them its share of the
 * writes counted since the last reorganization: from its memtables, evenly spaced over their
 * entries in its interval (a key with many versions more often). Not by entries alone: a
 * Drange that takes more writes flushes more often, so its memtables hold no more entries than
 * a cold one's, and a hot key would look as cold as its neighbours.
 */
function writeSample(db: EngineState, want: number): Buffer[] {
  const loads = drangeLoads(db.layout, db.trangeWrites);
  const total = Math.max(1, loads.reduce((a, b) => a + b, 0));
  const bounds = db.memtables.drangeBounds;
  const out: Buffer[] = [];
  for (let d = 0; d <= bounds.length; d++) {
    const count = Math.ceil((want * (loads[d] ?? 0)) / total);
    if (count > 0) out.push(...sampleRange(db.memtables.list(d), bounds[d - 1], bounds[d], count));
  }
  return out.sort(Buffer.compare);
}

/** About `count` user keys of `mems` in [lo, hi), evenly spaced over their entries there. */
function sampleRange(mems: readonly Memtable[], lo: Buffer | undefined, hi: Buffer | undefined, count: number): Buffer[] {
  const each = (visit: (key: Buffer) => void): void => {
    for (const m of mems) {
      const it = m.iterator();
      if (lo) it.seek(makeInternalKey(lo, MAX_SEQUENCE, SEEK_TYPE));
      else it.first();
      for (; it.valid; it.next()) {
        const user = it.key.subarray(0, it.key.length - TRAILER_BYTES);
        if (hi && Buffer.compare(user, hi) >= 0) break;
        visit(user);
      }
    }
  };
  let n = 0;
  each(() => n++);
  const every = Math.max(1, Math.floor(n / count));
  const out: Buffer[] = [];
  let i = 0;
  each((user) => {
    if (i++ % every === 0) out.push(Buffer.from(user));
  });
  return out;
}
