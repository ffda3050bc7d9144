/**
 * The session table (src/ltc/sessions.ts) against a model, under random clients that follow
 * NovaClient's rules (a floor below every unfinished write, giving up within half the
 * timeout, a new session when told the old one expired): random retries, racing retries,
 * lost answers, failed appends, idle time, flushes that snapshot the table, and crashes that
 * rebuild it from the last snapshot and the log records since (writes in flight among them,
 * or not). Every verdict must be the model's, and no write may be applied twice.
 */
import { describe, expect, it } from 'vitest';
import { SessionTable, decodeSessions, type Ticket } from '../../src/ltc/sessions.js';
import type { ClientId, SessionRef } from '../../src/common/write-id.js';
import { NovaError } from '../../src/common/errors.js';
import { rng } from '../helpers/rng.js';

const TIMEOUT = 10_000;
const limits = { timeoutMs: TIMEOUT, maxSessions: 1000, maxWindow: 256, maxEntries: 1_000_000, maxRingBytes: 1 << 24 };

type Verdict = 'apply' | 'applied' | 'wait' | 'SESSION_EXPIRED' | 'BAD_ARGUMENT';

/** What the table should know of a session. */
interface ModelSession {
  floor: number;
  applied: Set<number>;
  inFlight: Set<number>;
  /** Tickets begun and not yet applied or failed, at or below the floor too (they hold off expiry). */
  begun: number;
  lastActive: number;
}

/** The table's rules, written plainly. */
class Model {
  clock = 0;
  readonly sessions = new Map<string, ModelSession>();

  admit(r: SessionRef): Verdict {
    const k = key(r);
    let s = this.sessions.get(k);
    if (!s) {
      if (!r.open) return 'SESSION_EXPIRED';
      this.sessions.set(k, s = { floor: 0, applied: new Set(), inFlight: new Set(), begun: 0, lastActive: this.clock });
    }
    s.lastActive = this.clock;
    raise(s, r.floor);
    if (r.seq < s.floor) return 'BAD_ARGUMENT';
    if (s.applied.has(r.seq)) return 'applied';
    if (s.inFlight.has(r.seq)) return 'wait';
    return 'apply';
  }

  advance(ms: number): void {
    this.clock += ms;
    for (const [k, s] of this.sessions) if (this.clock - s.lastActive >= TIMEOUT && s.begun === 0) this.sessions.delete(k);
  }
}

function raise(s: ModelSession, floor: number): void {
  if (floor <= s.floor) return;
  s.floor = floor;
  for (const q of s.applied) if (q < floor) s.applied.delete(q);
  for (const q of s.inFlight) if (q < floor) s.inFlight.delete(q);
}

const key = (id: ClientId): string => `${id.idHigh}/${id.idLow}`;

interface Client {
  id: ClientId;
  next: number;
  /** Writes not finished: number → wall time of the first send. */
  unfinished: Map<number, number>;
  /** A write of this session has been acknowledged (then the table must know it). */
  acked: boolean;
}

interface Begun {
  client: Client;
  ref: SessionRef;
  ticket: Ticket;
}

interface Waiter {
  client: Client;
  seq: number;
  outcome: 'pending' | 'ok' | 'failed';
}

