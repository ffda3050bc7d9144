/**
 * `nova up|down|status`: a local cluster as background processes under one directory.
 *
 *   D/cluster.json      the coordinator's address and each component's role, id and pid
 *   D/coordinator/      the coordinator's state (config.json)
 *   D/stoc-<i>/         StoC i's files
 *   D/ltc-<i>/          LTC i's ranges (MANIFESTs)
 *   D/logs/<name>.log   each component's output
 *   D/caps.json         the --cap in force, applied to every component started
 *
 * `up` starts only what is not running, so a killed component comes back with the same
 * command; `down` stops LTCs first (they flush memtables), then StoCs, then the coordinator.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, openSync, closeSync, readFileSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NovaError } from '../common/errors.js';
import { SECRET_FILE, ensureSecretFile, useSecret } from '../common/cluster-secret.js';
import { TLS_FILE, clusterTlsFiles, readTlsFiles, useTcpTls, type TlsFiles } from '../net/tcp-tls.js';
import { processAlive, processExiting, replaceFile } from '../common/files.js';
import { CoordinatorLocator } from '../cluster/locator.js';
import { isWildcard } from '../net/tcp-rpc-server.js';
import { readConfigFile, type ClusterStatus, type MoveReport, type RebalanceReport, type ReshapeReport, type StocRemoveReport, type RemoveReport } from '../coordinator/coordinator.js';
import { DEFAULT_SETTINGS, configFromWire, type ClusterConfig, type Settings } from '../cluster/config.js';
import { KNOBS } from '../cluster/knobs.js';
import { MAX_CACHE_LOG_BYTES } from '../stoc/cache-server.js';
import { capsText, parseCaps, type CapRole, type Caps } from './caps.js';
import { applyCap, blockDevice, cgroupHost, groupOf, removeClusterGroups } from './cgroups.js';

const HERE = fileURLToPath(import.meta.url);
/** bin/nova.js of this installation (from dist/src/control/ or, in tests, src/control/). */
export const NOVA_BIN = join(dirname(HERE), ...(HERE.includes(`${sep}dist${sep}`) ? ['..', '..', '..'] : ['..', '..']), 'bin', 'nova.js');

export type ComponentRole = 'coordinator' | 'stoc' | 'ltc' | 'cache';

export interface Component {
  role: ComponentRole;
  id: number;
  pid: number;
}

export interface ClusterFile {
  coordinator: string;
  components: Component[];
}

export interface UpOptions {
  dir: string;
  ltcs?: number;
  stocs?: number;
  /** Gemini cache instances (default: as many as the cluster had, else none); each one's memory is the cacheMemoryBytes knob. */
  caches?: number;
  /** Where components listen, and the host clients reach them at (default: `host`, or loopback for a wildcard). */
  host: string;
  advertise?: string;
  /** Flags for a new cluster's coordinator (ranges, knobs), as CLI arguments. */
  coordinatorArgs: string[];
  /** Path of bin/nova.js. */
  bin: string;
  progress?: (line: string) => void;
  timeoutMs?: number;
  /** TLS for the coordinator and the LTCs' client ports (kept in the cluster's directory for later commands). */
  tls?: TlsFiles;
  /** CPU and disk caps per role (--cap; {}: none), kept for the components started later and applied to those running. */
  caps?: Caps;
}

function clusterPath(dir: string): string {
  return join(dir, 'cluster.json');
}

export function readClusterFile(dir: string): ClusterFile | undefined {
  const path = clusterPath(dir);
  if (!existsSync(path)) return undefined;
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as ClusterFile;
  } catch (err) {
    throw new NovaError('CORRUPTION', `${path}: ${(err as Error).message}`);
  }
}

/** The directory a component of the cluster in `dir` runs in: its `--dir`. */
export function componentDir(dir: string, role: ComponentRole, id: number): string {
  return role === 'coordinator' ? join(dir, 'coordinator') : join(dir, `${role}-${id}`);
}

/**
 * Whether `pid` is still the component that runs in `home` (componentDir): alive, not a
 * zombie, and its command line names that directory. Why the directory: pids are reused
 * (pid_max is 32768 on many hosts, and every thread takes one), so a dead component's pid
 * may already belong to another process — even another cluster's component, which a stop
 * or a kill of this cluster must not touch.
 */
