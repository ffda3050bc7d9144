/**
 * The write path's commit pipeline (LevelDB's group commit, pipelined): writes queue; one
 * round at a time takes the queue, appends its records to the memtables' logs (one append per
 * log), and applies them to the memtables once appended. Rounds overlap their appends (up to
 * PIPELINE_DEPTH) and apply and answer strictly in order. Functions over EngineState.
 */
import { performance } from 'node:perf_hooks';
import { NovaError } from '../common/errors.js';
import { WriteBatch } from '../log/write-batch.js';
import type { LogWriter } from '../logc/log-store.js';
import { Memtable } from '../memtable/memtable.js';
import { armIdle } from './background.js';
import type { WriteOptions } from './engine-options.js';
import { EngineState, type PendingWrite } from './engine-state.js';
import { degradedDrange, makeRoom } from './make-room.js';
import { countWrite } from './reorganization.js';
import type { Ticket } from './sessions.js';

/** Commit rounds whose log appends may be in flight at once (commitRound). */
const PIPELINE_DEPTH = 4;

/**
 * Queues a batch the engine owns from here on (commitRound writes its header). A write a
 * client numbered is answered from the session table instead when it is applied already
 * or in flight.
 */
export function enqueue(db: EngineState, batch: WriteBatch, options: WriteOptions): Promise<void> {
  if (db.closed) return Promise.reject(new NovaError('CLOSED', 'engine is closed'));
  if (db.failed) return Promise.reject(db.failed);
  let ticket: Ticket | undefined;
  if (options.session) {
    let entry;
    try {
      entry = db.sessions.enter(options.session);
    } catch (err) {
      return Promise.reject(err);
    }
    if ('settled' in entry) return entry.settled;
    ticket = entry.ticket;
  }
  const sync = options.sync ?? db.options.sync;
  const outcome = new Promise<void>((resolve, reject) => {
    db.queued.push({ batch, sync, ticket, resolve, reject });
    if (!db.roundScheduled) {
      db.roundScheduled = true;
      db.writeChain = db.writeChain.then(() => commitRound(db)).catch(() => undefined);
    }
  });
  return outcome;
}

/**
 * Commits every queued write: append all records, sync the logs if any asked, apply.
 *
 * Rounds are pipelined: a round's appends start while up to PIPELINE_DEPTH earlier rounds
 * still wait for theirs (a remote log costs a round trip; waiting for each in turn would cap
 * writes at one group per round trip). Sequence numbers and appends go out in round order
 * (appends to one log are applied in call order), and rounds are applied to memtables and
 * acknowledged strictly in that order. Before a memtable may need switching the pipeline
 * drains, so a memtable never retires with a round still to be applied to it.
 */
