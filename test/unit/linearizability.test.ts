/**
 * The linearizability checker (bench/faults/linearizability.ts): hand-made register histories
 * classified, and random small histories checked against a brute-force search over every
 * order the real-time order allows.
 */
import { describe, expect, it } from 'vitest';
import { checkRegister, settleUnknownWrites, type RegisterOp } from '../../bench/faults/linearizability.js';
import { rng } from '../helpers/rng.js';

const w = (client: number, value: number, invoke: number, respond: number): RegisterOp => ({ client, kind: 'write', value, invoke, respond });
const r = (client: number, value: number, invoke: number, respond: number): RegisterOp => ({ client, kind: 'read', value, invoke, respond });
const U = Infinity;

function verdict(h: RegisterOp[], initial = 0): string {
  return checkRegister(h, { initial }).result;
}

describe('linearizability checker', () => {
  it('accepts linearizable histories, concurrent writes read in either order among them', () => {
    expect(verdict([])).toBe('linearizable');
    expect(verdict([r(1, 0, 0, 1)])).toBe('linearizable');
    expect(verdict([w(1, 1, 0, 10), w(2, 2, 1, 11), r(3, 2, 2, 3), r(3, 1, 4, 5)])).toBe('linearizable');
    expect(verdict([w(1, 1, 0, 1), r(2, 1, 2, 3), w(1, 0, 4, 5), r(2, 0, 6, 7)])).toBe('linearizable'); // a delete
    expect(verdict([r(1, 7, 0, 1)], 7)).toBe('linearizable');
  });

  it('finds a stale read', () => {
    const h = [w(1, 1, 0, 1), w(1, 2, 2, 3), r(2, 1, 4, 5)];
    const v = checkRegister(h);
    expect(v.result).toBe('violation');
    if (v.result === 'violation') expect(v.explanation).toMatch(/read -> 1/);
  });

  it('finds a read of a value never written, and a read before its write began', () => {
    expect(verdict([w(1, 1, 0, 1), r(2, 9, 2, 3)])).toBe('violation');
    expect(verdict([r(2, 1, 0, 1), w(1, 1, 2, 3)])).toBe('violation');
    expect(verdict([r(2, 1, 0, 1), w(1, 1, 2, U)])).toBe('violation'); // unknown outcome, but begun after the read
  });

  it('explains a read by a write of unknown outcome, applied any time after it began', () => {
    expect(verdict([w(1, 1, 0, U), r(2, 1, 5, 6)])).toBe('linearizable');
    // Applied late: after a newer acknowledged write was read.
    expect(verdict([w(1, 1, 0, U), w(2, 2, 1, 2), r(3, 2, 3, 4), r(3, 1, 5, 6)])).toBe('linearizable');
    // An unknown write never read is as if never applied.
    expect(verdict([w(1, 1, 0, 1), w(2, 2, 2, U), r(3, 1, 3, 4)])).toBe('linearizable');
    // But it takes effect once: it cannot be read again after a newer write was.
    expect(verdict([w(1, 1, 0, U), r(2, 1, 1, 2), w(2, 2, 3, 4), r(3, 2, 5, 6), r(3, 1, 7, 8)])).toBe('violation');
  });

  it('finds the issue\'s history: a write applied twice by its retry after another client\'s newer write', () => {
    const h = [
      w(2, 1, 326493.7, 328926.1), // X, acknowledged after the LTC restarted
      r(5, 1, 326537.5, 328918.5), // X was replayed
      w(5, 2, 328919.3, 328926.0), // Y, acknowledged
      r(5, 1, 328926.05, 328933.0), // X again (after Y's answer: the figures are rounded to 0.1 ms)
    ];
    const v = checkRegister(h);
    expect(v.result).toBe('violation');
    if (v.result === 'violation') expect(v.explanation).toContain('client 5 read -> 1');
  });

  it('settles unique unknown-outcome writes before the search: dropped unless read, else bounded by the first read', () => {
    const h = [w(1, 1, 0, U), w(1, 2, 1, U), r(2, 2, 5, 6), r(2, 2, 3, 4), w(3, 3, 0, U), w(4, 3, 0, U)];
    expect(settleUnknownWrites(h)).toEqual([w(1, 2, 1, 4), r(2, 2, 5, 6), r(2, 2, 3, 4), w(3, 3, 0, U), w(4, 3, 0, U)]);
    // The initial value is a writer too: a read of it need not follow this delete.
    expect(settleUnknownWrites([r(1, 0, 0, 1), w(2, 0, 0.5, U)])).toEqual([r(1, 0, 0, 1), w(2, 0, 0.5, U)]);
  });

  it('counts a read invoked at the instant another operation answers as concurrent with it', () => {
    expect(verdict([r(1, 0, 0, 1), w(2, 0, 0.5, U), w(3, 5, 2, 3), r(1, 5, 4, 5), r(1, 0, 6, 7)])).toBe('linearizable');
    expect(verdict([w(1, 1, 0, 10), r(2, 0, 10, 11), w(3, 0, 20, 21)])).toBe('linearizable');
    expect(verdict([w(1, 1, 0, 10), r(2, 0, 10.5, 11), w(3, 0, 20, 21)])).toBe('violation');
  });

  it('gives up with undecided past its state budget', () => {
    // Forty concurrent writes of two values, then reads no order of them explains: every
    // subset of the writes is a state to rule out.
    const h = Array.from({ length: 40 }, (_, i) => w(i, 1 + (i % 2), 0, 100));
    h.push(r(99, 1, 101, 102), r(99, 2, 103, 104), r(99, 1, 105, 106));
    expect(checkRegister(h, { maxStates: 1000 }).result).toBe('undecided');
  });

  it('agrees with a brute-force search on random small histories, linearizable and mutated', () => {
    const rand = rng(23);
    const counts = { linearizable: 0, violation: 0 };
    for (let trial = 0; trial < 10_000; trial++) {
      // Whole-number times half the time (ties), deletes (writes of 0), and other initial values.
      const initial = rand() < 0.2 ? 1 + Math.floor(rand() * 3) : 0;
      const h = randomHistory(rand, 2 + Math.floor(rand() * 8), rand() < 0.3, 2 + Math.floor(rand() * 3), { ties: rand() < 0.5, deletes: rand() < 0.5, initial });
      if (rand() < 0.5) mutate(h, rand);
      const expected = bruteForce(h, initial) ? 'linearizable' : 'violation';
      expect(checkRegister(h, { initial }).result, `initial ${initial}: ${JSON.stringify(h)}`).toBe(expected);
      counts[expected]++;
    }
    expect(counts.linearizable).toBeGreaterThan(3000);
    expect(counts.violation).toBeGreaterThan(1000);
  });

  it('checks a long linearizable history with many concurrent clients quickly', () => {
    const rand = rng(5);
    const h = randomHistory(rand, 20_000, false, 30);
    const v = checkRegister(h);
    expect(v.result).toBe('linearizable');
    expect(v.states).toBeLessThan(20 * h.length);
  });
});

