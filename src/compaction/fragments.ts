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
 *
 * With parity (--parity, the paper's hybrid), each data piece is kept once and one fragment
 * more holds their XOR, each zero-padded to the longest, while the metadata, apart, keeps its R
 * copies: a data piece whose copy is lost or damaged is rebuilt from the parity and the other
 * data pieces. A parity fragment is no piece of the table: `piecesOf` leaves it out.
 */
import { checksum32 } from '../common/checksum.js';
import { NovaError } from '../common/errors.js';
import { readFooter } from '../sstable/format.js';
import { TableReader } from '../sstable/table-reader.js';
import type { Fragment } from '../log/version-edit.js';

/**
 * The deadline of moving `bytes` of compaction through a StoC's disk: a minute, plus 100 ms per
 * MiB (a floor of 10 MB/s), so a slow or throttled disk fails a job only when far behind.
 */
export function compactionDeadlineMs(bytes: number): number {
  return 60_000 + Math.ceil(bytes / 2 ** 20) * 100;
}

/**
 * How a table is laid out over the StoCs that are up: `width` pieces (ρ, or ρ + 1 with the
 * metadata apart), each in `copies` copies; with `parity`, the ρ data pieces once each and a
 * parity fragment, the metadata (apart) in `copies` copies.
 */
export interface TableShape {
  width: number;
  copies: number;
  parity?: boolean;
}

/**
 * The shape of a table given `up` StoCs: with `parity`, ρ data pieces, their parity and R
 * copies of the metadata where ρ + R + 1 StoCs are up; else R copies of ρ pieces where the
 * StoCs allow, the metadata apart where there are StoCs for its copies too, and fewer copies
 * (at least one) only when fewer than ρ·R StoCs are up.
 */
export function tableShape(up: number, rho: number, replicas: number, parity = false): TableShape {
  if (parity && up >= rho + replicas + 1) return { width: rho + 1, copies: replicas, parity: true };
  const copies = Math.max(1, Math.min(replicas, Math.floor(up / rho)));
  return { width: up >= (rho + 1) * copies ? rho + 1 : rho, copies };
}

/** StoCs a table of `shape` takes. */
export function shapeStocs(shape: TableShape): number {
  return shape.parity ? shape.width - 1 + shape.copies + 1 : shape.width * shape.copies;
}

/**
 * Cuts `bytes` (a whole table) for `stocs`, `copies` copies of each piece: copy c of piece i
 * goes to stocs[c·width + i], where width = stocs.length / copies is ρ (the metadata on the last
 * data piece) or ρ + 1 (the metadata on the last). Fragments are listed copy by copy, each copy's
 * pieces in offset order. With `parity`, stocs are ρ for the data pieces, `copies` for the
 * metadata's copies, and one for the parity fragment, listed in that order.
 */
export function cutTable(bytes: Buffer, stocs: number[], rho: number, name: string, copies = 1, parity = false): Fragment[] {
  const width = parity ? rho + 1 : stocs.length / copies;
  if (parity ? stocs.length !== rho + copies + 1 : !Number.isInteger(width) || (width !== rho && width !== rho + 1)) {
    throw new NovaError('BAD_ARGUMENT', parity
      ? `${name}: ${stocs.length} StoCs for ρ = ${rho} data fragments, their parity and ${copies} cop${copies === 1 ? 'y' : 'ies'} of the metadata (want ${rho + copies + 1})`
      : `${name}: ${stocs.length} StoCs for ρ = ${rho} data fragments in ${copies} cop${copies === 1 ? 'y' : 'ies'} (want ρ or ρ + 1 per copy)`);
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
  const piece = (i: number, stoc: number): Fragment => ({ stoc, offset: cuts[i], size: cuts[i + 1] - cuts[i], crc: crcs[i] });
  if (!parity) return stocs.map((stoc, j) => piece(j % width, stoc));
  const data = Array.from({ length: rho }, (_, i) => piece(i, stocs[i]));
  const meta = stocs.slice(rho, rho + copies).map((stoc) => piece(rho, stoc));
  const p = xorOf(data.map((f) => bytes.subarray(f.offset, f.offset + f.size)));
  computed.set(bytes, p); // for writeFragments, next
  return [...data, ...meta, { stoc: stocs[stocs.length - 1], offset: 0, size: p.length, crc: checksum32(p), parity: true }];
}

/** Parity cutTable computed, by the table's bytes, so writing them does not compute it again. */
const computed = new WeakMap<Buffer, Buffer>();

/** The table's parity fragment, if it has one. */
export function parityOf(fragments: readonly Fragment[]): Fragment | undefined {
  return fragments.find((f) => f.parity);
}

/** The XOR of `parts`, each zero-padded to the longest. */
export function xorOf(parts: readonly Uint8Array[]): Buffer {
  const out = Buffer.alloc(Math.max(0, ...parts.map((p) => p.length)));
  for (const p of parts) xorInto(out, p);
  return out;
}

/** `out` ^= `src` over their common length; four bytes at a time where both are aligned to four. */
export function xorInto(out: Uint8Array, src: Uint8Array): void {
  const n = Math.min(out.length, src.length);
  let i = 0;
  if (out.byteOffset % 4 === 0 && src.byteOffset % 4 === 0) {
    const words = n >>> 2;
    const o = new Uint32Array(out.buffer, out.byteOffset, words);
    const w = new Uint32Array(src.buffer, src.byteOffset, words);
    for (let j = 0; j < words; j++) o[j] ^= w[j];
    i = words << 2;
  }
  for (; i < n; i++) out[i] ^= src[i];
}

/**
 * The parity of `table` (its whole bytes) as `fragments` cut it: the XOR of its data pieces,
 * every piece but the metadata (apart, the last, in a table with parity).
 */
export function parityBytes(table: Buffer, fragments: readonly Fragment[], name: string): Buffer {
  const p = parityOf(fragments);
  const known = computed.get(table);
  if (known && known.length === p?.size) return known;
  const out = Buffer.alloc(p?.size ?? 0);
  for (const d of dataPiecesOf(fragments, name)) xorInto(out, table.subarray(d.offset, d.offset + d.size));
  return out;
}

/** A table with parity's data pieces: every piece but the last, its metadata. */
function dataPiecesOf(fragments: readonly Fragment[], name: string): Piece[] {
  return piecesOf(fragments, name).slice(0, -1);
}

/**
 * Bytes [from, from + length) of the data piece at `offset`, rebuilt as the XOR of the same
 * span of the parity and of every other data piece (each read by `read`, zeros past its end).
 * CORRUPTION if the table has no parity or the piece is its metadata.
 */
export async function rebuildSpan(fragments: readonly Fragment[], name: string, offset: number, from: number, length: number,
  read: (piece: Piece | Fragment, from: number, length: number) => Promise<Buffer>): Promise<Buffer> {
  const p = parityOf(fragments);
  const data = dataPiecesOf(fragments, name);
  if (!p || !data.some((d) => d.offset === offset)) throw new NovaError('CORRUPTION', `${name}: the fragment at table offset ${offset} has no parity to be rebuilt from`);
  const within = (size: number): number => Math.max(0, Math.min(length, size - from));
  const parts = await Promise.all([
    read(p, from, within(p.size)),
    ...data.filter((d) => d.offset !== offset && within(d.size) > 0).map((d) => read(d, from, within(d.size))),
  ]);
  const out = Buffer.alloc(length);
  for (const part of parts) xorInto(out, part);
  return out;
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
    if (f.size === 0 || f.parity) continue;
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

/** Copies of each piece (by offset) on StoCs `gone` does not name; a parity fragment is no piece. */
function copiesLeft(fragments: readonly Fragment[], gone: (stoc: number) => boolean): Map<number, number> {
  const left = new Map<number, number>();
  for (const f of fragments) if (f.size > 0 && !f.parity) left.set(f.offset, (left.get(f.offset) ?? 0) + (gone(f.stoc) ? 0 : 1));
  return left;
}

/**
 * Copies wanted of the piece at `offset` of a table whose pieces start at `offsets`: `want`, but
 * one of each data piece of a table with parity (its metadata, apart, is the last piece).
 */
function wanted(parity: boolean, offsets: Iterable<number>, offset: number, want: number): number {
  return parity && offset !== Math.max(...offsets) ? 1 : want;
}

/**
 * Whether some piece of the table has no copy left off the StoCs `gone` names, and cannot be
 * rebuilt: with parity, one data piece without a copy is rebuilt from the parity and the rest.
 */
export function tableLost(fragments: readonly Fragment[], gone: (stoc: number) => boolean): boolean {
  const left = copiesLeft(fragments, gone);
  const bare = [...left].filter(([, n]) => n === 0).map(([offset]) => offset);
  if (bare.length === 0) return false;
  const p = parityOf(fragments);
  return !(p && !gone(p.stoc) && bare.length === 1 && bare[0] !== Math.max(...left.keys())); // the last piece, the metadata, has no parity
}

/**
 * Copies the table lacks off the StoCs `gone` names, for `want` copies of each piece: with
 * parity, `want` of its metadata, one of each data piece and one parity fragment.
 */
export function copiesMissing(fragments: readonly Fragment[], want: number, gone: (stoc: number) => boolean = () => false): number {
  const left = copiesLeft(fragments, gone);
  const p = parityOf(fragments);
  let missing = p && gone(p.stoc) ? 1 : 0;
  for (const [offset, n] of left) missing += Math.max(0, wanted(!!p, left.keys(), offset, want) - n);
  return missing;
}

/** The copies the piece at `offset` of the table wants, given `want` for tables without parity (copiesMissing). */
export function copiesWanted(fragments: readonly Fragment[], offset: number, want: number): number {
  return wanted(!!parityOf(fragments), copiesLeft(fragments, () => false).keys(), offset, want);
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
 * read. CORRUPTION if the fragments do not tile the table. With parity, one data piece that no
 * copy gives is rebuilt. With `salvage`, a piece whose every copy read but failed its checksum
 * is kept as read (a piece out of reach, or missing, still fails the read).
 */
export async function readFragments(fragments: Fragment[], name: string,
  readOne: (f: Fragment, into: Buffer) => Promise<void>,
  alloc: (size: number) => Buffer = (size) => Buffer.allocUnsafe(size),
  onBad?: (f: Fragment, err: unknown) => void, salvage = false): Promise<Buffer> {
  const pieces = piecesOf(fragments, name);
  const last = pieces[pieces.length - 1];
  const table = alloc(last ? last.offset + last.size : 0);
  // Per piece: the copy last read whole (for salvage), when every copy failed.
  const lastRead = new Map<Piece, Fragment>();
  const results = await Promise.allSettled(pieces.map(async (p) => {
    const into = table.subarray(p.offset, p.offset + p.size);
    const errors: unknown[] = [];
    for (const f of p.copies) {
      try {
        await readOne(f, into);
        lastRead.set(p, f);
        checkCopy(f, into, name);
        return;
      } catch (err) {
        errors.push(err);
        onBad?.(f, err);
      }
    }
    throw everyCopyFailed(name, errors);
  }));
  const failed = results.flatMap((r, i) => (r.status === 'rejected' ? [{ piece: pieces[i], err: r.reason as NovaError }] : []));
  if (failed.length === 0) return table;
  const p = parityOf(fragments);
  if (failed.length === 1 && p && failed[0].piece !== pieces[pieces.length - 1]) {
    // One data piece lost: rebuilt from the parity and the other pieces, already read.
    const { piece } = failed[0];
    try {
      const rebuilt = await rebuildSpan(fragments, name, piece.offset, 0, piece.size, async (src, from, length) => {
        if (!('parity' in src && src.parity)) return table.subarray(src.offset + from, src.offset + from + length);
        const buf = Buffer.allocUnsafe(src.size);
        try {
          await readOne(src as Fragment, buf);
          checkCopy(src as Fragment, buf, name);
        } catch (err) {
          onBad?.(src as Fragment, err);
          throw err;
        }
        return buf.subarray(from, from + length);
      });
      checkCopy(piece.copies[0], rebuilt, name);
      rebuilt.copy(table, piece.offset);
      return table;
    } catch {
      // Not rebuilt: the piece's own failure is the answer.
    }
  }
  if (!salvage || failed.some((f) => f.err.code !== 'CORRUPTION' || !lastRead.has(f.piece))) throw failed[0].err;
  // Salvage: each piece as a copy of it read, damaged, for its blocks' own checks. A piece no
  // copy of which could be read at all is absence, not damage: nothing is salvaged for it.
  for (const { piece } of failed) {
    const into = table.subarray(piece.offset, piece.offset + piece.size);
    await readOne(lastRead.get(piece)!, into);
  }
  return table;
}

/**
 * Writes each fragment's bytes with `writeOne`. Rejects with the first failure only once
 * every write has settled, so clean-up after a failure never races a write under way.
 */
export async function writeFragments(bytes: Buffer, fragments: Fragment[],
  writeOne: (f: Fragment, part: Buffer) => Promise<void>): Promise<void> {
  const parity = parityOf(fragments) ? parityBytes(bytes, fragments, 'a table') : undefined;
  const results = await Promise.allSettled(fragments.map((f) => writeOne(f, f.parity ? parity! : bytes.subarray(f.offset, f.offset + f.size))));
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
}