export function isRunning(pid: number, home: string): boolean {
  if (!processAlive(pid)) return false;
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    // An exiting process's command line is empty before its files and locks are closed.
    return cmdline === '' ? processExiting(pid) : cmdline.split('\0').includes(home);
  } catch {
    return true; // no /proc: trust kill(0)
  }
}

const MiB = 1024 * 1024;

/**
 * Node flags per role. An LTC holds each write's request, batch and promise for a log round
 * trip (~1 ms), long enough to outlive a scavenge of V8's default young generation and be
 * promoted: old-space garbage that major GCs then mark on every core. A 64 MiB semi-space
 * keeps them young (doc/decisions/node-flags.md).
 */
export const NODE_FLAGS: Record<string, string[]> = { ltc: ['--max-semi-space-size=64'] };

function startProcess(o: UpOptions, role: ComponentRole, id: number, args: string[], nodeFlags: string[] = []): number {
  const name = role === 'coordinator' ? role : `${role}-${id}`;
  const logs = join(o.dir, 'logs');
  mkdirSync(logs, { recursive: true });
  const out = openSync(join(logs, `${name}.log`), 'a');
  let pid: number;
  try {
    const flags = [...(NODE_FLAGS[args[0]] ?? []), ...nodeFlags];
    const child = spawn(process.execPath, [...flags, o.bin, ...args], { detached: true, stdio: ['ignore', out, out] });
    child.unref();
    if (child.pid === undefined) throw new NovaError('UNAVAILABLE', `could not start ${name}`);
    pid = child.pid;
  } finally {
    closeSync(out);
  }
  try {
    capComponent(o.dir, role, id, pid, readCaps(o.dir));
  } catch (err) {
    process.kill(pid, 'SIGKILL'); // never left running without the cap it was given
    throw err;
  }
  return pid;
}

const CAPS_FILE = 'caps.json';

/** The caps kept for the local cluster in `dir` (`nova up --cap`), if any. */
export function readCaps(dir: string): Caps | undefined {
  const path = join(dir, CAPS_FILE);
  if (!existsSync(path)) return undefined;
  const text = (JSON.parse(readFileSync(path, 'utf8')) as { caps?: unknown }).caps;
  if (typeof text !== 'string') throw new NovaError('CORRUPTION', `${path}: no "caps" string`);
  return parseCaps(text);
}

/** Keeps `caps` for the cluster in `dir`, after checking this machine can apply them. */
function keepCaps(dir: string, caps: Caps): void {
  cgroupHost(caps);
  if (Object.values(caps).some((c) => c.diskWriteBps !== undefined || c.diskReadBps !== undefined) && blockDevice(dir) === undefined) {
    throw new NovaError('UNAVAILABLE', `--cap: ${dir} is on no block device (tmpfs or overlay?), so a disk cap cannot apply to it; put the cluster on a disk, or cap CPU only`);
  }
  replaceFile(dir, CAPS_FILE, JSON.stringify({ caps: capsText(caps) }) + '\n');
}

/** `caps` kept for the local cluster in `dir` and applied to each of its running components, starting none. */
export function capCluster(dir: string, caps: Caps): void {
  const home = resolve(dir);
  keepCaps(home, caps);
  for (const c of readClusterFile(home)?.components ?? []) {
    if (isRunning(c.pid, componentDir(home, c.role, c.id))) capComponent(home, c.role, c.id, c.pid, caps);
  }
}

/** Puts component `role` `id` (process `pid`) in its cgroup with its role's cap; nothing when the cluster has no caps. */
function capComponent(dir: string, role: ComponentRole, id: number, pid: number, caps: Caps | undefined): void {
  if (caps === undefined) return;
  const host = cgroupHost(caps);
  applyCap(host, groupOf(dir, role === 'coordinator' ? role : `${role}-${id}`), pid, caps[role as CapRole] ?? {}, blockDevice(dir));
}

async function sleep(ms: number): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

export async function fetchStatus(coordinator: string, timeoutMs = 5_000): Promise<ClusterStatus> {
  const s = await coordinatorCall<ClusterStatus>(coordinator, 'status', [], timeoutMs, timeoutMs);
  return { ...s, config: configFromWire(s.config) };
}

/** How long `nova up` waits for a rebalance under way (BUSY) before it removes an LTC or StoC: one moves many ranges. */
const REMOVE_WAIT_MS = 10 * 60_000;
/** How long `nova range move` waits: the old LTC letting go, then the new one opening (coordinator.ts). */
const MOVE_TIMEOUT_MS = 120_000;

