/**
 * Workloads: YCSB's core A–F and Nova-LSM's RW50, SW50 and W100, or any mix given as
 * proportions ("read=0.7,update=0.2,scan=0.1").
 */
import type { Distribution } from './generators.js';
import type { Random } from './generators.js';

export type OpKind = 'read' | 'update' | 'insert' | 'scan' | 'rmw';
export const OP_KINDS: readonly OpKind[] = ['read', 'update', 'insert', 'scan', 'rmw'];

export type Mix = Record<OpKind, number>;

export interface Workload {
  name: string;
  mix: Mix;
  /** The request distribution YCSB gives it when none is asked for. */
  defaultDist: Distribution;
  description: string;
}

const mix = (m: Partial<Mix>): Mix => ({ read: 0, update: 0, insert: 0, scan: 0, rmw: 0, ...m });

export const WORKLOADS: Readonly<Record<string, Workload>> = {
  A: { name: 'A', mix: mix({ read: 0.5, update: 0.5 }), defaultDist: 'zipfian', description: 'update heavy: 50% read, 50% update' },
  B: { name: 'B', mix: mix({ read: 0.95, update: 0.05 }), defaultDist: 'zipfian', description: 'read mostly: 95% read, 5% update' },
  C: { name: 'C', mix: mix({ read: 1 }), defaultDist: 'zipfian', description: 'read only' },
  D: { name: 'D', mix: mix({ read: 0.95, insert: 0.05 }), defaultDist: 'latest', description: 'read latest: 95% read, 5% insert' },
  E: { name: 'E', mix: mix({ scan: 0.95, insert: 0.05 }), defaultDist: 'zipfian', description: 'short ranges: 95% scan, 5% insert' },
  F: { name: 'F', mix: mix({ read: 0.5, rmw: 0.5 }), defaultDist: 'zipfian', description: 'read-modify-write: 50% read, 50% RMW' },
  RW50: { name: 'RW50', mix: mix({ read: 0.5, update: 0.5 }), defaultDist: 'zipfian', description: 'Nova-LSM: 50% get, 50% put' },
  SW50: { name: 'SW50', mix: mix({ scan: 0.5, update: 0.5 }), defaultDist: 'zipfian', description: 'Nova-LSM: 50% scan, 50% put' },
  W100: { name: 'W100', mix: mix({ update: 1 }), defaultDist: 'zipfian', description: 'Nova-LSM: 100% put' },
};

/** A workload by name (case-insensitive), or a custom mix "read=0.5,update=0.5". */
export function parseWorkload(spec: string): Workload {
  const named = Object.values(WORKLOADS).find((w) => w.name.toLowerCase() === spec.trim().toLowerCase());
  if (named) return named;
  if (!spec.includes('=')) {
    throw new Error(`unknown workload "${spec}": use one of ${Object.keys(WORKLOADS).join(', ')} or a mix such as read=0.7,update=0.3`);
  }
  const m = mix({});
  for (const part of spec.split(',')) {
    const [k, v] = part.split('=').map((s) => s.trim());
    if (!(OP_KINDS as readonly string[]).includes(k)) throw new Error(`workload mix "${spec}": unknown operation "${k}" (use ${OP_KINDS.join(', ')})`);
    const p = Number(v);
    if (!(p >= 0 && p <= 1)) throw new Error(`workload mix "${spec}": proportion of ${k} must be in [0, 1], not "${v}"`);
    m[k as OpKind] = p;
  }
  const total = OP_KINDS.reduce((n, k) => n + m[k], 0);
  if (Math.abs(total - 1) > 1e-6) throw new Error(`workload mix "${spec}": proportions add up to ${total}, not 1`);
  return { name: spec.replace(/\s+/g, ''), mix: m, defaultDist: 'zipfian', description: 'custom mix' };
}

/** Draws operations in the mix's proportions. */
export class OpChooser {
  private readonly kinds: OpKind[] = [];
  private readonly cumulative: number[] = [];

  constructor(m: Mix, private readonly r: Random) {
    let sum = 0;
    for (const k of OP_KINDS) {
      if (m[k] <= 0) continue;
      sum += m[k];
      this.kinds.push(k);
      this.cumulative.push(sum);
    }
  }

  next(): OpKind {
    const u = this.r.next() * this.cumulative[this.cumulative.length - 1];
    for (let i = 0; i < this.kinds.length; i++) if (u < this.cumulative[i]) return this.kinds[i];
    return this.kinds[this.kinds.length - 1];
  }
}
