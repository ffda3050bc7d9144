/**
 * Where to split a range by default (`nova range split` without `--at`): at the median key of
 * its load. Recent writes (the memtables' keys) stand for the load; without enough of them,
 * the data does: the tables' first keys weighted by their sizes.
 */
import { compareBytes } from '../common/internal-key.js';

/** Keys of recent writes below this many say too little; the tables decide. */
export const MIN_WRITE_SAMPLES = 64;

export interface TableSpan {
  /** The table's first user key, and its bytes. */
  smallest: Buffer;
  size: number;
}

const cmp = (a: Buffer, b: Buffer): number => compareBytes(a, 0, a.length, b, 0, b.length);

/**
 * The median of `writes` (user keys, any order), or else the key at which the tables' bytes,
 * in key order, pass half. Only keys after `start` and before `end` qualify (a range cannot
 * split at its first key, and may still hold keys it gave away). Undefined if there is none.
 */
export function splitKey(writes: Buffer[], tables: TableSpan[], start: Buffer, end?: Buffer): Buffer | undefined {
  const after = (k: Buffer): boolean => cmp(k, start) > 0 && (end === undefined || cmp(k, end) < 0);
  const keys = writes.filter(after).sort(cmp);
  if (keys.length >= MIN_WRITE_SAMPLES) return keys[keys.length >> 1];
  const spans = tables.filter((t) => after(t.smallest)).sort((a, b) => cmp(a.smallest, b.smallest));
  const total = spans.reduce((n, t) => n + t.size, 0);
  let seen = 0;
  for (const t of spans) {
    seen += t.size;
    if (seen * 2 >= total) return t.smallest;
  }
  return keys[keys.length >> 1];
}
