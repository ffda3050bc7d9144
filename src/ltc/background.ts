/**
 * The background: a flush loop, one step at a time, and a compaction loop running up to
 * compactionJobs jobs at once, side by side (kick); the L0 triggers that make compactions due
 * (count, scans, idle writes); and the manual flush and full compaction. Functions over
 * EngineState.
 */
import { type CompactionJob, jobFor, LEVELS, pickCompactions } from '../compaction/picker.js';
import { Postponed, runCompaction } from './compaction-job.js';
import { NoRoom } from './engine-env.js';
import { NovaError } from '../common/errors.js';
import type { TableMeta } from '../log/version-edit.js';
import { salvageTable } from '../sstable/salvage.js';
import { tableName } from './local-store.js';
import { Abandoned, EngineState, type LiveTable } from './engine-state.js';
import { installGroup, writeGroup, type WrittenGroup } from './flush-job.js';
import type { Memtable } from '../memtable/memtable.js';
import { mergeableDrange, mergeGroup } from './merge-job.js';
import { retire } from './make-room.js';

/**
 * Starts the flush loop and the compaction loop, each unless it runs or the engine failed
 * or is stopping. They run side by side, so a long compaction never holds up a flush (the
 * immutable memtable would stall writes meanwhile; LevelDB flushes between compaction
 * outputs for the same reason). Why that is safe: a flush only adds L0 tables newer than
 * anything a running compaction reads, and each removes only what it picked.
 */
/**
 * Runs `work` in the compaction loop's place: once the loop (or another such step) has ended,
 * no compaction runs until `work` does; then the loop is kicked. Under steady writes the loop
 * always has a job due: held, it starts no more, and ends.
 */
export async function inLoopPlace<T>(db: EngineState, work: () => Promise<T>): Promise<T> {
  db.holders++; // several may wait: the loop stays held until the last has had its turn
  db.pokeCompactions?.();
  try {
    while (db.compacting) await db.compacting;
    if (db.closed) throw new NovaError('CLOSED', 'engine is closed');
    db.manual = true;
    const run = work();
    db.compacting = run.then(() => 0, () => 0);
    return await run;
  } finally {
    db.holders--;
    if (db.manual) {
      db.manual = false;
      db.compacting = undefined;
    }
    kick(db);
  }
}

export function kick(db: EngineState): void {
  if (db.failed || db.stopping) return;
  if (db.flushing) db.pokeFlushes?.();
  else db.flushing = flushLoop(db);
  if (db.compacting) db.pokeCompactions?.();
  else db.compacting = compactionLoop(db);
}

/** Both loops while either runs; resolves with the steps they ran. */
export function background(db: EngineState): Promise<number> | undefined {
  if (!db.flushing && !db.compacting) return undefined;
  return Promise.all([db.flushing ?? 0, db.compacting ?? 0]).then(([f, c]) => f + c);
}

/**
 * The flush loop: flushes the groups of immutable memtables that are ready, oldest first, up
 * to α at once — their tables built and stored side by side (each may go to another StoC),
 * and installed one after another in the order they were picked, so a Drange's L0 tables
 * stay newest last — or merges a group into a new memtable instead (merge-job.ts) while no
 * flush is under way. Ends once nothing is ready; resolves with the groups it handled.
 */
