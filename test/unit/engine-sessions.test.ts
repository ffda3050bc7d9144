/**
 * Exactly-once writes in the engine: a write a client numbered is applied once, whether its
 * retry comes while it is in flight, after it was applied, after a crash replayed it from its
 * log, or after a flush deleted that log; sessions expire on the range's clock.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv } from '../../src/ltc/local-store.js';
import type { EngineEnv } from '../../src/ltc/engine-env.js';
import type { EngineOptions } from '../../src/ltc/engine-options.js';
import type { ClientId, SessionRef } from '../../src/common/write-id.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-sessions-');
const open: Engine[] = [];
afterEach(async () => { // runs before tempDirs' hook, registered first
  for (const e of open.splice(0)) await e.close().catch(() => undefined);
});

async function openEngine(dir: string, o: EngineOptions = {}): Promise<Engine> {
  const e = await Engine.open(dir, { mergeInWorker: false, ...o });
  open.push(e);
  return e;
}

async function reopen(e: Engine, dir: string, o: EngineOptions = {}): Promise<Engine> {
  await e.close().catch(() => undefined);
  open.splice(open.indexOf(e), 1);
  return openEngine(dir, o);
}

const A: ClientId = { idHigh: 0xa1a1, idLow: 1 };
const B: ClientId = { idHigh: 0xb2b2, idLow: 2 };
const k = Buffer.from('key');
const X = Buffer.from('X');
const Y = Buffer.from('Y');

function ref(client: ClientId, seq: number, floor = 1, open = true): SessionRef {
  return { ...client, seq, floor, open };
}

/**
 * The local environment, but the first append after `arm()` reaches the log and then fails,
 * as an append that reached one log replica of three does when its LTC dies before a majority.
 */
function appendThenFail(dir: string): { env: EngineEnv; arm: () => void } {
  const base = localEnv(dir);
  let armed = false;
  return {
    arm: () => { armed = true; },
    env: {
      ...base,
      logs: {
        ...base.logs,
        create: async (file) => {
          const log = await base.logs.create(file);
          return {
            append: async (records, sync) => {
              await log.append(records, sync);
              if (armed) {
                armed = false;
                throw new Error('injected: the LTC died before a majority acknowledged the append');
              }
            },
            close: () => log.close(),
          };
        },
        read: (file) => base.logs.read(file),
        remove: (file) => base.logs.remove(file),
        list: () => base.logs.list(),
        describe: (file) => base.logs.describe(file),
      },
    },
  };
}

