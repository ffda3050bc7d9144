/**
 * What a compaction or a flush keeps of the versions it merges, as a pure function (LevelDB
 * db/db_impl.cc DoCompactionWork). Run by the LTC and by a StoC alike.
 */
import { TRAILER_BYTES, ValueType, compareBytes, compareInternalKeys, sequenceOf } from '../common/internal-key.js';
import type { InternalIterator } from '../sstable/merging-iterator.js';

function userKey(ikey: Buffer): Buffer {
  return ikey.subarray(0, ikey.length - TRAILER_BYTES);
}

export interface MergeRule {
  /** Versions newer than this are kept as they are: some snapshot or the present may see them. */
  smallestSnapshot: number;
  /** True if no level deeper than the output can hold `userKey` (a tombstone may then go). */
  isBottomFor: (userKey: Buffer) => boolean;
}

/**
 * Merges `it` (all inputs, in internal-key order) and yields what must survive:
 *  - for each user key, every version with a sequence above `smallestSnapshot`, plus the
 *    newest version at or below it (what the oldest snapshot sees); older ones go;
 *  - a delete that is that newest-visible version goes too when no deeper level may hold
 *    the key (nothing older could be uncovered).
 * Identical internal keys (the same write recovered twice) are yielded once. Yields the
 * iterator's views in one reused pair: use each entry before asking for the next.
 */
export function* compactionEntries(it: InternalIterator, rule: MergeRule): Generator<[Buffer, Buffer]> {
  // The previous internal key, copied into a reused buffer: no allocation per entry.
  let last = Buffer.allocUnsafe(256);
  let lastLen = -1; // none yet
  let seenVisible = false; // a version <= smallestSnapshot of the current user key was handled
  const pair: [Buffer, Buffer] = [last, last];
  for (it.first(); it.valid; it.next()) {
    const k = it.key;
    const userLen = k.length - TRAILER_BYTES;
    if (lastLen >= 0 && compareBytes(last, 0, lastLen - TRAILER_BYTES, k, 0, userLen) === 0) {
      if (compareInternalKeys(last.subarray(0, lastLen), k) === 0) continue;
    } else {
      seenVisible = false; // a new user key
    }
    if (k.length > last.length) last = Buffer.allocUnsafe(k.length * 2);
    last.set(k, 0);
    lastLen = k.length;
    const seq = sequenceOf(k);
    if (seq <= rule.smallestSnapshot) {
      if (seenVisible) continue; // shadowed for every reader
      seenVisible = true;
      if (k[userLen] === ValueType.Delete && rule.isBottomFor(userKey(k))) continue;
    }
    pair[0] = k;
    pair[1] = it.value;
    yield pair;
  }
}