/** Moves range `range` to LTC `to` through the coordinator; resolves once it serves there. */
export function moveRange(coordinator: string, range: number, to: number): Promise<MoveReport> {
  return coordinatorCall<MoveReport>(coordinator, 'move', [range, to], MOVE_TIMEOUT_MS);
}

/** How long `nova range split|merge` waits for the LTC to copy the keys (coordinator.ts FILL_MS). */
const FILL_TIMEOUT_MS = 610_000;

/** Splits range `range` at `at` (by default where its load divides); resolves once the new range serves. */
export async function splitRange(coordinator: string, range: number, at: Buffer | undefined): Promise<ReshapeReport> {
  const r = await coordinatorCall<ReshapeReport>(coordinator, 'split', [range, at ?? null], FILL_TIMEOUT_MS);
  return { ...r, ...(r.at ? { at: Buffer.from(r.at) } : {}) };
}

/** Merges range `from` into the adjacent range `into` on the same LTC; resolves once `into` serves both. */
export function mergeRanges(coordinator: string, into: number, from: number): Promise<ReshapeReport> {
  return coordinatorCall<ReshapeReport>(coordinator, 'merge', [into, from], FILL_TIMEOUT_MS);
}

/** The settings of the cluster in `dir`: its configuration's, else the defaults (a cluster not created yet). */
export function clusterSettings(dir: string): Settings {
  return storedConfig(dir)?.settings ?? DEFAULT_SETTINGS;
}

/**
 * The coordinator's heap in MiB (--coordinator-memory), bounded from its start: the kept
 * configuration's knob, which wins over flags as the coordinator's own settings do, else the
 * flag among `args` (a new cluster's), else the default.
 */
export function coordinatorHeapMiB(dir: string, args: readonly string[]): number {
  const i = args.indexOf(`--${KNOBS.find((k) => k.key === 'coordinatorMemoryBytes')!.flag}`);
  const bytes = storedConfig(dir)?.settings.coordinatorMemoryBytes ?? (i >= 0 ? Number(args[i + 1]) : DEFAULT_SETTINGS.coordinatorMemoryBytes);
  return Math.max(1, Math.floor(bytes / MiB));
}

/** The configuration the coordinator of the cluster in `dir` keeps, if it has one yet. */
export function storedConfig(dir: string): ClusterConfig | undefined {
  return readConfigFile(componentDir(resolve(dir), 'coordinator', 1));
}

/**
 * Starts what is missing of the cluster in `o.dir` and waits until every range is served. The
 * components are those of cluster.json (a new cluster: 1 LTC and 3 StoCs); `ltcs` and `stocs`
 * grow or shrink them: new ones take the next ids (never those of StoCs removed before), and
 * the LTCs and StoCs with the highest ids are removed (an LTC's ranges moved first: removeLtc;
 * a StoC drained first: removeStocFrom).
 */
