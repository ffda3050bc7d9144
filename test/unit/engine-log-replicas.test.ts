/**
 * A memtable whose log lost a replica moves its Drange's writes to a new log (make-room.ts
 * degradedDrange), and the old log goes with the memtable's flush; a memtable switch takes the
 * log made ahead for it (prepareSpareLog) unless that one lost replicas. The local stores, with
 * logs that can be told they are short of replicas.
 */
import { cpSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv } from '../../src/ltc/local-store.js';
import type { EngineEnv } from '../../src/ltc/engine-env.js';
import type { EngineOptions } from '../../src/ltc/engine-options.js';
import type { LogWriter } from '../../src/logc/log-store.js';
import { tempDirs } from '../helpers/temp.js';
import { until } from '../helpers/until.js';

const tempDir = tempDirs('nova-log-replicas-');
const key = (i: number): Buffer => Buffer.from(`key${String(i).padStart(6, '0')}`);
const val = (i: number): Buffer => Buffer.from(`v-${i}`);

interface Made { file: number; writer: LogWriter & { short: boolean; misplaced: boolean; appends: number; closed: boolean } }

/** The local environment, its logs recorded as made, each able to be told it is short. */
function recording(dir: string, failCreate: (n: number) => boolean = () => false): { env: EngineEnv; made: Made[]; removed: number[]; shortFromStart: { on: boolean } } {
  const env = localEnv(dir);
  const made: Made[] = [];
  const removed: number[] = [];
  const shortFromStart = { on: false };
  const logs = env.logs;
  let creates = 0;
  env.logs = {
    ...logs,
    read: (f) => logs.read(f), list: () => logs.list(), describe: (f) => logs.describe(f),
    remove: (f) => { removed.push(f); return logs.remove(f); },
    create: async (file) => {
      if (failCreate(creates++)) throw new Error('injected: no StoC could create it');
      const inner = await logs.create(file);
      const writer = {
        short: shortFromStart.on, misplaced: false, appends: 0, closed: false,
        append: (r: readonly Buffer[], sync: boolean) => { writer.appends++; return inner.append(r, sync); },
        close: () => { writer.closed = true; return inner.close(); },
        get degraded() { return this.short; },
      };
      made.push({ file, writer });
      return writer;
    },
  };
  return { env, made, removed, shortFromStart };
}

const written = (made: Made[]): Made[] => made.filter((m) => m.writer.appends > 0);

// For the switch tests: 1 KB values, 64 KiB memtables, flushed, not merged (a merge makes a log of its own).
const value = (i: number): Buffer => Buffer.alloc(1000, i & 0xff);
const options = (env: EngineEnv): EngineOptions => ({ env, memtableBytes: 64 * 1024, sync: false, mergeUnderKeys: 0 });

/** Reopens `dir`: keys below `acked` read back, and none of those from there to `to`. */
async function reopenHas(dir: string, env: EngineEnv, acked: number, to = acked): Promise<void> {
  const again = await Engine.open(dir, options(env));
  for (let i = 0; i < acked; i++) expect(await again.get(key(i)), `key ${i}`).toEqual(value(i));
  for (let i = acked; i < to; i++) expect(await again.get(key(i)), `key ${i}`).toBeUndefined();
  await again.close();
}

/** Waits for the open's sweep to delete log `file` (obsolete-files.ts). */
const swept = (env: EngineEnv, file: number): Promise<void> => until(async () => !(await env.logs.list()).includes(file), 2000);

describe('a log short of replicas', () => {
  it('makes its memtable retire at the next write: later writes go to a new log; nothing is lost; a log that stays short is not rolled again and again', async () => {
    const dir = tempDir();
    const { env, made, shortFromStart } = recording(dir);
    const e = await Engine.open(dir, { env, memtableBytes: 1 << 20, sync: false });
    for (let i = 0; i < 100; i++) await e.put(key(i), val(i));
    const before = written(made).length;
    written(made).at(-1)!.writer.short = true; // a replica lost; a StoC up could replace it
    for (let i = 100; i < 200; i++) await e.put(key(i), val(i));
    expect(written(made).length).toBe(before + 1); // one new log, not one per write
    expect(written(made).at(-1)!.writer.short).toBe(false);
    // New logs that are short from the start (a StoC that answers but fails) are rolled at most once a second.
    shortFromStart.on = true;
    for (const m of made) m.writer.short = true; // the spare made after the roll too
    const rolled = written(made).length;
    for (let i = 200; i < 300; i++) await e.put(key(i), val(i));
    expect(written(made).length).toBe(rolled); // the last roll was less than a second ago
    await new Promise((r) => setTimeout(r, 1100));
    for (let i = 300; i < 400; i++) await e.put(key(i), val(i));
    expect(written(made).length).toBe(rolled + 1); // one roll, onto a log as short, and no more for a second
    for (let i = 0; i < 400; i += 17) expect(await e.get(key(i))).toEqual(val(i));
    await e.close();
    const again = await Engine.open(dir, { env, memtableBytes: 1 << 20, sync: false });
    for (let i = 0; i < 400; i += 13) expect(await again.get(key(i))).toEqual(val(i));
    await again.close();
  });
});

