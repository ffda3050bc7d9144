/**
 * Cache instances reached over TCP RPC (cache-server.ts): one pipelined connection per
 * instance, made on first use and made again after it is lost. The client protocol and the
 * recovery workers call instances through InstanceApi; this is its real face.
 */
import { ConnectionCache } from '../common/connection-cache.js';
import { NovaError } from '../common/errors.js';
import { TcpRpcClient } from '../net/tcp-rpc-client.js';
import { memberOf, type ClusterConfig } from '../cluster/config.js';
import type { InstanceApi } from './gemini-client.js';

/** A cache call's deadline: instances answer from memory (and a local write), so a long wait means a dead or paused one. */
const CALL_MS = 2_000;

interface Lookup { value?: Buffer; token?: number; backoff?: boolean }

function lookup(x: unknown): Lookup {
  const r = (x ?? {}) as { value?: Uint8Array; token?: number; backoff?: boolean };
  return {
    ...(r.value instanceof Uint8Array ? { value: Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength) } : {}),
    ...(typeof r.token === 'number' ? { token: r.token } : {}),
    ...(r.backoff ? { backoff: true } : {}),
  };
}

function bytes(x: unknown): Buffer | undefined {
  return x instanceof Uint8Array ? Buffer.from(x.buffer, x.byteOffset, x.byteLength) : undefined;
}

export class CacheLinks {
  private readonly conns = new ConnectionCache<string, TcpRpcClient>(
    (address) => TcpRpcClient.connect(address, { timeoutMs: CALL_MS }),
    (c, lost) => c.onClose(lost));
  private readonly apis = new Map<string, InstanceApi>();
  /** The instances of the configuration `seen`, by id. */
  private readonly byId = new Map<number, InstanceApi>();
  private seen: ClusterConfig | undefined;

  /** `config`: where instances are now (their addresses). */
  constructor(private readonly config: () => ClusterConfig) {}

  instance(id: number): InstanceApi {
    // Once per configuration, not per call: this is on every read's path.
    const config = this.config();
    if (config !== this.seen) {
      this.seen = config;
      this.byId.clear();
    }
    let api = this.byId.get(id);
    if (!api) this.byId.set(id, api = this.lookup(config, id));
    return api;
  }

  private lookup(config: ClusterConfig, id: number): InstanceApi {
    const m = memberOf(config, 'cache', id);
    if (!m) {
      const gone = (): Promise<never> => Promise.reject(new NovaError('UNAVAILABLE', `cache instance ${id} is not in the configuration`));
      return { iqget: gone, iset: gone, iqset: gone, idelete: gone, qareg: gone, dar: gone, delete: gone, get: gone, dirtyFetch: gone, dirtyInit: gone, fence: gone, redlease: gone, dirtyDone: gone };
    }
    let api = this.apis.get(m.address);
    if (!api) this.apis.set(m.address, api = this.apiOf(m.address));
    return api;
  }

  private apiOf(address: string): InstanceApi {
    const call = async <T>(op: string, args: unknown[]): Promise<T> => {
      const c = await this.conns.get(address);
      return c.call<T>(op, args, CALL_MS);
    };
    return {
      iqget: async (cfg, key, floor) => lookup(await call('iqget', [cfg, key, floor])),
      iset: async (cfg, key) => lookup(await call('iset', [cfg, key])),
      iqset: (cfg, key, value, token, fragment) => call<boolean>('iqset', [cfg, key, value, token, fragment]),
      idelete: async (cfg, key, token) => { await call('idelete', [cfg, key, token]); },
      qareg: (cfg, key, dirty) => call<number>('qareg', [cfg, key, dirty ?? null]),
      dar: async (cfg, key, token) => { await call('dar', [cfg, key, token]); },
      delete: async (cfg, key, dirty) => { await call('delete', [cfg, key, dirty ?? null]); },
      get: async (cfg, key, floor) => bytes(await call('get', [cfg, key, floor])),
      dirtyFetch: async (cfg, fragment, from, limit) => {
        const r = await call<{ state: string; keys: Uint8Array[]; total: number }>('dirtyFetch', [cfg, fragment, from, limit]);
        return { state: r.state, total: r.total, keys: r.keys.map((k) => bytes(k)!) };
      },
      dirtyInit: async (cfg, fragment) => { await call('dirtyInit', [cfg, fragment]); },
      fence: async (cfg) => { await call('fence', [cfg]); },
      redlease: async (cfg, fragment, renew) => (await call<number | null>('redlease', [cfg, fragment, renew ?? null])) ?? undefined,
      dirtyDone: (cfg, fragment, token) => call<boolean>('dirtyDone', [cfg, fragment, token]),
    };
  }

  close(): Promise<void> {
    return this.conns.closeAll();
  }
}
