/**
 * The engine against an in-memory oracle: random puts, deletes, batches, ingests, gets, scans
 * and snapshots, with forced flushes and reopens in between. Fixed seeds; NOVA_SOAK=1 runs longer.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv } from '../../src/ltc/local-store.js';
import type { EngineEnv } from '../../src/ltc/engine-env.js';
import type { Snapshot } from '../../src/ltc/engine-options.js';
import { tableName } from '../../src/ltc/local-store.js';
import type { LogWriter } from '../../src/logc/log-store.js';
import { rng } from '../helpers/rng.js';
import { tempDirs } from '../helpers/temp.js';

const SOAK = process.env.NOVA_SOAK === '1';
const tempDir = tempDirs('nova-engine-');


function scanOracle(m: Map<string, string>, start: string, end: string | undefined, limit: number): Array<[string, string]> {
  return [...m.entries()].filter(([k]) => k >= start && (end === undefined || k < end))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).slice(0, limit);
}

// α = 1 is LevelDB's shape; α = 4 cuts the keys into Dranges, and its batches span them.
// δ = α + 1 and a low L0 stop make writes wait for flushes and compactions.
// Table writes and log appends take up to `slowMs` so the background lags the writes as a
// disk makes it, and commit rounds overlap (their appends in flight together) as over LogC.
// With `cache`, tables are held as metadata and their data blocks loaded into a block cache
// of that many bytes as reads need them (so reads miss, load and go on, under compactions).
// With α > 1, three compaction jobs may run at once (L0 cut at the Drange gaps). Every get
// the lookup index answers, and every scan the range index cuts, is checked against a full
// search (checkIndexes).
const CONFIGS = [
  { seed: 1, alpha: 1, delta: 2, slowMs: 0, cache: 0 },
  { seed: 2, alpha: 1, delta: 2, slowMs: 2, cache: 0 },
  { seed: 3, alpha: 1, delta: 3, slowMs: 2, cache: 0 },
  { seed: 4, alpha: 4, delta: 5, slowMs: 2, cache: 0 },
  { seed: 5, alpha: 4, delta: 8, slowMs: 0, cache: 0 },
  { seed: 6, alpha: 1, delta: 2, slowMs: 2, cache: 16 * 1024 },
  { seed: 7, alpha: 4, delta: 5, slowMs: 1, cache: 64 * 1024 },
  // A hot spot that moves: the Dranges reorganize (minor and major) under the writes.
  { seed: 8, alpha: 4, delta: 6, slowMs: 1, cache: 0, skew: true },
  { seed: 9, alpha: 8, delta: 12, slowMs: 0, cache: 32 * 1024, skew: true, tau: 4096 },
  // A lookup index of about 30 keys: it fills, stops being complete, and gets search again.
  { seed: 10, alpha: 4, delta: 6, slowMs: 1, cache: 0, skew: true, index: 3000 },
  // The paper's ablations: writes to a random memtable of four; Dranges that never move.
  { seed: 11, alpha: 4, delta: 8, slowMs: 1, cache: 0, variant: 'nova-r' as const },
  { seed: 12, alpha: 4, delta: 6, slowMs: 1, cache: 16 * 1024, skew: true, variant: 'nova-s' as const },
  // One key takes half the writes: its Drange is duplicated.
  { seed: 13, alpha: 4, delta: 8, slowMs: 1, cache: 0, skew: true, point: true },
  { seed: 14, alpha: 8, delta: 12, slowMs: 0, cache: 16 * 1024, skew: true, point: true, index: 3000, tau: 4096 },
];

/** The local environment, with table writes and log appends (kept in order) delayed by up to `ms`. */
function slowEnv(dir: string, ms: number, r: () => number): EngineEnv {
  const env = localEnv(dir);
  const store = env.store;
  const slowLog = (log: LogWriter): LogWriter => {
    let tail: Promise<unknown> = Promise.resolve();
    return {
      append: (records, sync) => {
        const done = tail.then(() => new Promise((resolve) => setTimeout(resolve, r() * ms))).then(() => log.append(records, sync));
        tail = done.catch(() => undefined);
        return done;
      },
      close: async () => { await tail; return log.close(); },
    };
  };
  return {
    logs: {
      makeAhead: env.logs.makeAhead,
      create: async (file) => slowLog(await env.logs.create(file)),
      read: (file) => env.logs.read(file),
      remove: (file) => env.logs.remove(file),
      list: () => env.logs.list(),
      describe: (file) => env.logs.describe(file),
    },
    manifests: env.manifests,
    store: {
      writeTable: async (file, bytes) => {
        await new Promise((resolve) => setTimeout(resolve, r() * ms));
        return store.writeTable(file, bytes);
      },
      readTable: (file, fragments) => store.readTable(file, fragments),
      readRange: async (file, _fragments, offset, length) => {
        await new Promise((resolve) => setTimeout(resolve, r() * ms));
        const bytes = readFileSync(join(dir, tableName(file)));
        if (offset + length > bytes.length) throw new Error(`read past the end of table ${file}`);
        return bytes.subarray(offset, offset + length);
      },
      deleteTable: (file) => store.deleteTable(file),
      listTables: () => store.listTables(),
    },
  };
}

