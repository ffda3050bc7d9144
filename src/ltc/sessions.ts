/**
 * A range's client sessions: which numbered writes of each client are applied, so that a
 * write retried after a lost answer is answered, not applied again (exactly once; RIFL's
 * completion records; doc/decisions/exactly-once-writes.md).
 *
 * A client (NovaClient) has a 128-bit id and numbers its writes 1, 2, 3…; with each write to
 * a range it sends its floor there: every write of its to this range numbered below the floor
 * is finished (answered, or given up), so it will never send one again. Per client the table
 * keeps the floor and the numbers at or above it that are applied. A write is then
 * - applied already: answered at once with its outcome (success), not applied again;
 * - in flight (a retry raced its original): answered with the original's outcome;
 * - below the floor: refused (a stale frame; the client no longer waits for it);
 * - otherwise: applied, and recorded.
 *
 * Bounds: a session whose client has sent this range no write for `timeoutMs` of the
 * table's clock expires; at most `maxSessions` sessions, `maxWindow` applied numbers per
 * session and `maxEntries` in all (BUSY past them). A write of a client the table does not know is accepted only if the client says
 * it has had no write acknowledged here in this session (`open`); otherwise its session
 * expired here and it is told so (SESSION_EXPIRED), never applied.
 *
 * The clock is the range's running time, not the wall's: a pause of the process (SIGSTOP, a
 * descheduled VM) or a restart does not age sessions (advance caps each step), so frames that
 * waited in a socket through the pause still find their session.
 *
 * Durability is the engine's: each write's log record carries its SessionRef (replay calls
 * replay()), and a flush writes the whole table into the MANIFEST (encode/decode,
 * doc/format/manifest.md) before the logs it releases are deleted.
 *
 * Not thread-safe; the engine calls it from its one thread.
 */
import { ByteBuilder, readVarint } from '../common/coding.js';
import { NovaError } from '../common/errors.js';

export const CLIENT_ID_BYTES = 16;

/** A client's write as the client numbered it. */
export interface SessionRef {
  /** The client's session id: CLIENT_ID_BYTES random bytes. */
  client: Buffer;
  /** The write's number in the session, >= 1. */
  seq: number;
  /** Every write of this client to this range numbered below it is finished. <= seq. */
  floor: number;
  /** The client has had no write to this range acknowledged in this session. */
  open: boolean;
}

export interface SessionLimits {
  /** A session idle this long (the table's clock) expires. */
  timeoutMs: number;
  maxSessions: number;
  /** Applied numbers kept per session (at or above its floor). */
  maxWindow: number;
  /** Applied numbers kept over all sessions. */
  maxEntries: number;
}

/** Sessions a range keeps at most; past it new clients are refused (BUSY) until some expire. */
export const MAX_SESSIONS = 100_000;
/** Applied numbers kept per session; NovaClient keeps its windows below it (SESSION_WINDOW). */
export const MAX_WINDOW = 65_536;
/** Applied numbers a range keeps over all its sessions (a few MiB of memory, and of each flush's edit). */
export const MAX_ENTRIES = 262_144;
/** One step of the clock at most: time beyond it between steps was a pause, not idleness. */
export const MAX_CLOCK_STEP_MS = 2_000;

/** The snapshot format's version. 1: floor, idle time and applied numbers per client. Never renumber. */
const SESSIONS_VERSION = 1;

interface Session {
  floor: number;
  /** Applied numbers; those below the floor are dropped lazily (prune), so a write costs O(1). */
  applied: Set<number>;
  /** The size of `applied` at which numbers below the floor are dropped next. */
  pruneAt: number;
  /** Writes admitted and not yet applied or failed: a retry waits for the original. */
  pending: Map<number, Promise<void>> | undefined;
  /** The table's clock at this session's last write. */
  lastActive: number;
}

/** A write's verdict: apply it, it is applied already, or wait for its original. */
export type Admission = 'apply' | 'applied' | Promise<void>;

export interface SessionStats {
  sessions: number;
  /** Applied numbers held over all sessions. */
  entries: number;
  /** Writes answered from the table: retries of writes applied or in flight. */
  duplicates: number;
  expired: number;
}

export class SessionTable {
  private readonly sessions = new Map<string, Session>();
  private clock = 0;
  /** Numbers in every session's `applied`, those below a floor not yet dropped included. */
  private entries = 0;
  private readonly counts = { duplicates: 0, expired: 0 };

  constructor(private readonly limits: SessionLimits) {}

  get stats(): SessionStats {
    return { sessions: this.sessions.size, entries: this.entries, ...this.counts };
  }

