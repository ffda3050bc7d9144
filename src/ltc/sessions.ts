/**
 * A range's client sessions: which numbered writes of each client are applied, so that a
 * write retried after a lost answer is answered, not applied again (exactly once; RIFL's
 * completion records; doc/decisions/exactly-once-writes.md).
 *
 * A client (NovaClient) has a random id (two integers below 2^53: 106 random bits, cheap to
 * send and to look up) and numbers its writes 1, 2, 3…; with each write to a range it sends
 * its floor there: every write of its to this range numbered below the floor is finished
 * (answered, or given up), so it will never send one again. Per client the table keeps the
 * floor and the state of each number from it on (in a ring of bytes). A write is then
 * - applied already: answered at once with its outcome (success), not applied again;
 * - in flight (a retry raced its original): answered with the original's outcome;
 * - below the floor: refused (a stale frame; the client no longer waits for it);
 * - otherwise: applied, and recorded.
 *
 * Bounds: a session whose client has sent this range no write for `timeoutMs` of the
 * table's clock expires; at most `maxSessions` sessions, numbers less than `maxWindow` past a
 * session's floor, `maxEntries` numbers held and `maxRingBytes` of rings in all (BUSY past
 * them). A write of a client the table does not know is accepted only if the client says it
 * has had no write acknowledged here in this session (`open`); otherwise its session expired
 * here and it is told so (SESSION_EXPIRED), and that attempt applies nothing.
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
import { ByteBuilder, readU64, readVarint } from '../common/coding.js';
import { NovaError } from '../common/errors.js';
import { CLIENT_ID_BYTES, checkSessionRef, idName, type ClientId, type SessionRef } from '../common/write-id.js';

export interface SessionLimits {
  /** A session idle this long (the table's clock) expires. */
  timeoutMs: number;
  maxSessions: number;
  /** How far past its floor a session's numbers may go (a power of two: the ring's largest size). */
  maxWindow: number;
  /** Numbers held (applied or in flight) over all sessions. */
  maxEntries: number;
  /** Bytes of all sessions' rings (each 64 bytes, doubling to maxWindow). */
  maxRingBytes: number;
}

/** Sessions a range keeps at most; past it new clients are refused (BUSY) until some expire. */
export const MAX_SESSIONS = 100_000;
/** How far past its floor a session's numbers may go (64 KiB of ring at most); NovaClient keeps under it (SESSION_WINDOW). */
export const MAX_WINDOW = 65_536;
/** Numbers a range holds over all its sessions (at most 1–3 bytes each in each flush's edit). */
export const MAX_ENTRIES = 262_144;
/** Bytes of all of a range's session rings (each 64 bytes to MAX_WINDOW). */
export const MAX_RING_BYTES = 32 * 1024 * 1024;
/** One step of the clock at most: time beyond it between steps was a pause, not idleness. */
export const MAX_CLOCK_STEP_MS = 2_000;

/** The snapshot format's version. 1: floor, idle time and applied numbers per client. Never renumber. */
const SESSIONS_VERSION = 1;

interface Session extends ClientId {
  floor: number;
  /**
   * The state of each number from the floor on (0, IN_FLIGHT or APPLIED), at index number &
   * (length - 1): a ring that moves with the floor, doubling up to maxWindow when a number is
   * further ahead. A write sets a byte and a floor raise clears the ones it passes; nothing is
   * allocated per write, so the long-lived table points at no young garbage for the GC to
   * promote and mark (doc/decisions/exactly-once-writes.md).
   */
  states: Uint8Array;
  /** Numbers with a state (not 0). */
  held: number;
  /** Writes in flight (begun, not yet applied or failed): the session may not expire. */
  inFlight: number;
  /** The table's clock at this session's last write. */
  lastActive: number;
}

const IN_FLIGHT = 1;
const APPLIED = 2;

/**
 * A write admitted to be applied: what the engine hands back as the write goes (begin, then
 * applied or failed), so the table finds its session without another lookup.
 */
export interface Ticket {
  readonly ref: SessionRef;
}

interface TicketOf extends Ticket {
  readonly session: Session;
}

/** A write's verdict: apply it (under this ticket), it is applied already, or wait for its original. */
export type Admission = Ticket | 'applied' | Promise<void>;

export interface SessionStats {
  sessions: number;
  /** Applied numbers held over all sessions. */
  entries: number;
  /** Writes answered from the table: retries of writes applied or in flight. */
  duplicates: number;
  expired: number;
}