describe.each(CONFIGS)('engine model (seed $seed, α $alpha, δ $delta, table writes ≤ $slowMs ms, block cache $cache, skew $skew, $variant)', ({ seed, alpha: α, delta: δ, slowMs, cache, skew = false, point = false, tau = 16 * 1024, index = 1 << 20, variant = 'nova' as 'nova' | 'nova-r' | 'nova-s' }) => {
  it('matches the oracle through flushes and reopens', async () => {
    const dir = tempDir();
    const r = rng(seed);
    const warnings: string[] = [];
    const delays = rng(seed + 100);
    const open = () => Engine.open(dir, {
      memtableBytes: tau, activeMemtables: α, maxMemtables: δ, l0Trigger: 3, l0StopTrigger: 5, compactionJobs: α > 1 ? 3 : 1, checkIndexes: true, lookupIndexBytes: index, ltcVariant: variant,
      sync: false, onWarning: (w) => warnings.push(w), env: slowMs > 0 || cache > 0 ? slowEnv(dir, slowMs, delays) : undefined,
      blockCacheBytes: cache,
    });
    let db = await open();
    const oracle = new Map<string, string>();
    const snapshots: Array<{ snap: Snapshot; state: Map<string, string> }> = [];
    let compactions = 0;
    let deepest = 0;
    let dranges = 1;
    let reorganizations = 0;
    let lookupHits = 0;
    let duplicated = 0;
    let flushesAtOnce = 0;
    let ingested = 0;
    let ingestsRefused = 0;
    const tally = () => {
      lookupHits += db.stats.lookupHits;
      compactions += db.stats.compactions;
      reorganizations += db.stats.minorReorganizations + db.stats.majorReorganizations;
      dranges = Math.max(dranges, db.stats.dranges);
      flushesAtOnce = Math.max(flushesAtOnce, db.stats.maxFlushesAtOnce);
      db.stats.tablesPerLevel.forEach((n, l) => { if (n > 0) deepest = Math.max(deepest, l); });
    };
    let hot = 0; // with skew: most keys come from 40 near `hot`, which moves every 500 steps
    const key = () => `k${String(point && r() < 0.5 ? hot : skew && r() < 0.8 ? hot + Math.floor(r() * 40) : Math.floor(r() * 400)).padStart(4, '0')}`;
    const steps = SOAK ? 50_000 : 3000;
    for (let step = 0; step < steps; step++) {
      if (step % 500 === 0) hot = Math.floor(r() * 360);
      if (step % 50 === 0) duplicated = Math.max(duplicated, db.stats.duplicatedDranges);
      const dice = r();
      if (dice < 0.35) {
        const k = key(); const v = `v${step}-${'x'.repeat(Math.floor(r() * 200))}`;
        await db.put(Buffer.from(k), Buffer.from(v));
        oracle.set(k, v);
      } else if (dice < 0.45) {
        const k = key();
        await db.delete(Buffer.from(k));
        oracle.delete(k);
      } else if (dice < 0.5) {
        const b = db.newBatch();
        const changes: Array<[string, string | undefined]> = [];
        for (let i = 0; i < 1 + Math.floor(r() * 10); i++) {
          const k = key();
          if (r() < 0.7) { const v = `b${step}.${i}`; b.put(Buffer.from(k), Buffer.from(v)); changes.push([k, v]); }
          else { b.delete(Buffer.from(k)); changes.push([k, undefined]); }
        }
        await db.write(b);
        for (const [k, v] of changes) { if (v === undefined) oracle.delete(k); else oracle.set(k, v); }
      } else if (dice < 0.75) {
        const k = key();
        expect((await db.get(Buffer.from(k)))?.toString(), `get ${k} at step ${step}`).toBe(oracle.get(k));
      } else if (dice < 0.8) {
        const start = key(); const end = r() < 0.5 ? key() : undefined; const limit = 1 + Math.floor(r() * 30);
        const got = (await db.scan(Buffer.from(start), { end: end ? Buffer.from(end) : undefined, limit }))
          .map(([k, v]) => [k.toString(), v.toString()]);
        expect(got, `scan at step ${step}`).toEqual(scanOracle(oracle, start, end, limit));
      } else if (dice < 0.83) {
        snapshots.push({ snap: db.snapshot(), state: new Map(oracle) });
      } else if (dice < 0.88 && snapshots.length > 0) {
        const { snap, state } = snapshots[Math.floor(r() * snapshots.length)];
        const k = key();
        expect((await db.get(Buffer.from(k), { snapshot: snap }))?.toString(), `snapshot get at step ${step}`).toBe(state.get(k));
        const got = (await db.scan(Buffer.from('k'), { snapshot: snap, limit: 20 })).map(([a, b]) => [a.toString(), b.toString()]);
        expect(got).toEqual(scanOracle(state, 'k', undefined, 20));
      } else if (dice < 0.89) {
        await db.flush();
      } else if (dice < 0.895) {
        tally();
        await db.close();
        db = await open();
        snapshots.length = 0; // snapshots do not survive a reopen
      } else if (dice < 0.9 && snapshots.length > 0) {
        snapshots.splice(Math.floor(r() * snapshots.length), 1)[0].snap.release();
      } else if (dice < 0.95) {
        // A burst of writes in flight together: group commits, and flushes under way.
        const pending: Array<Promise<void>> = [];
        for (let i = 0; i < 2 + Math.floor(r() * 30); i++) {
          const k = key();
          if (r() < 0.8) {
            const v = `w${step}.${i}-${'y'.repeat(Math.floor(r() * 300))}`;
            pending.push(db.put(Buffer.from(k), Buffer.from(v)));
            oracle.set(k, v); // writes commit in call order
          } else {
            pending.push(db.delete(Buffer.from(k)));
            oracle.delete(k);
          }
        }
        await Promise.all(pending);
      } else if (dice < 0.97) {
        // A bulk ingest: a run of keys past the others (m…), where tables of ordinary keys do
        // not reach, or of ordinary keys, which memtables and L0 tables mostly hold (refused);
        // with puts and deletes issued after it (they commit after it), over its keys too.
        const own = r() < 0.7;
        const base = Math.floor(r() * (own ? 60 : 400)); // few own keys: ingests meet their versions again
        const keys = [...new Set(Array.from({ length: 1 + Math.floor(r() * 12) }, (_, j) => `${own ? 'm' : 'k'}${String(Math.min(399, base + j)).padStart(4, '0')}`))].sort();
        const values = keys.map((k, j) => `i${step}.${j}-${'z'.repeat(Math.floor(r() * 100))}`);
        const ingest = db.ingest(keys.map((k) => Buffer.from(k)), values.map((v) => Buffer.from(v)));
        const after: Array<[string, string | undefined]> = [];
        const pending: Array<Promise<void>> = [];
        for (let i = 0; i < Math.floor(r() * 4); i++) {
          const k = r() < 0.5 ? keys[Math.floor(r() * keys.length)] : key();
          if (r() < 0.7) { const v = `a${step}.${i}`; pending.push(db.put(Buffer.from(k), Buffer.from(v))); after.push([k, v]); }
          else { pending.push(db.delete(Buffer.from(k))); after.push([k, undefined]); }
        }
        const outcome = await ingest;
        await Promise.all(pending);
        if ('refused' in outcome) ingestsRefused++;
        else {
          ingested++;
          keys.forEach((k, j) => oracle.set(k, values[j]));
        }
        for (const [k, v] of after) { if (v === undefined) oracle.delete(k); else oracle.set(k, v); }
      }
    }
    tally();
    await db.close();
    expect(compactions, 'compactions ran').toBeGreaterThan(0);
    expect(ingested, 'ingests applied').toBeGreaterThan(0);
    // Slow table writes and several Dranges: flushes of different groups were written at once
    // (nova-r flushes its α memtables as one generation).
    if (α > 1 && slowMs > 0 && variant !== 'nova-r') expect(flushesAtOnce, 'flush groups written at once').toBeGreaterThan(1);
    else expect(flushesAtOnce).toBeLessThanOrEqual(α);
    expect(ingestsRefused, 'ingests refused').toBeGreaterThan(0);
    expect(deepest, 'data reached L1 or deeper').toBeGreaterThan(0);
    if (α > 1 && variant === 'nova-r') expect(dranges, 'nova-r has no Dranges').toBe(1);
    else if (α > 1) expect(dranges, 'Dranges were cut').toBeGreaterThan(1);
    if (skew) expect(reorganizations > 0, 'the Dranges reorganized (never in nova-s)').toBe(variant === 'nova');
    expect(lookupHits > 0, 'the lookup index answered gets (none in the ablations)').toBe(variant === 'nova');
    expect(duplicated > 0, 'a Drange was duplicated (nova-r: its one Drange, α times)').toBe(point || variant === 'nova-r');
    db = await open();
    for (const [k, v] of oracle) expect((await db.get(Buffer.from(k)))?.toString()).toBe(v);
    expect((await db.scan(Buffer.from(''))).map(([k, v]) => [k.toString(), v.toString()])).toEqual(scanOracle(oracle, '', undefined, Infinity));
    await db.close();
    expect(warnings).toEqual([]);
  }, 120_000);
});

