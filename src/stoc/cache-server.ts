/**
 * A Gemini cache instance's server: CacheInstance's operations over TCP RPC (tcp-rpc-server.ts,
 * the same envelope as LTCs), for clients and recovery workers outside the cluster's fabric.
 * Every argument is checked before it reaches the instance: a malformed request is answered
 * BAD_ARGUMENT and changes nothing.
 *
 *   iqget [cfg, key, floor] → {value} | {token} | {backoff} | {}
 *   iset [cfg, key] → the same, without value       iqset [cfg, key, value, token, fragment] → bool
 *   idelete [cfg, key, token]   qareg [cfg, key, dirtyFragment|null] → token   dar [cfg, key, token]
 *   delete [cfg, key, dirtyFragment|null]   get [cfg, key, floor] → value | null
 *   dirtyInit [cfg, fragment]   fence [cfg]   dirtyFetch [cfg, fragment, from, limit] → {state, keys, total}
 *   redlease [cfg, fragment, renew|null] → token | null   dirtyDone [cfg, fragment, token] → bool
 *   stats [] → CacheServerStats
 */
import { existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { NovaError } from '../common/errors.js';
import { lockDir, replaceFile } from '../common/files.js';
import { CACHE_LOG } from './cache-log.js';
import type { CacheLayer } from '../cluster/gemini.js';
import { TcpRpcServer, advertisedHost } from '../net/tcp-rpc-server.js';
import { DEFAULT_LIMITS } from '../log/write-batch.js';
import { CacheInstance, type CacheCounters } from './cache-instance.js';
import { CacheStore, type CacheStoreStats } from './cache-store.js';

export interface CacheServerOptions {
  id: number;
  /** Where entries persist; undefined: memory only. */
  dir?: string;
  memoryBytes: number;
  diskBytes: number;
  /** Start empty (the volatile baseline). */
  volatile?: boolean;
  sync?: boolean;
  maxDirtyKeys?: number;
  host?: string;
  advertise?: string;
  port?: number;
  /** How long I and Q leases live. */
  leaseMs?: number;
  serving?: () => boolean;
  onLog?: (line: string) => void;
}

export interface CacheServerStats {
  id: number;
  configId: number;
  counters: CacheCounters;
  store: CacheStoreStats;
  leases: { i: number; q: number; red: number };
}

/** An I or Q lease outlives the LTC call it guards by far. */
const LEASE_MS = 5_000;
const REDLEASE_MS = 10_000;
const SWEEP_MS = 1_000;
const MAX_DIRTY_KEYS = 1_000_000;
/** The largest cache log (one Buffer at start-up). */
export const MAX_CACHE_LOG_BYTES = 2 ** 31 - 1;
const MAX_FRAGMENT = 1_000_000;
/** Keys a dirty-list page carries at most. */
const MAX_PAGE = 16_384;

function cfgOf(x: unknown): number {
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0) throw new NovaError('BAD_ARGUMENT', 'a cache request starts with the configuration id it routes by (an integer of 0 or more)');
  return x;
}

function keyOf(x: unknown): Buffer {
  if (!(x instanceof Uint8Array) || x.length === 0) throw new NovaError('BAD_ARGUMENT', 'the key must be bytes, not empty');
  if (x.length > DEFAULT_LIMITS.maxKeyBytes) throw new NovaError('BAD_ARGUMENT', `key of ${x.length} bytes exceeds the limit of ${DEFAULT_LIMITS.maxKeyBytes} bytes`);
  return Buffer.from(x.buffer, x.byteOffset, x.byteLength);
}

function valueOf(x: unknown): Buffer {
  if (!(x instanceof Uint8Array)) throw new NovaError('BAD_ARGUMENT', 'the value must be bytes');
  if (x.length > DEFAULT_LIMITS.maxValueBytes) throw new NovaError('BAD_ARGUMENT', `value of ${x.length} bytes exceeds the limit of ${DEFAULT_LIMITS.maxValueBytes} bytes`);
  return Buffer.from(x.buffer, x.byteOffset, x.byteLength);
}

function countOf(x: unknown, what: string, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0 || x > max) throw new NovaError('BAD_ARGUMENT', `${what} must be an integer from 0 to ${max}`);
  return x;
}

function fragmentOrNull(x: unknown): number | undefined {
  return x === null || x === undefined ? undefined : countOf(x, 'the dirty list\'s fragment', MAX_FRAGMENT);
}

export class CacheServer {
  private constructor(readonly instance: CacheInstance, private readonly server: TcpRpcServer, private readonly advertise: string, private readonly sweeper: NodeJS.Timeout,
    private readonly id: number, private readonly unlock: () => void, private readonly onLog?: (line: string) => void) {}

  static async start(o: CacheServerOptions): Promise<CacheServer> {
    // The whole log is read at start-up, in one buffer.
    if (o.diskBytes > MAX_CACHE_LOG_BYTES) throw new NovaError('BAD_ARGUMENT', `--disk-bytes ${o.diskBytes}: a cache log over ${MAX_CACHE_LOG_BYTES} bytes is not implemented yet (its memory at most a quarter of that)`);
    let unlock = (): void => undefined;
    if (o.dir !== undefined) {
      mkdirSync(o.dir, { recursive: true });
      unlock = lockDir(o.dir); // one process per directory: two would each miss the other's invalidations
    }
    try {
      if (o.dir !== undefined && !o.volatile) setAsideAfterReboot(o.dir, o.sync ?? false, o.onLog);
      return await CacheServer.serve(o, unlock);
    } catch (err) {
      unlock();
      throw err;
    }
  }

