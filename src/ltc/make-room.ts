/**
 * Making room for writes (LevelDB MakeRoomForWrite): full active memtables are retired to
 * wait for their flush, with fresh memtables and logs bound in the MANIFEST first; when δ
 * memtables exist or L0 is at its stop trigger, writes stall until the background catches up.
 * Functions over EngineState.
 */
import { performance } from 'node:perf_hooks';
import { NovaError } from '../common/errors.js';
import { emptyEdit, type VersionEdit } from '../log/version-edit.js';
import { Memtable } from '../memtable/memtable.js';
import { background, kick } from './background.js';
import { copiesOf, drangeBounds } from './dranges.js';
import { installLayout, nextLayout } from './reorganization.js';
import { EngineState, type SpareLog } from './engine-state.js';
import { logEdit } from './version-set.js';

/** Write stalls at least this long are reported to `onNote`, with their cause. */
const STALL_NOTE_MS = 100;

/**
 * Retires full active memtables (LevelDB MakeRoomForWrite). When δ memtables exist or L0
 * is at its stop trigger, waits for the background to flush or compact: a write stall.
 */
/** What makeRoom sees before a commit round. */
export interface RoomState {
  /** The oldest immutable memtable shares records with active ones (a batch across Dranges). */
  flushNeedsActives: boolean;
  /** A Drange whose active memtable is full, or -1. */
  fullDrange: number;
  memtables: number;
  /** δ: memtables allowed in all. */
  memtableLimit: number;
  l0Tables: number;
  l0StopTrigger: number;
}

export type RoomStep =
  | { kind: 'retire-with-actives' }
  | { kind: 'room' }
  | { kind: 'retire'; drange: number }
  | { kind: 'stall'; onL0: boolean; cause: string };

/**
 * The write path's next step before a round (LevelDB MakeRoomForWrite's rule), pure
 * (test/testdata/stalls.txt): retire the actives an immutable memtable shares records with;
 * else go on if no active memtable is full; else retire the full one if δ and L0 leave room;
 * else stall, on L0 if it is at its stop trigger, else waiting for a flush.
 */
export function roomStep(s: RoomState): RoomStep {
  if (s.flushNeedsActives) return { kind: 'retire-with-actives' };
  if (s.fullDrange < 0) return { kind: 'room' };
  if (s.memtables < s.memtableLimit && s.l0Tables < s.l0StopTrigger) return { kind: 'retire', drange: s.fullDrange };
  return s.l0Tables >= s.l0StopTrigger
    ? { kind: 'stall', onL0: true, cause: `L0 at ${s.l0Tables} tables, its stop trigger` }
    : { kind: 'stall', onL0: false, cause: `${s.memtables} memtables, waiting for a flush` };
}

