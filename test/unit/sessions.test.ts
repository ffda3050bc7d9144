/**
 * The session table (src/ltc/sessions.ts): what it answers a write, floors, expiry on the
 * range's own clock, its bounds, and its snapshot format.
 */
import { describe, expect, it } from 'vitest';
import { MAX_CLOCK_STEP_MS, SessionTable, decodeSessions, type Admission, type Ticket } from '../../src/ltc/sessions.js';
import { idName, randomClientId, type ClientId, type SessionRef } from '../../src/common/write-id.js';

const A: ClientId = { idHigh: 0xaaaa, idLow: 0xa1 };
const B: ClientId = { idHigh: 0xbbbb, idLow: 0xb2 };
const id = (n: number): ClientId => ({ idHigh: n, idLow: n });
const limits = { timeoutMs: 10_000, maxSessions: 100, maxWindow: 1024, maxEntries: 100_000, maxRingBytes: 1 << 20 };

function ref(client: ClientId, seq: number, floor = 1, open = true): SessionRef {
  return { ...client, seq, floor, open };
}

/** 'apply' for a ticket (the write is to be applied), else the verdict itself. */
function verdict(a: Admission): 'apply' | 'applied' | Promise<void> {
  return a === 'applied' || a instanceof Promise ? a : 'apply';
}

/** The ticket to apply `r` under; fails the test if the table says otherwise. */
function ticket(t: SessionTable, r: SessionRef): Ticket {
  const a = t.admit(r);
  expect(verdict(a)).toBe('apply');
  return a as Ticket;
}

/** Admits and applies `r` (as the engine does for a write that commits). */
function apply(t: SessionTable, r: SessionRef): void {
  const k = ticket(t, r);
  t.begin(k);
  t.applied(k);
}