export async function up(o: UpOptions): Promise<ClusterFile> {
  const dir = resolve(o.dir);
  mkdirSync(dir, { recursive: true });
  clusterSecretFile(dir);
  clusterTls(dir, o.tls);
  const progress = o.progress ?? (() => undefined);
  const old = readClusterFile(dir);
  // A component killed a moment ago may still be exiting with its files and locks open: it is
  // let finish (for a while) and then started again, not taken for running.
  if (old) await exited(old.components.filter((c) => processExiting(c.pid) && isRunning(c.pid, componentDir(dir, c.role, c.id))), dir, EXIT_WAIT_MS);
  const running = (role: ComponentRole, id: number): Component | undefined =>
    old?.components.find((c) => c.role === role && c.id === id && isRunning(c.pid, componentDir(dir, role, id)) && !processExiting(c.pid));
  // Ids of StoCs removed from the cluster are not used again.
  const removed = storedConfig(dir)?.removedStocs ?? [];
  const want = (role: 'ltc' | 'stoc' | 'cache', given: number | undefined, fresh: number): { keep: number[]; drop: number[] } => {
    // A StoC removed from the cluster (drained, or as dead, by hand or on its own) is not one of it any more.
    const have = old ? [...new Set(old.components.filter((c) => c.role === role && !(role === 'stoc' && removed.includes(c.id))).map((c) => c.id))].sort((a, b) => a - b) : [];
    const n = given ?? (have.length > 0 ? have.length : fresh);
    const keep = have.slice(0, n);
    for (let id = Math.max(0, ...have, ...(role === 'stoc' ? removed : [])) + 1; keep.length < n; id++) keep.push(id);
    return { keep, drop: have.slice(n) };
  };
  const ltcs = want('ltc', o.ltcs, 1);
  const stocs = want('stoc', o.stocs, 3);
  const caches = want('cache', o.caches, 0);
  if (caches.drop.length > 0) {
    throw new NovaError('BAD_ARGUMENT', `--caches ${o.caches}: removing cache instances is not implemented yet (the cluster has ${caches.keep.length + caches.drop.length}); ` +
      'a stopped one is taken as failed and its fragments are served by secondaries');
  }
  if (caches.keep.length > 0 && (o.tls?.cert || o.tls?.ca || clusterTlsFiles(dir))) {
    throw new NovaError('BAD_ARGUMENT', 'cache instances on a cluster with TLS are not implemented yet: they serve plain TCP');
  }
  if (o.caps) keepCaps(dir, o.caps);
  const caps = readCaps(dir);
  const components: Component[] = [];
  const opts = { ...o, dir };

  // The coordinator first: the others register with it.
  let coordinator = running('coordinator', 1);
  let address = old?.coordinator;
  if (!coordinator) {
    const port = address ? address.slice(address.lastIndexOf(':') + 1) : '0';
    const cdir = componentDir(dir, 'coordinator', 1);
    const args = ['coordinator', '--dir', cdir, '--host', o.host, '--advertise', advertiseOf(o), '--port', port, '--ltcs', String(ltcs.keep.length),
      '--secret-file', clusterSecretFile(dir), ...tlsArgs(dir, true), ...o.coordinatorArgs];
    const heap = [`--max-old-space-size=${coordinatorHeapMiB(dir, args)}`];
    let pid = startProcess(opts, 'coordinator', 1, args, heap);
    address = await waitForCoordinator(cdir, pid, o.timeoutMs ?? 30_000).catch(async (err: NovaError) => {
      if (port === '0' || err.code === 'DEADLINE_EXCEEDED') throw err;
      // Its old port is taken: take any.
      progress(`coordinator could not reuse port ${port}; starting it on a free port`);
      pid = startProcess(opts, 'coordinator', 1, args.map((a, i) => (args[i - 1] === '--port' ? '0' : a)), heap);
      return waitForCoordinator(cdir, pid, o.timeoutMs ?? 30_000);
    });
    coordinator = { role: 'coordinator', id: 1, pid };
    progress(`coordinator started at ${address} (pid ${pid})`);
  } else if (o.caps) {
    capComponent(dir, 'coordinator', 1, coordinator.pid, caps);
  }
  components.push(coordinator);
  for (const [role, ids] of [['stoc', [...stocs.keep, ...stocs.drop]], ['ltc', [...ltcs.keep, ...ltcs.drop]], ['cache', caches.keep]] as const) {
    for (const id of ids) {
      let c = running(role, id);
      if (!c) {
        c = { role, id, pid: startComponent(opts, role, id, address!) };
        progress(`${role} ${id} started (pid ${c.pid})`);
      } else if (o.caps) {
        capComponent(dir, role, id, c.pid, caps);
      }
      components.push(c);
    }
  }
  let file: ClusterFile = { coordinator: address!, components };
  replaceFile(dir, 'cluster.json', JSON.stringify(file, null, 1) + '\n');
  await waitUntilServing(file, ltcs.keep.length + ltcs.drop.length, stocs.keep.length + stocs.drop.length, caches.keep.length, o.timeoutMs ?? 60_000, progress, dir);
  for (const id of ltcs.drop.reverse()) {
    const r = await whenNotBusy(() => removeLtc(dir, address!, id));
    progress(`ltc ${id} removed (${r.moves.length} range move(s))`);
    file = readClusterFile(dir)!;
  }
  for (const id of stocs.drop.reverse()) {
    const r = await whenNotBusy(() => removeStocFrom(dir, address!, id, false));
    progress(`stoc ${id} drained and removed (${r.ltcs.reduce((n, l) => n + l.tablesCopied + l.l0Merged, 0)} table(s) moved off it)`);
    file = readClusterFile(dir)!;
  }
  return file;
}