/**
 * A history of `n` operations by `clients` clients, linearizable by construction: each takes
 * effect at a point inside its interval. Writes write unique values unless `repeatValues`;
 * about one write in eight has an unknown outcome (applied at its point, or never).
 */
function randomHistory(rand: () => number, n: number, repeatValues: boolean, clients = 3,
  o: { ties?: boolean; deletes?: boolean; initial?: number } = {}): RegisterOp[] {
  const free = new Array<number>(clients).fill(0);
  const planned: Array<{ op: RegisterOp; at: number; applied: boolean }> = [];
  let nextValue = 1;
  const time = (t: number): number => (o.ties ? Math.round(t) : t);
  for (let i = 0; i < n; i++) {
    const c = Math.floor(rand() * clients);
    const invoke = time(free[c] + rand() * 3);
    const respond = Math.max(invoke + (o.ties ? 1 : 0.1), time(invoke + 0.1 + rand() * 6));
    free[c] = respond;
    const write = rand() < 0.5;
    const value = !write ? 0 : o.deletes && rand() < 0.25 ? 0 : repeatValues ? 1 + Math.floor(rand() * 3) : nextValue++;
    const unknown = write && rand() < 0.125;
    planned.push({
      op: { client: c, kind: write ? 'write' : 'read', value, invoke, respond: unknown ? Infinity : respond },
      at: invoke + rand() * (respond - invoke),
      applied: !unknown || rand() < 0.5,
    });
  }
  let state = o.initial ?? 0;
  for (const p of [...planned].sort((a, b) => a.at - b.at)) {
    if (p.op.kind === 'write') {
      if (p.applied) state = p.op.value;
    } else {
      p.op.value = state;
    }
  }
  return planned.map((p) => p.op);
}

/** Changes one read's value: to another value of the history, absent, or one never written. */
function mutate(h: RegisterOp[], rand: () => number): void {
  const reads = h.filter((o) => o.kind === 'read');
  if (reads.length === 0) return;
  const values = [0, 99, ...h.filter((o) => o.kind === 'write').map((o) => o.value)];
  reads[Math.floor(rand() * reads.length)].value = values[Math.floor(rand() * values.length)];
}

/**
 * Every order of the operations the real-time order allows (an operation whose response came
 * before another's invocation goes first), unknown-outcome writes included or left out.
 */
function bruteForce(h: RegisterOp[], initial = 0): boolean {
  const done = new Array<boolean>(h.length).fill(false);
  const go = (state: number, left: number): boolean => {
    if (h.every((o, i) => done[i] || o.respond === Infinity)) return true;
    if (left === 0) return false;
    for (let i = 0; i < h.length; i++) {
      if (done[i]) continue;
      const o = h[i];
      if (h.some((p, j) => !done[j] && j !== i && p.respond < o.invoke)) continue;
      if (o.kind === 'read' && o.value !== state) continue;
      done[i] = true;
      const ok = go(o.kind === 'write' ? o.value : state, left - 1);
      done[i] = false;
      if (ok) return true;
    }
    return false;
  };
  return go(initial, h.length);
}