describe('engine input checks', () => {
  it('refuses oversize keys and values with the limit, and works after', async () => {
    const dir = tempDir();
    const db = await Engine.open(dir, { limits: { maxKeyBytes: 16, maxValueBytes: 64 } });
    await expect(db.put(Buffer.alloc(17), Buffer.alloc(1))).rejects.toThrow(/limit of 16 bytes/);
    await expect(db.put(Buffer.alloc(1), Buffer.alloc(65))).rejects.toThrow(/limit of 64 bytes/);
    await db.put(Buffer.from('ok'), Buffer.from('fine'));
    expect((await db.get(Buffer.from('ok')))?.toString()).toBe('fine');
    await db.close();
    await expect(db.put(Buffer.from('a'), Buffer.from('b'))).rejects.toMatchObject({ code: 'CLOSED' });
  });
});

/** The local environment; table writes after the first `free` wait until `release()`. */
function gatedEnv(dir: string, free: number): { env: EngineEnv; release: () => void; waiting: () => number } {
  const env = localEnv(dir);
  let allowed = free;
  let waiters: Array<() => void> = [];
  return {
    env: {
      logs: env.logs,
    manifests: env.manifests,
      store: {
        writeTable: async (file, bytes) => {
          if (allowed-- <= 0) await new Promise<void>((resolve) => waiters.push(resolve));
          return env.store.writeTable(file, bytes);
        },
        readTable: (file, fragments) => env.store.readTable(file, fragments),
        deleteTable: (file) => env.store.deleteTable(file),
        listTables: () => env.store.listTables(),
      },
    },
    release: () => {
      allowed = Infinity;
      for (const w of waiters.splice(0)) w();
    },
    waiting: () => waiters.length,
  };
}

