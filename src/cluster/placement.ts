/**
 * Which StoCs a new SSTable's fragments go to (DESIGN.md §4, "Placement"). Power-of-d asks
 * d = 2ρ random StoCs for their load and keeps the ρ least loaded; random and round-robin
 * are there for comparison.
 */
import { NovaError } from '../common/errors.js';
import type { Placement } from './config.js';

export interface PlacementState {
  /** Round-robin position. */
  next: number;
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
  if (ids.length < rho) {
    throw new NovaError('UNAVAILABLE', `an SSTable needs ${rho} StoC(s) and only ${ids.length} are up: start more StoCs or lower --scatter`);
  }
  if (policy === 'random') return sample(ids, rho, random);
  if (policy === 'round-robin') {
    const out: number[] = [];
    for (let i = 0; i < rho; i++) out.push(ids[(state.next + i) % ids.length]);
    state.next = (state.next + rho) % ids.length;
    return out;
  }
  const candidates = sample(ids, 2 * rho, random);
  const loads = await Promise.all(candidates.map((id) => load(id).catch(() => Infinity)));
  return candidates
    .map((id, i) => ({ id, load: loads[i] }))
    .sort((a, b) => a.load - b.load)
    .slice(0, rho)
    .map((x) => x.id);
}