export async function commitRound(db: EngineState): Promise<void> {
  const began = performance.now();
  db.lastWriteAt = Date.now();
  db.idleDue = false;
  armIdle(db, db.options.idleCompactionMs);
  if (db.inFlight.rounds > 0 && (db.flushNeedsActives || db.inFlight.rounds >= PIPELINE_DEPTH ||
      db.memtables.fullDrange(db.options.memtableBytes - db.inFlight.bytes) >= 0 || degradedDrange(db) >= 0)) {
    await db.applied;
  }
  try {
    if (db.failed) throw db.failed;
    await makeRoom(db);
    await slowDown(db);
  } catch (err) {
    // A failed memtable switch left files half made: fail() already marked the engine.
    rejectQueued(db, err as Error);
    return;
  }
  // Writes that queued while room was made join this round, up to a size that keeps a
  // round from overfilling a memtable (LevelDB caps its groups at 1 MiB for the same reason).
  const cap = Math.min(1 << 20, db.options.memtableBytes >> 2);
  let n = 0;
  let bytes = 0;
  for (; n < db.queued.length && (n === 0 || bytes < cap); n++) bytes += db.queued[n].batch.byteSize;
  db.delay.charge(bytes, performance.now(), began);
  const group = db.queued.splice(0, n);
  if (db.queued.length === 0) db.roundScheduled = false;
  else db.writeChain = db.writeChain.then(() => commitRound(db)).catch(() => undefined);
  if (db.inFlight.rounds === 0) db.assigned = db.lastSequence;
  const first = db.assigned + 1;
  let next = first;
  const toApply: Array<{ batch: WriteBatch; first: number; home: Memtable; homeDrange: number }> = [];
  let appended: Promise<unknown>;
  try {
    // One append per log for the whole group: a remote log (LogC) then costs one round
    // trip per group, not one per write.
    const perLog = new Map<LogWriter, Buffer[]>();
    for (const w of group) {
      const firstKey = w.batch.firstKey();
      if (firstKey === undefined) continue;
      // The whole batch is one record in the log of its first key's memtable: atomic.
      // (A duplicated Drange, as Nova-LSM-R's one Drange, gives its copies batches in turn.)
      const homeDrange = db.memtables.drangeOf(firstKey);
      const home = db.memtables.pick(homeDrange);
      const log = db.logs.get(home.id)!;
      let records = perLog.get(log);
      if (!records) perLog.set(log, records = []);
      records.push(w.batch.encode(home.id, next, w.ticket?.ref));
      toApply.push({ batch: w.batch, first: next, home, homeDrange });
      next += w.batch.count;
    }
    const sync = group.some((w) => w.sync);
    appended = Promise.all([...perLog].map(([log, records]) => log.append(records, sync)));
    if (sync) db.counts.syncs += perLog.size;
  } catch (err) {
    appended = Promise.reject(err);
  }
  db.assigned = next - 1;
  db.inFlight.rounds++;
  db.inFlight.bytes += bytes;
  const previous = db.applied;
  db.applied = (async () => {
    let appendError: unknown;
    try {
      await appended;
    } catch (err) {
      appendError = err;
    }
    await previous; // rounds apply in order
    db.inFlight.rounds--;
    db.inFlight.bytes -= bytes;
    // Some records may be in a log: refuse further writes rather than guess.
    if (appendError !== undefined) return rejectGroup(db, group, db.fail('log append', appendError));
    // Appended, but the range may be another LTC's already: the outcome is the new one's to tell.
    const refused = db.env.mayAcknowledge?.();
    if (refused !== undefined) return rejectGroup(db, group, db.fail('commit', refused));
    if (db.failed) return rejectGroup(db, group, db.failed); // an earlier round failed
    try {
      const counting = db.options.activeMemtables > 1;
      const lookup = db.lookup;
      for (const { batch, first: seq0, home, homeDrange } of toApply) {
        let seq = seq0;
        batch.forEach((type, key, value) => {
          const d = db.memtables.drangeOf(key);
          const m = d === homeDrange ? home : db.memtables.current(d);
          m.add(seq++, type, key, value);
          if (m !== home) db.memtables.link(home, m);
          if (counting) countWrite(db, key);
          lookup?.wrote(key, m.id);
        });
      }
    } catch (err) {
      // The records are in the log but not all in memtables: only a reopen can tell.
      return rejectGroup(db, group, db.fail('memtable insert', err));
    }
    db.lastSequence = next - 1;
    db.counts.writes += group.length;
    db.counts.rounds++;
    for (const w of group) {
      if (w.ticket) db.sessions.applied(w.ticket);
      w.resolve();
    }
  })();
}

/**
 * Waits while the write slowdown holds this round back (write-delay.ts), adjusting its rate
 * after each flush or compaction; a finished one may end the wait at once.
 */
async function slowDown(db: EngineState): Promise<void> {
  let since: number | undefined;
  for (;;) {
    const seen = db.delaySeen;
    if (seen.steps !== db.steps) {
      const wasSlowed = db.delay.rate > 0;
      const l0 = db.levels[0].length;
      const triggers = { slowdown: db.options.l0SlowdownTrigger, stop: db.options.l0StopTrigger };
      db.delay.adjust(l0, triggers, db.counts.l0Stalls !== seen.l0Stalls);
      db.delaySeen = { steps: db.steps, l0Stalls: db.counts.l0Stalls };
      if (!wasSlowed && db.delay.rate > 0) {
        db.options.onNote?.(`writes slowed to ${Math.round(db.delay.rate / 1024)} KiB/s: L0 at ${l0} tables, its slowdown trigger ${triggers.slowdown}`);
      }
    }
    const now = performance.now();
    const ms = db.delay.waitMs(now);
    // A closing engine lets its last writes through: nothing comes after them to slow.
    if (ms <= 0 || db.failed || db.closed || db.stopping) break;
    if (since === undefined) {
      since = now;
      db.counts.delays++;
    }
    await db.wokenOr(ms);
  }
  if (since !== undefined) db.counts.delayMs += performance.now() - since;
  if (db.failed) throw db.failed;
}

export function rejectGroup(db: EngineState, group: PendingWrite[], err: Error): void {
  for (const w of group) {
    if (w.ticket) db.sessions.failed(w.ticket, err);
    w.reject(err);
  }
}

export function rejectQueued(db: EngineState, err: Error): void {
  db.roundScheduled = false;
  const group = db.queued;
  db.queued = [];
  rejectGroup(db, group, err);
}

/** Runs `work` in the write chain: after every write before it, before every write after. */
export function betweenWrites(db: EngineState, work: () => Promise<void>): Promise<void> {
  if (db.closed) return Promise.reject(new NovaError('CLOSED', 'engine is closed'));
  const run = db.writeChain.then(async () => {
    await db.applied; // no round may still be applied to a memtable retired here
    if (db.failed) throw db.failed;
    await work();
    if (db.failed) throw db.failed;
  });
  db.writeChain = run.catch(() => undefined);
  return run;
}
