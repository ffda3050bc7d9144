/**
 * A linearizability checker for histories of reads and writes of registers (one register per
 * key): the Wing–Gong–Lowe search with Lowe's memoization, as Porcupine and Knossos do it.
 * Linearizability is local (Herlihy & Wing), so a key-value history is linearizable when each
 * key's is; the caller checks key by key.
 *
 * An operation is an interval [invoke, respond] of one process's clock. A read returns a
 * value; a write sets one; 0 is "absent" (a delete writes 0). A write whose outcome is unknown
 * (the client gave up, or the run ended first) has respond = Infinity: it may take effect at any
 * time after its invocation, or never. Failed operations are not in the history.
 *
 * The search walks the operations in time order, linearizing an operation whose call it has
 * reached if the register allows it, and backtracks when it reaches the return of an
 * operation not yet linearized. Visited (set of linearized operations, register value) pairs
 * are remembered, so each is explored once. Sets are remembered by a 53-bit hash (Zobrist:
 * XOR of per-operation random numbers); a history found not linearizable that way is checked
 * again with exact sets, so a hash collision can never produce a false violation.
 *
 * Before the search, each unknown-outcome write of a value nothing else gives the register (no
 * other write, nor the initial value) is settled: if no read returned its value it is dropped
 * (a linearization with it is one without it), else it must precede the first read that
 * returned it, so it returns when that read did. In the fault runner's histories (each value
 * written once) only deletes of unknown outcome then stay open-ended.
 *
 * Times that tie count as concurrent (a call at the instant of another operation's return may
 * precede it): a tie never makes a violation.
 */

/** One completed or unknown-outcome operation on a register. */
export interface RegisterOp {
  /** The client (process) that ran it; for reports. */
  client: number;
  kind: 'read' | 'write';
  /** Written, or returned by the read; 0 = absent. */
  value: number;
  invoke: number;
  /** Infinity: a write of unknown outcome. */
  respond: number;
}

export interface CheckOptions {
  /** The register's value before the history (default 0, absent). */
  initial?: number;
  /** Search states to explore before giving up with 'undecided' (default 5 million). */
  maxStates?: number;
}

export type Verdict =
  | { result: 'linearizable'; states: number }
  | { result: 'undecided'; states: number }
  | { result: 'violation'; states: number; explanation: string; ops: RegisterOp[] };

interface Entry {
  isCall: boolean;
  op: number; // index into ops
  time: number;
  match: Entry | undefined; // the call's return
  prev: Entry | undefined;
  next: Entry | undefined;
}

/** Checks one register's history. */
export function checkRegister(history: readonly RegisterOp[], options: CheckOptions = {}): Verdict {
  const ops = settleUnknownWrites(history, options.initial ?? 0);
  const fast = search(ops, options, false);
  if (fast.result !== 'violation') return fast;
  const exact = search(ops, options, true);
  return exact.result === 'violation' ? exact : { ...exact, states: exact.states + fast.states };
}

/**
 * The history with each unknown-outcome write of a value nothing else gives the register (no
 * other write, nor the initial value) settled: dropped if no read returned it, else returning
 * when the first such read returned (if that is after it began; else it is left open and the
 * search reports the read).
 */
export function settleUnknownWrites(history: readonly RegisterOp[], initial = 0): RegisterOp[] {
  const writers = new Map<number, number>([[initial, 1]]);
  for (const o of history) if (o.kind === 'write') writers.set(o.value, (writers.get(o.value) ?? 0) + 1);
  const firstRead = new Map<number, number>();
  for (const o of history) {
    if (o.kind === 'read' && o.respond < (firstRead.get(o.value) ?? Infinity)) firstRead.set(o.value, o.respond);
  }
  const out: RegisterOp[] = [];
  for (const o of history) {
    if (o.kind !== 'write' || o.respond !== Infinity || writers.get(o.value) !== 1) {
      out.push(o);
      continue;
    }
    const seen = firstRead.get(o.value);
    if (seen === undefined) continue; // never observed: as if never applied
    out.push(seen >= o.invoke ? { ...o, respond: seen } : o);
  }
  return out;
}

