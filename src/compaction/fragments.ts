/**
 * How a table's bytes are cut over StoCs (DESIGN.md §3): its data blocks into ρ fragments of
 * about equal size, cut only between blocks (so a block is read from one StoC), and its
 * metadata — filter, index and footer — as one fragment more, on a StoC of its own, so a
 * reader can fetch a table's index and filter without touching its data. Each fragment is kept
 * in R copies on distinct StoCs (--table-replicas), each with the checksum of its bytes, so a
 * read goes to another copy when a StoC is down or a copy is damaged.
 *
 * A fragment copy is the whole of file `r<range>-<table>.sst` on its StoC, so no StoC holds two
 * fragments of a table: given too few StoCs, the metadata travels with the last data fragment,
 * and then fewer copies are kept (placed again whole by repair once StoCs are back). A table's
 * bytes are its pieces in offset order, however it was cut; the copies of a piece share its
 * offset and size.
 */
import { checksum32 } from '../common/checksum.js';
import { NovaError } from '../common/errors.js';
import { readFooter } from '../sstable/format.js';
import { TableReader } from '../sstable/table-reader.js';
import type { Fragment } from '../log/version-edit.js';

/** How a table is laid out over the StoCs that are up: `width` pieces (ρ, or ρ + 1 with the metadata apart), each in `copies` copies. */
export interface TableShape {
  width: number;
  copies: number;
}

/**
 * The shape of a table given `up` StoCs: R copies of ρ pieces where the StoCs allow, the
 * metadata apart where there are StoCs for its copies too, and fewer copies (at least one) only
 * when fewer than ρ·R StoCs are up.
 */
export function tableShape(up: number, rho: number, replicas: number): TableShape {
  const copies = Math.max(1, Math.min(replicas, Math.floor(up / rho)));
  return { width: up >= (rho + 1) * copies ? rho + 1 : rho, copies };
}

/** StoCs a table of `shape` takes. */
export function shapeStocs(shape: TableShape): number {
  return shape.width * shape.copies;
}

/**
 * Cuts `bytes` (a whole table) for `stocs`, `copies` copies of each piece: copy c of piece i
 * goes to stocs[c·width + i], where width = stocs.length / copies is ρ (the metadata on the last
 * data piece) or ρ + 1 (the metadata on the last). Fragments are listed copy by copy, each copy's
 * pieces in offset order.
 */
export function cutTable(bytes: Buffer, stocs: number[], rho: number, name: string, copies = 1): Fragment[] {
  const width = stocs.length / copies;
  if (!Number.isInteger(width) || (width !== rho && width !== rho + 1)) {
    throw new NovaError('BAD_ARGUMENT', `${name}: ${stocs.length} StoCs for ρ = ${rho} data fragments in ${copies} cop${copies === 1 ? 'y' : 'ies'} (want ρ or ρ + 1 per copy)`);
  }
  if (new Set(stocs).size !== stocs.length) throw new NovaError('BAD_ARGUMENT', `${name}: a StoC named twice in [${stocs.join(', ')}]`);
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
  cuts.push(width > rho ? dataEnd : bytes.length);
  if (width > rho) cuts.push(bytes.length);
  const crcs = cuts.slice(1).map((end, i) => checksum32(bytes.subarray(cuts[i], end)));
  return stocs.map((stoc, j) => {
    const i = j % width;
    return { stoc, offset: cuts[i], size: cuts[i + 1] - cuts[i], crc: crcs[i] };
  });
}

/** A span of a table and the fragments that hold it, its copies. */
export interface Piece {
  offset: number;
  size: number;
  copies: Fragment[];
}

/**
 * The pieces of a table from its fragments, in offset order, each with its copies in the order
 * given. CORRUPTION if the pieces do not tile the table or copies of a piece disagree on size.
 */
