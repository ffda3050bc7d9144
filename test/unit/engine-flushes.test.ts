/**
 * Flushes written side by side (background.ts flushLoop): with α > 1, several groups of
 * immutable memtables have their tables stored at once, and are installed in the order they
 * were picked whatever order their writes end in, so L0 keeps a Drange's newest table last.
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv } from '../../src/ltc/local-store.js';
import type { EngineEnv } from '../../src/ltc/engine-env.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-flushes-');

/** Table writes wait until released, each on its own; `held()` lists the waiting ones in the order they began. */
function heldWrites(dir: string): { env: EngineEnv; held: () => number; releaseNewestFirst: () => Promise<void>; open: () => void } {
  const base = localEnv(dir);
  const waiting: Array<() => void> = [];
  let passing = true;
  return {
    held: () => waiting.length,
    // The last write to begin ends first, then the one before it, and so on.
    releaseNewestFirst: async () => {
      passing = true;
      while (waiting.length > 0) {
        waiting.pop()!();
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    open: () => { passing = false; },
    env: {
      logs: base.logs,
      manifests: base.manifests,
      store: {
        readTable: (file, fragments) => base.store.readTable(file, fragments),
        deleteTable: (file) => base.store.deleteTable(file),
        listTables: () => base.store.listTables(),
        writeTable: async (file, bytes) => {
          if (!passing) await new Promise<void>((resolve) => waiting.push(resolve));
          return base.store.writeTable(file, bytes);
        },
      },
    },
  };
}

describe('flushes written at once', () => {
  it('install in the order they began, though their writes end newest first', async () => {
    const dir = tempDir();
    const gate = heldWrites(dir);
    const db = await Engine.open(dir, { env: gate.env, memtableBytes: 4096, activeMemtables: 4, maxMemtables: 16, l0Trigger: 100, l0StopTrigger: 200, mergeUnderKeys: 0, idleCompactionMs: 0 });
    const keys = Array.from({ length: 8 }, (_, i) => `k${i}`);
    // Fill the first memtable, so the Dranges are cut over these keys; then hold table writes.
    for (let v = 0; v < 3; v++) for (const k of keys) await db.put(Buffer.from(k), Buffer.from(`v${v}-${'x'.repeat(300)}`));
    await db.flush();
    gate.open();
    // One key again and again: its Drange's memtables fill and retire one after another, and
    // their groups are written at once (the older ones in flight are left out of the next).
    const writes: Array<Promise<void>> = [];
    for (let v = 3; v < 60; v++) writes.push(db.put(Buffer.from('k0'), Buffer.from(`v${v}-${'x'.repeat(300)}`)));
    for (let i = 0; i < 200 && gate.held() < 2; i++) await new Promise((r) => setTimeout(r, 10));
    expect(gate.held(), 'flush groups writing at once').toBeGreaterThan(1);
    await gate.releaseNewestFirst();
    await Promise.all(writes);
    await db.flush();
    expect(db.stats.maxFlushesAtOnce).toBeGreaterThan(1);
    expect((await db.get(Buffer.from('k0')))?.toString().split('-')[0]).toBe('v59');
    for (const k of keys.slice(1)) expect((await db.get(Buffer.from(k)))?.toString().split('-')[0], k).toBe('v2');
    await db.close();
  });
});