export async function makeRoom(db: EngineState): Promise<void> {
  let stalledAt: number | undefined;
  let stallCause = '';
  for (;;) {
    if (db.failed) throw db.failed;
    const step = roomStep({
      flushNeedsActives: db.flushNeedsActives, fullDrange: db.memtables.fullDrange(db.options.memtableBytes),
      memtables: db.memtables.size, memtableLimit: db.memtableLimit, l0Tables: db.levels[0].length, l0StopTrigger: db.options.l0StopTrigger,
    });
    if (step.kind === 'retire-with-actives') {
      db.flushNeedsActives = false;
      for (const m of db.memtables.nextFlush(false, db.flushingNow)) {
        const d = db.memtables.drangeOfActive(m);
        if (d >= 0) await retire(db, d, false);
      }
      kick(db);
      continue;
    }
    if (step.kind === 'room') {
      // A log that lost a replica a StoC up could replace: its Drange moves to a new log (R
      // replicas), and the old one goes with its memtable's flush. Never a stall for this.
      const d = degradedDrange(db);
      if (d < 0) break;
      db.degradedRetireAt = Date.now();
      await retire(db, d, false);
      kick(db);
      continue;
    }
    if (step.kind === 'retire') {
      await retire(db, step.drange, true);
      kick(db);
      continue;
    }
    if (stalledAt === undefined) {
      stalledAt = performance.now();
      if (step.onL0) db.counts.l0Stalls++;
      stallCause = step.cause;
    }
    // No StoC has room for the flush this write waits for: refused, naming why (it retries).
    if (db.noRoom) throw db.noRoom;
    if (db.held && !db.stopping && !db.failed) {
      // The compaction loop stepped aside for an evacuation step, which kicks it when done;
      // kicking it now would only start a loop that ends at once, and wake us: a busy loop.
      await new Promise<void>((resolve) => db.waiters.push(resolve));
      continue;
    }
    kick(db);
    if (!background(db) && db.postponeTimer && !db.failed && !db.stopping) {
      // Compactions wait for a StoC to come back (background.ts postpone): so does the write.
      await new Promise((resolve) => setTimeout(resolve, Math.max(1, db.compactionsWaitUntil - Date.now() + 2)));
      continue;
    }
    if (!background(db)) {
      throw db.failed ?? new NovaError('CLOSED', 'engine is closing: no room for the write');
    }
    const steps = db.steps;
    await new Promise<void>((resolve) => db.waiters.push(resolve));
    if (db.steps === steps && !background(db) && !db.flushNeedsActives && !db.failed && !db.postponeTimer) {
      // Not expected: a full engine always has a flush or a compaction to run.
      throw new NovaError('BAD_ARGUMENT', 'no room for the write and nothing to flush or compact; check l0Trigger/l0StopTrigger');
    }
  }
  if (stalledAt !== undefined) {
    const ms = performance.now() - stalledAt;
    db.counts.stalls++;
    db.counts.stallMs += ms;
    // Where stalls fall (a load, a run) is what tuning needs; only hosts that log get it.
    if (ms >= STALL_NOTE_MS) db.options.onNote?.(`writes stalled ${Math.round(ms)} ms (${stallCause})`);
  }
}

/** Least time between two retires for a log short of replicas: a new log may be short too (a StoC that answers but fails). */
const DEGRADED_RETIRE_MS = 1000;

/**
 * A Drange with an active memtable that holds writes on a log short of replicas a StoC up could
 * give it (LogWriter.degraded), to retire now; -1 if none, if δ memtables exist, or if one was
 * retired for this less than DEGRADED_RETIRE_MS ago.
 */
export function degradedDrange(db: EngineState): number {
  if (db.memtables.size >= db.memtableLimit || Date.now() - db.degradedRetireAt < DEGRADED_RETIRE_MS) return -1;
  // Asked every commit round: the logs are scanned first, and Dranges only once one is short.
  let short = false;
  for (const log of db.logs.values()) if (log.degraded) short = true;
  if (!short) return -1;
  for (let d = 0; d < db.memtables.dranges; d++) {
    if (db.memtables.actives(d).some((m) => m.entries > 0 && db.logs.get(m.id)?.degraded)) return d;
  }
  return -1;
}

/**
 * Gives Drange `d` fresh active memtables and logs (bound in the MANIFEST before any write
 * goes to them); the old ones wait for their flush. With α > 1 and no Dranges yet, a full
 * memtable (`learn`) cuts the key space into Dranges from a sample of its keys instead.
 */
export async function retire(db: EngineState, d: number, learn: boolean): Promise<void> {
  try {
    await switchMemtables(db, d, learn);
  } catch (err) {
    throw db.fail('memtable switch', err); // a log may exist unbound, or an edit be half written
  }
  prepareSpareLog(db);
}

/**
 * Starts making the log the next memtable switch takes (newMemtable): making a log on its
 * StoCs is the longest part of a switch, and writes wait for the switch. Numbered now, so
 * memtables still get numbers in the order they start taking writes (the lookup index relies
 * on it). A crash leaves it unbound and empty; the next open deletes it (obsolete-files.ts).
 */
function prepareSpareLog(db: EngineState): void {
  if (!db.env.logs.makeAhead || db.spareLog || db.closed || db.stopping || db.failed) return;
  const id = db.nextFile++;
  db.spareLog = db.env.logs.create(id).then((log) => ({ id, log }), () => undefined);
}

/** The spare log, now no longer the range's to take (claimed before the wait, so no two callers get it). */
function claimSpareLog(db: EngineState): Promise<SpareLog | undefined> | undefined {
  const spare = db.spareLog;
  db.spareLog = undefined;
  return spare;
}