async function run(seed: number, steps: number): Promise<{ applied: number; duplicates: number; crashes: number; expired: number }> {
  const random = rng(seed);
  const pick = <T>(xs: T[]): T => xs[Math.floor(random() * xs.length)];
  let table = new SessionTable(limits);
  const model = new Model();
  let wall = 0;
  let ids = 0;
  // Two clients share an id's high half: the table's second map.
  const newClient = (high = 1 + ids): Client => ({ id: { idHigh: high, idLow: ++ids }, next: 1, unfinished: new Map(), acked: false });
  const clients = [newClient(7), newClient(7), newClient(), newClient()];
  const applications = new Map<string, number>(); // (client, number) → times applied
  let begun: Begun[] = [];
  // What a reopen reads: the last flush's snapshot (the table's and the model's) and the log since.
  let snapshot: Buffer | undefined;
  let modelSnapshot = new Map<string, ModelSession>();
  let log: SessionRef[] = [];
  const flush = (): void => {
    snapshot = table.encode();
    modelSnapshot = new Map([...model.sessions].map(([k, s]) => [k, { ...s, applied: new Set(s.applied), inFlight: new Set(), begun: 0, lastActive: s.lastActive - model.clock }]));
    log = [];
  };
  let waiters: Waiter[] = [];
  const counts = { applied: 0, duplicates: 0, crashes: 0, expired: 0 };

  const applyOnce = (c: Client, seq: number): void => {
    const k = `${key(c.id)}:${seq}`;
    const n = (applications.get(k) ?? 0) + 1;
    applications.set(k, n);
    expect(n, `seed ${seed}: write ${seq} of ${k} applied twice`).toBe(1);
    counts.applied++;
  };
  const finish = (c: Client, seq: number, acked: boolean): void => {
    c.unfinished.delete(seq);
    if (acked) c.acked = true;
  };
  const send = (c: Client, seq: number): void => {
    const floor = Math.min(seq, ...c.unfinished.keys());
    const r: SessionRef = { ...c.id, seq, floor, open: !c.acked };
    const want = model.admit(r);
    let got: Verdict;
    let ticket: Ticket | undefined;
    let waiting: Promise<void> | undefined;
    try {
      const a = table.admit(r);
      if (a === 'applied') got = 'applied';
      else if (a instanceof Promise) [got, waiting] = ['wait', a];
      else [got, ticket] = ['apply', a];
    } catch (err) {
      got = (err as NovaError).code as Verdict;
    }
    expect(got, `seed ${seed}: write ${seq} of ${key(c.id)} (floor ${floor}, open ${r.open})`).toBe(want);
    if (got === 'applied') {
      counts.duplicates++;
      finish(c, seq, true);
    } else if (got === 'wait') {
      counts.duplicates++;
      const w: Waiter = { client: c, seq, outcome: 'pending' };
      waiting!.then(() => { w.outcome = 'ok'; }, () => { w.outcome = 'failed'; });
      waiters.push(w);
    } else if (got === 'apply') {
      table.begin(ticket!);
      const s = model.sessions.get(key(c.id))!;
      s.inFlight.add(seq);
      s.begun++;
      begun.push({ client: c, ref: r, ticket: ticket! });
    } else if (got === 'SESSION_EXPIRED') {
      // NovaClient: a new session; what was unfinished in the old one is given up.
      counts.expired++;
      clients[clients.indexOf(c)] = newClient();
    } else {
      finish(c, seq, false); // below the floor: a write the client had finished with
    }
  };
  /** Settles a begun write in the model, as the engine's applied() or failed() does in the table. */
  const settle = (b: Begun, ok: boolean): void => {
    const s = model.sessions.get(key(b.client.id))!;
    s.begun--;
    s.inFlight.delete(b.ref.seq);
    if (ok && b.ref.seq >= s.floor) s.applied.add(b.ref.seq);
  };

  for (let step = 0; step < steps; step++) {
    // A client gives up on a write within half the timeout of sending it (its deadline).
    for (const c of clients) for (const [seq, at] of c.unfinished) if (wall - at > TIMEOUT / 2) finish(c, seq, false);
    const x = random();
    if (x < 0.35) {
      const c = pick(clients);
      if (c.unfinished.size < limits.maxWindow / 2) {
        const seq = c.next++;
        c.unfinished.set(seq, wall);
        send(c, seq);
      }
    } else if (x < 0.5) {
      const c = pick(clients); // a retry, maybe racing its original
      const open = [...c.unfinished.keys()];
      if (open.length > 0) send(c, pick(open));
    } else if (x < 0.75 && begun.length > 0) {
      const i = Math.floor(random() * begun.length);
      const b = begun[i];
      begun.splice(i, 1);
      const ok = random() < 0.9;
      if (ok) {
        applyOnce(b.client, b.ref.seq);
        log.push(b.ref);
        table.applied(b.ticket);
      } else {
        table.failed(b.ticket, new Error('append failed'));
      }
      settle(b, ok);
      await Promise.resolve(); // let the waiters hear
      await Promise.resolve();
      for (const w of waiters) {
        if (w.client === b.client && w.seq === b.ref.seq) expect(w.outcome, `seed ${seed}: a retry's outcome`).toBe(ok ? 'ok' : 'failed');
      }
      waiters = waiters.filter((w) => w.outcome === 'pending');
      // The answer reaches the client, or is lost (it retries later, or gives up).
      if (random() < 0.7 && b.client.unfinished.has(b.ref.seq)) finish(b.client, b.ref.seq, ok);
    } else if (x < 0.96) {
      const ms = Math.floor(random() * 2000);
      wall += ms;
      table.advance(ms);
      model.advance(ms);
    } else if (x < 0.985) {
      flush();
    } else {
      // A crash. A write in flight reached the log (it was applied, and is replayed) or did
      // not (it was never applied). The reopen loads the last snapshot, replays the log and
      // writes a snapshot of its own.
      counts.crashes++;
      for (const b of begun) {
        if (random() < 0.5) continue;
        applyOnce(b.client, b.ref.seq);
        log.push(b.ref);
      }
      table = new SessionTable(limits);
      if (snapshot) table.load(snapshot, 'snapshot');
      model.clock = 0;
      model.sessions.clear();
      for (const [k, s] of modelSnapshot) model.sessions.set(k, { ...s, applied: new Set(s.applied), inFlight: new Set() });
      for (const r of log) {
        table.replay(r);
        let s = model.sessions.get(key(r));
        if (!s) model.sessions.set(key(r), s = { floor: 0, applied: new Set(), inFlight: new Set(), begun: 0, lastActive: 0 });
        s.lastActive = 0;
        raise(s, r.floor);
        if (r.seq >= s.floor) s.applied.add(r.seq);
      }
      flush();
      begun = [];
      waiters = []; // their connections died with the process
    }
    // The table's snapshot says what the model knows.
    if (step % 50 === 0) {
      const decoded = decodeSessions(table.encode(), 'snapshot').map((d) => [key(d), d.floor, d.applied]);
      const expected = [...model.sessions].map(([k, s]) => [k, s.floor, [...s.applied].sort((a, b) => a - b)]);
      expect(decoded.sort(), `seed ${seed}, step ${step}`).toEqual(expected.sort());
    }
  }
  return counts;
}

describe('session table against a model', () => {
  it('gives the model\'s verdict for every write and applies none twice (random clients, seeded)', async () => {
    const totals = { applied: 0, duplicates: 0, crashes: 0, expired: 0 };
    for (let seed = 1; seed <= 30; seed++) {
      const c = await run(seed, 3000);
      for (const k of Object.keys(totals) as Array<keyof typeof totals>) totals[k] += c[k];
    }
    // The runs reached every kind of answer, so the checks above were exercised.
    expect(totals.applied).toBeGreaterThan(10_000);
    expect(totals.duplicates).toBeGreaterThan(1000);
    expect(totals.crashes).toBeGreaterThan(100);
    expect(totals.expired).toBeGreaterThan(0);
  });
});
