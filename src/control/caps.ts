/**
 * `--cap`: how much CPU, memory and disk each kind of component of a local cluster may use, so that
 * one machine behaves like many small ones (cgroups.ts applies it).
 *
 *   ltc.cpu=0.25,stoc.cpu=0.5,stoc.disk=40MB/s,stoc.disk-read=100MiB/s
 *
 * A cap is `<role>.<resource>=<value>`: role coordinator, ltc, stoc or cache; resource cpu (CPUs,
 * a fraction or more than one), memory (bytes, the page cache its reads and writes fill included),
 * disk (bytes written per second) or disk-read (bytes read per second). Sizes and rates take k/M/G
 * (powers of 1000) or Ki/Mi/Gi (of 1024), an optional B, and rates an optional /s.
 */
import { NovaError } from '../common/errors.js';

export const CAP_ROLES = ['coordinator', 'ltc', 'stoc', 'cache'] as const;
export type CapRole = (typeof CAP_ROLES)[number];

export interface Cap {
  /** CPUs: the CFS quota per period, as a share of one CPU. */
  cpu?: number;
  /** Memory and page cache charged to the process together; past it the kernel reclaims cache, then kills. */
  memoryBytes?: number;
  diskWriteBps?: number;
  diskReadBps?: number;
}

export type Caps = Partial<Record<CapRole, Cap>>;

const RESOURCES = { cpu: 'cpu', memory: 'memoryBytes', disk: 'diskWriteBps', 'disk-read': 'diskReadBps' } as const satisfies Record<string, keyof Cap>;

/** The smallest CPU share: the kernel's smallest quota (1 ms) of a 100 ms period. */
export const MIN_CPU = 0.01;
/** A disk rate below this would stall a StoC's single table write for minutes. */
export const MIN_DISK_BPS = 64 * 1024;
/** Less than this does not hold a Node process's runtime. */
export const MIN_MEMORY_BYTES = 64 * 2 ** 20;

const UNITS: Record<string, number> = { '': 1, k: 1e3, m: 1e6, g: 1e9, ki: 2 ** 10, mi: 2 ** 20, gi: 2 ** 30 };

function refuse(why: string): never {
  throw new NovaError('BAD_ARGUMENT', `--cap: ${why}; the form is role.resource=value,... with role ${CAP_ROLES.join('|')} and resource ` +
    `${Object.keys(RESOURCES).join('|')} (e.g. ltc.cpu=0.25,stoc.cpu=0.25,stoc.disk=40MB/s)`);
}

/** Bytes written as a number, an optional unit and B (and `/s` where `perSecond`); undefined if `text` is not that. */
function bytesOf(text: string, perSecond: boolean): number | undefined {
  const m = /^(\d+(?:\.\d+)?)\s*([kmg]i?)?b?(\/s)?$/i.exec(text.trim());
  if (!m || (m[3] !== undefined && !perSecond)) return undefined;
  return Math.round(Number(m[1]) * UNITS[(m[2] ?? '').toLowerCase()]);
}

/** `40MB/s`, `40MiB`, `4M`, `65536`: bytes per second. */
export function parseRate(text: string): number {
  const bps = bytesOf(text, true);
  if (bps === undefined) refuse(`"${text}" is not a rate (bytes per second, such as 40MB/s or 32MiB/s)`);
  if (bps < MIN_DISK_BPS) refuse(`${text} is under the smallest disk rate, ${MIN_DISK_BPS} bytes/s`);
  return bps;
}

/** `2GiB`, `512M`, `1073741824`: bytes of memory. BAD_ARGUMENT saying why for anything else. */
export function parseSize(text: string): number {
  const bytes = bytesOf(text, false);
  if (bytes === undefined) throw new NovaError('BAD_ARGUMENT', `"${text}" is not a size (bytes, such as 2GiB or 512MB)`);
  if (bytes < MIN_MEMORY_BYTES) throw new NovaError('BAD_ARGUMENT', `${text} is under the smallest memory limit, ${MIN_MEMORY_BYTES / 2 ** 20} MiB`);
  return bytes;
}

/** Parses a --cap value; `none` is no caps. */
export function parseCaps(spec: string): Caps {
  const caps: Caps = {};
  if (spec.trim() === 'none') return caps;
  for (const part of spec.split(',').map((p) => p.trim()).filter(Boolean)) {
    const m = /^([a-z]+)\.([a-z-]+)=(.+)$/.exec(part);
    if (!m) refuse(`"${part}" is not role.resource=value`);
    const [, role, resource, value] = m;
    if (!(CAP_ROLES as readonly string[]).includes(role)) refuse(`"${role}" is not a role`);
    if (!(resource in RESOURCES)) refuse(`"${resource}" is not a resource`);
    const field = RESOURCES[resource as keyof typeof RESOURCES];
    const cap = (caps[role as CapRole] ??= {});
    if (cap[field] !== undefined) refuse(`${role}.${resource} is given twice`);
    if (field === 'cpu') {
      const cpu = Number(value);
      if (!(cpu >= MIN_CPU && cpu <= 1024)) refuse(`${role}.cpu=${value}: CPUs are a number from ${MIN_CPU} to 1024`);
      cap.cpu = cpu;
    } else if (field === 'memoryBytes') {
      try {
        cap.memoryBytes = parseSize(value);
      } catch (err) {
        refuse((err as Error).message);
      }
    } else {
      cap[field] = parseRate(value);
    }
  }
  if (Object.keys(caps).length === 0) refuse('no cap given (none: no caps)');
  return caps;
}

/** `bytes` in the largest unit that divides it (parseSize and, with /s, parseRate read it back). */
function sizeText(bytes: number): string {
  return bytes % 2 ** 30 === 0 ? `${bytes / 2 ** 30}GiB` : bytes % 2 ** 20 === 0 ? `${bytes / 2 ** 20}MiB` : bytes % 1e6 === 0 ? `${bytes / 1e6}MB` : `${bytes}B`;
}

/** The canonical text of `caps` (parseCaps reads it back), `none` for none. */
export function capsText(caps: Caps): string {
  const parts: string[] = [];
  for (const role of CAP_ROLES) {
    const c = caps[role];
    if (!c) continue;
    if (c.cpu !== undefined) parts.push(`${role}.cpu=${c.cpu}`);
    if (c.memoryBytes !== undefined) parts.push(`${role}.memory=${sizeText(c.memoryBytes)}`);
    if (c.diskWriteBps !== undefined) parts.push(`${role}.disk=${sizeText(c.diskWriteBps)}/s`);
    if (c.diskReadBps !== undefined) parts.push(`${role}.disk-read=${sizeText(c.diskReadBps)}/s`);
  }
  return parts.join(',') || 'none';
}