describe('pipelined commit rounds', () => {
  // Appends to each log are delayed at random (in order per log, as a StoC connection keeps
  // them), so with α = 4 a later round's appends can finish before an earlier round's.
  // Large values make rounds of two or three writes on few logs (they finish out of order);
  // small ones make full rounds and frequent memtable switches with rounds in flight.
  it.each([
    { valueBytes: 1536, tau: 16 * 1024, writes: 2000 },
    { valueBytes: 40, tau: 8 * 1024, writes: 3000 },
  ])('acknowledge in order, apply in order, and lose nothing across memtable switches and a reopen ($valueBytes B values)', async ({ valueBytes, tau, writes }) => {
    const dir = tempDir();
    const r = rng(11);
    const open = () => Engine.open(dir, {
      memtableBytes: tau, activeMemtables: 4, maxMemtables: 8, l0Trigger: 3, l0StopTrigger: 6, sync: false,
      env: slowEnv(dir, 3, r),
    });
    let db = await open();
    const acks: number[] = [];
    const pending: Array<Promise<void>> = [];
    const expected = new Map<string, string>();
    const keyOf = (i: number) => `k${String((i * 7919) % 600).padStart(4, '0')}`; // rewrites keys, across Dranges
    let staleReads = 0;
    for (let i = 0; i < writes; i++) {
      const k = keyOf(i);
      const v = `v${i}`.padEnd(valueBytes, '.');
      expected.set(k, v);
      pending.push(db.put(Buffer.from(k), Buffer.from(v)).then(async () => {
        acks.push(i);
        // Acknowledged means visible (a later write of the same key may already be visible too).
        const got = (await db.get(Buffer.from(k)))?.toString();
        if (got === undefined || Number(got.slice(1, got.indexOf('.'))) < i) staleReads++;
      }));
      if (i % 3 === 2) await new Promise((resolve) => setImmediate(resolve));
    }
    await Promise.all(pending);
    expect(acks).toEqual(Array.from({ length: writes }, (_, i) => i));
    expect(staleReads).toBe(0);
    expect(db.stats.flushes).toBeGreaterThan(3);
    const check = async () => {
      for (const [k, v] of expected) expect((await db.get(Buffer.from(k)))?.toString(), k).toBe(v);
    };
    await check();
    await db.close();
    db = await open();
    await check();
    await db.close();
  });
});

