/**
 * Which StoCs a new SSTable's fragments go to, and which StoC runs a compaction (DESIGN.md §4,
 * "Placement" and "Compaction"). Power-of-d asks d = 2ρ random StoCs for their load and keeps
 * the ρ least loaded; random and round-robin are there for comparison. A compaction job goes to
 * the least loaded StoC of all that are up.
 */
import { NovaError } from '../common/errors.js';
import type { Placement } from './config.js';

export interface PlacementState {
  /** Round-robin position. */
  next: number;
}

/** A StoC's load as placement weighs it (the StoC's `load` answer). */
export interface StocLoadView {
  compactionsRunning: number;
  queueDepth: number;
  pendingReadBytes: number;
  pendingWriteBytes: number;
}

/** `count` distinct ids of `ids` picked at random (partial Fisher–Yates). */
export function sample(ids: number[], count: number, random: () => number): number[] {
  const a = ids.slice();
  const n = Math.min(count, a.length);
  for (let i = 0; i < n; i++) {
    const j = i + Math.floor(random() * (a.length - i));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a.slice(0, n);
}

/**
 * Picks ρ StoCs. `load` answers a StoC's queue depth (power-of-d only); a StoC whose load
 * cannot be read counts as infinitely loaded.
 */
export async function place(policy: Placement, ids: number[], rho: number, state: PlacementState,
  load: (id: number) => Promise<number>, random: () => number = Math.random): Promise<number[]> {
  if (policy !== 'power-of-d') return placeBlind(policy, ids, rho, state, random);
  enough(ids, rho);
  const candidates = sample(ids, 2 * rho, random);
  const loads = await Promise.all(candidates.map((id) => load(id).catch(() => Infinity)));
  return leastOf(candidates, (_, i) => loads[i], rho);
}

/**
 * Places `count` tables of `shape.width` × `shape.copies` StoCs each (with parity, ρ + R + 1; a compaction's outputs,
 * before it runs) from one reading of the StoCs' queue depths: power-of-d weighs each StoC's
 * depth plus the data fragments this call already gave it (of each copy's `width` StoCs the
 * first `rho` hold data; one more holds only the small metadata), so the outputs' bytes spread
 * as if placed one by one.
 */
export function placeMany(policy: Placement, ids: number[], rho: number, shape: { width: number; copies: number; parity?: boolean }, count: number,
  state: PlacementState, depth: ReadonlyMap<number, number>, random: () => number = Math.random): number[][] {
  const given = new Map<number, number>();
  const out: number[][] = [];
  // With parity: ρ data StoCs, the metadata's copies, and the parity's StoC (fragments.ts cutTable).
  const width = shape.parity ? shape.width + shape.copies : shape.width * shape.copies;
  const holdsData = (i: number): boolean => (shape.parity ? i < rho || i === width - 1 : i % shape.width < rho);
  for (let n = 0; n < count; n++) {
    let stocs: number[];
    if (policy !== 'power-of-d') {
      stocs = placeBlind(policy, ids, width, state, random);
    } else {
      enough(ids, width);
      const candidates = sample(ids, 2 * width, random);
      stocs = leastOf(candidates, (id) => (depth.get(id) ?? Infinity) + (given.get(id) ?? 0), width);
    }
    stocs.forEach((id, i) => { if (holdsData(i)) given.set(id, (given.get(id) ?? 0) + 1); });
    out.push(stocs);
  }
  return out;
}

/**
 * The StoC a compaction job goes to: the fewest compactions running, then the shortest queue,
 * then the fewest bytes pending; a StoC whose load is unknown comes last. Ties go round the
 * StoCs from `turn`, so equal StoCs take turns.
 */
export function leastLoaded(ids: number[], loads: ReadonlyMap<number, StocLoadView>, turn: number): number {
  if (ids.length === 0) throw new NovaError('UNAVAILABLE', 'no StoC is up to run a compaction');
  const key = (id: number): number[] => {
    const l = loads.get(id);
    return l ? [l.compactionsRunning, l.queueDepth, l.pendingReadBytes + l.pendingWriteBytes] : [Infinity, Infinity, Infinity];
  };
  let best = ids[turn % ids.length];
  let bestKey = key(best);
  for (let i = 1; i < ids.length; i++) {
    const id = ids[(turn + i) % ids.length];
    const k = key(id);
    const j = k.findIndex((x, n) => x !== bestKey[n]);
    if (j >= 0 && k[j] < bestKey[j]) {
      best = id;
      bestKey = k;
    }
  }
  return best;
}

function enough(ids: number[], rho: number): void {
  if (ids.length < rho) {
    throw new NovaError('UNAVAILABLE', `an SSTable needs ${rho} StoC(s) and only ${ids.length} are up: start more StoCs or lower --scatter`);
  }
}

function placeBlind(policy: 'random' | 'round-robin', ids: number[], rho: number, state: PlacementState, random: () => number): number[] {
  enough(ids, rho);
  if (policy === 'random') return sample(ids, rho, random);
  const out: number[] = [];
  for (let i = 0; i < rho; i++) out.push(ids[(state.next + i) % ids.length]);
  state.next = (state.next + rho) % ids.length;
  return out;
}

/** The `rho` of `candidates` with the least `load`, least first (a stable sort: ties keep the sample's order). */
function leastOf(candidates: number[], load: (id: number, i: number) => number, rho: number): number[] {
  return candidates
    .map((id, i) => ({ id, load: load(id, i) }))
    .sort((a, b) => a.load - b.load)
    .slice(0, rho)
    .map((x) => x.id);
}