/** `op`, tried again while the coordinator is BUSY with a rebalance it runs on its own (up to REMOVE_WAIT_MS). */
async function whenNotBusy<T>(op: () => Promise<T>): Promise<T> {
  const until = Date.now() + REMOVE_WAIT_MS;
  for (;;) {
    try {
      return await op();
    } catch (err) {
      if ((err as NovaError).code !== 'BUSY' || Date.now() > until) throw err;
      await sleep(1_000);
    }
  }
}

/** Starts component `role` `id` of the cluster in `o.dir` in the background; its pid. */
function startComponent(o: UpOptions & { dir: string }, role: 'ltc' | 'stoc' | 'cache', id: number, coordinator: string): number {
  const cacheBytes = role === 'cache' ? clusterSettings(o.dir).cacheMemoryBytes : 0;
  const memory = role === 'cache' ? ['--memory-bytes', String(cacheBytes), '--disk-bytes', String(Math.min(4 * cacheBytes, MAX_CACHE_LOG_BYTES))] : [];
  return startProcess(o, role, id, [role, 'run', '--id', String(id), '--dir', componentDir(o.dir, role, id), '--coordinator', coordinator,
    '--cluster-file', join(o.dir, 'cluster.json'), '--host', o.host, '--secret-file', clusterSecretFile(o.dir), ...(role === 'cache' ? [] : tlsArgs(o.dir, role === 'ltc')),
    ...(role !== 'stoc' ? ['--advertise', advertiseOf(o)] : []), ...memory]);
}

/**
 * The TLS files of the local cluster in `dir`: `given` (kept there for later commands), or
 * those kept; made this process's (as a client, it needs only the CA).
 */
export function clusterTls(dir: string, given?: TlsFiles): TlsFiles | undefined {
  if (given && (given.cert || given.ca)) {
    const abs: TlsFiles = Object.fromEntries(Object.entries(given).filter(([, v]) => v !== undefined).map(([k, v]) => [k, resolve(v as string)]));
    readTlsFiles(abs); // refused here, not in each component
    replaceFile(dir, TLS_FILE, JSON.stringify(abs, null, 1) + '\n');
  }
  const files = clusterTlsFiles(dir);
  useTcpTls(files?.ca ? readTlsFiles({ ca: files.ca }) : undefined);
  return files;
}

/** The TLS flags of a component of the cluster in `dir`: a server (coordinator, LTC) gets its certificate and key, every one the CA. */
function tlsArgs(dir: string, serves: boolean): string[] {
  const f = clusterTlsFiles(dir);
  if (!f) return [];
  return [...(serves && f.cert && f.key ? ['--tls-cert', f.cert, '--tls-key', f.key] : []), ...(f.ca ? ['--tls-ca', f.ca] : [])];
}

/**
 * The secret file of the local cluster in `dir`, made if it has none, and made this process's
 * secret (it talks to that cluster): every component `nova up` starts is given it.
 */
export function clusterSecretFile(dir: string): string {
  const path = join(dir, SECRET_FILE);
  useSecret(ensureSecretFile(path));
  return path;
}

/** The host a local cluster's components are reached at (UpOptions.advertise). */
function advertiseOf(o: { host: string; advertise?: string }): string {
  return o.advertise ?? (isWildcard(o.host) ? '127.0.0.1' : o.host);
}

/**
 * `nova ltc add` / `nova stoc add`: starts one more component of the local cluster in `o.dir`
 * (id `id`, or the next free one) and waits until it is up and, for an LTC, until the
 * rebalance its joining starts is over.
 */
export async function addComponent(o: Omit<UpOptions, 'ltcs' | 'stocs' | 'coordinatorArgs'>, role: 'ltc' | 'stoc', id?: number): Promise<Component> {
  const dir = resolve(o.dir);
  const file = readClusterFile(dir);
  if (!file) throw new NovaError('UNAVAILABLE', `no cluster in ${o.dir} (no cluster.json): start one with nova up`);
  const taken = file.components.filter((c) => c.role === role).map((c) => c.id);
  const removed = role === 'stoc' ? storedConfig(dir)?.removedStocs ?? [] : [];
  if (id !== undefined && removed.includes(id)) throw new NovaError('BAD_ARGUMENT', `StoC ${id} was removed from the cluster and its id is not used again: give another --id`);
  const n = id ?? Math.max(0, ...taken, ...removed) + 1;
  if (taken.includes(n)) throw new NovaError('BAD_ARGUMENT', `${role} ${n} is in the cluster already`);
  const pid = startComponent({ ...o, dir, coordinatorArgs: [] }, role, n, file.coordinator);
  const c: Component = { role, id: n, pid };
  replaceFile(dir, 'cluster.json', JSON.stringify({ ...file, components: [...file.components, c] }, null, 1) + '\n');
  o.progress?.(`${role} ${n} started (pid ${pid})`);
  const until = Date.now() + (o.timeoutMs ?? 60_000);
  for (;;) {
    if (!isRunning(pid, componentDir(dir, role, n))) throw new NovaError('UNAVAILABLE', `${role} ${n} exited at start-up: see ${join(dir, 'logs', `${role}-${n}.log`)}`);
    const s = await fetchStatus(file.coordinator).catch(() => undefined);
    if (s?.members.some((m) => m.role === role && m.id === n && m.pid === pid && m.alive) && !s.reshaping && !s.joining.includes(n)) return c;
    if (Date.now() > until) throw new NovaError('DEADLINE_EXCEEDED', `${role} ${n} did not join within ${o.timeoutMs ?? 60_000} ms: see its log under ${join(dir, 'logs')}`);
    await sleep(100);
  }
}