  /**
   * What to do with a write: 'apply' (then begin(), and applied() or failed() once it is
   * known), 'applied', or the original's outcome. Throws SESSION_EXPIRED, BAD_ARGUMENT (below
   * the floor) or BUSY (a bound); then the write must not be applied.
   */
  admit(ref: SessionRef): Admission {
    checkSessionRef(ref);
    const id = key(ref.client);
    let s = this.sessions.get(id);
    if (!s) {
      if (!ref.open) {
        throw new NovaError('SESSION_EXPIRED', `client session ${ref.client.toString('hex')} is not known here: it was idle over ${this.limits.timeoutMs} ms and expired; start a new session`);
      }
      if (this.sessions.size >= this.limits.maxSessions) {
        throw new NovaError('BUSY', `${this.sessions.size} client sessions are open here, the most a range keeps; sessions idle ${this.limits.timeoutMs} ms expire`);
      }
      s = newSession(this.clock);
      this.sessions.set(id, s);
    }
    s.lastActive = this.clock;
    this.raiseFloor(s, ref.floor);
    if (ref.seq < s.floor) {
      throw new NovaError('BAD_ARGUMENT', `write ${ref.seq} of client session ${ref.client.toString('hex')} is below its floor ${s.floor}: the client has finished with it; not applied`);
    }
    if (s.applied.has(ref.seq)) {
      this.counts.duplicates++;
      return 'applied';
    }
    const original = s.pending?.get(ref.seq);
    if (original) {
      this.counts.duplicates++;
      return original;
    }
    const inFlight = s.pending?.size ?? 0;
    if (s.applied.size + inFlight >= this.limits.maxWindow && this.prune(s) + inFlight >= this.limits.maxWindow) {
      throw new NovaError('BUSY', `client session ${ref.client.toString('hex')} has ${this.limits.maxWindow} writes applied here above its oldest unfinished one (${s.floor}): finish that one first`);
    }
    if (this.entries >= this.limits.maxEntries) {
      for (const other of this.sessions.values()) this.prune(other);
      if (this.entries >= this.limits.maxEntries) {
        throw new NovaError('BUSY', `client sessions hold ${this.entries} applied writes here, the most a range keeps; they are released as clients finish writes or go idle`);
      }
    }
    return 'apply';
  }

  /** REQUIRES: admit(ref) said 'apply'. `outcome` settles when the write is applied or fails. */
  begin(ref: SessionRef, outcome: Promise<void>): void {
    const s = this.sessions.get(key(ref.client))!;
    (s.pending ??= new Map()).set(ref.seq, outcome);
  }

  /** The write begun for `ref` is applied (its record is durable and in the memtable). */
  applied(ref: SessionRef): void {
    const s = this.sessions.get(key(ref.client));
    if (!s) return;
    s.pending?.delete(ref.seq);
    this.add(s, ref.seq);
  }

  /**
   * The write begun for `ref` was not applied here, or may be in a log but the engine failed
   * (it refuses work until a reopen rebuilds the table from the logs).
   */
  failed(ref: SessionRef): void {
    this.sessions.get(key(ref.client))?.pending?.delete(ref.seq);
  }

  /**
   * A write found in a log at recovery: applied, and its session active now (the record is
   * newer than any idle time a snapshot gave it).
   */
  replay(ref: SessionRef): void {
    const id = key(ref.client);
    let s = this.sessions.get(id);
    if (!s) this.sessions.set(id, s = newSession(this.clock));
    s.lastActive = this.clock;
    this.raiseFloor(s, ref.floor);
    this.add(s, ref.seq);
  }

  /**
   * Moves the clock on by `elapsedMs` (capped at MAX_CLOCK_STEP_MS: more was a pause) and
   * expires sessions idle for the timeout that have no write in flight.
   */
  advance(elapsedMs: number): void {
    this.clock += Math.min(Math.max(0, elapsedMs), MAX_CLOCK_STEP_MS);
    for (const [id, s] of this.sessions) {
      if (this.clock - s.lastActive >= this.limits.timeoutMs && !s.pending?.size) {
        this.sessions.delete(id);
        this.entries -= s.applied.size;
        this.counts.expired++;
      }
    }
  }

  /**
   * The table as bytes (doc/format/manifest.md, "Sessions"): each session's floor, idle time
   * and applied numbers. Writes in flight are not in it; their records are in logs.
   */
  encode(): Buffer {
    const out = new ByteBuilder(64 + this.sessions.size * 24);
    out.u8(SESSIONS_VERSION);
    out.varint(this.sessions.size);
    for (const [id, s] of this.sessions) {
      out.bytes(Buffer.from(id, 'latin1'));
      out.varint(s.floor);
      out.varint(Math.max(0, this.clock - s.lastActive));
      const seqs = [...s.applied].filter((q) => q >= s.floor).sort((a, b) => a - b);
      out.varint(seqs.length);
      let prev = s.floor;
      for (const q of seqs) {
        out.varint(q - prev);
        prev = q;
      }
    }
    return out.finish();
  }