export async function flushLoop(db: EngineState): Promise<number> {
  const queue: Array<{ group: Memtable[]; written: Promise<WrittenGroup> }> = [];
  let n = 0;
  try {
    while (!db.stopping && !db.failed) {
      while (queue.length < Math.max(1, db.options.activeMemtables)) {
        const next = await pickFlush(db, queue.length === 0);
        if (next === undefined) break;
        if (next === 'merged') {
          n++;
          db.steps++;
          db.wake();
          continue;
        }
        queue.push(next);
        db.counts.maxFlushesAtOnce = Math.max(db.counts.maxFlushesAtOnce, queue.length);
      }
      const head = queue[0];
      if (!head) break;
      // Until its tables are stored, a group that becomes ready meanwhile (kick) starts too.
      const stored = await Promise.race([head.written.then(() => true, () => true),
        new Promise<false>((resolve) => { db.pokeFlushes = () => resolve(false); })]);
      db.pokeFlushes = undefined;
      if (!stored) continue;
      queue.shift();
      try {
        await installGroup(db, head.group, await head.written);
      } finally {
        for (const m of head.group) db.flushingNow.delete(m);
      }
      if (db.noRoom) db.options.onNote?.('a flush found room on the StoCs again; writes go on');
      db.noRoom = undefined;
      kick(db); // the new L0 table may make a compaction due
      n++;
      db.steps++;
      db.wake();
    }
  } catch (err) {
    if (err instanceof NoRoom) waitForRoom(db, err);
    else db.fail('flush or compaction', err);
  } finally {
    // Groups written but not installed: their memtables flush again later; their tables go,
    // before the loop ends (an engine closing waits for it).
    for (const { group, written } of queue.splice(0)) {
      for (const m of group) db.flushingNow.delete(m);
      await written.then((w) => Promise.all(w.added.map((t) => db.store.deleteTable(t.meta.file))), () => undefined).catch(() => undefined);
    }
  }
  db.flushing = undefined;
  // A loop that found nothing to do wakes no stalled writer while the other loop runs:
  // the writer would only kick it again, a busy loop that starves the other of the turns
  // it needs. Once neither runs, writers must learn it (nothing will make room).
  if (n > 0 || !background(db)) db.wake();
  return n;
}

/**
 * Starts the flush of the oldest group ready beside those under way (its tables written in
 * the background), or merges it instead when it is one Drange's with few keys and `alone`;
 * undefined when none is ready (or a merge must wait for the flushes under way).
 */
async function pickFlush(db: EngineState, alone: boolean): Promise<{ group: Memtable[]; written: Promise<WrittenGroup> } | 'merged' | undefined> {
  if (Date.now() < db.flushesWaitUntil) {
    armPostponed(db);
    return undefined;
  }
  const group = db.memtables.nextFlush(db.flushingAll, db.flushingNow);
  if (group.length === 0) return undefined;
  if (group.some((m) => db.memtables.isActive(m))) {
    db.flushNeedsActives = true; // the write path retires them, then kicks
    db.wake();
    return undefined;
  }
  const drange = db.flushingAll ? -1 : mergeableDrange(db, group);
  if (drange >= 0) {
    if (!alone) return undefined;
    await mergeGroup(db, group, drange);
    return 'merged';
  }
  for (const m of group) db.flushingNow.add(m);
  const written = writeGroup(db, group);
  written.catch(() => undefined); // its failure is met when its turn to be installed comes
  return { group, written };
}

/**
 * Runs the jobs due, up to compactionJobs at once (jobs that share no table: picker.ts
 * pickCompactions). L0, once due, is picked whole, cut into jobs; those beyond the limit wait
 * here, their tables held, and start as others end. Picks again when nothing waits and a job
 * ends or a flush kicks; ends once none runs and none is due. Resolves with the jobs run. A
 * job that fails fails the engine: no job starts after it, and the loop ends once those
 * running have ended.
 */
