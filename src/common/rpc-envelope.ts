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

/** A response to `id` carrying `result`. */
export function okResponse(id: number, result: unknown): unknown[] {
  return [id, RESPONSE_OK, result];
}

/** A response to `id` carrying a failure (`detail`: data such as a newer config id). */
export function errorResponse(id: number, code: string, message: string, detail: unknown = null): unknown[] {
  return [id, RESPONSE_ERROR, code, message, detail];
}

/** The code, message and detail of whatever was thrown, as a response to `id`. */
export function failureResponse(id: number, err: unknown): unknown[] {
  const e = err as { code?: unknown; message?: unknown; detail?: unknown };
  return errorResponse(id, typeof e?.code === 'string' ? e.code : 'REMOTE', String(e?.message ?? err), e?.detail ?? null);
}

/** An error answered by a server, with its `detail`. */
export class RpcRemoteError extends RemoteError {
  constructor(code: string, message: string, readonly detail: unknown) {
    super(code, message);
  }
}

export type Response =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; code: string; message: string; detail: unknown };

/** Response `m` (its elements from `at`), or undefined when it is not one (no id, or a status that is neither). */
export function readResponse(m: readonly unknown[], at = 0): Response | undefined {
  const id = m[at];
  if (typeof id !== 'number' || !Number.isInteger(id)) return undefined;
  const status = m[at + 1];
  if (status === RESPONSE_OK) return { id, ok: true, value: m[at + 2] };
  if (status !== RESPONSE_ERROR) return undefined;
  if (typeof m[at + 2] !== 'string') return { id, ok: false, code: 'REMOTE', message: 'malformed error response', detail: null };
  return { id, ok: false, code: m[at + 2] as string, message: String(m[at + 3]), detail: m[at + 4] ?? null };
}

/** The error a failed response settles its call with; `what` (the call) prefixes its message. */
export function remoteError(r: Extract<Response, { ok: false }>, what: string): RpcRemoteError {
  return new RpcRemoteError(r.code, `${what}: ${r.message}`, r.detail);
}
