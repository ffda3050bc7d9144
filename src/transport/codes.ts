/**
 * Numeric codes shared with native/codes.h. They cross the N-API boundary in operation
 * descriptors and event records: NEVER renumber; retire a value by leaving it reserved.
 */
import type { ErrorCode } from '../common/errors.js';

export const Status = {
  Ok: 0,
  PeerLost: 1,
  OutOfBounds: 2,
  BadRemoteKey: 3,
  Closed: 4,
  BadArgument: 5,
  Transport: 6,
  Timeout: 7,
} as const;

export const OpKind = { Read: 1, Write: 2, WriteImm: 3, Send: 4, Flush: 5, WriteSend: 6 } as const;

export const EventKind = {
  OpDone: 1,
  Connected: 2,
  Accepted: 3,
  PeerLost: 4,
  Message: 5,
  Imm: 6,
} as const;

const STATUS_CODES: Record<number, ErrorCode> = {
  [Status.PeerLost]: 'PEER_LOST',
  [Status.OutOfBounds]: 'OUT_OF_BOUNDS',
  [Status.BadRemoteKey]: 'BAD_REMOTE_KEY',
  [Status.Closed]: 'CLOSED',
  [Status.BadArgument]: 'BAD_ARGUMENT',
  [Status.Transport]: 'TRANSPORT',
  [Status.Timeout]: 'TIMEOUT',
};

export function errorCodeOf(status: number): ErrorCode {
  return STATUS_CODES[status] ?? 'TRANSPORT';
}

/** Bytes per operation descriptor (native OpDesc) and per event record (native Event). */
export const OP_DESC_BYTES = 48;
export const EVENT_BYTES = 32;
