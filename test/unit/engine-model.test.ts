/**
 * The engine against an in-memory oracle: random puts, deletes, batches, gets, scans and
 * snapshots, with forced flushes and reopens in between. Fixed seeds; NOVA_SOAK=1 runs longer.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine, type Snapshot } from '../../src/ltc/engine.js';
import { rng } from '../helpers/rng.js';

const SOAK = process.env.NOVA_SOAK === '1';
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});


function scanOracle(m: Map<string, string>, start: string, end: string | undefined, limit: number): Array<[string, string]> {
  return [...m.entries()].filter(([k]) => k >= start && (end === undefined || k < end))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).slice(0, limit);
}

describe.each([1, 2, 3])('engine model (seed %i)', (seed) => {
  it('matches the oracle through flushes and reopens', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nova-engine-'));
    dirs.push(dir);
    const r = rng(seed);
    const warnings: string[] = [];
    const open = () => Engine.open(dir, { memtableBytes: 16 * 1024, sync: false, onWarning: (w) => warnings.push(w) });
    let db = await open();
    const oracle = new Map<string, string>();
    const snapshots: Array<{ snap: Snapshot; state: Map<string, string> }> = [];
    let compactions = 0;
    let deepest = 0;
    const tally = () => {
      compactions += db.stats.compactions;
      db.stats.tablesPerLevel.forEach((n, l) => { if (n > 0) deepest = Math.max(deepest, l); });
    };
    const key = () => `k${String(Math.floor(r() * 400)).padStart(4, '0')}`;
    const steps = SOAK ? 50_000 : 3000;
    for (let step = 0; step < steps; step++) {
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
      }
    }
    tally();
    await db.close();
    expect(compactions, 'compactions ran').toBeGreaterThan(0);
    expect(deepest, 'data reached L1 or deeper').toBeGreaterThan(0);
    db = await open();
    for (const [k, v] of oracle) expect((await db.get(Buffer.from(k)))?.toString()).toBe(v);
    expect((await db.scan(Buffer.from(''))).map(([k, v]) => [k.toString(), v.toString()])).toEqual(scanOracle(oracle, '', undefined, Infinity));
    await db.close();
    expect(warnings).toEqual([]);
  }, 120_000);
});

describe('engine input checks', () => {
  it('refuses oversize keys and values with the limit, and works after', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nova-engine-'));
    dirs.push(dir);
    const db = await Engine.open(dir, { limits: { maxKeyBytes: 16, maxValueBytes: 64 } });
    await expect(db.put(Buffer.alloc(17), Buffer.alloc(1))).rejects.toThrow(/limit of 16 bytes/);
    await expect(db.put(Buffer.alloc(1), Buffer.alloc(65))).rejects.toThrow(/limit of 64 bytes/);
    await db.put(Buffer.from('ok'), Buffer.from('fine'));
    expect((await db.get(Buffer.from('ok')))?.toString()).toBe('fine');
    await db.close();
    await expect(db.put(Buffer.from('a'), Buffer.from('b'))).rejects.toMatchObject({ code: 'CLOSED' });
  });
});
