/**
 * `nova repair RANGE` (doc/decisions/salvage.md; LevelDB's RepairDB is the anchor): every table
 * of the range is read, each copy tried; a table with a block no copy of which reads keeps the
 * entries of the blocks that do (sstable/salvage.ts), and the rest is reported lost with the
 * keys it may have held. A table whose index does not read is lost whole. The tree stays
 * consistent: a salvaged table of L1 or below is stored again at its level (its keys are
 * within the old ones, so the level stays sorted); L0 is merged into L1 with the salvaged
 * bytes in place of the damaged ones, since an L0 table stored again under a new number would
 * pass newer ones. Sequence numbers are kept, so what was lost may read as an older version
 * from a deeper level, or as nothing. Functions over EngineState.
 */
import { NovaError } from '../common/errors.js';
import { userKeyOf } from '../common/internal-key.js';
import { printable } from '../common/printable.js';
import { emptyEdit } from '../log/version-edit.js';
import { salvageTable } from '../sstable/salvage.js';
import { TableBuilder, type BuiltTable } from '../sstable/table-builder.js';
import type { EngineState, LiveTable } from './engine-state.js';
import { tableName } from './local-store.js';
import { mergeAllL0, storeAgain } from './repair.js';
import { installTables } from './version-set.js';

/** The keys shown of a lost span. */
const KEY_SHOWN = 60;
/** Lost spans named per table (the count is always whole). */
const SPANS_NAMED = 20;

export interface SalvagedTable {
  file: number;
  level: number;
  /** Entries the MANIFEST gave it, and those kept. */
  entries: number;
  kept: number;
  blocks: number;
  blocksLost: number;
  /** The user keys each lost block may have held (`keys`), where it was, and why it did not read. */
  lost: Array<{ keys: string; offset: number; why: string }>;
  /** Set when nothing of it could be found (its index or footer is damaged). */
  unreadable?: string;
}

export interface SalvageReport {
  tablesChecked: number;
  bytesRead: number;
  /** Tables with damage, and what was made of each. */
  salvaged: SalvagedTable[];
  /** Entries lost in all (those the damaged tables had, less those kept). */
  entriesLost: number;
  /** L0 tables merged into L1 to put salvaged L0 tables back in order. */
  l0Merged: number;
}

/**
 * Reads every table of the tree and salvages the damaged ones; the caller holds the
 * compaction loop's place. `stop` is asked between tables (the range being let go).
 */
export async function salvageRange(db: EngineState, stop: () => boolean = () => false): Promise<SalvageReport> {
  const report: SalvageReport = { tablesChecked: 0, bytesRead: 0, salvaged: [], entriesLost: 0, l0Merged: 0 };
  const instead = new Map<number, Buffer>(); // L0 tables' salvaged bytes
  const restore: Array<{ level: number; t: LiveTable; built?: BuiltTable }> = [];
  for (let level = 0; level < db.levels.length; level++) {
    for (const t of [...db.levels[level]]) {
      if (db.failed) throw db.failed;
      if (stop() || db.stopping) throw new NovaError('UNAVAILABLE', 'repair stopped: the range is being let go; run it again where the range opens next');
      let bytes: Buffer;
      try {
        bytes = t.reader.ownBytes() ?? await db.store.readTable(t.meta.file, t.meta.fragments, true);
      } catch (err) {
        // Out of reach is not damage: nothing may be dropped for a StoC that is only down.
        throw new NovaError((err as NovaError).code ?? 'UNAVAILABLE', `repair stopped at table ${t.meta.file} of level ${level}: ${(err as Error).message}; ` +
          'start the StoCs that are down (or remove those gone for good with nova stoc remove --dead), then repair again');
      }
      report.tablesChecked++;
      report.bytesRead += bytes.length;
      const s = salvageTable(bytes, tableName(t.meta.file));
      // Written again also when only its filter is damaged, or it stands in for a table whose metadata did not read at open.
      if (s.lost.length === 0 && s.unreadable === undefined && s.filterDamaged === undefined && !t.reader.damaged && !db.damaged.has(t.meta.file)) continue;
      const built = s.entries.length > 0 ? build(s.entries) : undefined;
      const kept = s.entries.length;
      report.entriesLost += Math.max(0, t.meta.entries - kept);
      report.salvaged.push({
        file: t.meta.file, level, entries: t.meta.entries, kept, blocks: s.blocks, blocksLost: s.lost.length,
        lost: s.lost.length === 0
          ? (s.unreadable !== undefined ? [{ keys: `${shown(t.meta.smallest)} to ${shown(t.meta.largest)}`, offset: 0, why: s.unreadable }] : [])
          : s.lost.slice(0, SPANS_NAMED).map((b) => ({
            keys: `${b.after ? `after ${shown(b.after)}` : `from ${shown(t.meta.smallest)}`}, up to ${shown(b.upTo)}`, offset: b.offset, why: b.why,
          })),
        ...(s.unreadable !== undefined ? { unreadable: s.unreadable } : {}),
      });
      if (level === 0) instead.set(t.meta.file, built?.bytes ?? new TableBuilder().finish().bytes);
      else restore.push({ level, t, built });
    }
  }
  for (const { level, t, built } of restore) {
    if (built) await storeAgain(db, level, t, built);
    else {
      // Nothing of it read: it leaves the tree.
      const edit = emptyEdit();
      edit.removed.push({ level, file: t.meta.file });
      await installTables(db, edit, level, [], new Set([t.meta.file]));
      await db.store.deleteTable(t.meta.file);
    }
  }
  if (instead.size > 0) report.l0Merged = await mergeAllL0(db, instead);
  db.damaged.clear();
  return report;
}

function build(entries: Array<[Buffer, Buffer]>): BuiltTable {
  const b = new TableBuilder();
  for (const [k, v] of entries) b.add(k, v);
  return b.finish();
}

function shown(internalKey: Buffer): string {
  return printable(userKeyOf(internalKey), KEY_SHOWN);
}
