/**
 * Puts a local cluster's components in cgroups of their own with the limits of `--cap`
 * (caps.ts): a CFS quota for CPU, a memory limit, a block-I/O throttle for the disk. cgroup v2
 * (one unified hierarchy, cpu.max, memory.max and io.max) or v1 (the cpu, memory and blkio
 * hierarchies, cpu.cfs_quota_us, memory.limit_in_bytes and blkio.throttle.*_bps_device). Each component's group is nova/<cluster>/<role>-<id>, where
 * <cluster> names the cluster's directory, so two clusters on one machine never share one.
 *
 * The throttle counts what reaches the disk from the process: O_DIRECT writes and the writeback
 * an fdatasync forces. Plain buffered writes are written back later by the kernel's flusher,
 * outside any group (v1), so only writes a component syncs are held to its rate.
 */
import { createHash } from 'node:crypto';
import { accessSync, constants, existsSync, mkdirSync, readFileSync, readdirSync, realpathSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { NovaError } from '../common/errors.js';
import { cgroupRoot } from '../common/memory-limit.js';
import type { Cap, Caps } from './caps.js';

/** CFS period of every capped group: the kernel's default. */
const PERIOD_US = 100_000;

export interface CgroupHost {
  version: 1 | 2;
  /** Where the cgroup file systems are mounted (/sys/fs/cgroup). */
  root: string;
  cpu: boolean;
  memory: boolean;
  io: boolean;
  /** The flag that asked for the groups, named by errors. */
  flag: string;
}

/**
 * The cgroups of this machine, checked to hold `caps`: each controller they need exists and can
 * be written. UNAVAILABLE saying what is missing otherwise, for the flag that asked (`flag`).
 */
export function cgroupHost(caps: Caps | readonly Cap[], root = cgroupRoot(), flag = '--cap'): CgroupHost {
  const refuse = (why: string): never => {
    throw new NovaError('UNAVAILABLE', `${flag}: ${why}; leave out ${flag} to run without it`);
  };
  const writable = (dir: string): void => {
    try {
      accessSync(dir, constants.W_OK);
    } catch (err) {
      refuse(`cannot create cgroups in ${dir} (${(err as NodeJS.ErrnoException).code}): caps need root (or a cgroup delegated to this user) and a cgroup file system mounted writable`);
    }
  };
  const all: readonly Cap[] = Array.isArray(caps) ? caps : Object.values(caps as Caps);
  const needCpu = all.some((c) => c.cpu !== undefined);
  const needMemory = all.some((c) => c.memoryBytes !== undefined);
  const needIo = all.some((c) => c.diskWriteBps !== undefined || c.diskReadBps !== undefined);
  const v2 = join(root, 'cgroup.controllers');
  if (existsSync(v2)) {
    const have = readFileSync(v2, 'utf8').split(/\s+/);
    const host: CgroupHost = { version: 2, root, cpu: have.includes('cpu'), memory: have.includes('memory'), io: have.includes('io'), flag };
    if (needCpu && !host.cpu) refuse(`the cgroup v2 hierarchy at ${root} has no cpu controller`);
    if (needMemory && !host.memory) refuse(`the cgroup v2 hierarchy at ${root} has no memory controller`);
    if (needIo && !host.io) refuse(`the cgroup v2 hierarchy at ${root} has no io controller`);
    writable(root);
    return host;
  }
  const host: CgroupHost = { version: 1, root, cpu: existsSync(join(root, 'cpu', 'cpu.cfs_quota_us')),
    memory: existsSync(join(root, 'memory', 'memory.limit_in_bytes')), io: existsSync(join(root, 'blkio', 'blkio.throttle.write_bps_device')), flag };
  if (!host.cpu && !host.memory && !host.io && (needCpu || needMemory || needIo)) {
    refuse(`no cgroups at ${root} (neither v2's cgroup.controllers nor v1's cpu, memory and blkio hierarchies)`);
  }
  if (needCpu && !host.cpu) refuse(`no cgroup v1 cpu hierarchy with CFS quotas at ${join(root, 'cpu')}`);
  if (needMemory && !host.memory) refuse(`no cgroup v1 memory hierarchy at ${join(root, 'memory')}`);
  if (needIo && !host.io) refuse(`no cgroup v1 blkio hierarchy with throttling at ${join(root, 'blkio')}`);
  if (needCpu) writable(join(root, 'cpu'));
  if (needMemory) writable(join(root, 'memory'));
  if (needIo) writable(join(root, 'blkio'));
  return host;
}

/** The group of component `name` of the cluster in `clusterDir`, under a hierarchy's root. */
export function groupOf(clusterDir: string, name: string): string {
  return join('nova', clusterTag(clusterDir), name);
}

function clusterTag(clusterDir: string): string {
  return createHash('sha256').update(resolve(clusterDir)).digest('hex').slice(0, 12);
}

/**
 * The whole disk (`major:minor`) holding `path`, which a throttle names; undefined when it is on
 * no block device (tmpfs, overlay), where a disk cap cannot apply.
 */
export function blockDevice(path: string): string | undefined {
  const dev = statSync(path, { bigint: true }).dev;
  const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
  const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
  const sys = `/sys/dev/block/${major}:${minor}`;
  if (!existsSync(sys)) return undefined;
  // A partition's throttle is the disk's: the kernel throttles requests to the whole device.
  if (existsSync(join(sys, 'partition'))) return readFileSync(join(dirname(realpathSync(sys)), 'dev'), 'utf8').trim();
  return `${major}:${minor}`;
}

function put(host: CgroupHost, file: string, text: string): void {
  try {
    writeFileSync(file, text);
  } catch (err) {
    throw new NovaError('UNAVAILABLE', `${host.flag}: writing "${text.trim()}" to ${file}: ${(err as Error).message}`);
  }
}

/**
 * Puts process `pid` in `group` with the limits of `cap` (no field: unlimited). A cap with no
 * limit for a process that has no group yet leaves it where it is. `device` names the disk a
 * disk limit is for (blockDevice); needed when `cap` has one, or to lift one set before.
 */
export function applyCap(host: CgroupHost, group: string, pid: number, cap: Cap, device: string | undefined): void {
  const empty = cap.cpu === undefined && cap.memoryBytes === undefined && cap.diskWriteBps === undefined && cap.diskReadBps === undefined;
  const quota = cap.cpu === undefined ? undefined : Math.max(1_000, Math.round(cap.cpu * PERIOD_US));
  const needsDevice = cap.diskWriteBps !== undefined || cap.diskReadBps !== undefined;
  if (needsDevice && device === undefined) throw new NovaError('UNAVAILABLE', '--cap: a disk cap needs the cluster\'s directory on a block device, and it is not (tmpfs or overlay?); leave out --cap to run the components uncapped');
  if (host.version === 2) {
    const dir = join(host.root, group);
    if (empty && !existsSync(dir)) return;
    const controllers = [host.cpu ? '+cpu' : '', host.memory ? '+memory' : '', host.io ? '+io' : ''].filter(Boolean).join(' ');
    // v2 gives a group a controller only if every parent enables it for its children.
    let parent = host.root;
    for (const part of group.split('/').slice(0, -1)) {
      put(host, join(parent, 'cgroup.subtree_control'), controllers);
      parent = join(parent, part);
      mkdirSync(parent, { recursive: true });
    }
    put(host, join(parent, 'cgroup.subtree_control'), controllers);
    mkdirSync(dir, { recursive: true });
    if (host.cpu) put(host, join(dir, 'cpu.max'), `${quota ?? 'max'} ${PERIOD_US}`);
    if (host.memory) put(host, join(dir, 'memory.max'), String(cap.memoryBytes ?? 'max'));
    if (host.io && device !== undefined) put(host, join(dir, 'io.max'), `${device} rbps=${cap.diskReadBps ?? 'max'} wbps=${cap.diskWriteBps ?? 'max'}`);
    put(host, join(dir, 'cgroup.procs'), String(pid));
    return;
  }
  // v1: a hierarchy per controller; a process never limited in one is left where it is there.
  const place = (controller: string, limited: boolean, files: Array<[string, string]>): void => {
    const dir = join(host.root, controller, group);
    if (!limited && !existsSync(dir)) return;
    mkdirSync(dir, { recursive: true });
    for (const [file, text] of files) put(host, join(dir, file), text);
    put(host, join(dir, 'cgroup.procs'), String(pid));
  };
  if (host.cpu) place('cpu', quota !== undefined, [['cpu.cfs_period_us', String(PERIOD_US)], ['cpu.cfs_quota_us', String(quota ?? -1)]]);
  if (host.memory) place('memory', cap.memoryBytes !== undefined, [['memory.limit_in_bytes', String(cap.memoryBytes ?? -1)]]);
  // 0 lifts a throttle (v1).
  if (host.io && device !== undefined) {
    place('blkio', needsDevice, [['blkio.throttle.write_bps_device', `${device} ${cap.diskWriteBps ?? 0}`], ['blkio.throttle.read_bps_device', `${device} ${cap.diskReadBps ?? 0}`]]);
  }
}

/**
 * Removes the cluster's groups once its processes are gone (nova down). A group still holding a
 * process after `waitMs` cannot be removed and is left.
 */
export async function removeClusterGroups(clusterDir: string, root = cgroupRoot(), waitMs = GROUP_DRAIN_MS): Promise<void> {
  const tag = clusterTag(clusterDir);
  const until = Date.now() + waitMs;
  for (const base of [join(root, 'nova', tag), ...['cpu', 'memory', 'blkio'].map((h) => join(root, h, 'nova', tag))]) {
    await removeGroups(base, Math.max(0, until - Date.now()));
  }
}

/**
 * How long removal waits for a group's processes to leave it. A process taken for stopped (its
 * command line gone) stays in its group while the kernel unmaps its memory.
 */
const GROUP_DRAIN_MS = 5000;

/** The processes in the group `dir`; none once it is removed. */
export function groupProcesses(dir: string): number[] {
  try {
    return readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/**
 * Removes the groups in `base`, trying again until they go or `waitMs` has passed, then `base`
 * and its parent (unless another's groups are in it). A group still holding a process cannot be
 * removed and is left. A removal that succeeds is the sign: an exiting process may have left
 * cgroup.procs and still hold its group.
 */
export async function removeGroups(base: string, waitMs = GROUP_DRAIN_MS): Promise<void> {
  if (!existsSync(base)) return;
  let groups = readdirSync(base, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => join(base, e.name));
  for (const until = Date.now() + waitMs; ;) {
    groups = groups.filter((g) => !tryRmdir(g));
    if (groups.length === 0 || Date.now() >= until) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  tryRmdir(base);
  tryRmdir(dirname(base));
}

/** Whether `dir` is gone (removed now, or before). */
function tryRmdir(dir: string): boolean {
  try {
    rmdirSync(dir);
    return true;
  } catch (err) {
    // busy (a process is left in it) or not a cgroup: left as it is
    return (err as NodeJS.ErrnoException).code === 'ENOENT';
  }
}
