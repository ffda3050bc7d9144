/**
 * The coordinator's side of the cache layer (cache-keeper.ts CacheSteward) with instances faked:
 * a change is published only once every live instance took its id (fence); an instance that does
 * not defers it; one taken as down that is heard from while the step runs drops it.
 */
import { describe, expect, it } from 'vitest';
import type { ClusterConfig } from '../../src/cluster/config.js';
import { newLayer } from '../../src/cluster/gemini.js';
import { CacheSteward, type KeeperInstance } from '../../src/coordinator/cache-keeper.js';

interface World {
  config: ClusterConfig;
  published: string[];
  alive: Set<number>;
  fenced: Map<number, number>;
  refuse: Set<number>;
  /** Called during an instance call: the world changing while the step awaits. */
  during?: () => void;
}

function world(): World {
  const members = [1, 2, 3].map((id) => ({ role: 'cache' as const, id, address: `127.0.0.1:${9000 + id}`, pid: id, host: '' }));
  const config = { id: 10, ranges: [], lastRange: 0, members, settings: { cacheMode: 'gemini-o', cacheFragments: 6 }, cache: newLayer('gemini-o', 6, [1, 2, 3], 10) } as unknown as ClusterConfig;
  return { config, published: [], alive: new Set([1, 2, 3]), fenced: new Map(), refuse: new Set() };
}

function steward(w: World): CacheSteward {
  const instance = (id: number): KeeperInstance => ({
    dirtyFetch: async () => ({ state: 'whole' }),
    dirtyInit: async () => undefined,
    fence: async (cfg) => {
      w.during?.();
      if (w.refuse.has(id)) throw new Error('no answer');
      w.fenced.set(id, cfg);
    },
  });
  return new CacheSteward({
    config: () => w.config,
    publish: (next, why) => { w.config = next; w.published.push(why); },
    instance,
    alive: (id) => w.alive.has(id),
    knowsLiveness: () => true,
  });
}

async function step(s: CacheSteward, now: number): Promise<void> {
  s.tick(now);
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}

describe('cache steward', () => {
  it('fences every live instance with the new id before it publishes a failure\'s change', async () => {
    const w = world();
    w.alive.delete(3);
    await step(steward(w), 1_000);
    expect(w.published).toHaveLength(1);
    expect(w.config.id).toBe(11);
    expect(w.config.cache!.fragments.filter((f) => f.primary === 3).every((f) => f.mode === 'transient')).toBe(true);
    expect(Object.fromEntries(w.fenced)).toEqual({ 1: 11, 2: 11 });
  });

  it('defers the change while a live instance does not take the fence: the id is published, the layer unchanged', async () => {
    const w = world();
    w.alive.delete(3);
    w.refuse.add(2);
    const s = steward(w);
    await step(s, 1_000);
    expect(w.config.id).toBe(11);
    expect(w.config.cache!.fragments.every((f) => f.mode === 'normal')).toBe(true);
    expect(w.published[0]).toMatch(/deferred/);
    await step(s, 1_500); // within the deferral: nothing
    expect(w.config.id).toBe(11);
    w.refuse.clear();
    await step(s, 2_100);
    expect(w.config.id).toBe(12);
    expect(w.config.cache!.fragments.filter((f) => f.primary === 3).every((f) => f.mode === 'transient')).toBe(true);
  });

  it('drops a change that took an instance as down when it is heard from while the step runs', async () => {
    const w = world();
    w.alive.delete(3);
    w.during = () => w.alive.add(3);
    await step(steward(w), 1_000);
    expect(w.config.cache!.fragments.every((f) => f.mode === 'normal')).toBe(true);
    expect(w.published[0]).toMatch(/deferred/);
  });

  it('applies the workers\' reports of processed dirty lists in one configuration, and ignores one from an earlier recovery', async () => {
    const w = world();
    const recovering = (j: number) => ({ ...w.config.cache!.fragments[j]!, mode: 'recovery' as const, secondary: 2, secondaryFloor: 11, migrate: false, dirtyDone: false, since: 20 });
    w.config = { ...w.config, id: 21, cache: { ...w.config.cache!, fragments: w.config.cache!.fragments.map((f, j) => (j === 0 || j === 3 ? recovering(j) : f)) } };
    const s = steward(w);
    expect(s.recovered([0, 21])).toBe(21);
    expect(s.recovered([3, 21])).toBe(21);
    expect(s.recovered([1, 21])).toBe(21); // not recovering: nothing
    expect(() => s.recovered(['x', 1])).toThrow(/cacheRecovered takes/);
    await step(s, 1_000);
    expect(w.published[0]).toMatch(/dirty lists of fragment\(s\) 0, 3 processed/);
    expect(w.config.cache!.fragments.filter((f) => f.mode === 'recovery')).toEqual([]);
    w.config = { ...w.config, id: 30, cache: { ...w.config.cache!, fragments: w.config.cache!.fragments.map((f, j) => (j === 0 ? recovering(0) : f)) } };
    s.recovered([0, 19]); // processed under a configuration from before this recovery began
    await step(s, 2_000);
    expect(w.config.cache!.fragments[0]!.mode).toBe('recovery');
  });
});
