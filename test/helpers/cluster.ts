/**
 * A local cluster for multi-process tests: `nova up` in a temp directory (real processes,
 * started from the built bin/nova.js), a client, and ways to kill and restart components.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NovaClient } from '../../src/client/nova-client.js';
import { componentDir, down, isRunning, readClusterFile, up, type ComponentRole } from '../../src/control/cluster-control.js';
import { ROOT } from './peer-process.js';

export const BIN = join(ROOT, 'bin', 'nova.js');

export interface TestCluster {
  dir: string;
  client: NovaClient;
  /** (Re)starts what is not running and reconnects nothing: clients follow on their own. */
  up(): Promise<void>;
  /** SIGKILLs a component and waits until it is gone. */
  kill(role: ComponentRole, id: number): Promise<void>;
  /** SIGSTOPs (true) or SIGCONTs (false) a component. */
  pause(role: ComponentRole, id: number, stopped: boolean): void;
  pid(role: ComponentRole, id: number): number;
  down(): Promise<void>;
  /** Kills everything left and removes the directory. */
  destroy(): Promise<void>;
}

/**
 * `prepare(dir)` runs before the cluster starts in `dir` (a mount for a component's directory,
 * say); `release(dir)` once its processes are killed, before the directory is removed.
 */
export async function startCluster(o: { ltcs?: number; stocs?: number; args?: string[]; clientTimeoutMs?: number;
  prepare?: (dir: string) => void; release?: (dir: string) => void } = {}): Promise<TestCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'nova-cluster-'));
  o.prepare?.(dir);
  const start = () => up({ dir, ltcs: o.ltcs, stocs: o.stocs, host: '127.0.0.1', bin: BIN, coordinatorArgs: o.args ?? [], timeoutMs: 60_000 });
  try {
    await start();
  } catch (err) {
    killAll(dir);
    o.release?.(dir);
    throw err;
  }
  const client = await NovaClient.connect({ dir, timeoutMs: o.clientTimeoutMs ?? 30_000 });
  const pid = (role: ComponentRole, id: number): number => {
    const c = readClusterFile(dir)!.components.find((x) => x.role === role && x.id === id);
    if (!c) throw new Error(`no ${role} ${id}`);
    return c.pid;
  };
  return {
    dir,
    client,
    up: async () => { await start(); },
    pid,
    kill: async (role, id) => {
      const p = pid(role, id);
      process.kill(p, 'SIGKILL');
      for (let i = 0; i < 500 && isRunning(p, componentDir(dir, role, id)); i++) await new Promise((r) => setTimeout(r, 10));
    },
    pause: (role, id, stopped) => { process.kill(pid(role, id), stopped ? 'SIGSTOP' : 'SIGCONT'); },
    down: async () => { await down(dir); },
    destroy: async () => {
      client.close();
      killAll(dir);
      o.release?.(dir);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function killAll(dir: string): void {
  for (const c of readClusterFile(dir)?.components ?? []) {
    if (isRunning(c.pid, componentDir(dir, c.role, c.id))) process.kill(c.pid, 'SIGKILL');
  }
}

export function key(i: number): Buffer {
  return Buffer.from(`user${String(i).padStart(12, '0')}`);
}

export function value(i: number, version = 0): Buffer {
  return Buffer.from(`value-${i}-v${version}-`.padEnd(100, 'x'));
}

/**
 * Puts keys from..to-1 with `depth` writes in flight, until `stop()` says so; returns those
 * acknowledged. A write that fails (after the client's retries) fails the call.
 */
export async function writeKeys(c: NovaClient, from: number, to: number, depth: number, stop: () => boolean = () => false): Promise<Set<number>> {
  const acked = new Set<number>();
  let next = from;
  const worker = async (): Promise<void> => {
    while (next < to && !stop()) {
      const i = next++;
      await c.put(key(i), value(i));
      acked.add(i);
    }
  };
  await Promise.all(Array.from({ length: depth }, worker));
  return acked;
}

/** Keys of `acked` whose value is missing or wrong. */
export async function missing(c: NovaClient, acked: Iterable<number>): Promise<number[]> {
  const bad: number[] = [];
  const all = [...acked];
  for (let i = 0; i < all.length; i += 64) {
    const got = await Promise.all(all.slice(i, i + 64).map((k) => c.get(key(k))));
    got.forEach((v, j) => { if (!v || !v.equals(value(all[i + j]))) bad.push(all[i + j]); });
  }
  return bad;
}

/**
 * Overwrites `keys` with growing versions and reads them back (`depth` workers) until `stop()`.
 * A read must see at least the version acknowledged before it began: those that did not are
 * returned as `stale`, with the version acknowledged last per key. Each key has one writer, so
 * its versions are acknowledged in the order they were written: with two, a put of an older
 * version that waited out a failover in its retries may rightly land after a newer one.
 */
async function overwriteAndRead(c: NovaClient, keys: string[], depth: number, stop: () => boolean): Promise<{ stale: string[]; acked: Map<string, number> }> {
  const acked = new Map(keys.map((k) => [k, 0]));
  const next = new Map(keys.map((k) => [k, 1]));
  const stale: string[] = [];
  let reads = 0;
  const worker = async (w: number): Promise<void> => {
    const mine = keys.filter((_, i) => i % depth === w);
    for (let turn = 0; !stop(); turn++) {
      if (turn % 2 === 0 && mine.length > 0) {
        const k = mine[(turn / 2) % mine.length];
        const v = next.get(k)!;
        next.set(k, v + 1);
        await c.put(Buffer.from(k), Buffer.from(String(v)));
        acked.set(k, v);
      } else {
        const k = keys[reads++ % keys.length];
        const floor = acked.get(k)!;
        const got = await c.get(Buffer.from(k));
        const v = got === undefined ? 0 : Number(got.toString());
        if (v < floor) stale.push(`${k}: read ${v}, ${floor} acknowledged before`);
      }
    }
  };
  await Promise.all(Array.from({ length: depth }, (_, w) => worker(w)));
  return { stale, acked };
}

/** Keys of `acked` (overwriteAndRead) that now read older than their last acknowledged version. */
async function olderThanAcked(c: NovaClient, acked: Map<string, number>): Promise<string[]> {
  const bad: string[] = [];
  for (const [k, v] of acked) {
    const got = Number((await c.get(Buffer.from(k)))?.toString() ?? 0);
    if (got < v) bad.push(`${k}: ${got} < ${v}`);
  }
  return bad;
}

/** What a verified workload found (verifiedWorkload): all empty when nothing was lost or read stale. */
export interface WorkloadCheck {
  /** Keys written after the start, acknowledged. */
  written: number;
  /** Acknowledged keys missing or wrong at the end. */
  lost: number[];
  /** Reads older than a write acknowledged before them, and keys older at the end than their last write. */
  stale: string[];
}

/**
 * Writes new keys from `from` (16 at a time) and overwrites and reads `overwrite` (8 at a time)
 * until `finish()`, which checks every acknowledged write (those of `before` too) and every read.
 */
export function verifiedWorkload(c: NovaClient, from: number, before: Iterable<number>, overwrite: string[]): { finish: () => Promise<WorkloadCheck> } {
  let stop = false;
  const writing = writeKeys(c, from, 1_000_000, 16, () => stop);
  const checking = overwriteAndRead(c, overwrite, 8, () => stop);
  return {
    finish: async () => {
      stop = true;
      const later = await writing;
      const { stale, acked } = await checking;
      return { written: later.size, lost: await missing(c, [...before, ...later]), stale: [...stale, ...await olderThanAcked(c, acked)] };
    },
  };
}