/**
 * Starts component `role` `id` of the local cluster in `o.dir` again if it is not running (on its
 * directory, as `nova up` would), and waits until the coordinator sees it up. The others are left
 * as they are.
 */
export async function restartComponent(o: Omit<UpOptions, 'ltcs' | 'stocs' | 'coordinatorArgs'>, role: 'ltc' | 'stoc' | 'cache', id: number): Promise<Component> {
  const dir = resolve(o.dir);
  const file = readClusterFile(dir);
  const old = file?.components.find((c) => c.role === role && c.id === id);
  if (!file || !old) throw new NovaError('BAD_ARGUMENT', `${role} ${id} is not a component of the cluster in ${o.dir}`);
  if (isRunning(old.pid, componentDir(dir, role, id))) return old;
  const pid = startComponent({ ...o, dir, coordinatorArgs: [] }, role, id, file.coordinator);
  const c: Component = { role, id, pid };
  replaceFile(dir, 'cluster.json', JSON.stringify({ ...file, components: file.components.map((x) => (x === old ? c : x)) }, null, 1) + '\n');
  const until = Date.now() + (o.timeoutMs ?? 60_000);
  for (;;) {
    if (!isRunning(pid, componentDir(dir, role, id))) throw new NovaError('UNAVAILABLE', `${role} ${id} exited at start-up: see ${join(dir, 'logs', `${role}-${id}.log`)}`);
    const s = await fetchStatus(file.coordinator).catch(() => undefined);
    if (s?.members.some((m) => m.role === role && m.id === id && m.pid === pid && m.alive)) return c;
    if (Date.now() > until) throw new NovaError('DEADLINE_EXCEEDED', `${role} ${id} did not come back within ${o.timeoutMs ?? 60_000} ms: see its log under ${join(dir, 'logs')}`);
    await sleep(100);
  }
}

/**
 * `nova ltc remove`: the coordinator moves LTC `id`'s ranges to the others and tells it to stop;
 * on a local cluster (`dir`), this waits until its process has exited and drops it from cluster.json.
 */
export async function removeLtc(dir: string | undefined, coordinator: string, id: number): Promise<RemoveReport> {
  const r = await coordinatorCall<RemoveReport>(coordinator, 'removeLtc', [id], MOVE_TIMEOUT_MS * 4);
  if (dir !== undefined) await forgetComponent(dir, 'ltc', id, 60_000); // it flushes its memtables first
  return r;
}

/**
 * A component of the local cluster in `dir` that the coordinator removed: waits up to `waitMs`
 * for it to stop on its own (SIGTERM after), and drops it from cluster.json.
 */
async function forgetComponent(dir: string, role: 'ltc' | 'stoc', id: number, waitMs: number): Promise<void> {
  const home = resolve(dir);
  const file = readClusterFile(home);
  const c = file?.components.find((x) => x.role === role && x.id === id);
  if (!file || !c) return;
  for (const until = Date.now() + waitMs; Date.now() < until && isRunning(c.pid, componentDir(home, role, id));) await sleep(100);
  if (isRunning(c.pid, componentDir(home, role, id))) process.kill(c.pid, 'SIGTERM');
  replaceFile(home, 'cluster.json', JSON.stringify({ ...file, components: file.components.filter((x) => x !== c) }, null, 1) + '\n');
}

