/**
 * The engine with a Compactor (compactions run elsewhere, as on StoCs): outputs come back as
 * metadata and are read through the BlockStore; output numbers are reserved in the MANIFEST
 * before a job leaves; a declined job is merged by the engine; an answer outside the
 * reservation, or corruption, fails the engine; reopening keeps every write.
 */
import { cpSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { NovaError } from '../../src/common/errors.js';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv, tableName } from '../../src/ltc/local-store.js';
import type { EngineEnv } from '../../src/ltc/engine-env.js';
import type { CompactedTable, CompactionRequest } from '../../src/ltc/engine-env.js';
import { mergeTables } from '../../src/compaction/merge.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-compactor-');

const key = (i: number): Buffer => Buffer.from(`key${String(i).padStart(6, '0')}`);
const val = (i: number, v: number): Buffer => Buffer.from(`v${v}-${i}-`.padEnd(300, '*'));
const OPTIONS = { memtableBytes: 32 * 1024, l0Trigger: 2, l1Bytes: 96 * 1024, sync: false, mergeInWorker: false };

/** A local environment whose compactor merges through the store, like a StoC would, and records its jobs. */
type Answer = 'merge' | 'decline' | 'outside' | 'corrupt';

function offloading(dir: string, first: Answer = 'merge'): { env: EngineEnv; jobs: CompactionRequest[]; answer: Answer } {
  const env = localEnv(dir);
  const jobs: CompactionRequest[] = [];
  const control = { env, jobs, answer: first };
  env.compactor = {
    compact: async (job) => {
      jobs.push(job);
      const answer = control.answer;
      if (answer === 'decline') return undefined;
      if (answer === 'corrupt') throw new NovaError('CORRUPTION', 'injected: an input is damaged');
      const tables = await Promise.all(job.inputs.map((m) => env.store.readTable(m.file, m.fragments)));
      const out: CompactedTable[] = [];
      for (const t of mergeTables({ tables, names: job.inputs.map((m) => String(m.file)), smallestSnapshot: job.smallestSnapshot, deeper: job.deeper, targetBytes: job.targetBytes, cuts: job.cuts })) {
        const file = job.firstFile + out.length;
        const fragments = await env.store.writeTable(file, t.bytes);
        // 'outside' names a number it was not given (it wrote its own: a StoC never replaces a file).
        const named = answer === 'outside' ? file + job.maxFiles : file;
        out.push({ file: named, size: t.bytes.length, entries: t.entries, smallest: t.smallest, largest: t.largest, fragments });
      }
      return out;
    },
  };
  return control;
}

/** Holds every job of `env`'s compactor until `release()`; `away()` counts the jobs sent. */
function holdJobs(env: EngineEnv): { release: () => void; away: () => number } {
  const inner = env.compactor!;
  let release!: () => void;
  const held = new Promise<void>((r) => { release = r; });
  let away = 0;
  env.compactor = { compact: async (job) => { away++; await held; return inner.compact(job); } };
  return { release, away: () => away };
}

async function load(e: Engine, n: number, version: number): Promise<void> {
  for (let i = 0; i < n; i += 50) {
    const b = e.newBatch();
    for (let j = i; j < Math.min(n, i + 50); j++) b.put(key((j * 7919) % n), val((j * 7919) % n, version));
    await e.write(b);
  }
}

async function check(e: Engine, n: number, version: number): Promise<void> {
  for (let i = 0; i < n; i++) expect((await e.get(key(i)))?.equals(val(i, version)), `key ${i}`).toBe(true);
}

