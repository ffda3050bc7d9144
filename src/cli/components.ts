/**
 * `nova coordinator|stoc|ltc|cache`: one component in the foreground. Each runs until SIGTERM or
 * SIGINT (an LTC also until the coordinator removes it), then stops gracefully (an LTC flushes
 * its memtables first) and returns.
 */
import { clusterSecret } from '../common/cluster-secret.js';
import { Coordinator } from '../coordinator/coordinator.js';
import type { Settings } from '../cluster/config.js';
import { Membership } from '../cluster/membership.js';
import { LtcServer } from '../ltc/ltc-server.js';
import { StocServer } from '../stoc/stoc-server.js';
import { performance } from 'node:perf_hooks';
import { configFromWire, type ClusterConfig } from '../cluster/config.js';
import { NovaError } from '../common/errors.js';
import { CoordinatorLocator } from '../cluster/locator.js';
import { CacheServer } from '../stoc/cache-server.js';
import { CacheLinks } from '../client/cache-links.js';
import { recoverFragments, type RecoveryHost } from '../client/gemini-recovery.js';

export function logger(name: string): (line: string) => void {
  return (line) => process.stderr.write(`${new Date().toISOString()} ${name}: ${line}\n`);
}

/** Resolves on the first SIGTERM or SIGINT. */
function stopSignal(): Promise<string> {
  return new Promise((resolve) => {
    const on = (sig: string): void => {
      process.off('SIGTERM', on);
      process.off('SIGINT', on);
      resolve(sig);
    };
    process.on('SIGTERM', on);
    process.on('SIGINT', on);
  });
}

export interface CoordinatorCli {
  dir: string; host: string; advertise?: string; port: number; ltcs?: number; splits?: Buffer[]; settings: Partial<Settings>;
  /** etcd endpoints: keep the configuration there, and lead or stand by. */
  etcd?: string[];
  etcdPrefix?: string;
}

export async function runCoordinator(o: CoordinatorCli): Promise<void> {
  const log = logger('coordinator');
  const stop = stopSignal();
  let lost: (err: Error) => void = () => undefined;
  const gone = new Promise<Error>((resolve) => (lost = resolve));
  const c = await Coordinator.listen({
    dir: o.dir, host: o.host, advertise: o.advertise, port: o.port, ltcs: o.ltcs, splits: o.splits, settings: o.settings, onLog: log,
    etcd: o.etcd, etcdPrefix: o.etcdPrefix, onLost: (err) => lost(err),
  });
  if (o.etcd) log(`standing by at ${c.address} until it leads (configuration in etcd ${o.etcd.join(',')})`);
  else await c.led().catch(async (err: Error) => {
    await c.close().catch(() => undefined);
    throw err; // as any failure to start: the command's error
  });
  c.led().then(
    () => log(`serving at ${c.address} (config ${c.current().id}, ${c.current().ranges.length} range(s)); state in ${o.etcd ? 'etcd' : o.dir}${openNote()}`),
    (err: Error) => lost(err));
  const end = await Promise.race([stop.then((sig) => `stopping on ${sig}`), gone]);
  await c.close().catch(() => undefined);
  if (typeof end === 'string') {
    log(end);
    return;
  }
  // It could not lead (its store refused), or another coordinator leads now.
  log(`exiting: ${end.message}${o.etcd ? '; start it again to stand by' : ''}`);
  process.exitCode = 1;
}

export interface ComponentCli {
  dir: string; id: number; coordinator: string; host: string; advertise?: string; port?: number;
  /** The cluster.json of `nova up`, read again for the coordinator's address if it moves. */
  clusterFile?: string;
  /** StoC: peers served at once (StocServerOptions.peers). */
  peers?: number;
}

/** What a component started without the cluster's secret says of it. */
function openNote(): string {
  return clusterSecret() ? '' : '; no --secret-file: it serves anyone who reaches it';
}

export async function runStoc(o: ComponentCli): Promise<void> {
  const log = logger(`stoc ${o.id}`);
  const stop = stopSignal();
  let remove = (): void => undefined;
  const removed = new Promise<string>((resolve) => { remove = () => resolve('removal from the cluster'); });
  const s = await StocServer.start({ dir: o.dir, id: o.id, peers: o.peers });
  let m: Membership;
  try {
    m = await Membership.join({
      coordinator: o.coordinator, clusterFile: o.clusterFile, role: 'stoc', id: o.id, address: s.address.toString('base64'), host: o.host,
      onConfig: (c) => {
        s.setCompactionLimit(c.settings.stocCompactions);
        s.setReserve(c.settings.stocReserveBytes);
        s.setMemory(c.settings.stocMemoryBytes, c.settings.stocLogMemoryBytes);
      },
      onLog: log, onRemoved: remove,
    });
  } catch (err) {
    await s.close();
    throw err;
  }
  log(`serving files in ${o.dir}; registered with ${o.coordinator}${openNote()}`);
  log(`stopping on ${await Promise.race([stop, removed])}`);
  m.stop();
  await s.close();
}