describe('the log made ahead of a memtable switch', () => {
  /** Writes keys from `from` until writes have gone to `logs` logs in all; returns the next key. */
  const writeUntil = async (e: Engine, made: Made[], logs: number, from: number): Promise<number> => {
    let i = from;
    while (written(made).length < logs) await e.put(key(i), value(i++));
    await new Promise((r) => setTimeout(r, 10)); // the spare's making, begun after the switch
    return i;
  };

  it('is what the next switch writes to; a close removes it unused', async () => {
    const dir = tempDir();
    const { env, made, removed } = recording(dir);
    const e = await Engine.open(dir, options(env));
    expect(made).toHaveLength(1); // the open's memtable; no spare before a switch
    let n = await writeUntil(e, made, 2, 0); // the first switch makes its log, then the spare
    expect(made).toHaveLength(3);
    const spare = made[2];
    expect(spare.writer.appends, 'made ahead, not yet written').toBe(0);
    n = await writeUntil(e, made, 3, n); // the next switch
    expect(written(made).at(-1), 'the switch took it').toBe(spare);
    expect(made, 'and made the next one ahead').toHaveLength(4);
    const unused = made[3];
    expect(unused.writer.appends).toBe(0);
    expect(unused.file).toBeGreaterThan(spare.file);
    await e.close();
    expect(unused.writer.closed).toBe(true);
    expect(removed).toContain(unused.file);
    expect(await env.logs.list()).not.toContain(unused.file);
    await reopenHas(dir, env, n);
  });

  it.each([
    ['lost replicas a new log would have', (m: Made) => { m.writer.short = true; }],
    ['has a replica on a StoC new logs avoid, or whose connection was lost', (m: Made) => { m.writer.misplaced = true; }],
  ])('is dropped if it %s: the switch makes a log as before', async (_why, unfit) => {
    const dir = tempDir();
    const { env, made, removed } = recording(dir);
    const e = await Engine.open(dir, options(env));
    let n = await writeUntil(e, made, 2, 0);
    const spare = made[2];
    unfit(spare);
    n = await writeUntil(e, made, 3, n);
    expect(spare.writer.appends).toBe(0);
    expect(written(made).at(-1)!.file, 'a log made at the switch').toBeGreaterThan(spare.file);
    await e.close(); // waits for the spare's removal, which the switch did not
    expect(spare.writer.closed).toBe(true);
    expect(removed).toContain(spare.file);
    await reopenHas(dir, env, n);
  });

  it('is closed and removed by a close that fails to close another log', async () => {
    const dir = tempDir();
    const { env, made, removed } = recording(dir);
    const e = await Engine.open(dir, options(env));
    const n = await writeUntil(e, made, 2, 0);
    const spare = made[2];
    const active = made[1].writer;
    const close = active.close;
    active.close = async () => { await close(); throw new Error('injected: close failed'); };
    await expect(e.close()).rejects.toThrow('injected: close failed');
    expect(spare.writer.closed).toBe(true);
    expect(removed).toContain(spare.file);
    await reopenHas(dir, env, n);
  });

  it('is not made where an empty log holds StoC memory (the store says so)', async () => {
    const dir = tempDir();
    const { env, made } = recording(dir);
    env.logs = { ...env.logs, makeAhead: false };
    const e = await Engine.open(dir, options(env));
    const n = await writeUntil(e, made, 3, 0);
    expect(made.every((m) => m.writer.appends > 0)).toBe(true);
    await e.close();
    await reopenHas(dir, env, n);
  });

  it('left by a crash, unbound and empty, is deleted by the next open, and its number not given out again', async () => {
    const dir = tempDir();
    const { env, made } = recording(dir);
    const e = await Engine.open(dir, options(env));
    const n = await writeUntil(e, made, 2, 0);
    const spare = made[2];
    expect(spare.writer.appends).toBe(0);
    expect(await env.logs.list()).toContain(spare.file);
    // A crash: the files as they are now, opened by another engine.
    const copy = tempDir();
    cpSync(dir, copy, { recursive: true });
    await e.close();
    const after = recording(copy);
    const again = await Engine.open(copy, options(after.env));
    for (let i = 0; i < n; i++) expect(await again.get(key(i)), `key ${i}`).toEqual(value(i));
    await swept(after.env, spare.file);
    expect(after.made.every((m) => m.file > spare.file)).toBe(true);
    await again.close();
  });

  it('that could not be made leaves its switch to make a log as before', async () => {
    const dir = tempDir();
    const { env, made } = recording(dir, (n) => n === 2); // the open's log, the first switch's, then the spare
    const e = await Engine.open(dir, options(env));
    let n = await writeUntil(e, made, 2, 0);
    expect(made, 'no spare').toHaveLength(2);
    n = await writeUntil(e, made, 3, n);
    expect(written(made), 'the switch made its log').toHaveLength(3);
    expect(made, 'and then a spare').toHaveLength(4);
    await e.close();
    await reopenHas(dir, env, n);
  });
});