/** How long `nova stoc remove` waits: every LTC copying its ranges' files off the StoC (coordinator.ts EVACUATE_MS). */
const EVACUATE_TIMEOUT_MS = 610_000;

/**
 * `nova stoc remove`: the coordinator drains StoC `id` (or, `dead`, drops it and what only it
 * held); on a local cluster (`dir`), this waits until its process has exited (it stops on its
 * own once removed) and drops it from cluster.json.
 */
export async function removeStocFrom(dir: string | undefined, coordinator: string, id: number, dead: boolean): Promise<StocRemoveReport> {
  const r = await coordinatorCall<StocRemoveReport>(coordinator, 'removeStoc', [id, dead], EVACUATE_TIMEOUT_MS);
  if (dir !== undefined) await forgetComponent(dir, 'stoc', id, 10_000); // it stops at its next heartbeat
  return r;
}

/** `nova rebalance`: the coordinator's plan, and its moves unless `dryRun`. */
export function rebalance(coordinator: string, dryRun: boolean): Promise<RebalanceReport> {
  return coordinatorCall<RebalanceReport>(coordinator, 'rebalance', [dryRun], MOVE_TIMEOUT_MS * 8);
}

/** Calls the leading coordinator of those in `coordinator` (HOST:PORT[,HOST:PORT…]): CoordinatorLocator.call. */
async function coordinatorCall<T>(coordinator: string, op: string, args: unknown[], timeoutMs: number, untilMs?: number): Promise<T> {
  const locator = new CoordinatorLocator(coordinator);
  try {
    return await locator.call<T>(op, args, timeoutMs, untilMs);
  } finally {
    locator.close();
  }
}

/** Waits until the coordinator started as `pid` answers at the address it wrote. */
/**
 * The address of the coordinator just started as `pid`, once it answers as that process. One
 * that does not within `timeoutMs` is stopped (it is in no cluster.json, so nothing else would).
 */
async function waitForCoordinator(cdir: string, pid: number, timeoutMs: number): Promise<string> {
  try {
    return await answeringCoordinator(cdir, pid, timeoutMs);
  } catch (err) {
    await stopStarted(pid, cdir);
    throw err;
  }
}

/** Stops process `pid` (running from `dir`): SIGTERM, then SIGKILL if it is still there after STOP_GRACE_MS. */
async function stopStarted(pid: number, dir: string): Promise<void> {
  const signal = (s: NodeJS.Signals): void => {
    try {
      process.kill(pid, s);
    } catch {
      // it exited meanwhile
    }
  };
  if (!isRunning(pid, dir)) return;
  signal('SIGTERM');
  const until = Date.now() + STOP_GRACE_MS;
  while (isRunning(pid, dir) && Date.now() < until) await sleep(50);
  if (isRunning(pid, dir)) signal('SIGKILL');
}

/** How long a process `nova up` gave up on has to stop before it is killed. */
const STOP_GRACE_MS = 5_000;

async function answeringCoordinator(cdir: string, pid: number, timeoutMs: number): Promise<string> {
  const until = Date.now() + timeoutMs;
  const path = join(cdir, 'address');
  while (Date.now() < until) {
    if (!isRunning(pid, cdir)) throw new NovaError('UNAVAILABLE', `the coordinator exited at start-up: see its log under logs/coordinator.log`);
    const address = existsSync(path) ? readFileSync(path, 'utf8').trim() : '';
    if (address) {
      try {
        if ((await fetchStatus(address, 1_000)).pid === pid) return address;
      } catch {
        // not answering yet (or an old address)
      }
    }
    await sleep(50);
  }
  throw new NovaError('DEADLINE_EXCEEDED', `the coordinator did not answer within ${timeoutMs} ms, so it was stopped: see logs/coordinator.log, and run nova up again`);
}

