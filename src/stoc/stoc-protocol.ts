/**
 * The StoC persistent-file protocol, shared by StocServer and StocClient (DESIGN.md §6).
 *
 * The methods, their arguments and answers are doc/format/wire.md ("StoC protocol"; names are
 * on the wire: never rename). `Method` below lists them.
 *
 * Data moves by one-sided WRITE into a per-connection window of the StoC's shared file buffer
 * (writes), or into the client's staging region (reads); the RPC names the file and offset. A
 * slot is the same offset in the window and in the staging region, and is owned by the client
 * from the WRITE until the RPC's answer.
 *
 * Appends: `seq` counts appends per connection from 0 in call order; the StoC reserves
 * `total` bytes at the file's end for append `seq` only after every earlier seq was reserved
 * or cancelled, so appends land in call order even though their parts' RPCs may arrive in any
 * order, and a multi-part append is contiguous even with other writers appending.
 */
import { NovaError } from '../common/errors.js';

/**
 * 1: hello/attach/persist/cancel/fetch/stat/list/remove/sync/load/bye;
 *    later, without a bump (methods only added): mcreate/mget/mextend/mlist/mremove, then
 *    compact, then dopen, then fence, then challenge (a StoC with the cluster's secret answers
 *    it with a nonce, and takes a hello only with `proof` of it). A StoC that predates them
 *    answers UNKNOWN_METHOD, and disk files are untouched by the memory ones.
 */
export const STOC_PROTOCOL_VERSION = 1;

/**
 * The FILE_WRITE version a dopen's writes use (rpc.ts), which the StoC checks at dopen so a
 * mismatch fails there: 2, the bytes in the window. (1, the bytes in the message, sent no
 * version at dopen; a StoC of then answers version-2 writes BAD_ARGUMENT.)
 */
export const DIRECT_WRITE_VERSION = 2;

export const Method = {
  hello: 'stoc.hello',
  attach: 'stoc.attach',
  persist: 'stoc.persist',
  cancel: 'stoc.cancel',
  fetch: 'stoc.fetch',
  stat: 'stoc.stat',
  list: 'stoc.list',
  remove: 'stoc.remove',
  sync: 'stoc.sync',
  load: 'stoc.load',
  bye: 'stoc.bye',
  mcreate: 'stoc.mcreate',
  mget: 'stoc.mget',
  mextend: 'stoc.mextend',
  mlist: 'stoc.mlist',
  mremove: 'stoc.mremove',
  compact: 'stoc.compact',
  dopen: 'stoc.dopen',
  fence: 'stoc.fence',
  challenge: 'stoc.challenge',
} as const;

/** An in-memory file's regions, each a serialised RemoteKey of `regionBytes` bytes, in file order. */
export interface MemoryFileReply {
  regionBytes: number;
  regions: Uint8Array[];
}

export interface HelloReply {
  version: number;
  id: number;
  windowBytes: number;
  window: Uint8Array;
}

export interface StocLoad {
  /** Data requests (persist, fetch, sync) the StoC is working on or holding. */
  queueDepth: number;
  /** Bytes of fetches not yet delivered. */
  pendingReadBytes: number;
  /** Bytes of persists not yet written to disk. */
  pendingWriteBytes: number;
  /** Offloaded compactions running (0 from a StoC that predates the field). */
  compactionsRunning: number;
}

/** A range's table `file` on a StoC: the name carries the range and number (paper §4.9). */
export function tableFileName(range: number, file: number): string {
  return `r${range}-${String(file).padStart(6, '0')}.sst`;
}

/** A range's memtable log `file` on a StoC. */
export function logFileName(range: number, file: number): string {
  return `r${range}-${String(file).padStart(6, '0')}.log`;
}

/** A range's MANIFEST `file` on a StoC. */
export function manifestFileName(range: number, file: number): string {
  return `r${range}-${String(file).padStart(6, '0')}.manifest`;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;
const PREFIX = /^[A-Za-z0-9._-]{0,200}$/;
/** The kinds of a range's files on StoCs: tables, memtable logs, MANIFESTs. */
export type StocFileSuffix = '.sst' | '.log' | '.manifest';

/** File numbers among StoC file names of `range` with `suffix`. */
export function filesOf(range: number, names: string[], suffix: StocFileSuffix): number[] {
  const prefix = `r${range}-`;
  const out: number[] = [];
  for (const n of names) {
    if (!n.startsWith(prefix) || !n.endsWith(suffix)) continue;
    const num = Number(n.slice(prefix.length, n.length - suffix.length));
    if (Number.isSafeInteger(num)) out.push(num);
  }
  return out;
}

/** The directory lock (src/common/files.ts); never served as a file. */
/** Largest file a client may write (offset + length); beyond is BAD_ARGUMENT. */
export const MAX_FILE_BYTES = 2 ** 47;

export const RESERVED_NAMES: ReadonlySet<string> = new Set(['LOCK', 'FENCES', 'FENCES.tmp']);

/** Throws BAD_ARGUMENT unless `name` is a plain file name the StoC may serve. */
export function checkName(name: unknown): string {
  if (typeof name !== 'string' || !NAME.test(name) || RESERVED_NAMES.has(name)) {
    throw new NovaError('BAD_ARGUMENT',
      `bad file name ${describe(name)}: want 1-200 of [A-Za-z0-9._-], starting with a letter or digit, not LOCK or FENCES`);
  }
  return name;
}

export function checkPrefix(prefix: unknown): string {
  if (typeof prefix !== 'string' || !PREFIX.test(prefix)) {
    throw new NovaError('BAD_ARGUMENT', `bad file name prefix ${describe(prefix)}: want 0-200 of [A-Za-z0-9._-]`);
  }
  return prefix;
}

/** Throws BAD_ARGUMENT unless `v` is a safe integer in [0, max]. */
export function checkUint(what: string, v: unknown, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0 || v > max) {
    throw new NovaError('BAD_ARGUMENT', `${what} must be an integer in [0, ${max}], not ${describe(v)}`);
  }
  return v;
}

/** The fields of an RPC argument object, or BAD_ARGUMENT. */
export function fields(method: string, args: unknown): Record<string, unknown> {
  if (typeof args !== 'object' || args === null || Array.isArray(args)) {
    throw new NovaError('BAD_ARGUMENT', `${method}: arguments must be a map, not ${describe(args)}`);
  }
  return args as Record<string, unknown>;
}

function describe(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? `${v.slice(0, 60)}...` : v);
  if (v instanceof Uint8Array) return `${v.length} bytes`;
  return typeof v === 'object' && v !== null ? (Array.isArray(v) ? 'an array' : 'a map') : String(v);
}