export function piecesOf(fragments: readonly Fragment[], name: string): Piece[] {
  const byOffset = new Map<number, Piece>();
  // An empty data piece (a table of fewer blocks than ρ) holds nothing to read, and shares its
  // offset with the next piece: it is no copy of that one.
  for (const f of fragments) {
    if (f.size === 0) continue;
    const p = byOffset.get(f.offset);
    if (!p) byOffset.set(f.offset, { offset: f.offset, size: f.size, copies: [f] });
    else if (p.size !== f.size) throw new NovaError('CORRUPTION', `${name}: copies of the fragment at offset ${f.offset} differ in size (${p.size} on StoC ${p.copies[0].stoc}, ${f.size} on StoC ${f.stoc})`);
    else p.copies.push(f);
  }
  const pieces = [...byOffset.values()].sort((a, b) => a.offset - b.offset);
  pieces.forEach((p, i) => {
    const expected = i === 0 ? 0 : pieces[i - 1].offset + pieces[i - 1].size;
    if (p.offset !== expected) throw new NovaError('CORRUPTION', `${name}: fragment at offset ${p.offset} on StoC ${p.copies[0].stoc}, expected one at ${expected}`);
  });
  return pieces;
}

/** Whether some piece of the table has no copy left off the StoCs `gone` names. */
export function tableLost(fragments: readonly Fragment[], gone: (stoc: number) => boolean): boolean {
  const kept = new Map<number, boolean>();
  for (const f of fragments) if (f.size > 0) kept.set(f.offset, (kept.get(f.offset) ?? false) || !gone(f.stoc));
  return [...kept.values()].some((k) => !k);
}

/** The fewest copies any piece of the table has off the StoCs `gone` names. */
export function fewestCopies(fragments: readonly Fragment[], gone: (stoc: number) => boolean = () => false): number {
  const count = new Map<number, number>();
  for (const f of fragments) if (f.size > 0) count.set(f.offset, (count.get(f.offset) ?? 0) + (gone(f.stoc) ? 0 : 1));
  return count.size === 0 ? 0 : Math.min(...count.values());
}

/** CORRUPTION if `bytes`, read from copy `f`, do not have the checksum written with it. */
export function checkCopy(f: Fragment, bytes: Uint8Array, name: string): void {
  if (f.crc !== undefined && checksum32(bytes) !== f.crc) {
    throw new NovaError('CORRUPTION', `${name}: the copy on StoC ${f.stoc} of the fragment at table offset ${f.offset} (${f.size} bytes) fails its checksum`);
  }
}

/**
 * The error of a read that every copy failed: UNAVAILABLE (clients retry) if any copy was only
 * out of reach, CORRUPTION if each was damaged; its message names each copy's failure.
 */
export function everyCopyFailed(name: string, errors: unknown[]): NovaError {
  const codes = errors.map((e) => (e as NovaError).code);
  const code = codes.every((c) => c === 'CORRUPTION') ? 'CORRUPTION' : codes.find((c) => c !== 'CORRUPTION' && c !== undefined) ?? 'UNAVAILABLE';
  if (errors.length === 1 && errors[0] instanceof NovaError && errors[0].code === code) return errors[0];
  return new NovaError(code, `${name}: every copy failed: ${errors.map((e) => (e as Error).message).join('; ')}`, { cause: errors[0] });
}

/**
 * A table's bytes from its fragments, each piece read whole by `readOne` straight into its
 * place in one buffer, made by `alloc` (a fragment is the whole of the table's file on its
 * StoC). A copy that fails, or fails its checksum, is passed to `onBad` and the next copy is
 * read. CORRUPTION if the fragments do not tile the table.
 */
export async function readFragments(fragments: Fragment[], name: string,
  readOne: (f: Fragment, into: Buffer) => Promise<void>,
  alloc: (size: number) => Buffer = (size) => Buffer.allocUnsafe(size),
  onBad?: (f: Fragment, err: unknown) => void): Promise<Buffer> {
  const pieces = piecesOf(fragments, name);
  const last = pieces[pieces.length - 1];
  const table = alloc(last ? last.offset + last.size : 0);
  await Promise.all(pieces.map(async (p) => {
    const into = table.subarray(p.offset, p.offset + p.size);
    const errors: unknown[] = [];
    for (const f of p.copies) {
      try {
        await readOne(f, into);
        checkCopy(f, into, name);
        return;
      } catch (err) {
        errors.push(err);
        onBad?.(f, err);
      }
    }
    throw everyCopyFailed(name, errors);
  }));
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
