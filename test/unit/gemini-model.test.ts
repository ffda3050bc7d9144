/**
 * The Gemini protocol against an oracle (paper §5.2): clients (gemini-client.ts) reading and
 * writing keys through cache instances (cache-instance.ts over a memory CacheStore) in front of
 * a data store, while instances fail and return at random and the coordinator's side
 * (cache-keeper.ts) moves fragments through their modes, and recovery workers
 * (gemini-recovery.ts) process dirty lists. Every step yields to the others at random points.
 *
 * Read-after-write consistency: no read returns a value older than one a write acknowledged
 * before the read began (values carry the store's order of application). The `stale` baseline
 * must violate it (the test can fail), every Gemini variant and `volatile` never.
 */
import { describe, expect, it } from 'vitest';
import { NovaError } from '../../src/common/errors.js';
import type { ClusterConfig } from '../../src/cluster/config.js';
import { recoveryStep, type CacheMode } from '../../src/cluster/gemini.js';
import { fenceAll, keepLayer } from '../../src/coordinator/cache-keeper.js';
import { GeminiClient, type GeminiHost, type InstanceApi } from '../../src/client/gemini-client.js';
import { recoverFragments } from '../../src/client/gemini-recovery.js';
import { CacheInstance } from '../../src/stoc/cache-instance.js';
import { CacheStore } from '../../src/stoc/cache-store.js';
import { rng } from '../helpers/rng.js';

interface Node { store: CacheStore; inst: CacheInstance; up: boolean }

interface Outcome { reads: number; stale: number; hits: number; writes: number; discards: number; recoveries: number; failures: number }

