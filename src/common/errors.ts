/**
 * Errors with a stable code. Every failure Nova reports to a caller is a NovaError whose
 * `code` says what kind of failure it is, so callers branch on codes, never on messages.
 */

export type ErrorCode =
  | 'PEER_LOST' // the peer died or the connection broke
  | 'OUT_OF_BOUNDS' // an access outside a local or remote region
  | 'BAD_REMOTE_KEY' // a remote key that is garbled, of another version, or not for this endpoint
  | 'CLOSED' // the fabric, endpoint or region was closed
  | 'BAD_ARGUMENT' // a call that cannot be valid
  | 'TRANSPORT' // any other failure inside UCX
  | 'TIMEOUT' // a control call to the native layer missed its deadline
  | 'DEADLINE_EXCEEDED' // an RPC or connect did not finish by its deadline
  | 'UNKNOWN_METHOD' // an RPC named a method the peer does not serve
  | 'REMOTE' // an RPC handler failed without a code of its own
  | 'CORRUPTION' // bytes that fail a checksum or a length check
  | 'BUSY' // a resource another process (or another open) holds
  | 'STALE_CONFIG' // the request named an old configuration, or a range this LTC does not serve
  | 'UNAVAILABLE' // a component is starting or recovering; retry shortly
  | 'DISK_FAILED' // a StoC's disk refused a write: full, over quota, failing or read-only (the message has the errno)
  | 'NOT_LEADER' // a standby coordinator: ask the leader (the error's detail is its address, if known)
  | 'SESSION_EXPIRED' // an LTC no longer knows the client's session (idle too long): this attempt applied nothing
  | 'FAILED' // a client's write that was certainly not applied (`reason` says why)
  | 'UNKNOWN_OUTCOME'; // a client's write that may or may not have been applied (`reason` says why)

export class NovaError extends Error {
  readonly code: ErrorCode;
  /** FAILED and UNKNOWN_OUTCOME: the code of the failure behind them (BAD_ARGUMENT, DEADLINE_EXCEEDED…). */
  readonly reason?: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; reason?: ErrorCode }) {
    super(message, options);
    this.name = 'NovaError';
    this.code = code;
    if (options?.reason !== undefined) this.reason = options.reason;
  }
}

/** An error raised by an RPC handler on another process, carried back with its code. */
export class RemoteError extends NovaError {
  readonly remoteCode: string;
  constructor(remoteCode: string, message: string) {
    super(isErrorCode(remoteCode) ? remoteCode : 'REMOTE', message);
    this.name = 'RemoteError';
    this.remoteCode = remoteCode;
  }
}

const CODES: ReadonlySet<string> = new Set<ErrorCode>([
  'PEER_LOST', 'OUT_OF_BOUNDS', 'BAD_REMOTE_KEY', 'CLOSED', 'BAD_ARGUMENT', 'TRANSPORT',
  'TIMEOUT', 'DEADLINE_EXCEEDED', 'UNKNOWN_METHOD', 'REMOTE', 'CORRUPTION', 'BUSY', 'STALE_CONFIG', 'UNAVAILABLE',
  'SESSION_EXPIRED', 'FAILED', 'UNKNOWN_OUTCOME', 'DISK_FAILED', 'NOT_LEADER',
]);

export function isErrorCode(code: string): code is ErrorCode {
  return CODES.has(code);
}