/** Closes and removes the spare log, if any, and waits for those dropped before (close, flushMemtables). Never throws. */
export async function dropSpareLog(db: EngineState): Promise<void> {
  const s = await claimSpareLog(db);
  if (s) discard(db, s);
  await db.spareDrops;
}

/** The spare log (prepareSpareLog), unless it lost replicas or one is on a StoC new logs avoid or lost its connection. */
async function takeSpareLog(db: EngineState): Promise<SpareLog | undefined> {
  const s = await claimSpareLog(db);
  if (!s || (!s.log.degraded && !s.log.misplaced)) return s;
  discard(db, s);
  return undefined;
}

/** Closes and removes `s` in the background: the switch that found it unfit must not wait on its StoCs. */
function discard(db: EngineState, s: SpareLog): void {
  const gone = s.log.close().catch(() => undefined)
    .then(() => db.env.logs.remove(s.id)).catch(() => undefined); // else the next open's sweep removes it
  db.spareDrops = Promise.all([db.spareDrops, gone]).then(() => undefined);
}

export async function switchMemtables(db: EngineState, d: number, learn: boolean): Promise<void> {
  const set = db.memtables;
  const old = set.actives(d);
  const edit = emptyEdit();
  const full = old.reduce((a, b) => (b.approximateBytes > a.approximateBytes ? b : a));
  const next = learn ? nextLayout(db, full) : undefined;
  if (!next) {
    // A duplicated Drange's copies retire together (memtable-set.ts).
    const fresh: Memtable[] = [];
    for (let i = 0; i < old.length; i++) fresh.push(await newMemtable(db, edit));
    edit.nextFile = db.nextFile;
    acknowledgeAfter(db, logEdit(db, edit));
    set.retire(d, fresh);
    for (const m of old) await closeLog(db, m);
    return;
  }
  // New Dranges: those whose interval or copies are not one of today's get fresh memtables,
  // and so does the full one's; the others keep theirs (memtable-set.ts reorganize).
  const bounds = drangeBounds(next.layout);
  const copies = copiesOf(next.layout);
  const fresh = new Map<number, Memtable[]>();
  const same = set.unchanged(bounds, copies);
  for (let j = 0; j <= bounds.length; j++) {
    if (same[j] >= 0 && same[j] !== d) continue;
    const ms: Memtable[] = [];
    for (let i = 0; i < copies[j]; i++) ms.push(await newMemtable(db, edit));
    fresh.set(j, ms);
  }
  edit.dranges = bounds;
  edit.tranges = next.layout.tranges;
  if (next.layout.copies) edit.copies = next.layout.copies;
  edit.nextFile = db.nextFile;
  await logEdit(db, edit);
  const kept = new Set(same.flatMap((i, j) => (i >= 0 && !fresh.has(j) ? set.actives(i) : [])));
  const retired = set.activeAll().filter((m) => !kept.has(m));
  set.reorganize(bounds, fresh);
  installLayout(db, next);
  for (const m of retired) await closeLog(db, m);
}

/**
 * Lets writes go to the new logs while the MANIFEST edit that binds them is appended: rounds
 * are acknowledged in order after `binding` (commit.ts), so none is acknowledged from a log a
 * crash would leave unbound (the next open deletes such a log, unread). A failed binding fails
 * the engine, as a failed switch does.
 */
function acknowledgeAfter(db: EngineState, binding: Promise<void>): void {
  const previous = db.applied;
  db.applied = (async () => {
    await previous;
    try {
      await binding;
    } catch (err) {
      db.fail('memtable switch', err);
    }
  })();
}

/** Closes the log of memtable `m`, which takes no more writes. */
async function closeLog(db: EngineState, m: Memtable): Promise<void> {
  const log = db.logs.get(m.id)!;
  db.logs.delete(m.id);
  await log.close();
}

/** A memtable with a new, empty log file, its binding added to `edit`. */
export async function newMemtable(db: EngineState, edit: VersionEdit): Promise<Memtable> {
  const spare = await takeSpareLog(db);
  const id = spare?.id ?? db.nextFile++;
  // The log exists before the MANIFEST names it, so recovery can tell an empty log from a lost one.
  db.logs.set(id, spare?.log ?? await db.env.logs.create(id));
  edit.boundLogs.push({ memtable: id, log: id });
  const m = new Memtable(id, db.options.memtableBytes);
  db.lookup?.opened(m);
  return m;
}