describe('engine write stalls', () => {
  const value = Buffer.alloc(100, 7);
  const tick = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  /** Writes until a write stalls; checks it waits for release(), and is counted and timed. */
  async function expectStall(db: Engine, release: () => void, holdMs = 50): Promise<void> {
    let i = 0;
    let stalled: Promise<void> | undefined;
    while (!stalled && i < 10_000) {
      let done = false;
      const w = db.put(Buffer.from(`k${i++}`), value).then(() => { done = true; });
      await tick(0);
      await tick(0);
      if (!done) stalled = w;
    }
    expect(stalled, 'a write stalled').toBeDefined();
    let done = false;
    void stalled!.then(() => { done = true; });
    await tick(holdMs);
    expect(done, 'the stalled write waits for the background').toBe(false);
    expect(db.stats.stalls).toBe(0); // counted when it ends
    release();
    await stalled;
    expect(db.stats.stalls).toBe(1);
    expect(db.stats.stallMs).toBeGreaterThanOrEqual(40);
    for (let j = 0; j < i; j++) expect(await db.get(Buffer.from(`k${j}`)), `k${j}`).toEqual(value);
  }

  it('waits when δ memtables exist and none can be retired', async () => {
    const dir = tempDir();
    const gate = gatedEnv(dir, 0); // no flush finishes until released
    const db = await Engine.open(dir, { memtableBytes: 4096, maxMemtables: 3, sync: false, env: gate.env });
    await expectStall(db, gate.release);
    expect(db.stats.memtables).toBeLessThanOrEqual(3);
    expect(db.stats.l0Stalls).toBe(0); // it waited for a flush
    await db.close();
  });

  it('waits when L0 is at its stop trigger until a compaction ends', async () => {
    const dir = tempDir();
    // Flushes go on; the first compaction waits (on a compactor that then declines the job,
    // so the engine merges it itself) until released.
    let release!: () => void;
    const gate = new Promise<void>((resolve) => { release = resolve; });
    const env = { ...localEnv(dir), compactor: { compact: async () => { await gate; return undefined; } } };
    const notes: string[] = [];
    // Memtables of a few keys each: merging them instead of flushing is off, so they reach L0.
    const db = await Engine.open(dir, { memtableBytes: 4096, maxMemtables: 8, l0Trigger: 2, l0StopTrigger: 3, sync: false, env, onNote: (n) => notes.push(n), mergeUnderKeys: 0 });
    await expectStall(db, release, 150);
    expect(db.stats.compactions).toBeGreaterThan(0);
    expect(db.stats.l0Stalls, JSON.stringify(db.stats)).toBe(1);
    expect(notes.filter((n) => !n.startsWith('opened: '))).toEqual([expect.stringMatching(/^writes stalled \d+ ms \(L0 at 3 tables, its stop trigger\)$/)]);
    await db.close();
  });

  /**
   * An engine whose compactions wait for `release`, after five seconds (the meter's window) of
   * ten writes every 20 ms, tens of KB/s; then eight writers until L0 reaches the slowdown
   * trigger (3), and one more write. Returns the first rate, as the note rounds it up.
   */
  async function slowedEngine(): Promise<{ db: Engine; release: () => void; breakCompaction: (err: Error) => void; put: (v?: Buffer) => Promise<void>; rate: number; written: () => number; writeWhile: (go: () => boolean) => Promise<unknown> }> {
    const dir = tempDir();
    let release!: () => void;
    let breakCompaction!: (err: Error) => void;
    const gate = new Promise<void>((resolve, reject) => { release = resolve; breakCompaction = reject; });
    const env = { ...localEnv(dir), compactor: { compact: async () => { await gate; return undefined; } } };
    const notes: string[] = [];
    const db = await Engine.open(dir, { memtableBytes: 512 * 1024, maxMemtables: 3, l0Trigger: 2, l0SlowdownTrigger: 3, l0StopTrigger: 12, sync: false, env, onNote: (n) => notes.push(n), mergeUnderKeys: 0 });
    let i = 0;
    const put = (v: Buffer = value): Promise<void> => db.put(Buffer.from(`k${String(i++).padStart(6, '0')}`), v);
    for (const t0 = Date.now(); Date.now() - t0 < 5_200;) {
      await Promise.all(Array.from({ length: 10 }, () => put()));
      await tick(20);
    }
    expect(db.stats.flushes).toBe(0);
    // Eight writers, so rounds follow one another as under load.
    const writeWhile = (go: () => boolean): Promise<unknown> => Promise.all(Array.from({ length: 8 }, async () => {
      while (go()) await put();
    }));
    await writeWhile(() => db.stats.tablesPerLevel[0] < 3);
    await put(); // a round that sees L0 at 3 or more
    const slowed = notes.filter((n) => n.startsWith('writes slowed to '));
    expect(slowed, notes.join('\n')).toEqual([expect.stringMatching(/^writes slowed to \d+ KiB\/s: L0 at \d+ tables, its slowdown trigger 3$/)]);
    const rate = (Number(/(\d+) KiB/.exec(slowed[0])![1]) + 0.5) * 1024;
    return { db, release, breakCompaction, put, rate, written: () => i, writeWhile };
  }

  it('slows writes from L0\'s slowdown trigger to the rate metered before, until L0 is below it', async () => {
    const { db, release, put, rate, written, writeWhile } = await slowedEngine();
    expect(rate).toBeGreaterThan(16384);
    expect(rate).toBeLessThan(1 << 20);
    expect(db.stats.delayedWriteRate).toBeGreaterThan(0);
    expect(db.stats.delayedWriteRate).toBeLessThanOrEqual(rate); // a flush since may have lowered it
    const [t0, writes0] = [Date.now(), db.stats.writes];
    // (Short of the stop, where writes unslowed would wait for the held compaction.)
    await writeWhile(() => Date.now() - t0 < 1_500 && db.stats.tablesPerLevel[0] < 10);
    const ms = Date.now() - t0;
    const s = db.stats;
    // At most the first rate (each write over 100 bytes), and one round of eight writes late;
    // unslowed, eight writers write megabytes a second here.
    expect(s.writes - writes0, JSON.stringify(s)).toBeLessThanOrEqual((rate * ms) / 100_000 + 8);
    expect(s.writes - writes0).toBeGreaterThan((rate * ms) / 1_000_000);
    expect(s.delayedRounds).toBeGreaterThan(0);
    expect(s.delayMs).toBeGreaterThan(0.3 * ms);
    release();
    // The compaction takes L0 below the trigger; the next write ends the slowdown.
    for (let t = 0; t < 200 && db.stats.tablesPerLevel[0] >= 3; t++) await tick(10);
    await put();
    expect(db.stats.delayedWriteRate).toBe(0);
    for (let j = 0; j < written(); j++) expect(await db.get(Buffer.from(`k${String(j).padStart(6, '0')}`)), `k${j}`).toEqual(value);
    await db.close();
  });

  it('lets a round the slowdown holds back go at once when the engine closes', async () => {
    const { db, release, put } = await slowedEngine();
    await put(Buffer.alloc(200_000, 1)); // holds the next round back the most a round waits (2 s)
    let done = false;
    const t0 = Date.now();
    const held = put().then(() => { done = true; });
    await tick(100);
    expect(done, 'the write after a big one is slowed').toBe(false);
    const closing = db.close();
    await held;
    expect(Date.now() - t0).toBeLessThan(1_500);
    release(); // the held compaction, which close waits for
    await closing;
  });

  it('refuses a round the slowdown holds back as soon as the engine fails', async () => {
    const { db, breakCompaction, put } = await slowedEngine();
    await put(Buffer.alloc(200_000, 1));
    let settled = false;
    const t0 = Date.now();
    const held = put().finally(() => { settled = true; });
    held.catch(() => undefined);
    await tick(100);
    expect(settled, 'the write after a big one is slowed').toBe(false);
    breakCompaction(new Error('injected: compaction failed'));
    await expect(held).rejects.toThrow(/^compaction failed; reopen the engine to recover: injected: compaction failed$/);
    expect(Date.now() - t0).toBeLessThan(1_500);
    await expect(put()).rejects.toThrow(/^compaction failed; reopen/);
    await db.close();
  });
});