describe('a switch\'s binding of its new log in the MANIFEST', () => {
  /** `recording`, with MANIFEST appends that wait at `gate` while it is set. */
  function gated(dir: string): ReturnType<typeof recording> & { hold: () => { release: () => void; fail: (err: Error) => void } } {
    const r = recording(dir);
    let gate: Promise<void> | undefined;
    const manifests = r.env.manifests;
    r.env.manifests = {
      ...manifests,
      readCurrent: () => manifests.readCurrent(), install: (f) => manifests.install(f),
      create: async (file) => {
        const inner = await manifests.create(file);
        return {
          append: async (records, sync) => {
            if (gate) await gate;
            return inner.append(records, sync);
          },
          close: () => inner.close(),
        };
      },
    };
    const hold = (): { release: () => void; fail: (err: Error) => void } => {
      let release!: () => void;
      let fail!: (err: Error) => void;
      gate = new Promise<void>((resolve, reject) => { release = resolve; fail = reject; });
      gate.catch(() => undefined);
      return { release: () => { gate = undefined; release(); }, fail: (err) => { gate = undefined; fail(err); } };
    };
    return { ...r, hold };
  }
  /** Holds the MANIFEST, then writes past a switch: the puts, and which have settled. */
  async function writePastSwitch(e: Engine, made: Made[], hold: () => { release: () => void; fail: (err: Error) => void }) {
    for (let i = 0; i < 10; i++) await e.put(key(i), value(i));
    const logs = written(made).length;
    const gate = hold();
    const settled = new Set<number>();
    const puts = Array.from({ length: 100 }, (_, j) => {
      const p = e.put(key(10 + j), value(10 + j));
      p.then(() => settled.add(10 + j), () => undefined);
      return p;
    });
    await until(() => written(made).length > logs, 1000);
    expect(written(made).length, 'writes went to the new log while its binding waits').toBe(logs + 1);
    await new Promise((r) => setTimeout(r, 100));
    const early = settled.size;
    expect(early, 'acknowledged: the writes to the old log').toBeLessThan(puts.length);
    return { gate, puts, settled, early };
  }

  it('lets rounds go to the new log meanwhile, and acknowledges none of them before it lands', async () => {
    const dir = tempDir();
    const { env, made, hold } = gated(dir);
    const e = await Engine.open(dir, options(env));
    const { gate, puts, settled, early } = await writePastSwitch(e, made, hold);
    // Acknowledged in order: the first `early` puts, and no later one.
    expect([...settled].sort((a, b) => a - b)).toEqual(Array.from({ length: early }, (_, j) => 10 + j));
    gate.release();
    await Promise.all(puts);
    await e.close();
    await reopenHas(dir, recording(dir).env, 110);
  });

  it('left unbound by a crash, the new log is deleted unread by the next open: none of its writes was acknowledged', async () => {
    const dir = tempDir();
    const { env, made, hold } = gated(dir);
    const e = await Engine.open(dir, options(env));
    const { gate, puts, early } = await writePastSwitch(e, made, hold);
    const fresh = written(made).at(-1)!;
    // A crash now: the files as they are, the new log holding writes, the MANIFEST not naming it.
    const copy = tempDir();
    cpSync(dir, copy, { recursive: true });
    gate.release();
    await Promise.all(puts);
    await e.close();
    const after = recording(copy);
    expect(await after.env.logs.list()).toContain(fresh.file);
    await reopenHas(copy, after.env, 10 + early, 110); // its open's sweep deletes the log
    expect(await after.env.logs.list()).not.toContain(fresh.file);
  });

  it('fails the engine if the binding fails: the writes to the new log are refused, and a reopen has none of them', async () => {
    const dir = tempDir();
    const { env, made, hold } = gated(dir);
    const e = await Engine.open(dir, options(env));
    const { gate, puts, early } = await writePastSwitch(e, made, hold);
    gate.fail(new Error('injected: MANIFEST append failed'));
    const outcomes = await Promise.allSettled(puts);
    const refused = outcomes.filter((o) => o.status === 'rejected');
    expect(refused.length).toBe(puts.length - early);
    for (const o of refused) expect(String((o as PromiseRejectedResult).reason)).toMatch(/failed; reopen the engine to recover: injected: MANIFEST append failed/);
    await e.close();
    await reopenHas(dir, recording(dir).env, 10 + early, 110);
  });
});