describe('engine with a compactor', () => {
  it('installs the outputs it answers, numbered inside a reservation made before the job left', async () => {
    const dir = tempDir();
    const { env, jobs } = offloading(dir);
    let e = await Engine.open(dir, { ...OPTIONS, env });
    await load(e, 3000, 1);
    await load(e, 3000, 2);
    await e.flush();
    expect(jobs.length).toBeGreaterThan(2);
    expect(e.stats.offloadedCompactions).toBe(e.stats.compactions);
    expect(e.stats.tablesPerLevel.slice(1).some((n) => n > 0)).toBe(true);
    // Reservations never overlap one another, nor any table a flush wrote.
    const spans = jobs.map((j) => [j.firstFile, j.firstFile + j.maxFiles]).sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < spans.length; i++) expect(spans[i][0]).toBeGreaterThanOrEqual(spans[i - 1][1]);
    await check(e, 3000, 2);
    await e.close();

    e = await Engine.open(dir, { ...OPTIONS, env: offloading(dir).env });
    await check(e, 3000, 2);
    // A job's numbers are in the MANIFEST before the job runs: after a reopen, new tables
    // are numbered past every reservation.
    await load(e, 500, 3);
    await e.flush();
    const last = spans[spans.length - 1][1];
    const tables = await env.store.listTables();
    expect(tables.filter((f) => f >= last).length).toBeGreaterThan(0);
    await e.close();
  });

  it('with Dranges, L0 compacts in parallel jobs cut at their bounds, each with only the L1 tables it meets', async () => {
    const dir = tempDir();
    const o = offloading(dir);
    const e = await Engine.open(dir, { ...OPTIONS, env: o.env, activeMemtables: 4, maxMemtables: 8, l0Trigger: 4, compactionJobs: 4 });
    // The first memtable spans every key (the Dranges are cut from it); once its table has
    // reached L1, cut at the bounds, each Drange's tables compact on their own.
    await load(e, 3000, 1);
    await e.flush();
    const inner = o.env.compactor!;
    const held: CompactionRequest[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => { release = r; });
    o.env.compactor = { compact: async (job) => { held.push(job); await gate; return inner.compact(job); } };
    const writing = load(e, 3000, 2);
    for (let i = 0; i < 500 && held.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
    expect(held.length).toBeGreaterThanOrEqual(2); // two jobs out at once, neither answered
    const cuts = held[0].cuts;
    expect(cuts.length).toBe(3);
    const user = (k: Buffer): Buffer => k.subarray(0, k.length - 8);
    const drangeOf = (k: Buffer): number => cuts.filter((c) => Buffer.compare(c, user(k)) <= 0).length;
    const dranges = held.map((j) => {
      const all = j.inputs.flatMap((m) => [drangeOf(m.smallest), drangeOf(m.largest)]);
      expect(new Set(all).size, 'a job\'s tables lie in one Drange').toBe(1);
      return all[0];
    });
    expect(new Set(dranges).size).toBe(held.length); // and no two jobs share one
    // No table is in two jobs.
    const files = held.flatMap((j) => j.inputs.map((m) => m.file));
    expect(new Set(files).size).toBe(files.length);
    release();
    await writing;
    await e.flush();
    expect(e.stats.maxJobsInParallel).toBeGreaterThanOrEqual(2);
    expect(e.stats.meanJobsInParallel).toBeGreaterThan(1);
    await check(e, 3000, 2);
    await e.close();
    const again = await Engine.open(dir, { ...OPTIONS, env: offloading(dir).env, activeMemtables: 4, maxMemtables: 8 });
    await check(again, 3000, 2);
    await again.close();
  });

  it('with tables held as metadata, a job whose inputs are on a StoC that is away waits; the engine goes on', async () => {
    const dir = tempDir();
    const o = offloading(dir, 'decline');
    const store = o.env.store;
    store.readRange = async (file, _f, offset, length) => readFileSync(join(dir, tableName(file))).subarray(offset, offset + length);
    const read = store.readTable.bind(store);
    let away = true;
    store.readTable = async (file, fragments) => {
      if (away) throw new NovaError('PEER_LOST', 'injected: the StoC holding it is away');
      return read(file, fragments);
    };
    const warnings: string[] = [];
    // Room in L0 for every table the load makes: writes need no compaction meanwhile. The budget
    // leaves the block cache less than a table (δ = 2 memtables of 32 KiB take the rest): tables
    // are held as metadata, so a merge must read its inputs from the StoC.
    const e = await Engine.open(dir, { ...OPTIONS, env: o.env, memoryBudgetBytes: 88 * 1024, l0StopTrigger: 100, onWarning: (w) => warnings.push(w) });
    await load(e, 1500, 1);
    for (let i = 0; i < 200 && !warnings.some((w) => w.includes('compaction postponed')); i++) await new Promise((r) => setTimeout(r, 10));
    expect(warnings.some((w) => w.includes('compaction postponed'))).toBe(true);
    expect(e.failure).toBeUndefined();
    expect(e.stats.compactions).toBe(0);
    await expect(e.compactAll()).rejects.toMatchObject({ code: 'UNAVAILABLE' }); // and the engine goes on
    expect(e.failure).toBeUndefined();
    await check(e, 1500, 1);
    away = false; // the StoC is back: the next try merges
    for (let i = 0; i < 300 && e.stats.compactions === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(e.stats.compactions).toBeGreaterThan(0);
    await load(e, 1500, 2);
    await e.flush();
    await check(e, 1500, 2);
    expect(e.failure).toBeUndefined();
    await e.close();
  });

  it('merges a declined job itself', async () => {
    const dir = tempDir();
    const { env, jobs } = offloading(dir, 'decline');
    const e = await Engine.open(dir, { ...OPTIONS, env });
    await load(e, 3000, 1);
    await e.flush();
    expect(jobs.length).toBeGreaterThan(0);
    expect(e.stats.compactions).toBe(jobs.length);
    expect(e.stats.offloadedCompactions).toBe(0);
    await check(e, 3000, 1);
    await e.close();
  });

  it('outputs that cannot be read back (a StoC went away) are dropped and the job is merged here', async () => {
    const dir = tempDir();
    const o = offloading(dir);
    const read = o.env.store.readTable.bind(o.env.store);
    o.env.store.readTable = async (file, fragments) => {
      if (o.jobs.some((j) => file >= j.firstFile && file < j.firstFile + j.maxFiles)) throw new NovaError('PEER_LOST', 'injected: the StoC holding it is gone');
      return read(file, fragments);
    };
    const warnings: string[] = [];
    const e = await Engine.open(dir, { ...OPTIONS, env: o.env, onWarning: (w) => warnings.push(w) });
    await load(e, 3000, 1);
    await e.flush();
    expect(e.failure).toBeUndefined();
    expect(o.jobs.length).toBeGreaterThan(0);
    expect(warnings.length).toBe(o.jobs.length);
    expect(warnings[0]).toContain('could not be read back');
    expect(e.stats.offloadedCompactions).toBe(0);
    expect(e.stats.compactions).toBe(o.jobs.length);
    await check(e, 3000, 1);
    // The outputs no one could read were deleted; the tables in use are the engine's own.
    const live = new Set(await o.env.store.listTables());
    for (const job of o.jobs) for (let f = job.firstFile; f < job.firstFile + job.maxFiles; f++) expect(live.has(f)).toBe(false);
    await e.close();
  });

  for (const fault of ['outside', 'corrupt'] as const) {
    it(`an answer ${fault === 'outside' ? 'outside the reserved numbers' : 'of corruption'} fails the engine; reopening keeps every write`, async () => {
      const dir = tempDir();
      const failing = offloading(dir);
      const e = await Engine.open(dir, { ...OPTIONS, env: failing.env });
      await load(e, 3000, 1);
      // Nothing else writes the MANIFEST from here on: flushes, then the job that fails.
      failing.answer = fault;
      await e.flush().catch(() => undefined);
      expect(e.failure).toMatchObject({ message: expect.stringContaining(fault === 'outside' ? 'within the numbers reserved' : 'injected') });
      await e.close();
      const again = await Engine.open(dir, { ...OPTIONS, env: offloading(dir).env });
      // Writes acknowledged before the failure are all there.
      const stats = again.stats;
      expect(stats.lastSequence).toBeGreaterThan(0);
      let found = 0;
      for (let i = 0; i < 3000; i++) if ((await again.get(key(i)))?.equals(val(i, 1))) found++;
      expect(found).toBe(stats.lastSequence);
      await again.close();
    });
  }

  it('a crash while a job is away: the reopened engine numbers new tables past the job\'s reservation', async () => {
    const dir = tempDir();
    const copy = tempDir('nova-compactor-crash-');
    const o = offloading(dir);
    const e = await Engine.open(dir, { ...OPTIONS, env: o.env });
    await load(e, 3000, 1);
    // The next job "crashes the LTC" as it leaves: the directory as it is then is what a
    // restarted LTC finds, while the job may still be writing outputs on a StoC.
    let crashed: CompactionRequest | undefined;
    o.env.compactor = {
      compact: async (job) => {
        if (!crashed) cpSync(dir, copy, { recursive: true });
        crashed ??= job;
        throw new NovaError('CORRUPTION', 'injected: the LTC is gone');
      },
    };
    await load(e, 1500, 2).catch(() => undefined); // the engine fails at the job
    await e.flush().catch(() => undefined);
    await e.close();
    expect(crashed).toBeDefined();
    const again = await Engine.open(copy, { ...OPTIONS, env: offloading(copy).env });
    // Reopening numbers its new MANIFEST (and all after it) from the recovered next number.
    const manifests = readdirSync(copy).map((n) => /^MANIFEST-(\d+)$/.exec(n)).filter((m) => m !== null).map((m) => Number(m![1]));
    expect(manifests).toHaveLength(1);
    expect(manifests[0]).toBeGreaterThanOrEqual(crashed!.firstFile + crashed!.maxFiles);
    await load(again, 500, 3);
    await again.flush();
    await check(again, 500, 3);
    await again.close();
  });

  it('flushes go on while a compaction is away (writes do not wait for it)', async () => {
    const dir = tempDir();
    const o = offloading(dir);
    const hold = holdJobs(o.env);
    const e = await Engine.open(dir, { ...OPTIONS, env: o.env, l0StopTrigger: 100 });
    while (hold.away() === 0) await load(e, 200, 1); // until the first job leaves
    const flushes = e.stats.flushes;
    await load(e, 3000, 2); // ~30 memtables of writes while the job is held
    expect(e.stats.flushes).toBeGreaterThan(flushes + 10);
    expect(hold.away()).toBe(1);
    hold.release();
    await e.flush();
    await check(e, 3000, 2);
    await e.close();
  });

  it('closing gives up a compaction still away (a range moving on waits for no StoC); reopened, every write is there', async () => {
    const dir = tempDir();
    const o = offloading(dir);
    const hold = holdJobs(o.env);
    const e = await Engine.open(dir, { ...OPTIONS, env: o.env, l0StopTrigger: 100 });
    while (hold.away() === 0) await load(e, 200, 1);
    await load(e, 400, 2);
    await e.close(); // without giving up the held job, this would wait for it for good
    hold.release(); // it ends after the close: its outputs are orphans, named by no edit
    const again = await Engine.open(dir, { ...OPTIONS, env: offloading(dir).env });
    await check(again, 400, 2);
    await again.close();
  });

  it('a compaction that ends after a MANIFEST append failed appends no edit and deletes no input', async () => {
    const dir = tempDir();
    const o = offloading(dir);
    const hold = holdJobs(o.env);
    const fault = { armed: false, failed: false, after: 0 };
    const manifests = o.env.manifests;
    o.env.manifests = {
      readCurrent: () => manifests.readCurrent(),
      install: (file) => manifests.install(file),
      create: async (file) => {
        const log = await manifests.create(file);
        return {
          append: async (records, sync) => {
            if (fault.failed) fault.after++;
            if (fault.armed && !fault.failed) {
              fault.failed = true;
              throw new Error('injected: one MANIFEST append failed');
            }
            return log.append(records, sync);
          },
          close: () => log.close(),
        };
      },
    };
    const e = await Engine.open(dir, { ...OPTIONS, env: o.env, l0StopTrigger: 100 });
    while (hold.away() === 0) await load(e, 200, 1);
    fault.armed = true;
    await load(e, 3000, 2).catch(() => undefined); // a memtable switch or flush hits the fault
    expect(fault.failed).toBe(true);
    hold.release();
    await e.flush().catch(() => undefined);
    await e.close();
    expect(fault.after).toBe(0);
    const again = await Engine.open(dir, { ...OPTIONS, env: offloading(dir).env });
    await check(again, 200, 1);
    await again.close();
  });
});