export class SessionTable {
  private readonly sessions = new SessionMap();
  /** Retries waiting for their original, still in flight, by session id and number (rare). */
  private readonly waiting = new Map<string, Array<{ resolve: () => void; reject: (err: Error) => void }>>();
  private clock = 0;
  /** Numbers with a state over all sessions. */
  private entries = 0;
  /** Bytes of all sessions' rings. */
  private ringBytes = 0;
  private readonly counts = { duplicates: 0, expired: 0 };

  constructor(private readonly limits: SessionLimits) {}

  get stats(): SessionStats {
    return { sessions: this.sessions.size, entries: this.entries, ...this.counts };
  }

  /**
   * What to do with a write: apply it (a ticket: then begin(), and applied() or failed() once
   * it is known), 'applied', or the original's outcome. Throws SESSION_EXPIRED, BAD_ARGUMENT
   * (a malformed ref, or below the floor) or BUSY (a bound); then the write must not be applied.
   */
  admit(ref: SessionRef): Admission {
    checkSessionRef(ref);
    let s = this.sessions.get(ref);
    if (!s) {
      if (!ref.open) {
        throw new NovaError('SESSION_EXPIRED', `client session ${idName(ref)} is not known here: it was idle over ${this.limits.timeoutMs} ms and expired; start a new session`);
      }
      if (this.sessions.size >= this.limits.maxSessions) {
        throw new NovaError('BUSY', `${this.sessions.size} client sessions are open here, the most a range keeps; sessions idle ${this.limits.timeoutMs} ms expire`);
      }
      s = this.create(ref, this.clock);
    }
    s.lastActive = this.clock;
    this.raiseFloor(s, ref.floor);
    if (ref.seq < s.floor) {
      throw new NovaError('BAD_ARGUMENT', `write ${ref.seq} of client session ${idName(ref)} is below its floor ${s.floor}: the client has finished with it; not applied`);
    }
    const known = stateOf(s, ref.seq);
    if (known !== 0) {
      this.counts.duplicates++;
      return known === APPLIED ? 'applied' : this.waitFor(ref);
    }
    if (ref.seq - s.floor >= this.limits.maxWindow) {
      throw new NovaError('BUSY', `write ${ref.seq} of client session ${idName(ref)} is ${this.limits.maxWindow} or more past its oldest unfinished one here (${s.floor}): finish that one first`);
    }
    if (this.entries >= this.limits.maxEntries) {
      throw new NovaError('BUSY', `client sessions hold ${this.entries} writes here, the most a range keeps; they are released as clients finish writes or go idle`);
    }
    const growth = ringFor(ref.seq - s.floor) - s.states.length;
    if (growth > 0 && this.ringBytes + growth > this.limits.maxRingBytes) {
      throw new NovaError('BUSY', `client sessions' windows take ${this.ringBytes} bytes here, the most a range keeps; they shrink as clients finish writes or go idle`);
    }
    const ticket: TicketOf = { ref, session: s };
    return ticket;
  }

  /** Writes whose edit is being logged (applying): applied in every table encoded meanwhile. */
  private readonly applyingNow = new Set<TicketOf>();

  /** `ticket`'s write is in an edit being logged (an ingest's): encode() counts it applied until applied() or failed(). */
  applying(ticket: Ticket): void {
    this.applyingNow.add(ticket as TicketOf);
  }

  private applyingSeqs(s: unknown): number[] {
    const out: number[] = [];
    for (const t of this.applyingNow) if (t.session === s) out.push(t.ref.seq);
    return out;
  }

  /**
   * admit() as a write acts on it: `settled` when the write needs nothing more (applied before, or
   * its original under way: that one's outcome), else its ticket, begun.
   */
  enter(ref: SessionRef): { ticket: Ticket } | { settled: Promise<void> } {
    const a = this.admit(ref);
    if (a === 'applied') return { settled: Promise.resolve() };
    if (a instanceof Promise) return { settled: a };
    this.begin(a);
    return { ticket: a };
  }

  /** The write admitted under `ticket` goes to the log: until applied() or failed(), retries wait for it. */
  begin(ticket: Ticket): void {
    const s = (ticket as TicketOf).session;
    this.setState(s, ticket.ref.seq, IN_FLIGHT);
    s.inFlight++;
  }

  /** The write begun under `ticket` is applied (its record is durable and in the memtable). */
  applied(ticket: Ticket): void {
    this.applyingNow.delete(ticket as TicketOf);
    const s = (ticket as TicketOf).session;
    const seq = ticket.ref.seq;
    s.inFlight--;
    if (seq >= s.floor) this.setState(s, seq, APPLIED); // else the client finished with it meanwhile
    if (this.waiting.size > 0) this.settle(ticket.ref, undefined);
  }