export async function compactionLoop(db: EngineState): Promise<number> {
  await Promise.resolve(); // kick sets db.compacting to this loop before the loop may clear it
  const running = new Set<Promise<void>>();
  const waiting: CompactionJob[] = [];
  const busy = new Set<number>(); // tables of the jobs running and waiting
  let n = 0;
  for (;;) {
    if (db.stopping || db.failed || db.held) {
      waiting.length = 0;
    } else {
      const room = db.options.compactionJobs - running.size;
      // No job takes a damaged table: L0's jobs group overlapping tables, so nothing newer passes one either.
      const blocked = db.damaged.size === 0 ? busy : new Set([...busy, ...db.damaged.keys()]);
      if (waiting.length === 0) for (const job of pickNow(db, blocked, room)) waiting.push(hold(job));
      while (waiting.length > 0 && running.size < db.options.compactionJobs) running.add(start(waiting.shift()!));
    }
    if (running.size === 0) break;
    await Promise.race([...running, new Promise<void>((resolve) => { db.pokeCompactions = resolve; })]);
    db.pokeCompactions = undefined;
  }
  db.compacting = undefined;
  if (n > 0 || !background(db)) db.wake(); // as in loop()
  return n;

  function hold(job: CompactionJob): CompactionJob {
    for (const t of [...job.inputs, ...job.overlapping]) busy.add(t.file);
    return job;
  }

  function start(job: CompactionJob): Promise<void> {
    const tables = [...job.inputs, ...job.overlapping].map((t) => t.file);
    const c = db.counts;
    c.jobsStarted++;
    c.jobsInParallel += running.size + 1;
    c.maxJobsInParallel = Math.max(c.maxJobsInParallel, running.size + 1);
    if (job.level === 0 && db.idleDue && job.inputs.length < db.options.l0Trigger) c.idle++;
    const p: Promise<void> = runCompaction(db, job).then(() => {
      n++;
      db.steps++;
    }, async (err: unknown) => {
      if (err instanceof Postponed || err instanceof NoRoom) postpone(db, err);
      else if ((err as NovaError).code === 'CORRUPTION' && await findDamaged(db, [...job.inputs, ...job.overlapping])) return;
      else if (!(err instanceof Abandoned)) db.fail('compaction', err);
    }).finally(() => {
      for (const f of tables) busy.delete(f);
      running.delete(p);
      db.wake();
    });
    return p;
  }
}

/** How long compactions wait after one could not read its inputs. */
const POSTPONE_MS = 1000;

/** No compaction starts for POSTPONE_MS; then the loop is kicked again. */
function postpone(db: EngineState, err: NovaError): void {
  db.warn(`${err.message}; compactions wait ${POSTPONE_MS} ms`);
  db.compactionsWaitUntil = Date.now() + POSTPONE_MS;
  armPostponed(db);
}

/** How long flushes wait after a table found no StoC with room. */
const NO_ROOM_WAIT_MS = 1000;

/** No flush starts for NO_ROOM_WAIT_MS; writes that must wait for one are refused meanwhile (make-room.ts). */
function waitForRoom(db: EngineState, err: NoRoom): void {
  if (!db.noRoom) db.warn(`${err.message}; flushes wait ${NO_ROOM_WAIT_MS} ms, and writes that need one are refused`);
  db.noRoom = err;
  db.flushesWaitUntil = Date.now() + NO_ROOM_WAIT_MS;
  armPostponed(db);
}

/** A kick once the waits are over (timers may fire a little early: then it arms again). */
function armPostponed(db: EngineState): void {
  if (db.postponeTimer) return;
  db.postponeTimer = setTimeout(() => {
    db.postponeTimer = undefined;
    kick(db);
  }, Math.max(1, Math.max(db.compactionsWaitUntil, db.flushesWaitUntil) - Date.now() + 1));
  db.postponeTimer.unref();
}

/** The jobs that may start now beside those holding `busy` (pickCompactions). */
export function pickNow(db: EngineState, busy: ReadonlySet<number>, room: number): CompactionJob[] {
  if (Date.now() < db.compactionsWaitUntil) {
    armPostponed(db);
    return [];
  }
  const levels = { l0Trigger: l0TriggerNow(db), l1Bytes: db.options.l1Bytes, memtableBytes: db.options.memtableBytes };
  return pickCompactions(db.levels.map((l) => l.map((t) => t.meta)), levels, db.compactCursor, busy, room);
}

/**
 * 1 while writes have paused (idleCompactionMs); else l0ScanTrigger once the oldest L0
 * table has served its allowance of scans; else l0Trigger.
 */
export function l0TriggerNow(db: EngineState): number {
  if (db.idleDue) return 1;
  return l0ScannedEnough(db) ? db.options.l0ScanTrigger : db.options.l0Trigger;
}

/**
 * Checks for a pause in writes `ms` from now. One timer at a time: a commit round only
 * arms it when none is set, and the check re-arms it for the rest of the pause when writes
 * came meanwhile, so a busy write path costs a Date.now() per round, not a timer.
 */
