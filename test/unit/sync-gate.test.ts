/**
 * The order of a StoC's fdatasyncs (sync-gate.ts): syncs writes wait for go at once; those of
 * compaction outputs one at a time, after them, and past them once they waited too long.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SyncGate } from '../../src/stoc/sync-gate.js';

/** A sync that ends when told to; `started` says whether the gate let it begin. */
function pending(): { started: boolean; end: () => void; sync: () => Promise<void> } {
  const s = { started: false, end: (): void => undefined, sync: (): Promise<void> => Promise.resolve() };
  s.sync = () => {
    s.started = true;
    return new Promise<void>((resolve) => { s.end = resolve; });
  };
  return s;
}

const turns = async (): Promise<void> => {
  for (let i = 0; i < 5; i++) await Promise.resolve();
};

afterEach(() => {
  vi.useRealTimers();
});

describe('SyncGate', () => {
  it('runs syncs writes wait for at once, side by side, even while a background one runs', async () => {
    const gate = new SyncGate();
    const bg = pending();
    const a = pending();
    const b = pending();
    const done = [gate.run(true, bg.sync), gate.run(false, a.sync), gate.run(false, b.sync)];
    await turns();
    expect([bg.started, a.started, b.started]).toEqual([true, true, true]);
    bg.end();
    a.end();
    b.end();
    await Promise.all(done);
    expect(gate.counters).toMatchObject({ foregroundSyncs: 2, backgroundSyncs: 1, backgroundWaits: 0 });
  });

  it('holds background syncs while a foreground one runs, then lets them go one at a time in order', async () => {
    const gate = new SyncGate();
    const fg = pending();
    const first = pending();
    const second = pending();
    const done = [gate.run(false, fg.sync), gate.run(true, first.sync), gate.run(true, second.sync)];
    await turns();
    expect([first.started, second.started]).toEqual([false, false]);
    fg.end();
    await turns();
    expect([first.started, second.started]).toEqual([true, false]);
    first.end();
    await turns();
    expect(second.started).toBe(true);
    second.end();
    await Promise.all(done);
    expect(gate.counters.backgroundWaits).toBe(2);
  });

  it('lets a background sync that waited too long go while foreground syncs keep coming', async () => {
    vi.useFakeTimers();
    const gate = new SyncGate(1_000);
    const fgs = [pending(), pending()];
    const bg = pending();
    const done = [gate.run(false, fgs[0].sync), gate.run(true, bg.sync)];
    await turns();
    // A second foreground sync starts before the first ends: the disk is never free of them.
    done.push(gate.run(false, fgs[1].sync));
    fgs[0].end();
    await turns();
    expect(bg.started).toBe(false);
    await vi.advanceTimersByTimeAsync(999);
    expect(bg.started).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(bg.started).toBe(true);
    expect(gate.counters.backgroundOverdue).toBe(1);
    fgs[1].end();
    bg.end();
    await Promise.all(done);
  });

  it('frees the disk for the next background sync when one fails', async () => {
    const gate = new SyncGate();
    const next = pending();
    const failed = gate.run(true, () => Promise.reject(new Error('EIO')));
    const done = gate.run(true, next.sync);
    await expect(failed).rejects.toThrow('EIO');
    await turns();
    expect(next.started).toBe(true);
    next.end();
    await done;
  });
});