describe('session table', () => {
  it('answers a retry of an applied write from the table, and one in flight with its original', async () => {
    const t = new SessionTable(limits);
    apply(t, ref(A, 1));
    expect(verdict(t.admit(ref(A, 1)))).toBe('applied');
    const two = ticket(t, ref(A, 2, 1, false)); // the session is known: `open` no longer matters
    t.begin(two);
    const retry = t.admit(ref(A, 2));
    expect(retry).toBeInstanceOf(Promise);
    t.applied(two);
    await expect(retry).resolves.toBeUndefined(); // the original's outcome
    expect(verdict(t.admit(ref(A, 2)))).toBe('applied');
    // A write that failed may be sent again (the engine refuses work until a reopen rebuilds
    // the table); a retry that waited for it fails with it.
    const three = ticket(t, ref(A, 3));
    t.begin(three);
    const waiting = t.admit(ref(A, 3));
    t.failed(three, new Error('the log append failed'));
    await expect(waiting).rejects.toThrow('the log append failed');
    expect(verdict(t.admit(ref(A, 3)))).toBe('apply');
    expect(verdict(t.admit(ref(B, 1)))).toBe('apply'); // clients are apart
    expect(t.stats).toMatchObject({ sessions: 2, entries: 2, duplicates: 4 });
  });

  it('enter: a fresh write\'s ticket begun, an applied one settled, a retry of one under way settled by its outcome', async () => {
    const t = new SessionTable(limits);
    const first = t.enter(ref(A, 1));
    expect('ticket' in first).toBe(true);
    const retry = t.enter(ref(A, 1)); // begun: the retry waits for it
    expect('settled' in retry).toBe(true);
    t.applied((first as { ticket: Ticket }).ticket);
    await expect((retry as { settled: Promise<void> }).settled).resolves.toBeUndefined();
    const again = t.enter(ref(A, 1));
    await expect((again as { settled: Promise<void> }).settled).resolves.toBeUndefined();
    expect(t.stats).toMatchObject({ duplicates: 2 });
  });

  it('forgets what is below a client\'s floor and refuses a write there', () => {
    const t = new SessionTable(limits);
    for (let i = 1; i <= 5; i++) apply(t, ref(A, i));
    apply(t, ref(A, 7, 4));
    expect(verdict(t.admit(ref(A, 4, 4)))).toBe('applied');
    expect(() => t.admit(ref(A, 3, 3))).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/write 3 .* below its floor 4/) }));
    // An older floor (a frame that waited) lowers nothing.
    expect(verdict(t.admit(ref(A, 5, 2)))).toBe('applied');
    expect(() => t.admit(ref(A, 2, 2))).toThrow(/below its floor 4/);
  });

  it('a client it does not know must be opening a session; else its session expired and it is told so', () => {
    const t = new SessionTable(limits);
    expect(() => t.admit(ref(A, 9, 9, false))).toThrow(expect.objectContaining({ code: 'SESSION_EXPIRED' }));
    expect(t.stats.sessions).toBe(0);
    expect(verdict(t.admit(ref(A, 9, 9, true)))).toBe('apply');
  });

  it('expires a session idle for the timeout on its own clock, not one with a write in flight; a pause is not idleness', () => {
    const t = new SessionTable(limits);
    apply(t, ref(A, 1));
    apply(t, ref(B, 1));
    const inFlight = ticket(t, ref(B, 2));
    t.begin(inFlight); // in flight
    for (let ms = 0; ms < 9_000; ms += 1000) t.advance(1000);
    apply(t, ref(A, 2, 1, false)); // A is busy again
    t.advance(600_000); // a SIGSTOP of ten minutes moves the clock one step
    expect(t.stats.sessions).toBe(2);
    for (let ms = 0; ms < 10_000; ms += MAX_CLOCK_STEP_MS) t.advance(MAX_CLOCK_STEP_MS);
    expect(t.stats).toMatchObject({ sessions: 1, expired: 1 }); // A expired; B still has a write in flight
    expect(() => t.admit(ref(A, 3, 3, false))).toThrow(expect.objectContaining({ code: 'SESSION_EXPIRED' }));
    t.failed(inFlight, new Error('x'));
    t.advance(1);
    expect(t.stats).toMatchObject({ sessions: 0, expired: 2 });
  });

  it('is bounded: sessions, how far past its floor a session writes, and writes held in all', () => {
    const t = new SessionTable({ timeoutMs: 10_000, maxSessions: 3, maxWindow: 4, maxEntries: 8, maxRingBytes: 1 << 20 });
    const [c0, c1, c2] = [0, 1, 2].map(id);
    for (const c of [c0, c1, c2]) apply(t, ref(c, 1));
    expect(() => t.admit(ref(A, 1))).toThrow(expect.objectContaining({ code: 'BUSY', message: expect.stringMatching(/3 client sessions/) }));
    for (let i = 2; i <= 4; i++) apply(t, ref(c0, i));
    expect(() => t.admit(ref(c0, 5))).toThrow(expect.objectContaining({ code: 'BUSY', message: expect.stringMatching(/finish that one first/) }));
    apply(t, ref(c0, 5, 3)); // 1 and 2 finished: room again
    expect(t.stats.entries).toBe(5); // c0: 3, 4, 5; c1: 1; c2: 1
    apply(t, ref(c1, 2));
    apply(t, ref(c1, 3));
    apply(t, ref(c2, 2));
    expect(() => t.admit(ref(c2, 3))).toThrow(expect.objectContaining({ code: 'BUSY', message: expect.stringMatching(/hold 8 writes here/) }));
    apply(t, ref(c1, 4, 3)); // c1's 1 and 2 finished: dropped, room in all
    expect(t.stats.entries).toBe(7);
  });

  it('keeps apart clients whose ids share their high half (looked up by it, checked whole)', () => {
    const t = new SessionTable(limits);
    const ids = [0, 1, 2].map((i) => ({ idHigh: 77, idLow: i }));
    apply(t, ref(ids[0], 1));
    apply(t, ref(ids[1], 1));
    expect(verdict(t.admit(ref(ids[0], 1)))).toBe('applied');
    expect(verdict(t.admit(ref(ids[1], 1)))).toBe('applied');
    expect(verdict(t.admit(ref(ids[2], 1)))).toBe('apply');
    for (let i = 0; i < 10; i++) t.advance(1000); // both expire; a new one takes the first place
    apply(t, ref(ids[1], 2, 2));
    expect(verdict(t.admit(ref(ids[1], 2, 2, false)))).toBe('applied');
    expect(() => t.admit(ref(ids[0], 2, 2, false))).toThrow(expect.objectContaining({ code: 'SESSION_EXPIRED' }));
    const u = new SessionTable(limits);
    u.load(t.encode(), 'M');
    expect(verdict(u.admit(ref(ids[1], 2, 2, false)))).toBe('applied');
  });

  it('keeps numbers in a ring that grows as a window widens and moves with the floor', () => {
    const t = new SessionTable(limits);
    for (let i = 1; i <= 300; i++) apply(t, ref(A, i)); // past 64 and 128 and 256: the ring doubles
    for (let i = 1; i <= 300; i++) expect(verdict(t.admit(ref(A, i)))).toBe('applied');
    expect(verdict(t.admit(ref(A, 301)))).toBe('apply');
    apply(t, ref(A, 1000, 999)); // the floor passes the whole ring
    expect(t.stats.entries).toBe(1);
    expect(() => t.admit(ref(A, 300, 300))).toThrow(/below its floor 999/);
    expect(verdict(t.admit(ref(A, 1000, 999)))).toBe('applied');
    expect(verdict(t.admit(ref(A, 1000 + 64, 999)))).toBe('apply'); // same slot as 1000 in a ring of 64: not confused
    // A write in flight whose number the floor passes: its end touches no other number's slot.
    const k = ticket(t, ref(A, 1001, 999));
    t.begin(k);
    apply(t, ref(A, 1001 + 128, 1100));
    t.failed(k, new Error('x'));
    expect(verdict(t.admit(ref(A, 1001 + 128, 1100)))).toBe('applied');
    expect(() => t.admit(ref(A, 1100 + 1024, 1100))).toThrow(/1024 or more past its oldest unfinished one/);
    // Rings take bytes: past maxRingBytes a window may not widen.
    const u = new SessionTable({ ...limits, maxRingBytes: 160 });
    apply(u, ref(A, 1));
    apply(u, ref(B, 1));
    expect(() => u.admit(ref(A, 100))).toThrow(expect.objectContaining({ code: 'BUSY', message: expect.stringMatching(/windows take 128 bytes/) }));
    // A log record far past the window (a bad log) raises the floor rather than the ring.
    const v = new SessionTable(limits);
    v.replay(ref(A, 5000, 1, false));
    expect(() => v.admit(ref(A, 1, 1, false))).toThrow(/below its floor 3977/);
    expect(verdict(v.admit(ref(A, 5000, 3977, false)))).toBe('applied');
  });

  it('adopts another range\'s sessions: applied numbers join, and a floor goes down to the other\'s', () => {
    // Range X saw writes 1..3 and 8 of A (floor 8); range Y saw 4..6 with 5 still unanswered (floor 5).
    const x = new SessionTable(limits);
    for (const q of [1, 2, 3]) apply(x, ref(A, q));
    apply(x, ref(A, 8, 8));
    const y = new SessionTable(limits);
    apply(y, ref(A, 4, 4));
    apply(y, ref(A, 6, 4));
    apply(y, ref(B, 1));
    y.admit(ref(A, 5, 5)); // floor 5: the client had 4 answered
    // X takes over Y's keys (a merge): 5 may be retried here and must not be refused; 6 is applied.
    x.adopt(y.encode(), 'test');
    expect(verdict(x.admit(ref(A, 6, 5)))).toBe('applied');
    expect(verdict(x.admit(ref(A, 8, 5)))).toBe('applied');
    expect(verdict(x.admit(ref(A, 5, 5)))).toBe('apply');
    expect(verdict(x.admit(ref(B, 1, 1, false)))).toBe('applied'); // a session only Y knew
    // A session only the other range knew takes no floor from it: that floor said which
    // writes sent there were finished, and a write sent here meanwhile may be below it.
    const u = new SessionTable(limits);
    apply(u, ref(A, 40, 40));
    const v = new SessionTable(limits);
    v.adopt(u.encode(), 'test');
    expect(verdict(v.admit(ref(A, 39, 39)))).toBe('apply');
    expect(verdict(v.admit(ref(A, 40, 39)))).toBe('applied');
    // A floor far below the highest number goes no lower than the window allows.
    const z = new SessionTable(limits);
    apply(z, ref(A, 5000, 5000));
    const w = new SessionTable(limits);
    apply(w, ref(A, 1));
    z.adopt(w.encode(), 'test');
    expect(verdict(z.admit(ref(A, 5000, 5000 - 1023)))).toBe('applied');
    expect(() => z.adopt(Buffer.from([0xff]), 'bad bytes')).toThrow(/bad bytes/);
  });

  it('refuses a malformed session, naming what is wrong', () => {
    const t = new SessionTable(limits);
    for (const r of [ref({ idHigh: -1, idLow: 0 }, 1), ref({ idHigh: 1, idLow: 2 ** 53 }, 1), ref(A, 0), ref(A, 1.5), ref(A, 3, 4), ref(A, 3, 0), { ...ref(A, 1), open: 1 as unknown as boolean }]) {
      expect(() => t.admit(r)).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT', message: expect.stringContaining('a write\'s session is') }));
    }
    expect(t.stats.sessions).toBe(0);
  });

  it('a write replayed from a log makes its session active, whatever idle time the snapshot gave it', () => {
    const t = new SessionTable(limits);
    apply(t, ref(A, 1));
    for (let i = 0; i < 9; i++) t.advance(1000); // idle 9 s of 10 when a flush wrote the table
    const snapshot = t.encode();
    const u = new SessionTable(limits); // the reopen: the snapshot, then the logs
    u.load(snapshot, 'M');
    u.replay(ref(A, 2, 1, false));
    for (let i = 0; i < 9; i++) u.advance(1000);
    expect(verdict(u.admit(ref(A, 2, 1, false)))).toBe('applied'); // the client's retry, 9 s on
  });

  it('round-trips its snapshot; loading merges floors, applied writes and idle times', () => {
    const t = new SessionTable(limits);
    for (const i of [3, 4, 9, 900]) apply(t, ref(A, i, 3));
    apply(t, ref(B, 1));
    t.advance(1500);
    const bytes = t.encode();
    expect(decodeSessions(bytes, 'M')).toEqual([
      { ...A, floor: 3, idleMs: 1500, applied: [3, 4, 9, 900] },
      { ...B, floor: 1, idleMs: 1500, applied: [1] },
    ]);
    const u = new SessionTable(limits);
    u.replay(ref(A, 11, 4, false)); // a record in a log, newer than the snapshot
    u.load(bytes, 'M');
    expect(verdict(u.admit(ref(A, 9, 4, false)))).toBe('applied');
    expect(verdict(u.admit(ref(A, 11, 4, false)))).toBe('applied');
    expect(() => u.admit(ref(A, 3, 3, false))).toThrow(/below its floor 4/);
    expect(verdict(u.admit(ref(B, 1, 1, false)))).toBe('applied');
    // B was idle 1.5 s when saved; it expires 8.5 s later, not 10.
    const v = new SessionTable(limits);
    v.load(bytes, 'M');
    for (let i = 0; i < 9; i++) v.advance(1000);
    expect(v.stats.sessions).toBe(0);
  });

  it('reports every cut and bad field of a snapshot as corruption with where and offset', () => {
    const t = new SessionTable(limits);
    apply(t, ref(A, 5, 2));
    apply(t, ref(A, 7, 2));
    const bytes = t.encode();
    for (let n = 0; n < bytes.length; n++) {
      expect(() => decodeSessions(bytes.subarray(0, n), 'MANIFEST-9 record 2'), `cut at ${n}`).toThrow(/MANIFEST-9 record 2: session table .* at offset \d+/);
    }
    expect(() => decodeSessions(Buffer.concat([bytes, Buffer.from([0])]), 'M')).toThrow(/1 bytes after its last session/);
    expect(() => decodeSessions(Buffer.from([2, 0]), 'M')).toThrow(/unsupported version 2 at offset 0/);
    const dup = Buffer.from(bytes);
    dup[dup.length - 1] = 0; // the second applied number equals the first
    expect(() => decodeSessions(dup, 'M')).toThrow(/out of order/);
    const big = Buffer.from(bytes);
    big[9] = 0xff; // the top byte of the first id's high half: 2^56 and more
    expect(() => decodeSessions(big, 'M')).toThrow(/M: session table has a client id half of 2\^53 or more at offset 2/);
  });

  it('makes random ids of two integers below 2^53, all different', () => {
    const ids = Array.from({ length: 2000 }, () => randomClientId());
    for (const x of ids) expect(Number.isSafeInteger(x.idHigh) && x.idHigh >= 0 && Number.isSafeInteger(x.idLow) && x.idLow >= 0).toBe(true);
    expect(new Set(ids.map(idName)).size).toBe(ids.length);
    // All 53 bits are used: about half the halves are 2^52 or more.
    const high = ids.filter((x) => x.idHigh >= 2 ** 52).length;
    expect(high).toBeGreaterThan(800);
    expect(high).toBeLessThan(1200);
  });

  it('encodes the example of doc/format/manifest.md', () => {
    const t = new SessionTable(limits);
    for (const q of [3, 4, 9]) apply(t, ref({ idHigh: 0xaaaaaa, idLow: 0x55 }, q, 3));
    t.advance(1500);
    expect(t.encode().toString('hex')).toBe('0101aaaaaa0000000000550000000000000003dc0b03000105');
  });
});

describe('a write whose edit is being logged (an ingest)', () => {
  it('is applied in every table encoded meanwhile, not in memory until applied(), and in neither once failed', () => {
    const t = new SessionTable(limits);
    const k = ticket(t, ref(A, 3));
    t.begin(k);
    const applied = (b: Buffer): number[] => decodeSessions(b, 'test').find((d) => d.idHigh === A.idHigh)?.applied ?? [];
    expect(applied(t.encode())).toEqual([]);
    t.applying(k);
    // Any edit logged now (a flush's, beside the ingest's) may replace the table: it must say so.
    expect(applied(t.encode())).toEqual([3]);
    expect(verdict(t.admit(ref(A, 3)))).toBeInstanceOf(Promise); // a retry still waits for the original
    t.applied(k);
    expect(applied(t.encode())).toEqual([3]);
    const k2 = ticket(t, ref(A, 4));
    t.begin(k2);
    t.applying(k2);
    t.failed(k2, new Error('install failed'));
    expect(applied(t.encode())).toEqual([3]);
  });
});
