/**
 * Merge instead of flush (DESIGN.md §4 "Flush or merge"; paper §4.4.2): immutable memtables of
 * one Drange that hold fewer than mergeUnderKeys unique keys are merged into one new memtable
 * with a new log, instead of written to L0. Hot keys rewritten over and over then cost memory
 * and one small log, not an L0 table and its share of every compaction below. Functions over
 * EngineState.
 *
 * Order of effects, each crash-safe: the new log is written and synced; one MANIFEST edit binds
 * it and releases the old logs (with what they said of client writes, as a flush's does); only then are the
 * old logs deleted. A crash before the edit replays the old logs (the new one, unbound, is
 * deleted at open); after it, the new one.
 */
import { ValueType, sequenceOf, typeOf } from '../common/internal-key.js';
import { compactionEntries } from '../compaction/merge-rule.js';
import { emptyEdit } from '../log/version-edit.js';
import { WriteBatch } from '../log/write-batch.js';
import { Memtable } from '../memtable/memtable.js';
import { MergingIterator } from '../sstable/merging-iterator.js';
import { EngineState } from './engine-state.js';
import { logEdit } from './version-set.js';

/**
 * The Drange `group` (a nextFlush group) may be merged in instead of flushed, or −1: merging
 * is on, every memtable of the group is immutable, listed under that one Drange alone and
 * shares no log record with a memtable outside it (twins go whole), together they hold
 * fewer than mergeUnderKeys keys, and no parked memtable among them has grown to a
 * memtable's bytes.
 */
export function mergeableDrange(db: EngineState, group: readonly Memtable[]): number {
  const n = db.options.mergeUnderKeys;
  if (n === 0) return -1;
  const set = db.memtables;
  const dranges = new Set<number>();
  for (const m of group) {
    const d = set.drangesOf(m);
    if (d.length !== 1 || set.isActive(m) || set.linkedOutside(m, group)) return -1;
    dranges.add(d[0]);
  }
  if (dranges.size !== 1) return -1;
  // A parked memtable of a memtable's bytes (versions a snapshot keeps pile up) is flushed
  // with the rest: merged memtables stay under two memtables' bytes.
  if (group.some((m) => set.isParked(m) && m.approximateBytes >= db.options.memtableBytes)) return -1;
  return uniqueKeysUnder(group, n) ? [...dranges][0] : -1;
}

/** Whether the memtables of `group` hold fewer than `n` user keys between them. */
function uniqueKeysUnder(group: readonly Memtable[], n: number): boolean {
  const keys = new Set<string>();
  for (const m of group) {
    // Entries of one key are adjacent: a memtable with as many entries as n distinct keys
    // need not be read past n of them.
    const it = m.iterator();
    for (it.first(); it.valid; it.next()) {
      keys.add(it.key.toString('latin1', 0, it.key.length - 8));
      if (keys.size >= n) return false;
    }
  }
  return true;
}

/** Merges `group` (memtables of Drange `drange`) into a new memtable and log that takes their place. */
export async function mergeGroup(db: EngineState, group: Memtable[], drange: number): Promise<void> {
  db.merging = true;
  try {
    await merge(db, group, drange);
  } finally {
    db.merging = false;
  }
}

async function merge(db: EngineState, group: Memtable[], drange: number): Promise<void> {
  const id = db.nextFile++;
  const merged = new Memtable(id, db.options.memtableBytes);
  const log = await db.env.logs.create(id);
  try {
    // What a flush would keep (flush.ts): each key's newest version and what live snapshots
    // need. Each entry is its own record: their sequence numbers are not consecutive.
    const records: Buffer[] = [];
    const entries = compactionEntries(new MergingIterator(group.map((m) => m.iterator())), { smallestSnapshot: db.smallestSnapshot(), isBottomFor: () => false });
    for (const [k, v] of entries) {
      const user = k.subarray(0, k.length - 8);
      const type = typeOf(k) as ValueType;
      merged.add(sequenceOf(k), type, user, v);
      const b = new WriteBatch();
      if (type === ValueType.Delete) b.delete(user);
      else b.put(user, v);
      records.push(b.encode(id, sequenceOf(k)));
    }
    if (records.length > 0) await log.append(records, true);
  } finally {
    await log.close();
  }
  const edit = emptyEdit();
  edit.boundLogs.push({ memtable: id, log: id });
  edit.releasedLogs.push(...group.map((m) => m.id));
  edit.sessions = db.sessions.encode();
  edit.nextFile = db.nextFile;
  await logEdit(db, edit);
  db.memtables.replaceMerged(group, drange, merged);
  db.lookup?.opened(merged);
  db.lookup?.merged(group.map((m) => m.id), id);
  db.counts.merges++;
  for (const m of group) await db.env.logs.remove(m.id);
}