export async function runLtc(o: ComponentCli): Promise<void> {
  const log = logger(`ltc ${o.id}`);
  const stop = stopSignal();
  let retire = (): void => undefined;
  const retired = new Promise<string>((resolve) => { retire = () => resolve('removal from the cluster'); });
  const l = await LtcServer.start({ dir: o.dir, id: o.id, coordinator: o.coordinator, clusterFile: o.clusterFile, host: o.host, advertise: o.advertise, port: o.port, onLog: log, onRetired: retire });
  log(`serving clients at ${o.host}:${l.port}${o.advertise ? ` (reached at ${o.advertise})` : ''}; registered with ${o.coordinator}${openNote()}`);
  log(`stopping on ${await Promise.race([stop, retired])}: flushing memtables`);
  await l.close(true);
  log('stopped');
}

export interface CacheCli {
  dir: string; id: number; coordinator: string; host: string; advertise?: string; port?: number; clusterFile?: string;
  memoryBytes: number; diskBytes: number;
  /** Keep nothing on disk (entries are lost with the process). */
  volatile?: boolean;
}

/** How often a cache process's recovery worker looks for fragments to recover. */
const RECOVERY_TICK_MS = 200;

/**
 * `nova cache run`: a Gemini cache instance (cache-server.ts), registered with the coordinator,
 * and a recovery worker (gemini-recovery.ts) for the fragments in recovery mode.
 */
export async function runCache(o: CacheCli): Promise<void> {
  const log = logger(`cache ${o.id}`);
  const stop = stopSignal();
  let renewedAt = -Infinity;
  let leaseMs = 0;
  let config: ClusterConfig | undefined;
  const coordinator = new CoordinatorLocator(o.coordinator, o.clusterFile);
  // The cluster's --sync decides whether invalidations reach the disk before they are answered.
  let sync: boolean;
  try {
    sync = configFromWire(await coordinator.call('config', [], 5_000, 30_000)).settings.sync;
  } catch (err) {
    coordinator.close();
    throw new NovaError('UNAVAILABLE', `cache ${o.id}: the coordinator at ${o.coordinator} did not answer (${(err as Error).message}); is it running?`);
  }
  const server = await CacheServer.start({
    id: o.id, dir: o.volatile ? undefined : o.dir, memoryBytes: o.memoryBytes, diskBytes: o.diskBytes, sync, host: o.host, advertise: o.advertise, port: o.port,
    serving: () => config !== undefined && performance.now() - renewedAt < leaseMs, onLog: log,
  }).catch((err: unknown) => {
    coordinator.close();
    throw err;
  });
  const links = new CacheLinks(() => config!);
  let m: Membership;
  try {
    m = await Membership.join({
      coordinator: o.coordinator, clusterFile: o.clusterFile, role: 'cache', id: o.id, address: server.address, host: o.host,
      counters: () => {
        const c = server.instance.counters;
        return [c.gets, c.hits, c.secondaryGets, c.secondaryHits];
      },
      onRenewed: (at) => { renewedAt = at; },
      onConfig: (c) => {
        const layerWas = config?.cache;
        config = c;
        leaseMs = c.settings.cacheLeaseMs;
        server.instance.learn(c.id);
        if (c.cache && JSON.stringify(c.cache) !== JSON.stringify(layerWas)) server.collectFor(c.cache);
      },
      onLog: log,
    });
  } catch (err) {
    coordinator.close();
    await server.close();
    throw err;
  }
  const st = server.stats().store;
  log(`serving at ${server.address}: ${st.entries} entries (${(st.bytes / 2 ** 20).toFixed(1)} MiB) ${o.volatile ? 'in memory only' : `kept in ${o.dir}`}; registered with ${o.coordinator}${openNote()}`);
  const host: RecoveryHost = {
    config: () => config!,
    refresh: async () => {
      await m.refresh();
      return config!;
    },
    instance: (id) => links.instance(id),
    sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
    now: () => Date.now(),
    recovered: async (fragment, configId) => {
      await coordinator.call('cacheRecovered', [fragment, configId], 5_000, 5_000);
    },
  };
  let working = false;
  const worker = setInterval(() => {
    if (working || !config?.cache?.fragments.some((f) => f.mode === 'recovery' && !f.dirtyDone)) return;
    working = true;
    recoverFragments(host).then((p) => {
      if (p.fragments > 0) log(`recovered ${p.fragments} fragment(s): ${p.keys} dirty keys, ${p.overwritten} overwritten from the secondary`);
    }, (err: Error) => log(`recovery worker: ${err.message} (trying again)`)).finally(() => {
      working = false;
    });
  }, RECOVERY_TICK_MS);
  log(`stopping on ${await stop}`);
  clearInterval(worker);
  m.stop();
  coordinator.close();
  await links.close();
  await server.close();
}