  /**
   * The write begun under `ticket` failed with `err`: not applied here, or in a log while the
   * engine failed (it refuses work until a reopen rebuilds the table from the logs).
   */
  failed(ticket: Ticket, err: Error): void {
    this.applyingNow.delete(ticket as TicketOf);
    const s = (ticket as TicketOf).session;
    s.inFlight--;
    if (stateOf(s, ticket.ref.seq) === IN_FLIGHT) this.setState(s, ticket.ref.seq, 0);
    if (this.waiting.size > 0) this.settle(ticket.ref, err);
  }

  /** A promise of the outcome of `ref`'s original, in flight. */
  private waitFor(ref: SessionRef): Promise<void> {
    const k = `${idName(ref)}:${ref.seq}`;
    return new Promise((resolve, reject) => {
      let list = this.waiting.get(k);
      if (!list) this.waiting.set(k, list = []);
      list.push({ resolve, reject });
    });
  }

  private settle(ref: SessionRef, err: Error | undefined): void {
    const k = `${idName(ref)}:${ref.seq}`;
    const list = this.waiting.get(k);
    if (!list) return;
    this.waiting.delete(k);
    for (const w of list) {
      if (err) w.reject(err);
      else w.resolve();
    }
  }

  /**
   * A write found in a log at recovery: applied, and its session active now (the record is
   * newer than any idle time a snapshot gave it).
   */
  replay(ref: SessionRef): void {
    let s = this.sessions.get(ref);
    if (!s) s = this.create(ref, this.clock);
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
    const idle: Session[] = [];
    for (const s of this.sessions.values()) {
      if (this.clock - s.lastActive >= this.limits.timeoutMs && s.inFlight === 0) idle.push(s);
    }
    for (const s of idle) {
      this.sessions.delete(s);
      this.entries -= s.held;
      this.ringBytes -= s.states.length;
      this.counts.expired++;
    }
  }

  /**
   * The table as bytes (doc/format/manifest.md, "Sessions"): each session's floor, idle time
   * and applied numbers. Writes in flight are not in it (their records are in logs), except
   * those applying (an ingest whose edit is being logged): any edit logged from now on may
   * replace the table, so each must say they are applied.
   */
  encode(): Buffer {
    const out = new ByteBuilder(64 + this.sessions.size * 24);
    out.u8(SESSIONS_VERSION);
    out.varint(this.sessions.size);
    for (const s of this.sessions.values()) {
      out.u64(s.idHigh);
      out.u64(s.idLow);
      out.varint(s.floor);
      out.varint(Math.max(0, this.clock - s.lastActive));
      const seqs: number[] = [];
      for (let q = s.floor; q < s.floor + s.states.length; q++) {
        if (stateOf(s, q) === APPLIED || this.applyingSeqs(s).includes(q)) seqs.push(q);
      }
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
      let s = this.sessions.get(d);
      if (!s) s = this.create(d, this.clock - d.idleMs);
      this.raiseFloor(s, d.floor);
      for (const q of d.applied) this.add(s, q);
    }
  }

  /**
   * Adds the client records of another range (its encode()) whose keys this range takes over (a split
   * or merge): applied numbers join, and no floor comes from the other range, whose floor says
   * only which of the writes sent there are finished. A floor here may go down to the other's:
   * a write still unfinished there may now be retried here. A client keeps a write in the
   * window of every range it went to until it finishes (nova-client.ts), so the other's floor
   * is at or below it, and its record kept. The numbers uncovered were finished for this range,
   * and no attempt at one can arrive any more: a client sends only unfinished writes, and an
   * attempt sent before the split or merge carries an older configuration id, which the LTC
   * refuses. Throws CORRUPTION naming `where` and the offset on bad bytes.
   */
  adopt(bytes: Buffer, where: string): void {
    for (const d of decodeSessions(bytes, where)) {
      let s = this.sessions.get(d);
      if (!s) s = this.create(d, this.clock - d.idleMs);
      else if (d.floor < s.floor) this.lowerFloor(s, d.floor);
      for (const q of d.applied) this.add(s, q);
    }
  }

  /** Moves the floor down (no lower than the window allows); the numbers it uncovers are unknown. */
  private lowerFloor(s: Session, floor: number): void {
    let highest = s.floor - 1;
    for (let q = s.floor; q < s.floor + s.states.length; q++) if (stateOf(s, q) !== 0) highest = q;
    const to = Math.max(floor, highest - this.limits.maxWindow + 1);
    if (to >= s.floor) return;
    // Each number's slot is its value modulo the ring: the ring must span the new floor to the highest.
    if (highest - to >= s.states.length) this.grow(s, ringFor(highest - to));
    s.floor = to;
  }