describe('engine: exactly-once writes', () => {
  it('a retry after another client\'s newer write is answered, not applied again (the issue\'s history)', async () => {
    const dir = tempDir();
    const db = await openEngine(dir);
    await db.put(k, X, { session: ref(A, 1) });
    await db.put(k, Y, { session: ref(B, 1) });
    const seq = db.stats.lastSequence;
    await db.put(k, X, { session: ref(A, 1) }); // the retry
    expect((await db.get(k))!.toString()).toBe('Y');
    expect(db.stats.lastSequence).toBe(seq);
    expect(db.stats.sessions).toMatchObject({ sessions: 2, duplicates: 1 });
    // Writes without a session (the embedded engine's) are applied as they come.
    await db.put(k, X);
    await db.put(k, X);
    expect(db.stats.lastSequence).toBe(seq + 2);
  });

  it('a retry racing its original gets the original\'s outcome, and one write is applied', async () => {
    const db = await openEngine(tempDir());
    const batch = db.newBatch().put(Buffer.from('a'), X).delete(Buffer.from('b'));
    const first = db.write(batch, { session: ref(A, 7, 7) });
    const again = db.write(batch, { session: ref(A, 7, 7) });
    await Promise.all([first, again]);
    expect(db.stats.lastSequence).toBe(2);
    await expect(db.delete(Buffer.from('a'), { session: ref(A, 7, 7) })).resolves.toBeUndefined();
    expect((await db.get(Buffer.from('a')))!.toString()).toBe('X'); // the delete was the retry of write 7: not applied
  });

  it('after a crash, a write whose append reached the log but was never answered is replayed once; its retry is answered', async () => {
    const dir = tempDir();
    const fault = appendThenFail(dir);
    let db = await openEngine(dir, { env: fault.env });
    await db.put(Buffer.from('other'), Y, { session: ref(B, 1) });
    fault.arm();
    await expect(db.put(k, X, { session: ref(A, 1) })).rejects.toMatchObject({ code: 'TRANSPORT' });
    db = await reopen(db, dir);
    expect((await db.get(k))!.toString()).toBe('X'); // replayed from the log
    await db.put(k, Y, { session: ref(B, 2, 2, false) });
    await db.put(k, X, { session: ref(A, 1, 1, true) }); // the client's retry of write 1
    expect((await db.get(k))!.toString()).toBe('Y');
  });

  it('the table survives flushes (the logs are deleted), reopens, and a reopen of a reopen', async () => {
    const dir = tempDir();
    let db = await openEngine(dir, { memtableBytes: 4096 });
    for (let i = 1; i <= 50; i++) await db.put(Buffer.from(`k${i}`), Buffer.alloc(200, i), { session: ref(A, i, i - 5 > 0 ? i - 5 : 1) });
    await db.put(k, X, { session: ref(B, 1) });
    await db.flush();
    await db.put(k, Y);
    expect(db.stats.flushes).toBeGreaterThan(1);
    db = await reopen(db, dir, { memtableBytes: 4096 });
    db = await reopen(db, dir, { memtableBytes: 4096 });
    const seq = db.stats.lastSequence;
    await db.put(k, X, { session: ref(B, 1, 1, false) });
    for (let i = 45; i <= 50; i++) await db.put(Buffer.from(`k${i}`), Buffer.alloc(1), { session: ref(A, i, 45, false) });
    expect(db.stats.lastSequence).toBe(seq);
    expect((await db.get(k))!.toString()).toBe('Y');
    await expect(db.put(k, X, { session: ref(A, 44, 45, false) })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await db.put(k, X, { session: ref(A, 51, 45, false) }); // a new write of the same client
    expect((await db.get(k))!.toString()).toBe('X');
  });

  it('a MANIFEST grown past maxManifestBytes moves to a new one; the tree and the sessions come back from it', async () => {
    const dir = tempDir();
    // Memtables of 50 keys are flushed, not merged: each flush's edit grows the MANIFEST.
    let db = await openEngine(dir, { memtableBytes: 4096, maxManifestBytes: 1024, l0Trigger: 100, mergeUnderKeys: 0 });
    for (let i = 1; i <= 200; i++) await db.put(Buffer.from(`k${i % 50}`), Buffer.alloc(300, i), { session: ref(A, i, i) });
    await db.flush();
    expect(db.stats.manifestRolls).toBeGreaterThan(0);
    db = await reopen(db, dir, { memtableBytes: 4096, maxManifestBytes: 1024, l0Trigger: 100, mergeUnderKeys: 0 });
    const seq = db.stats.lastSequence;
    await db.put(Buffer.from('k1'), X, { session: ref(A, 200, 200, false) }); // a retry of the last write
    expect(db.stats.lastSequence).toBe(seq);
    expect((await db.get(Buffer.from('k0')))!.equals(Buffer.alloc(300, 200))).toBe(true);
  });

  it('refuses a malformed session, and goes on', async () => {
    const db = await openEngine(tempDir());
    await expect(db.put(k, X, { session: { idHigh: 1.5, idLow: 0, seq: 1, floor: 1, open: true } })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await expect(db.put(k, X, { session: ref(A, 2, 3) })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await db.put(k, Y, { session: ref(A, 1) });
    expect((await db.get(k))!.toString()).toBe('Y');
  });

  it('a session idle for sessionTimeoutMs expires: its client is told, and nothing is applied', async () => {
    const db = await openEngine(tempDir(), { sessionTimeoutMs: 1000 });
    await db.put(k, X, { session: ref(A, 1) });
    await new Promise((r) => setTimeout(r, 2600)); // ticks once a second
    await expect(db.put(k, Y, { session: ref(A, 2, 2, false) })).rejects.toMatchObject({ code: 'SESSION_EXPIRED' });
    expect((await db.get(k))!.toString()).toBe('X');
    expect(db.stats.sessions).toMatchObject({ sessions: 0, expired: 1 });
    await expect(Engine.open(tempDir(), { sessionTimeoutMs: 0 })).rejects.toThrow(/sessionTimeoutMs must be a positive integer/);
  });
});
