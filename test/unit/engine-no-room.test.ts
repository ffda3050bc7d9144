/**
 * A table no StoC has room for (engine-env.ts NoRoom) does not fail the engine: flushes and
 * compactions wait and try again, writes that must wait for a flush are refused naming the
 * cause, reads go on, and writes resume by themselves once there is room.
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { NoRoom } from '../../src/ltc/engine-env.js';
import { localEnv } from '../../src/ltc/local-store.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-no-room-');
const key = (i: number): Buffer => Buffer.from(`key${String(i).padStart(6, '0')}`);
const val = (i: number): Buffer => Buffer.from(`v-${i}-`.padEnd(100, '*'));

describe('no room for tables', () => {
  it('waits instead of failing; refuses the writes that need a flush, naming the cause; reads go on; writes resume once there is room', async () => {
    const dir = tempDir();
    const env = localEnv(dir);
    const store = env.store;
    let full = false;
    let refusedWrites = 0;
    env.store = {
      ...store,
      readTable: (f, fr) => store.readTable(f, fr), deleteTable: (f) => store.deleteTable(f), listTables: () => store.listTables(),
      readRange: store.readRange && ((f, fr, o, l, c) => store.readRange!(f, fr, o, l, c)),
      writeTable: async (file, bytes) => {
        if (full) {
          refusedWrites++;
          throw new NoRoom('no StoC can take the table: StoC 1 (ENOSPC) failed writes to disk');
        }
        return store.writeTable(file, bytes);
      },
    };
    const warnings: string[] = [];
    const e = await Engine.open(dir, { env, memtableBytes: 16 * 1024, maxMemtables: 2, activeMemtables: 1, sync: false, mergeInWorker: false, onWarning: (w) => warnings.push(w) });
    for (let i = 0; i < 200; i++) await e.put(key(i), val(i));
    full = true;
    let refused: unknown;
    let written = 200;
    for (; written < 5000; written++) {
      try {
        await e.put(key(written), val(written));
      } catch (err) {
        refused = err;
        break;
      }
    }
    expect(refused).toBeInstanceOf(NoRoom);
    expect((refused as Error).message).toMatch(/ENOSPC/);
    expect(refusedWrites).toBeGreaterThan(0);
    expect(warnings.some((w) => /flushes wait/.test(w))).toBe(true);
    // A flush asked for fails at once, naming the cause, rather than waiting or spinning.
    const t0flush = Date.now();
    await expect(e.flush()).rejects.toBeInstanceOf(NoRoom);
    expect(Date.now() - t0flush).toBeLessThan(2_000);
    // Reads go on, of tables and of memtables.
    for (let i = 0; i < written; i += 7) expect(await e.get(key(i))).toEqual(val(i));
    // Room again: the next flush succeeds on its own (within its wait), and writes resume; none is refused for long.
    full = false;
    const t0 = Date.now();
    const putRetrying = async (i: number): Promise<void> => {
      for (;;) {
        try {
          await e.put(key(i), val(i));
          return;
        } catch (err) {
          expect(err).toBeInstanceOf(NoRoom);
          expect(Date.now() - t0).toBeLessThan(10_000);
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    };
    for (let i = written; i < written + 500; i++) await putRetrying(i);
    const refusedBefore = refusedWrites;
    for (let i = written + 500; i < written + 1000; i++) await e.put(key(i), val(i)); // no refusal once a flush found room
    expect(refusedWrites).toBe(refusedBefore);
    for (let i = 0; i < written + 1000; i += 11) expect(await e.get(key(i))).toEqual(val(i));
    await e.close();
  });
});