  /**
   * Records `seq` as applied in `s` (a write from a log or a snapshot) unless it is below the
   * floor. One further ahead than maxWindow raises the floor instead of the ring's size: the
   * numbers it passes are then refused if they come again, never applied twice.
   */
  private add(s: Session, seq: number): void {
    if (seq < s.floor) return;
    if (seq - s.floor >= this.limits.maxWindow) this.raiseFloor(s, seq - this.limits.maxWindow + 1);
    if (stateOf(s, seq) === 0) this.setState(s, seq, APPLIED);
  }

  /** REQUIRES: floor <= seq < floor + maxWindow. */
  private setState(s: Session, seq: number, state: number): void {
    if (seq - s.floor >= s.states.length) this.grow(s, ringFor(seq - s.floor));
    const i = seq & (s.states.length - 1);
    const was = s.states[i];
    s.states[i] = state;
    const delta = (state !== 0 ? 1 : 0) - (was !== 0 ? 1 : 0);
    s.held += delta;
    this.entries += delta;
  }

  private create(id: ClientId, lastActive: number): Session {
    const s = newSession(id, lastActive);
    this.sessions.add(s);
    this.ringBytes += s.states.length;
    return s;
  }

  /** Makes `s`'s ring `size` long, keeping each number's state. */
  private grow(s: Session, size: number): void {
    const old = s.states;
    const next = new Uint8Array(size);
    for (let q = s.floor; q < s.floor + old.length; q++) next[q & (size - 1)] = old[q & (old.length - 1)];
    s.states = next;
    this.ringBytes += size - old.length;
  }

  /** Moves the floor up, clearing the states of the numbers it passes. */
  private raiseFloor(s: Session, floor: number): void {
    if (floor <= s.floor) return;
    const end = Math.min(floor, s.floor + s.states.length);
    const mask = s.states.length - 1;
    for (let q = s.floor; q < end; q++) {
      if (s.states[q & mask] !== 0) {
        s.states[q & mask] = 0;
        s.held--;
        this.entries--;
      }
    }
    s.floor = floor;
  }
}

/** The state of number `seq` in `s` (0 below the floor: forgotten). */
function stateOf(s: Session, seq: number): number {
  const d = seq - s.floor;
  return d >= 0 && d < s.states.length ? s.states[seq & (s.states.length - 1)] : 0;
}

/** The ring size that holds numbers up to `distance` past the floor. */
function ringFor(distance: number): number {
  let n = 64;
  while (n <= distance) n *= 2;
  return n;
}

export interface DecodedSession extends ClientId {
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
  const half = (at: number): number => {
    try {
      return readU64(b, at);
    } catch {
      return bad('has a client id half of 2^53 or more');
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
    const idHigh = half(c.at);
    const idLow = half(c.at + 8);
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
    out.push({ idHigh, idLow, floor, idleMs, applied });
  }
  if (c.at !== b.length) bad(`has ${b.length - c.at} bytes after its last session`);
  return out;
}

/**
 * Sessions by client id: by the id's high half (a Map of numbers), checked against the low
 * half; a session whose high half another one has already goes to a second map, by the whole
 * id (random ids almost never get there).
 */
class SessionMap {
  private readonly byHigh = new Map<number, Session>();
  private readonly byId = new Map<string, Session>();

  get size(): number {
    return this.byHigh.size + this.byId.size;
  }

  get(id: ClientId): Session | undefined {
    const s = this.byHigh.get(id.idHigh);
    if (s !== undefined && s.idLow === id.idLow) return s;
    return this.byId.size === 0 ? undefined : this.byId.get(idName(id));
  }

  /** REQUIRES: no session of `s`'s id is in the map. */
  add(s: Session): void {
    if (!this.byHigh.has(s.idHigh)) this.byHigh.set(s.idHigh, s);
    else this.byId.set(idName(s), s);
  }

  delete(s: Session): void {
    if (this.byHigh.get(s.idHigh) === s) this.byHigh.delete(s.idHigh);
    else this.byId.delete(idName(s));
  }

  *values(): IterableIterator<Session> {
    yield* this.byHigh.values();
    yield* this.byId.values();
  }
}

function newSession(id: ClientId, lastActive: number): Session {
  return { idHigh: id.idHigh, idLow: id.idLow, floor: 0, states: new Uint8Array(64), held: 0, inFlight: 0, lastActive };
}