  /**
   * Adds the sessions of a snapshot (encode) to the table: floors and applied numbers merge
   * (the larger floor, the union of numbers at or above it), idle times carry over.
   * Throws CORRUPTION naming `where` and the offset on bad bytes.
   */
  load(bytes: Buffer, where: string): void {
    for (const d of decodeSessions(bytes, where)) {
      const id = key(d.client);
      let s = this.sessions.get(id);
      if (!s) this.sessions.set(id, s = newSession(this.clock - d.idleMs));
      this.raiseFloor(s, d.floor);
      for (const q of d.applied) this.add(s, q);
    }
  }

  /** Records `seq` as applied in `s` unless it is below the floor. */
  private add(s: Session, seq: number): void {
    if (seq < s.floor || s.applied.has(seq)) return;
    s.applied.add(seq);
    this.entries++;
  }

  private raiseFloor(s: Session, floor: number): void {
    if (floor <= s.floor) return;
    s.floor = floor;
    if (s.applied.size >= s.pruneAt) this.prune(s);
  }

  /** Drops applied numbers below the floor; the count left. */
  private prune(s: Session): number {
    for (const q of s.applied) {
      if (q < s.floor) {
        s.applied.delete(q);
        this.entries--;
      }
    }
    s.pruneAt = 2 * s.applied.size + 64;
    return s.applied.size;
  }
}

/**
 * Checks a SessionRef's shape: BAD_ARGUMENT naming what is wrong (a table keyed by a bad id
 * would write a snapshot no reader accepts).
 */
export function checkSessionRef(ref: SessionRef): void {
  const bad = (why: string): never => {
    throw new NovaError('BAD_ARGUMENT', `a write's session is a client id of ${CLIENT_ID_BYTES} bytes, a write number >= 1, a floor in 1..number and an open flag: ${why}`);
  };
  if (!Buffer.isBuffer(ref.client) || ref.client.length !== CLIENT_ID_BYTES) bad('bad client id');
  if (!Number.isSafeInteger(ref.seq) || ref.seq < 1) bad(`write number ${String(ref.seq)}`);
  if (!Number.isSafeInteger(ref.floor) || ref.floor < 1 || ref.floor > ref.seq) bad(`floor ${String(ref.floor)} for write ${ref.seq}`);
  if (typeof ref.open !== 'boolean') bad(`open ${String(ref.open)}`);
}

export interface DecodedSession {
  client: Buffer;
  floor: number;
  idleMs: number;
  applied: number[];
}

/** The sessions of a snapshot; CORRUPTION naming `where` and the offset on bad bytes. */
export function decodeSessions(b: Buffer, where: string): DecodedSession[] {
  const c = { at: 0 };
  const bad = (why: string): never => {
    throw new NovaError('CORRUPTION', `${where}: session table ${why} at offset ${c.at}`);
  };
  const num = (): number => {
    try {
      return readVarint(b, c, b.length);
    } catch (err) {
      return bad((err as Error).message);
    }
  };
  if (b.length < 1) bad('is empty');
  if (b[0] !== SESSIONS_VERSION) bad(`has unsupported version ${b[0]}`);
  c.at = 1;
  const count = num();
  if (count > b.length) bad(`claims ${count} sessions`);
  const out: DecodedSession[] = [];
  for (let i = 0; i < count; i++) {
    if (c.at + CLIENT_ID_BYTES > b.length) bad('ends inside a client id');
    const client = Buffer.from(b.subarray(c.at, c.at + CLIENT_ID_BYTES));
    c.at += CLIENT_ID_BYTES;
    const floor = num();
    const idleMs = num();
    const n = num();
    if (n > b.length) bad(`claims ${n} applied writes`);
    const applied: number[] = [];
    let prev = floor;
    for (let j = 0; j < n; j++) {
      const q = prev + num();
      if (!Number.isSafeInteger(q) || (j > 0 && q === prev)) bad('has applied write numbers out of order');
      applied.push(q);
      prev = q;
    }
    out.push({ client, floor, idleMs, applied });
  }
  if (c.at !== b.length) bad(`has ${b.length - c.at} bytes after its last session`);
  return out;
}

function key(client: Buffer): string {
  return client.toString('latin1');
}

function newSession(lastActive: number): Session {
  return { floor: 0, applied: new Set(), pruneAt: 64, pending: undefined, lastActive };
}