async function run(mode: CacheMode, seed: number, steps: number): Promise<Outcome> {
  const random = rng(seed);
  const yieldSome = async (): Promise<void> => {
    for (let i = Math.floor(random() * 4); i > 0; i--) await new Promise((r) => setImmediate(r));
  };
  const INSTANCES = 3;
  const KEYS = 24;
  const nodes = new Map<number, Node>();
  const newNode = (store: CacheStore, configId: number): Node => {
    const inst = new CacheInstance(store, { leaseMs: 60_000, redleaseMs: 60_000 });
    inst.learn(configId);
    return { store, inst, up: true };
  };
  for (let id = 1; id <= INSTANCES; id++) {
    nodes.set(id, newNode(CacheStore.open({ memoryBytes: 1 << 20, diskBytes: 4 << 20, sync: false, maxDirtyKeys: 1_000 }), 1));
  }
  // The coordinator's published configuration.
  let config = { id: 2, cache: { mode, fragments: Array.from({ length: 8 }, (_, j) => ({ id: j, mode: 'normal' as const, primary: (j % INSTANCES) + 1, floor: 2 })) } } as unknown as ClusterConfig;
  let discards = 0;
  let recoveries = 0;
  let failures = 0;
  const alive = (): Set<number> => new Set([...nodes].filter(([, n]) => n.up).map(([id]) => id));
  const down = (): NovaError => new NovaError('UNAVAILABLE', 'instance down');

  /** An instance as a peer reaches it: each call may find it down, before or after it acts. */
  const api = (id: number): InstanceApi => {
    const call = async <T>(f: (i: CacheInstance) => T | Promise<T>): Promise<T> => {
      await yieldSome();
      const n = nodes.get(id)!;
      if (!n.up) throw down();
      const inst = n.inst;
      const r = await f(inst);
      await yieldSome();
      if (!n.up || n.inst !== inst) throw down(); // the answer is lost with the instance
      return r;
    };
    return {
      iqget: (c, k, f) => call((i) => i.iqget(c, k, f)),
      iset: (c, k) => call((i) => i.iset(c, k)),
      iqset: (c, k, v, t, f) => call((i) => i.iqset(c, k, v, t, f)),
      idelete: (c, k, t) => call((i) => i.idelete(c, k, t)),
      qareg: (c, k, d) => call((i) => i.qareg(c, k, d)),
      dar: (c, k, t) => call((i) => i.dar(c, k, t)),
      delete: (c, k, d) => call((i) => i.delete(c, k, d)),
      get: (c, k, f) => call((i) => i.get(c, k, f)),
      dirtyFetch: (c, f, from, limit) => call((i) => i.dirtyFetch(c, f, from, limit)),
      dirtyInit: (c, f) => call((i) => i.dirtyInit(c, f)),
      fence: (c) => call((i) => i.fence(c)),
      redlease: (c, f, r) => call((i) => i.redlease(c, f, r)),
      dirtyDone: (c, f, t) => call((i) => i.dirtyDone(c, f, t)),
    };
  };

  let publishing = Promise.resolve();
  /** One step of the coordinator, as its tick: serialized. */
  const reconcileNow = (): Promise<void> => {
    publishing = publishing.then(async () => {
      const r = await keepLayer(config, alive(), api);
      // As the coordinator does (CacheSteward.change): fenced before published; here an instance that misses its fence is down.
      if (r) await fenceAll(alive(), config.id + 1, api);
      if (r) {
        discards += r.changes.filter((c) => c.discarded).length;
        config = { ...config, id: config.id + 1, cache: r.layer };
      }
    });
    return publishing;
  };

  const host = (): GeminiHost & { recovered: (f: number, c: number) => Promise<void> } => {
    let mine = config;
    return {
      config: () => mine,
      refresh: async () => {
        await yieldSome();
        mine = config;
        return mine;
      },
      instance: api,
      sleep: async () => { await yieldSome(); },
      now: () => 0, // no deadline: the model runs until each call ends
      recovered: async (f) => {
        await yieldSome();
        const next = config.cache && recoveryStep(config.cache, f, 'dirty');
        if (next) config = { ...config, id: config.id + 1, cache: next };
      },
    };
  };

  // The data store: each applied write takes the next number; values are that number.
  const store = new Map<number, number>();
  let applied = 0;
  const acked = new Map<number, number>();
  const out: Outcome = { reads: 0, stale: 0, hits: 0, writes: 0, discards: 0, recoveries: 0, failures: 0 };
  const keyOf = (k: number): Buffer => Buffer.from(`key${k}`);

  const client = async (steps: number): Promise<number> => {
    const c = new GeminiClient(host(), { timeoutMs: 1e12, backoffTries: 3 });
    for (let s = 0; s < steps; s++) {
      const k = Math.floor(random() * random() * KEYS); // skewed
      if (random() < 0.2) {
        // Now and then a batch of two keys (one Q lease each around one update).
        const ks = random() < 0.25 ? [...new Set([k, Math.floor(random() * KEYS)])] : [k];
        let seq = 0;
        await c.writeMany(ks.map(keyOf), async () => {
          await yieldSome();
          seq = ++applied;
          for (const x of ks) store.set(x, seq);
          await yieldSome();
        });
        for (const x of ks) acked.set(x, Math.max(acked.get(x) ?? 0, seq));
        out.writes++;
      } else {
        const floor = acked.get(k) ?? 0;
        const v = await c.get(keyOf(k), async () => {
          await yieldSome();
          const x = store.get(k);
          return x === undefined ? undefined : Buffer.from(String(x));
        });
        const got = v === undefined ? 0 : Number(v.toString());
        out.reads++;
        if (got < floor) out.stale++;
      }
    }
    return c.counters.hits;
  };

  const chaos = async (): Promise<void> => {
    for (let s = 0; s < steps / 4; s++) {
      await yieldSome();
      const id = 1 + Math.floor(random() * INSTANCES);
      const n = nodes.get(id)!;
      const r = random();
      if (n.up && r < 0.1 && alive().size > 1) {
        n.up = false; // killed: its leases die with it; its store (on disk) stays
        failures++;
        await reconcileNow();
      } else if (!n.up && r < 0.14) {
        if (random() < 0.5) {
          // Paused past its lease, then resumed: it serves again only once a heartbeat renewed its
          // lease, which applies the newest configuration first (its leases and entries stay).
          n.inst.learn(config.id);
          n.up = true;
        } else {
          const store = mode === 'volatile' && random() < 0.5 ? CacheStore.open({ memoryBytes: 1 << 20, diskBytes: 4 << 20, sync: false, maxDirtyKeys: 1_000 }) : n.store;
          nodes.set(id, newNode(store, config.id)); // registers: learns the configuration
        }
        await reconcileNow();
      } else if (r < 0.5) {
        await reconcileNow();
        const w = host();
        await recoverFragments(w).catch(() => undefined);
        recoveries++;
      } else if (r < 0.55 && config.cache) {
        const f = config.cache.fragments.find((x) => x.mode === 'recovery' && x.migrate);
        const next = f && recoveryStep(config.cache, f.id, 'migration');
        if (next) config = { ...config, id: config.id + 1, cache: next };
      }
    }
    for (const n of nodes.values()) {
      if (n.up) continue;
      n.inst.learn(config.id); // as a renewed lease does
      n.up = true;
    }
    await reconcileNow();
  };

  const results = await Promise.all([client(steps), client(steps), client(steps), chaos()]);
  out.hits = results.slice(0, 3).reduce((a: number, b) => a + (b ?? 0), 0);
  out.discards = discards;
  out.recoveries = recoveries;
  out.failures = failures;
  return out;
}

describe('Gemini protocol model', () => {
  for (const mode of ['gemini-i', 'gemini-o', 'gemini-i+w', 'gemini-o+w', 'volatile'] as const) {
    it(`${mode}: no read older than a write acknowledged before it began, instances failing and returning`, async () => {
      let hits = 0;
      let failures = 0;
      for (const seed of [1, 2, 3, 4, 5, 6]) {
        const o = await run(mode, seed, 600);
        expect(o.stale, `seed ${seed}: ${JSON.stringify(o)}`).toBe(0);
        hits += o.hits;
        failures += o.failures;
      }
      expect(failures).toBeGreaterThan(10);
      expect(hits).toBeGreaterThan(500); // the cache served, not only the store
    }, 60_000);
  }

  it('stale: the unsafe baseline serves values overwritten while an instance was down', async () => {
    let stale = 0;
    for (const seed of [1, 2, 3, 4, 5, 6]) stale += (await run('stale', seed, 600)).stale;
    expect(stale).toBeGreaterThan(0);
  }, 60_000);
});