async function waitUntilServing(file: ClusterFile, ltcs: number, stocs: number, caches: number, timeoutMs: number,
  progress: (line: string) => void, dir: string): Promise<void> {
  const until = Date.now() + timeoutMs;
  let last = '';
  for (;;) {
    const dead = file.components.filter((c) => !isRunning(c.pid, componentDir(dir, c.role, c.id)));
    if (dead.length > 0) {
      const names = dead.map((c) => `${c.role}-${c.id}`);
      throw new NovaError('UNAVAILABLE', `${names.join(', ')} exited at start-up: see ${names.map((n) => join(dir, 'logs', `${n}.log`)).join(', ')}`);
    }
    let why: string;
    let reasons = '';
    try {
      const s = await fetchStatus(file.coordinator);
      // Only the processes in cluster.json count: a killed one's last heartbeats are still fresh.
      const ours = (m: { role: string; id: number; pid: number }) => file.components.some((c) => c.role === m.role && c.id === m.id && c.pid === m.pid);
      const live = s.members.filter((m) => m.alive && ours(m));
      const alive = (role: string) => live.filter((m) => m.role === role).length;
      const served = new Set(live.flatMap((m) => m.serving));
      const waiting = s.config.ranges.filter((r) => !served.has(r.id)).map((r) => r.id);
      // Settled too: the rebalance that joining LTCs start is over.
      const settling = s.reshaping || s.joining.length > 0;
      // Cache instances count once they hold fragments: clients route by them then.
      const held = new Set(s.config.cache?.fragments.flatMap((f) => [f.primary, ...(f.secondary !== undefined ? [f.secondary] : [])]) ?? []);
      const cachesUp = live.filter((m) => m.role === 'cache' && held.has(m.id)).length;
      if (alive('stoc') >= stocs && alive('ltc') >= ltcs && cachesUp >= caches && waiting.length === 0 && !settling) return;
      why = `${alive('stoc')}/${stocs} StoCs, ${alive('ltc')}/${ltcs} LTCs${caches > 0 ? `, ${cachesUp}/${caches} cache instances` : ''} up; ranges not served yet: ${waiting.join(', ') || 'none'}${settling ? '; rebalancing' : ''}`;
      // Reported with the state, not compared: a reason may carry figures that change every poll.
      reasons = waiting.flatMap((r) => openFailures(s, r).map((u) => `; range ${r} on ltc-${u.ltc}: ${u.error}`)).join('');
    } catch (err) {
      why = (err as Error).message;
    }
    if (why !== last) progress(`waiting: ${why}${reasons}`);
    last = why;
    if (Date.now() > until) {
      throw new NovaError('DEADLINE_EXCEEDED', `cluster not serving after ${timeoutMs} ms (${why}${reasons}); see the logs in ${join(dir, 'logs')}`);
    }
    await sleep(100);
  }
}

/** Why range `range` is not open: each live LTC holding it that reports its opens failing. */
export function openFailures(s: ClusterStatus, range: number): Array<{ ltc: number; error: string; forMs: number }> {
  return s.members.filter((m) => m.role === 'ltc' && m.alive).flatMap((m) =>
    (m.unopened ?? []).filter((u) => u.range === range).map((u) => ({ ltc: m.id, error: u.error, forMs: u.forMs })));
}

/** How long `nova up` waits for a component that is exiting before it starts it again. */
const EXIT_WAIT_MS = 10_000;

/** Resolves once every component in `components` has exited, or after `ms`. */
async function exited(components: Component[], dir: string, ms: number): Promise<void> {
  for (const until = Date.now() + ms; Date.now() < until;) {
    if (!components.some((c) => isRunning(c.pid, componentDir(dir, c.role, c.id)))) return;
    await sleep(20);
  }
}

/** Stops the cluster in `dir`: LTCs (which flush), then cache instances, then StoCs, then the coordinator. */
export async function down(dir: string, progress: (line: string) => void = () => undefined, timeoutMs = 120_000): Promise<number> {
  const home = resolve(dir);
  const file = readClusterFile(home);
  if (!file) throw new NovaError('UNAVAILABLE', `no cluster in ${dir} (no cluster.json)`);
  let stopped = 0;
  for (const role of ['ltc', 'cache', 'stoc', 'coordinator'] as const) {
    const running = (c: Component): boolean => isRunning(c.pid, componentDir(home, c.role, c.id));
    const group = file.components.filter((c) => c.role === role && running(c));
    for (const c of group) process.kill(c.pid, 'SIGTERM');
    const until = Date.now() + timeoutMs;
    for (const c of group) {
      while (running(c)) {
        if (Date.now() > until) {
          progress(`${role} ${c.id} (pid ${c.pid}) did not stop within ${timeoutMs} ms; killing it (its data is in its logs)`);
          process.kill(c.pid, 'SIGKILL');
          break;
        }
        await sleep(50);
      }
      progress(`${role} ${c.id} stopped`);
      stopped++;
    }
  }
  if (existsSync(join(home, CAPS_FILE))) await removeClusterGroups(home);
  return stopped;
}