export function armIdle(db: EngineState, ms: number): void {
  if (db.idleTimer || db.options.idleCompactionMs === 0 || db.closed) return;
  db.idleTimer = setTimeout(() => {
    db.idleTimer = undefined;
    const left = db.lastWriteAt + db.options.idleCompactionMs - Date.now();
    if (left > 0) return armIdle(db, left);
    // Until the next write. The compaction loop takes L0 now, or next if it is running;
    // a memtable whose flush ends during the pause kicks it again (flushLoop).
    db.idleDue = true;
    if (db.levels[0].length > 0) kick(db);
  }, ms);
  db.idleTimer.unref();
}

/** Whether the oldest L0 table (the most scanned) has served its allowance of scans. */
export function l0ScannedEnough(db: EngineState): boolean {
  const oldest = db.levels[0][0];
  return oldest !== undefined && db.scans - (oldest.scansAtAdd ?? 0) >= scanAllowance(oldest);
}

/**
 * Counts a scan; once the oldest L0 table's allowance is used up, L0 is due at
 * l0ScanTrigger tables: start the compaction loop unless it runs (then it picks the job
 * next). Not only on the scan that crosses: that one may come while the loop is ending.
 */
export function countScan(db: EngineState): void {
  db.scans++;
  if (!db.compacting && db.levels[0].length >= db.options.l0ScanTrigger && l0ScannedEnough(db)) kick(db);
}

export async function flushAll(db: EngineState): Promise<void> {
  for (let d = 0; d < db.memtables.dranges; d++) {
    if (db.memtables.actives(d).some((m) => m.entries > 0)) await retire(db, d, false);
  }
  // Until a background run finds nothing to do (one may be under way already). A manual
  // compaction in the compaction loop's place is not waited for: it may take minutes, and
  // a shutdown flushes (LtcServer.close) before its close stops that compaction.
  db.flushingAll = true; // parked memtables too, and nothing merged
  try {
    for (;;) {
      kick(db);
      const running = db.manual ? db.flushing : background(db);
      if (!running || (await running) === 0) break;
    }
  } finally {
    db.flushingAll = false;
  }
  // Memtables left because no StoC took their tables: not flushed, and the caller must know.
  if (db.noRoom && db.memtables.all().some((m) => m.entries > 0)) throw db.noRoom;
}

/**
 * Every level above the deepest that holds tables (L1 at least: L0's tables may overlap),
 * merged down one level at a time.
 */
export async function compactLevels(db: EngineState): Promise<void> {
  let bottom = LEVELS - 1;
  while (bottom > 1 && db.levels[bottom].length === 0) bottom--;
  // The L0 tables there are now; those flushed meanwhile are newer and stay in L0.
  let l0 = db.levels[0].length > 0;
  for (let level = 0; level < bottom; level++) {
    while (level === 0 ? l0 : db.levels[level].length > 0) {
      if (db.failed) throw db.failed;
      if (db.closed) return; // between jobs: each one is whole in the MANIFEST
      // L0's tables may overlap one another: all at once. A sorted level: its first table,
      // the same size of job as a background one.
      l0 = false;
      const inputs = level === 0 ? [...db.levels[0]] : [db.levels[level][0]];
      await runCompaction(db, jobFor(db.levels.map((l) => l.map((t) => t.meta)), level, inputs.map((t) => t.meta)));
      db.steps++;
      db.wake(); // writers stalled on L0 may go on
    }
  }
}

/** Scans an L0 table may serve before it makes L0 due at l0ScanTrigger (LevelDB: allowed_seeks). */
export function scanAllowance(t: LiveTable): number {
  return Math.max(100, Math.floor(t.meta.size / 16384));
}

/**
 * After a compaction failed with CORRUPTION: reads each of its tables as salvage would and
 * marks those with a block no copy of which reads (EngineState.markDamaged). True if any was:
 * the range then serves on, no compaction taking a damaged table until `nova repair`, instead
 * of failing.
 */
async function findDamaged(db: EngineState, tables: readonly TableMeta[]): Promise<boolean> {
  let found = false;
  for (const t of tables) {
    try {
      const s = salvageTable(await db.store.readTable(t.file, t.fragments, true), tableName(t.file));
      const why = s.unreadable ?? s.lost[0]?.why ?? s.filterDamaged;
      if (why === undefined) continue;
      db.markDamaged(t.file, why);
      found = true;
    } catch {
      // Out of reach now: not known to be damaged.
    }
  }
  return found;
}
