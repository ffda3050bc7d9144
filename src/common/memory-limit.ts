/**
 * The memory limit this process runs under, read from its cgroups (v1 memory.limit_in_bytes, v2
 * memory.max): a component under one (`nova up --cap`, a container) keeps within it.
 * src/control/cgroups.ts makes and fills the groups; this only reads them.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** Where cgroups are mounted; tests point it at a directory laid out like one. */
export function cgroupRoot(): string {
  return process.env.NOVA_CGROUP_ROOT ?? '/sys/fs/cgroup';
}

/**
 * The memory limit this process runs under: the smallest of its memory cgroup's and its ancestors'
 * (v1 memory.limit_in_bytes, v2 memory.max); undefined when none is set or none can be read.
 */
export function memoryLimitOfSelf(root = cgroupRoot()): number | undefined {
  let groups: Map<string, string>;
  try {
    groups = groupsOf(process.pid);
  } catch {
    return undefined; // no /proc
  }
  const v1 = groups.get('memory');
  const path = v1 ?? groups.get('');
  if (path === undefined) return undefined;
  let limit: number | undefined;
  for (let dir = path; ; dir = dirname(dir)) {
    const file = v1 !== undefined ? join(root, 'memory', dir, 'memory.limit_in_bytes') : join(root, dir, 'memory.max');
    try {
      const n = Number(readFileSync(file, 'utf8').trim()); // 'max' and v1's unlimited page-rounded 2^63 read as no limit
      if (Number.isFinite(n) && n < 2 ** 60) limit = Math.min(limit ?? n, n);
    } catch {
      // not there (the v2 root has no memory.max) or unreadable
    }
    if (dir === '/' || dir === '.' || dir === '') break;
  }
  return limit;
}

/** The groups a process is in, per hierarchy (/proc/PID/cgroup: "id:controllers:path"). */
export function groupsOf(pid: number): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n').filter(Boolean)) {
    const [, controllers, path] = line.split(':');
    for (const c of controllers.split(',')) out.set(c, path);
  }
  return out;
}
