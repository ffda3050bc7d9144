/**
 * How a table's bytes are cut over StoCs (DESIGN.md §3): its data blocks into ρ fragments of
 * about equal size, cut only between blocks (so a block is read from one StoC), and its
 * metadata — filter, index and footer — as one fragment more, on a StoC of its own, so a
 * reader can fetch a table's index and filter without touching its data.
 *
 * A fragment is the whole of file `r<range>-<table>.sst` on its StoC, so no two fragments of a
 * table share a StoC: given only ρ StoCs, the metadata travels with the last data fragment.
 * A table's bytes are its fragments in offset order, however it was cut.
 */
import { NovaError } from '../common/errors.js';
import { readFooter } from '../sstable/format.js';
import { TableReader } from '../sstable/table-reader.js';
import type { Fragment } from '../log/version-edit.js';

/**
 * Cuts `bytes` (a whole table) for `stocs`: ρ + 1 StoCs put the metadata on the last one;
 * ρ StoCs carry it on the last data fragment. Fragments are in offset order.
 */
export function cutTable(bytes: Buffer, stocs: number[], rho: number, name: string): Fragment[] {
  if (stocs.length !== rho && stocs.length !== rho + 1) {
    throw new NovaError('BAD_ARGUMENT', `${name}: ${stocs.length} StoCs for ρ = ${rho} data fragments (want ρ or ρ + 1)`);
  }
  const dataEnd = readFooter(bytes, name).filter.offset;
  // Only more than one data fragment needs the block ends, from the index: every flush and
  // compaction output is cut here, and reading a 16 MiB table's index takes most of a millisecond.
  const ends = rho > 1 ? new TableReader(bytes, name).dataBlockEnds() : [];
  const cuts: number[] = [0];
  for (let k = 1; k < rho; k++) {
    const target = (dataEnd * k) / rho;
    // The first block end at or past the target, never before the previous cut.
    const end = ends.find((e) => e >= target && e >= cuts[cuts.length - 1]) ?? dataEnd;
    cuts.push(end);
  }
  cuts.push(stocs.length > rho ? dataEnd : bytes.length);
  if (stocs.length > rho) cuts.push(bytes.length);
  return stocs.map((stoc, i) => ({ stoc, offset: cuts[i], size: cuts[i + 1] - cuts[i] }));
}

/**
 * A table's bytes from its fragments, each read whole by `readOne` straight into its place
 * in one buffer, made by `alloc` (a fragment is the whole of the table's file on its StoC).
 * CORRUPTION if the fragments do not tile the table.
 */
export async function readFragments(fragments: Fragment[], name: string,
  readOne: (f: Fragment, into: Buffer) => Promise<void>,
  alloc: (size: number) => Buffer = (size) => Buffer.allocUnsafe(size)): Promise<Buffer> {
  const sorted = [...fragments].sort((a, b) => a.offset - b.offset);
  sorted.forEach((f, i) => {
    const expected = i === 0 ? 0 : sorted[i - 1].offset + sorted[i - 1].size;
    if (f.offset !== expected) throw new NovaError('CORRUPTION', `${name}: fragment at offset ${f.offset} on StoC ${f.stoc}, expected one at ${expected}`);
  });
  const last = sorted[sorted.length - 1];
  const table = alloc(last ? last.offset + last.size : 0);
  await Promise.all(sorted.map((f) => readOne(f, table.subarray(f.offset, f.offset + f.size))));
  return table;
}

/**
 * Writes each fragment's bytes with `writeOne`. Rejects with the first failure only once
 * every write has settled, so clean-up after a failure never races a write under way.
 */
export async function writeFragments(bytes: Buffer, fragments: Fragment[],
  writeOne: (f: Fragment, part: Buffer) => Promise<void>): Promise<void> {
  const results = await Promise.allSettled(fragments.map((f) => writeOne(f, bytes.subarray(f.offset, f.offset + f.size))));
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
}
