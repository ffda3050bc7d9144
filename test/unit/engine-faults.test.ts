/**
 * Fault injection through the engine's environment: a log that fails to sync, a store that
 * fails to write a table. The engine refuses further work, and reopening (with healthy I/O)
 * finds every acknowledged write and nothing twice.
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/ltc/engine.js';
import { localEnv } from '../../src/ltc/local-store.js';
import type { EngineEnv } from '../../src/ltc/engine-env.js';
import type { LogWriter } from '../../src/logc/log-store.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-fault-');

function faulty(dir: string, fault: { syncFailsAfter?: number; tableFailsAfter?: number; manifestFailsAfter?: number; manifestFailsOnlyAt?: number; appendsAfterFailure?: { n: number } }): EngineEnv {
  const base = localEnv(dir);
  let syncs = 0;
  let tables = 0;
  let edits = 0;
  const syncFails = (log: LogWriter): LogWriter => ({
    append: async (records, sync) => {
      // The records reach the file; the fdatasync after them fails.
      await log.append(records, false);
      if (sync && fault.syncFailsAfter !== undefined && syncs++ >= fault.syncFailsAfter) throw new Error('injected: EIO on fdatasync');
      if (sync) await log.append([], true);
    },
    close: () => log.close(),
  });
  return {
    store: {
      writeTable: async (file, bytes) => {
        if (fault.tableFailsAfter !== undefined && tables++ >= fault.tableFailsAfter) throw new Error('injected: disk full');
        return base.store.writeTable(file, bytes);
      },
      readTable: (file, fragments) => base.store.readTable(file, fragments),
      deleteTable: (file) => base.store.deleteTable(file),
      listTables: () => base.store.listTables(),
    },
    logs: {
      makeAhead: base.logs.makeAhead,
      create: async (file) => syncFails(await base.logs.create(file)),
      read: (file) => base.logs.read(file),
      remove: (file) => base.logs.remove(file),
      list: () => base.logs.list(),
      describe: (file) => base.logs.describe(file),
    },
    manifests: {
      readCurrent: () => base.manifests.readCurrent(),
      install: (file) => base.manifests.install(file),
      create: async (file) => {
        const log = await base.manifests.create(file);
        return {
          append: async (records, sync) => {
            const edit = edits++;
            if (fault.manifestFailsAfter !== undefined && edit >= fault.manifestFailsAfter) throw new Error('injected: MANIFEST write failed');
            if (edit === fault.manifestFailsOnlyAt) throw new Error('injected: one MANIFEST write failed');
            if (fault.manifestFailsOnlyAt !== undefined && edit > fault.manifestFailsOnlyAt && fault.appendsAfterFailure) fault.appendsAfterFailure.n++;
            return log.append(records, sync);
          },
          close: () => log.close(),
        };
      },
    },
  };
}

/**
 * Writes `n` keys, returning those acknowledged. Once one write is refused every later one
 * must be too (a failed engine takes no more writes), so the acknowledged keys are a prefix.
 */
async function acked(db: Engine, n: number, prefix: string): Promise<string[]> {
  const ok: string[] = [];
  let refused = false;
  for (let i = 0; i < n; i++) {
    const k = `${prefix}${String(i).padStart(4, '0')}`;
    try {
      await db.put(Buffer.from(k), Buffer.from(`v-${k}`));
      expect(refused, `${k} acknowledged after an earlier write was refused`).toBe(false);
      ok.push(k);
    } catch (err) {
      refused = true;
      expect((err as Error).message).toMatch(/reopen the engine/);
    }
  }
  return ok;
}

function newDir(): string {
  const dir = tempDir();
  return dir;
}

/** Reopens with healthy I/O and checks every acknowledged key. */
async function expectRecovered(dir: string, ok: string[], memtableBytes?: number): Promise<Engine> {
  const again = await Engine.open(dir, { memtableBytes });
  for (const k of ok) expect((await again.get(Buffer.from(k)))?.toString()).toBe(`v-${k}`);
  return again;
}

describe('engine under injected faults', () => {
  // Edit 0 is the snapshot written at open; then come memtable switches (in the write path),
  // flushes and compactions (in the background): each of them may be the one that fails.
  it.each([1, 2, 3, 4, 5, 6])('a failed MANIFEST update (edit %i) stops the engine; reopening keeps the acknowledged', async (failing) => {
    const dir = newDir();
    const db = await Engine.open(dir, { memtableBytes: 2048, sync: false, env: faulty(dir, { manifestFailsAfter: failing }) });
    const ok = await acked(db, 300, 'm');
    expect(ok.length).toBeGreaterThan(10);
    expect(ok.length).toBeLessThan(300);
    await db.close();
    await (await expectRecovered(dir, ok, 2048)).close();
  });

  it('after one failed MANIFEST append no later edit is appended, though the MANIFEST would take it', async () => {
    const dir = newDir();
    const after = { n: 0 };
    const db = await Engine.open(dir, { memtableBytes: 2048, sync: false, env: faulty(dir, { manifestFailsOnlyAt: 3, appendsAfterFailure: after }) });
    const ok = await acked(db, 300, 'o');
    await db.flush().catch(() => undefined);
    expect(db.failure).toBeDefined();
    expect(after.n).toBe(0);
    await db.close();
    await (await expectRecovered(dir, ok, 2048)).close();
  });

  it('a failed log sync fails that commit and every later one; reopening keeps the acknowledged', async () => {
    const dir = newDir();
    const db = await Engine.open(dir, { env: faulty(dir, { syncFailsAfter: 20 }) });
    const ok = await acked(db, 50, 'a');
    expect(ok.length).toBe(20);
    await expect(db.put(Buffer.from('later'), Buffer.from('x'))).rejects.toThrow(/reopen the engine/);
    await expect(db.flush()).rejects.toThrow(/reopen the engine/);
    await db.close();
    const again = await expectRecovered(dir, ok);
    await again.put(Buffer.from('after'), Buffer.from('ok'));
    await again.close();
  });

  it('a failed table write stops the engine; reopening recovers the memtable from its log', async () => {
    const dir = newDir();
    const db = await Engine.open(dir, { memtableBytes: 2048, sync: false, env: faulty(dir, { tableFailsAfter: 1 }) });
    const ok = await acked(db, 200, 'b');
    expect(ok.length).toBeGreaterThan(10);
    expect(ok.length).toBeLessThan(200);
    await db.close();
    await (await expectRecovered(dir, ok, 2048)).close();
  });
});
