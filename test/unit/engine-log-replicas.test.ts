/**
 * A memtable whose log lost a replica moves its Drange's writes to a new log (make-room.ts
 * degradedDrange), and the old log goes with the memtable's flush: the local stores, with logs
 * that can be told they are short of replicas.
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv } from '../../src/ltc/local-store.js';
import type { LogWriter } from '../../src/logc/log-store.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-log-replicas-');
const key = (i: number): Buffer => Buffer.from(`key${String(i).padStart(6, '0')}`);
const val = (i: number): Buffer => Buffer.from(`v-${i}`);

describe('a log short of replicas', () => {
  it('makes its memtable retire at the next write: later writes go to a new log; nothing is lost; a log that stays short is not rolled again and again', async () => {
    const dir = tempDir();
    const env = localEnv(dir);
    const created: Array<{ file: number; writer: LogWriter & { short: boolean } }> = [];
    let shortFromStart = false;
    const logs = env.logs;
    env.logs = {
      ...logs,
      read: (f) => logs.read(f), remove: (f) => logs.remove(f), list: () => logs.list(), describe: (f) => logs.describe(f),
      create: async (file) => {
        const inner = await logs.create(file);
        const writer = {
          short: shortFromStart,
          append: (r: readonly Buffer[], sync: boolean) => inner.append(r, sync),
          close: () => inner.close(),
          get degraded() { return this.short; },
        };
        created.push({ file, writer });
        return writer;
      },
    };
    const e = await Engine.open(dir, { env, memtableBytes: 1 << 20, sync: false });
    for (let i = 0; i < 100; i++) await e.put(key(i), val(i));
    const before = created.length;
    created.at(-1)!.writer.short = true; // a replica lost; a StoC up could replace it
    for (let i = 100; i < 200; i++) await e.put(key(i), val(i));
    expect(created.length).toBe(before + 1); // one new log, not one per write
    expect(created.at(-1)!.writer.short).toBe(false);
    // New logs that are short from the start (a StoC that answers but fails) are rolled at most once a second.
    shortFromStart = true;
    created.at(-1)!.writer.short = true;
    const rolled = created.length;
    for (let i = 200; i < 300; i++) await e.put(key(i), val(i));
    expect(created.length).toBe(rolled); // the last roll was less than a second ago
    await new Promise((r) => setTimeout(r, 1100));
    for (let i = 300; i < 400; i++) await e.put(key(i), val(i));
    expect(created.length).toBe(rolled + 1); // one roll, onto a log as short, and no more for a second
    for (let i = 0; i < 400; i += 17) expect(await e.get(key(i))).toEqual(val(i));
    await e.close();
    const again = await Engine.open(dir, { env, memtableBytes: 1 << 20, sync: false });
    for (let i = 0; i < 400; i += 13) expect(await again.get(key(i))).toEqual(val(i));
    await again.close();
  });
});