  private static async serve(o: CacheServerOptions, unlock: () => void): Promise<CacheServer> {
    const store = CacheStore.open({
      dir: o.dir, memoryBytes: o.memoryBytes, diskBytes: o.diskBytes, sync: o.sync ?? false,
      maxDirtyKeys: o.maxDirtyKeys ?? MAX_DIRTY_KEYS, volatile: o.volatile, onLog: o.onLog,
    });
    const instance = new CacheInstance(store, { leaseMs: o.leaseMs ?? LEASE_MS, redleaseMs: REDLEASE_MS, serving: o.serving });
    const i = instance;
    const frag = (x: unknown): number => countOf(x, 'the fragment', MAX_FRAGMENT);
    let server: TcpRpcServer;
    try {
      server = await TcpRpcServer.listen({
        host: o.host, advertise: o.advertise, port: o.port, name: `cache ${o.id}`, onLog: o.onLog,
        handlers: {
          iqget: ([c, k, f]) => i.iqget(cfgOf(c), keyOf(k), countOf(f, 'the floor')),
          iset: ([c, k]) => i.iset(cfgOf(c), keyOf(k)),
          iqset: ([c, k, v, t, f]) => i.iqset(cfgOf(c), keyOf(k), valueOf(v), countOf(t, 'the token'), frag(f)),
          idelete: ([c, k, t]) => i.idelete(cfgOf(c), keyOf(k), countOf(t, 'the token')),
          qareg: ([c, k, f]) => i.qareg(cfgOf(c), keyOf(k), fragmentOrNull(f)),
          dar: ([c, k, t]) => i.dar(cfgOf(c), keyOf(k), countOf(t, 'the token')),
          delete: ([c, k, f]) => i.delete(cfgOf(c), keyOf(k), fragmentOrNull(f)),
          get: ([c, k, f]) => i.get(cfgOf(c), keyOf(k), countOf(f, 'the floor')) ?? null,
          dirtyInit: ([c, f]) => i.dirtyInit(cfgOf(c), frag(f)),
          fence: ([c]) => i.fence(cfgOf(c)),
          dirtyFetch: ([c, f, from, limit]) => i.dirtyFetch(cfgOf(c), frag(f), countOf(from, 'from'), countOf(limit, 'the limit', MAX_PAGE)),
          redlease: ([c, f, r]) => i.redlease(cfgOf(c), frag(f), r === null || r === undefined ? undefined : countOf(r, 'the token')) ?? null,
          dirtyDone: ([c, f, t]) => i.dirtyDone(cfgOf(c), frag(f), countOf(t, 'the token')),
          stats: () => statsOf(o.id, i),
        },
      });
    } catch (err) {
      store.close();
      throw err;
    }
    const sweeper = setInterval(() => {
      try {
        i.sweep();
      } catch (err) {
        o.onLog?.(`sweeping expired leases: ${(err as Error).message}`);
      }
    }, SWEEP_MS);
    sweeper.unref();
    return new CacheServer(instance, server, advertisedHost(o.host, o.advertise), sweeper, o.id, unlock, o.onLog);
  }

  private collecting = false;
  private collectNext: CacheLayer | undefined;

  /**
   * Drops, in the background and a chunk per event-loop turn, the entries `layer` leaves no use
   * for (CacheInstance.collect); a layer given meanwhile is collected after.
   */
  collectFor(layer: CacheLayer): void {
    this.collectNext = layer;
    if (this.collecting) return;
    this.collecting = true;
    const turn = (): void => {
      const l = this.collectNext;
      if (!l) {
        this.collecting = false;
        return;
      }
      try {
        const r = this.instance.collect(l, this.id);
        if (!r.more && this.collectNext === l) this.collectNext = undefined;
      } catch (err) {
        this.onLog?.(`discarding entries no fragment uses: ${(err as Error).message}`);
        this.collectNext = undefined;
      }
      setImmediate(turn);
    };
    setImmediate(turn);
  }

  /** HOST:PORT clients reach it at. */
  get address(): string {
    return `${this.advertise}:${this.server.port}`;
  }

  stats(): CacheServerStats {
    return statsOf(this.id, this.instance);
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    try {
      await this.server.close();
      this.instance.store.close();
    } finally {
      this.unlock();
    }
  }
}

/** The file that names the boot the cache log was last written under. */
const BOOT_FILE = 'boot-id';

/**
 * Without sync, a log written before the machine restarted may lack invalidations it had
 * acknowledged (they were in the page cache): it is set aside (renamed, never deleted) and the
 * instance starts empty. A process restart keeps the boot, and the log. Where the boot cannot be
 * told (no /proc), nothing is set aside.
 */
export function setAsideAfterReboot(dir: string, sync: boolean, onLog?: (line: string) => void): void {
  let boot: string;
  try {
    boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return;
  }
  mkdirSync(dir, { recursive: true });
  const log = join(dir, CACHE_LOG);
  const was = existsSync(join(dir, BOOT_FILE)) ? readFileSync(join(dir, BOOT_FILE), 'utf8').trim() : undefined;
  if (!sync && was !== undefined && was !== boot && existsSync(log)) {
    const aside = `${log}.before-reboot-${Date.now()}`;
    renameSync(log, aside);
    onLog?.(`${log} was written before the machine restarted, without --sync: invalidations it acknowledged may be lost, so it was set aside as ${aside} and the instance starts empty`);
  }
  if (was !== boot) replaceFile(dir, BOOT_FILE, `${boot}\n`);
}

function statsOf(id: number, i: CacheInstance): CacheServerStats {
  return { id, configId: i.configId, counters: { ...i.counters }, store: i.store.stats(), leases: i.leases() };
}
