/**
 * A numbered write's identity: the session id of the client that wrote it and the write's
 * number in that session (doc/decisions/exactly-once-writes.md). The client makes them, the
 * wire and the log record carry them, the LTC's session table (ltc/sessions.ts) keys on them.
 */
import { randomBytes } from 'node:crypto';
import { NovaError } from './errors.js';

/** Bytes of a session id in logs and snapshots: its two halves as u64s. */
export const CLIENT_ID_BYTES = 16;

/** A client's session id: two random integers below 2^53. */
export interface ClientId {
  idHigh: number;
  idLow: number;
}

/** A new session id: 106 random bits, as two integers below 2^53 (cheap to send and to look up). */
export function randomClientId(): ClientId {
  const r = randomBytes(14);
  return { idHigh: r.readUIntLE(0, 6) + (r[6] & 0x1f) * 2 ** 48, idLow: r.readUIntLE(7, 6) + (r[13] & 0x1f) * 2 ** 48 };
}

/** A client's write as the client numbered it. */
export interface SessionRef extends ClientId {
  /** The write's number in the session, >= 1. */
  seq: number;
  /** Every write of this client to this range numbered below it is finished. <= seq. */
  floor: number;
  /** The client has had no write to this range acknowledged in this session. */
  open: boolean;
}

/**
 * Checks a SessionRef's shape: BAD_ARGUMENT naming what is wrong (a table keyed by a bad id
 * would write a snapshot no reader accepts).
 */
export function checkSessionRef(ref: SessionRef): void {
  const bad = (why: string): never => {
    throw new NovaError('BAD_ARGUMENT', `a write's session is a client id of two integers in 0..2^53-1, a write number >= 1, a floor in 1..number and an open flag: ${why}`);
  };
  if (!isHalf(ref.idHigh) || !isHalf(ref.idLow)) bad(`client id ${String(ref.idHigh)}, ${String(ref.idLow)}`);
  if (!Number.isSafeInteger(ref.seq) || ref.seq < 1) bad(`write number ${String(ref.seq)}`);
  if (!Number.isSafeInteger(ref.floor) || ref.floor < 1 || ref.floor > ref.seq) bad(`floor ${String(ref.floor)} for write ${ref.seq}`);
  if (typeof ref.open !== 'boolean') bad(`open ${String(ref.open)}`);
}

/** A session id as 28 hex digits, for messages and tools. */
export function idName(id: ClientId): string {
  return id.idHigh.toString(16).padStart(14, '0') + id.idLow.toString(16).padStart(14, '0');
}

/** Whether `x` can be one half of a session id. */
function isHalf(x: unknown): x is number {
  return typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
}