function search(ops: readonly RegisterOp[], options: CheckOptions, exact: boolean): Verdict {
  const maxStates = options.maxStates ?? 5_000_000;
  const n = ops.length;
  // Entries in time order; a call before a return at the same time (ties are concurrent).
  const entries: Entry[] = [];
  for (let i = 0; i < n; i++) {
    const call: Entry = { isCall: true, op: i, time: ops[i].invoke, match: undefined, prev: undefined, next: undefined };
    const ret: Entry = { isCall: false, op: i, time: ops[i].respond, match: undefined, prev: undefined, next: undefined };
    call.match = ret;
    entries.push(call, ret);
  }
  entries.sort((a, b) => a.time - b.time || (a.isCall === b.isCall ? a.op - b.op : a.isCall ? -1 : 1));
  const head: Entry = { isCall: false, op: -1, time: -Infinity, match: undefined, prev: undefined, next: undefined };
  let tail = head;
  for (const e of entries) {
    tail.next = e;
    e.prev = tail;
    tail = e;
  }

  const linearized = new Uint8Array(n);
  const h1 = new Uint32Array(n);
  const h2 = new Uint32Array(n);
  let seed = 0x9e3779b9;
  const rand = (): number => { // xorshift32: the hash needs spread, not secrecy
    seed ^= seed << 13; seed >>>= 0;
    seed ^= seed >>> 17;
    seed ^= seed << 5; seed >>>= 0;
    return seed;
  };
  for (let i = 0; i < n; i++) {
    h1[i] = rand();
    h2[i] = rand();
  }
  let hash1 = 0;
  let hash2 = 0;
  const seen = new Set<number | string>();
  const stateKey = (state: number, a: number, b: number): number =>
    ((a ^ Math.imul(state, 0x85ebca6b)) >>> 0) * 0x200000 + (((b ^ Math.imul(state, 0xc2b2ae35)) >>> 11) & 0x1fffff);
  // The exact key: the first operation (by index) not linearized, then those above it that
  // are (all within the window of operations concurrent with it, so the walk is short).
  let lowest = 0; // no operation below it is unlinearized
  const exactKey = (state: number, add: number): string => {
    linearized[add] = 1;
    while (lowest < n && linearized[lowest]) lowest++;
    let left = stack.length + 1 - lowest; // linearized above `lowest`
    const above: number[] = [];
    for (let i = lowest + 1; left > 0; i++) {
      if (linearized[i]) {
        above.push(i);
        left--;
      }
    }
    const key = `${state}|${lowest}|${above.join(',')}`;
    linearized[add] = 0;
    if (add < lowest) lowest = add;
    return key;
  };

  const lift = (e: Entry): void => {
    e.prev!.next = e.next;
    if (e.next) e.next.prev = e.prev;
    const m = e.match!;
    m.prev!.next = m.next;
    if (m.next) m.next.prev = m.prev;
  };
  const unlift = (e: Entry): void => {
    const m = e.match!;
    m.prev!.next = m;
    if (m.next) m.next.prev = m;
    e.prev!.next = e;
    if (e.next) e.next.prev = e;
  };

  // Per value: unlinearized writes that would set it, and reads that still need it. Once the
  // register holds a value no remaining write sets, every read of it left must come before
  // the next write (it could never read it later): writes wait (sound for any history).
  const writesLeft = new Map<number, number>();
  const readsLeft = new Map<number, number>();
  const bump = (m: Map<number, number>, v: number, by: number): void => { m.set(v, (m.get(v) ?? 0) + by); };
  for (const o of ops) bump(o.kind === 'write' ? writesLeft : readsLeft, o.value, 1);
  const initial = options.initial ?? 0;
  /** Only one write gives the register this value, and it is not the initial value. */
  const unique = (v: number): boolean => writesLeft.get(v) === 1 && v !== initial;

  // A write whose value nothing else gives the register (no other write, nor the initial value),
  // and which some read returned: those reads must
  // follow it before any other write, so everything that must precede the last of them (whatever
  // returned before it was invoked, but those reads) must precede the write. `lastReadAt`: the
  // latest invocation among its reads.
  const lastReadAt = new Float64Array(n).fill(-Infinity);
  {
    const latest = new Map<number, number>();
    for (const o of ops) if (o.kind === 'read') latest.set(o.value, Math.max(latest.get(o.value) ?? -Infinity, o.invoke));
    ops.forEach((o, i) => {
      if (o.kind === 'write' && unique(o.value)) lastReadAt[i] = latest.get(o.value) ?? -Infinity;
    });
  }
  /** Whether write `i` may be linearized now as far as the reads of its value go. */
  const readsCanFollow = (i: number): boolean => {
    const until = lastReadAt[i];
    if (until === -Infinity) return true;
    const v = ops[i].value;
    for (let e = head.next; e && e.time < until; e = e.next) {
      if (e.isCall || e.op === i) continue;
      const p = ops[e.op];
      if (!(p.kind === 'read' && p.value === v)) return false; // must come first, and cannot come inside its run
    }
    return true;
  };

  // A write no read saw (its value is its own): once its call is reached and writes may go,
  // it may as well go at once when no read left could still return the register's current
  // value before this write's answer. Any order with it later becomes one with it here: what
  // came between began with a write (no read of the current value fits there), which now
  // overwrites it. So it is forced, like a matching read.
  const unseen = new Uint8Array(n);
  ops.forEach((o, i) => { if (o.kind === 'write' && unique(o.value) && !readsLeft.get(o.value)) unseen[i] = 1; });
  const goesAtOnce = (i: number): boolean => {
    if (!unseen[i]) return false;
    const until = ops[i].respond;
    for (let e = head.next; e && e.time <= until; e = e.next) { // a read invoked as it answers is concurrent with it
      if (e.isCall && ops[e.op].kind === 'read' && ops[e.op].value === state) return false;
    }
    return true;
  };

  let state = initial;
  // `forced`: a read linearized as soon as it could be. If any order extends the linearized
  // prefix, one with that read next does (it changes nothing, and everything that must precede
  // it is linearized), so when it is undone the prefix itself has failed. Likewise an unseen
  // write that goes at once (goesAtOnce).
  const stack: Array<{ entry: Entry; state: number; forced: boolean }> = [];
  let deepest = { count: -1, state, pending: [] as number[] };
  const push = (e: Entry, next: number, forced: boolean): void => {
    const o = ops[e.op];
    stack.push({ entry: e, state, forced });
    state = next;
    linearized[e.op] = 1;
    hash1 ^= h1[e.op];
    hash2 ^= h2[e.op];
    bump(o.kind === 'write' ? writesLeft : readsLeft, o.value, -1);
    lift(e);
  };
  /** Undoes choices back to the last one with alternatives; its entry's successor, or undefined when none is left. */
  const backtrack = (): Entry | undefined => {
    for (;;) {
      const top = stack.pop();
      if (!top) return undefined;
      const o = ops[top.entry.op];
      state = top.state;
      linearized[top.entry.op] = 0;
      if (top.entry.op < lowest) lowest = top.entry.op;
      hash1 ^= h1[top.entry.op];
      hash2 ^= h2[top.entry.op];
      bump(o.kind === 'write' ? writesLeft : readsLeft, o.value, 1);
      unlift(top.entry);
      if (!top.forced) return top.entry.next;
    }
  };
  const key = (next: number, op: number): number | string =>
    exact ? exactKey(next, op) : stateKey(next, hash1 ^ h1[op], hash2 ^ h2[op]);

  let entry = head.next;
  while (head.next) {
    if (seen.size > maxStates) return { result: 'undecided', states: seen.size };
    let fail = false;
    if (entry!.isCall) {
      const o = ops[entry!.op];
      if (o.kind === 'read') {
        if (o.value === state) {
          const k = key(state, entry!.op);
          if (seen.has(k)) fail = true; // explored from here before, and failed
          else {
            seen.add(k);
            push(entry!, state, true);
            entry = head.next;
            continue;
          }
        }
      } else if (!((writesLeft.get(state) ?? 0) === 0 && (readsLeft.get(state) ?? 0) > 0) && readsCanFollow(entry!.op)) {
        const k = key(o.value, entry!.op);
        const forced = goesAtOnce(entry!.op);
        if (!seen.has(k)) {
          seen.add(k);
          push(entry!, o.value, forced);
          entry = head.next;
          continue;
        }
        if (forced) fail = true; // explored from here before, and failed
      }
      if (!fail) {
        entry = entry!.next;
        continue;
      }
    }
    // The return of an operation not linearized (or a prefix known to fail): whatever was
    // chosen since cannot stand.
    if (stack.length > deepest.count) {
      const pending: number[] = [];
      for (let e: Entry | undefined = head.next; e && pending.length < 12; e = e.next) if (e.isCall) pending.push(e.op);
      if (!entry!.isCall && !pending.includes(entry!.op)) pending.push(entry!.op);
      deepest = { count: stack.length, state, pending };
    }
    entry = backtrack();
    if (!entry) return violation(ops, seen.size, deepest);
  }
  return { result: 'linearizable', states: seen.size };
}

function violation(ops: readonly RegisterOp[], states: number, deepest: { count: number; state: number; pending: number[] }): Verdict {
  const shown = deepest.pending.map((i) => ops[i]);
  const explanation = `at most ${deepest.count} of ${ops.length} operations linearize; there the register holds ${deepest.state} ` +
    `and none of the ${shown.length} operations open at that point can come next without breaking the register:\n` +
    shown.map(describeOp).join('\n');
  return { result: 'violation', states, explanation, ops: shown };
}

export function describeOp(o: RegisterOp): string {
  const what = o.kind === 'write' ? `write ${o.value}` : `read -> ${o.value}`;
  const end = o.respond === Infinity ? '∞ (unknown outcome)' : o.respond.toFixed(1);
  return `  client ${o.client} ${what}  [${o.invoke.toFixed(1)}, ${end}]`;
}
