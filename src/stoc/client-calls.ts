/**
 * What StocClient and its in-memory file calls share: a call's deadline, reply parsing, and
 * errors that name the StoC and the call.
 */
import { NovaError } from '../common/errors.js';
import { checkUint, type MemoryFileReply } from './stoc-protocol.js';

/** One call's description (for errors) and deadline. */
export interface Op {
  what: string;
  deadline: number;
}

/** Set once a part's request is on its way: from then on, no answer means the slot is unsafe. */
export interface PartState {
  sent: boolean;
}


export function parseList(reply: unknown): Array<{ name: string; size: number }> {
  if (!Array.isArray(reply)) throw new NovaError('CORRUPTION', 'the StoC answered list with a non-array');
  return reply.map((e: unknown) => {
    if (!Array.isArray(e) || typeof e[0] !== 'string') throw new NovaError('CORRUPTION', 'malformed list entry from the StoC');
    return { name: e[0], size: checkUint('size in the StoC reply', e[1]) };
  });
}

export function parseMemoryReply(v: unknown): MemoryFileReply {
  const r = v as Partial<MemoryFileReply> | null;
  if (!Array.isArray(r?.regions) || !r.regions.every((k) => k instanceof Uint8Array)) {
    throw new NovaError('CORRUPTION', 'the StoC answered with a malformed memory file');
  }
  return { regionBytes: checkUint('regionBytes in the StoC reply', r.regionBytes), regions: r.regions };
}

export function left(deadline: number): number {
  return Math.max(1, deadline - Date.now());
}

/**
 * The error with `context` ("StoC 3: write of f [0, +9)") in front, keeping its code. The
 * StoC's own messages already name it and the file, and are kept as they are.
 */
export function wrap(err: unknown, context: string): NovaError {
  const e = err instanceof NovaError ? err
    : new NovaError('BAD_ARGUMENT', (err as Error)?.message ?? String(err), { cause: err });
  const stoc = context.slice(0, context.indexOf(':'));
  if (e.message.includes(`${stoc}:`)) return e;
  return new NovaError(e.code, `${context}: ${e.message}`, { cause: err });
}
