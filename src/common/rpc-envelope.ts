/**
 * The one RPC envelope of the fabric RPC and the TCP RPC (doc/format/wire.md, "RPC envelope"):
 *
 *   request  = [id, method, args]
 *   response = [id, 0, result] | [id, 1, code, message, detail?]
 *
 * Status values are on the wire: never renumber. What carries the messages differs: the fabric
 * RPC sends one per transport message, after its version ([RPC_VERSION, ...message]); the TCP RPC
 * sends a batch of them per frame. An error decodes to a RemoteError of the answered code.
 */
import { RemoteError } from './errors.js';

export const RESPONSE_OK = 0;
export const RESPONSE_ERROR = 1;

/**
 * A response to `id` carrying `result`; with `version`, that element first (the fabric RPC's
 * messages), so no second array is made to prefix it.
 */
export function okResponse(id: number, result: unknown, version?: number): unknown[] {
  return version === undefined ? [id, RESPONSE_OK, result] : [version, id, RESPONSE_OK, result];
}

/** A response to `id` carrying a failure (`detail`: data such as a newer config id); `version` as for okResponse. */
export function errorResponse(id: number, code: string, message: string, detail: unknown = null, version?: number): unknown[] {
  return version === undefined ? [id, RESPONSE_ERROR, code, message, detail] : [version, id, RESPONSE_ERROR, code, message, detail];
}

/** The code, message and detail of whatever was thrown, as a response to `id`. */
export function failureResponse(id: number, err: unknown, version?: number): unknown[] {
  const e = err as { code?: unknown; message?: unknown; detail?: unknown };
  return errorResponse(id, typeof e?.code === 'string' ? e.code : 'REMOTE', String(e?.message ?? err), e?.detail ?? null, version);
}

/** An error answered by a server, with its `detail`. */
export class RpcRemoteError extends RemoteError {
  constructor(code: string, message: string, readonly detail: unknown) {
    super(code, message);
  }
}

/**
 * The id response `m` (its elements from `at`) answers, or undefined when it is not a
 * response (no id, or a status that is neither). Reads in place: nothing is allocated per
 * response, which every call of a client takes.
 */
export function responseId(m: readonly unknown[], at = 0): number | undefined {
  const id = m[at];
  const status = m[at + 1];
  if (typeof id !== 'number' || !Number.isInteger(id) || (status !== RESPONSE_OK && status !== RESPONSE_ERROR)) return undefined;
  return id;
}

/** Whether response `m` (a responseId) carries a result, at `m[at + 2]`. */
export function responseOk(m: readonly unknown[], at = 0): boolean {
  return m[at + 1] === RESPONSE_OK;
}

/** The error a failed response `m` settles its call with; `what` (the call) prefixes its message. */
export function responseError(m: readonly unknown[], at: number, what: string): RpcRemoteError {
  if (typeof m[at + 2] !== 'string') return new RpcRemoteError('REMOTE', `${what}: malformed error response`, null);
  return new RpcRemoteError(m[at + 2] as string, `${what}: ${String(m[at + 3])}`, m[at + 4] ?? null);
}
