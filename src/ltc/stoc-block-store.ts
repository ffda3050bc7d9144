/**
 * A range's SSTables on StoCs (DESIGN.md §3–4). A table's data blocks are cut into ρ
 * fragments at block boundaries and its metadata (filter, index, footer) is one fragment
 * more, each in R copies (fragments.ts), on StoCs chosen by the placement policy; each copy is
 * a StoC file `r<range>-<table>.sst` written with sync, so a table is durable before the
 * MANIFEST names it. The MANIFEST records each copy's StoC, its offset in the table, its size
 * and its checksum.
 *
 * Reads fetch whole tables, or byte ranges of one (a block, a table's metadata) for the LTC's
 * block cache, from the first copy that answers and passes its check: copies on StoCs that are
 * up first, and block reads spread over the copies.
 */
import { NovaError, isErrorCode, type ErrorCode } from '../common/errors.js';
import type { Settings } from '../cluster/config.js';
import { NoRoom, type BlockStore, type RepairResult } from './engine-env.js';
import {
  checkCopy, compactionDeadlineMs, copiesMissing, copiesWanted, cutTable, everyCopyFailed, parityBytes, parityOf, piecesOf, readFragments, rebuildSpan, shapeStocs, tableShape, writeFragments,
} from '../compaction/fragments.js';
import { place, type PlacementState } from '../cluster/placement.js';
import { tableFileName } from '../stoc/stoc-protocol.js';
import { STOC_LOST, filesOnStocs, type StocPool } from '../stoc/stoc-pool.js';
import type { Fragment } from '../log/version-edit.js';

/** Placements tried for one table before its write fails. */
const WRITE_ATTEMPTS = 3;

/** Damaged copies remembered at most (the rest are found again by the next scrub). */
const MAX_DAMAGED = 10_000;

/** Block reads at offsets this far apart go to different copies of their piece. */
const SPREAD_BYTES = 4096;


/** How tables are laid out: the knobs of the one knob table. */
export type TableLayout = Pick<Settings, 'scatter' | 'tableReplicas' | 'placement'> & Partial<Pick<Settings, 'parity'>>;

export class StocBlockStore implements BlockStore {
  private readonly state: PlacementState = { next: 0 };
  /** Bytes and time spent moving flushed and compacted tables to StoCs; copies read after another failed; copies found damaged. */
  readonly counters = { tables: 0, bytes: 0, ms: 0, otherCopy: 0, damaged: 0 };
  /** Copies found damaged (`file:stoc`), until repair writes them again (needsRepair). */
  private readonly damaged = new Set<string>();

  constructor(private readonly pool: StocPool, private readonly range: number, private readonly layout: TableLayout) {}

  /**
   * Places and writes the table. A StoC lost meanwhile (the pool shuns it), or whose disk fails
   * the write (full: the pool gives it no new file for a while), does not fail the table: it is
   * placed again, on the other StoCs, after removing what the attempt wrote. NoRoom when too
   * few StoCs are left because disks failed.
   */
  async writeTable(file: number, bytes: Buffer, background = false): Promise<Fragment[]> {
    const started = performance.now();
    const name = tableFileName(this.range, file);
    const { scatter, tableReplicas, placement, parity } = this.layout;
    const failed = new Set<number>(); // StoCs a late write of an earlier attempt may still reach
    for (let attempt = 1; ; attempt++) {
      const healthy = this.pool.placeable().filter((id) => !failed.has(id));
      const disks = this.pool.disksFailed();
      if (healthy.length < scatter && disks.length > 0) {
        throw new NoRoom(`no StoC can take table ${name}: ${disks.join(', ')} failed writes to disk, and ${healthy.length} other StoC(s) can take it where ${scatter} are needed; writes resume once a StoC has room`);
      }
      // StoCs that failed a moment ago are shunned for seconds: the table waits for them, as for
      // room, instead of failing its range (which could not reopen without them either).
      if (healthy.length < scatter) {
        throw new NoRoom(`no StoC can take table ${name}: it needs ${scatter} and ${healthy.length} answer now (the others failed in the last seconds, are leaving or are new); writes resume once enough answer`);
      }
      const shape = tableShape(healthy.length, scatter, tableReplicas, parity);
      const stocs = await place(placement, healthy, shapeStocs(shape), this.state,
        (id) => this.pool.probeLoad(id).then((l) => l.queueDepth));
      const fragments = cutTable(bytes, stocs, scatter, name, shape.copies, shape.parity);
      try {
        await writeFragments(bytes, fragments, (f, part) => this.writePiece(f.stoc, name, part, background).catch((err: Error) => {
          failed.add(f.stoc);
          throw err;
        }));
      } catch (err) {
        const code = (err as NovaError).code;
        if (!STOC_LOST.has(code) && code !== 'DISK_FAILED') throw err;
        if (attempt >= WRITE_ATTEMPTS) throw code === 'DISK_FAILED' ? new NoRoom(`table ${name}: ${(err as Error).message}`) : err;
        await Promise.all(fragments.map((f) => this.pool.on(f.stoc, (c) => c.remove(name)).catch(() => undefined)));
        continue;
      }
      this.counters.tables++;
      this.counters.bytes += bytes.length;
      this.counters.ms += performance.now() - started;
      return fragments;
    }
  }

  /**
   * Writes a piece of table `name` to StoC `stoc`, synced, with a deadline for its size (the sync
   * waits for what the disk has queued) and the StoC watched meanwhile (doc/decisions/slow-stocs.md).
   */
  private writePiece(stoc: number, name: string, bytes: Buffer, background = false): Promise<void> {
    return this.pool.watched(stoc, (c) => c.write(name, 0, bytes, true, { background, timeoutMs: compactionDeadlineMs(bytes.length) }));
  }

  async readTable(file: number, fragments: Fragment[], salvage = false): Promise<Buffer> {
    const name = tableFileName(this.range, file);
    return readFragments(this.upFirst(fragments), `table ${name}`,
      (f, into) => this.pool.on(f.stoc, (c) => c.read(name, 0, f.size, undefined, into)).then(() => undefined, (err: Error) => {
        throw new NovaError(this.readCode(f.stoc, err), `table ${name}: fragment at table offset ${f.offset} on StoC ${f.stoc}: ${err.message}`);
      }),
      undefined, (f, err) => {
        this.counters.otherCopy++;
        if ((err as NovaError).code === 'CORRUPTION') this.markDamaged(file, f);
      }, salvage);
  }

  /** Records that copy `f` of table `file` failed its check, for repair. */
  private markDamaged(file: number, f: Fragment): void {
    const key = `${file}:${f.stoc}`;
    if (this.damaged.has(key) || !this.pool.ids().includes(f.stoc) || this.damaged.size >= MAX_DAMAGED) return;
    this.damaged.add(key);
    this.counters.damaged++;
  }

  needsRepair(file: number, fragments: readonly Fragment[]): boolean {
    if (fragments.some((f) => this.damaged.has(`${file}:${f.stoc}`))) return true;
    const configured = new Set(this.pool.ids());
    const pieces = piecesOf(fragments, `table ${file}`).length;
    return pieces > 0 && copiesMissing(fragments, this.copiesWanted(configured.size), (s) => !configured.has(s)) > 0;
  }

  /** Copies of each piece a table should have with `stocs` StoCs: as many as a table written now would get (tableShape). */
  private copiesWanted(stocs: number): number {
    return tableShape(stocs, this.layout.scatter, this.layout.tableReplicas, this.layout.parity).copies;
  }

  /**
   * Writes damaged copies again where they are, drops copies on StoCs that left the cluster,
   * and writes new copies of pieces short of them on placeable StoCs holding none of the table.
   */
  async repairTable(file: number, fragments: readonly Fragment[], read: () => Promise<Buffer>,
    away: ReadonlySet<number> = new Set()): Promise<RepairResult> {
    const name = tableFileName(this.range, file);
    const configured = new Set([...this.pool.ids()].filter((s) => !away.has(s)));
    const placeable = this.pool.placeable().filter((s) => !away.has(s));
    const anyDamaged = fragments.some((f) => this.damaged.has(`${file}:${f.stoc}`) && placeable.includes(f.stoc));
    const gone = fragments.some((f) => !configured.has(f.stoc));
    const roomFor = placeable.filter((s) => !fragments.some((f) => f.stoc === s)).length;
    const want = this.copiesWanted(configured.size);
    // One fragment of a table per StoC: the copies missing must fit on the StoCs holding none of
    // it. If they cannot (a table cut for more StoCs than are left), it must be written anew.
    const missing = copiesMissing(fragments, want, (s) => !configured.has(s));
    if (!anyDamaged && !gone && !(missing > 0 && roomFor > 0)) return undefined; // nothing it can do now: the table is not read
    if (missing > roomFor) return 'rewrite';
    const bytes = await read();
    // A fragment's bytes: its part of the table, or the parity of the data pieces.
    const partOf = (f: Fragment): Buffer => (f.parity ? parityBytes(bytes, fragments, `table ${name}`) : bytes.subarray(f.offset, f.offset + f.size));
    let written = 0;
    let writtenBytes = 0;
    const kept: Fragment[] = [];
    for (const f of fragments) {
      const key = `${file}:${f.stoc}`;
      if (!configured.has(f.stoc)) { // its StoC left, or leaves: never read again (an empty piece, nothing to move)
        this.damaged.delete(key);
        continue;
      }
      if (this.damaged.has(key)) {
        try {
          await this.writePiece(f.stoc, name, partOf(f));
          this.damaged.delete(key);
          written++;
          writtenBytes += f.size;
        } catch {
          continue; // damaged and not rewritable now: made again elsewhere below
        }
      }
      kept.push(f);
    }
    // Every piece keeps a copy: one whose only copies were dropped is written first, from the bytes read.
    const all = piecesOf(fragments, `table ${name}`);
    const pieces = all.map((p) => ({ ...p, copies: kept.filter((f) => f.offset === p.offset && f.size > 0 && !f.parity) }));
    const holding = new Set(kept.map((f) => f.stoc));
    const free = placeable.filter((s) => !holding.has(s));
    const place1 = async (like: Fragment): Promise<Fragment | undefined> => {
      while (free.length > 0) {
        const stoc = free.shift()!;
        try {
          await this.writePiece(stoc, name, partOf(like));
        } catch {
          continue;
        }
        const copy: Fragment = { ...like, stoc };
        kept.push(copy);
        written++;
        writtenBytes += like.size;
        return copy;
      }
      return undefined;
    };
    for (const p of pieces.sort((a, b) => a.copies.length - b.copies.length)) {
      const like = all.find((x) => x.offset === p.offset)!.copies[0];
      while (p.copies.length < copiesWanted(fragments, p.offset, want)) {
        const copy = await place1(like);
        if (!copy) break;
        p.copies.push(copy);
      }
    }
    const parity = parityOf(fragments);
    if (parity && !kept.some((f) => f.parity)) await place1(parity);
    const bare = pieces.find((p) => p.copies.length === 0);
    if (bare) {
      throw new NovaError('UNAVAILABLE', `table ${name}: no StoC could take a copy of the fragment at table offset ${bare.offset}; its copies stay where they are`);
    }
    const changed = written > 0 || kept.length !== fragments.length;
    return changed ? { fragments: kept, written, bytes: writtenBytes } : undefined;
  }

  async removeCopy(file: number, stoc: number): Promise<void> {
    await this.pool.on(stoc, (c) => c.remove(tableFileName(this.range, file))).catch(() => undefined);
  }

  /**
   * Reads every copy of the table on a StoC that is up and checks it against the checksum the
   * MANIFEST has for it; a damaged one is marked for repair. The bytes read, for the scrub's rate.
   */
  async scrubTable(file: number, fragments: readonly Fragment[]): Promise<number> {
    const name = tableFileName(this.range, file);
    let read = 0;
    for (const f of fragments) {
      if (f.size === 0 || f.crc === undefined || !this.pool.isHealthy(f.stoc)) continue;
      const bytes = Buffer.allocUnsafe(f.size);
      try {
        await this.pool.on(f.stoc, (c) => c.read(name, 0, f.size, undefined, bytes));
      } catch {
        continue; // away, or the file went with a compaction meanwhile: reads find a missing copy
      }
      read += f.size;
      try {
        checkCopy(f, bytes, `table ${name}`);
      } catch {
        this.markDamaged(file, f);
      }
    }
    return read;
  }

  /**
   * Bytes [offset, offset + length) of the table, each piece from one copy; `check` (a block's
   * checksum) failing on what one set of copies gave sends the read to the next.
   */
  async readRange(file: number, fragments: Fragment[], offset: number, length: number, check?: (bytes: Buffer) => void): Promise<Buffer> {
    const name = tableFileName(this.range, file);
    const end = offset + length;
    const parts = piecesOf(this.upFirst(fragments), `table ${name}`).filter((p) => p.offset < end && p.offset + p.size > offset);
    const covered = parts.reduce((n, p) => n + Math.min(end, p.offset + p.size) - Math.max(offset, p.offset), 0);
    if (covered !== length) throw new NovaError('CORRUPTION', `table ${name}: its fragments do not hold [${offset}, +${length})`);
    const tries = Math.max(...parts.map((p) => p.copies.length));
    const errors: unknown[] = [];
    for (let t = 0; t < tries; t++) {
      const used: Fragment[] = [];
      try {
        const bytes = await Promise.all(parts.map((p) => {
          // Blocks spread over the copies that are up (listed first); the next try takes the next copy.
          const up = p.copies.filter((f) => this.pool.isHealthy(f.stoc)).length || p.copies.length;
          const f = p.copies[(Math.floor(offset / SPREAD_BYTES) % up + t) % p.copies.length];
          used.push(f);
          const from = Math.max(offset, f.offset);
          return this.pool.on(f.stoc, (c) => c.read(name, from - f.offset, Math.min(end, f.offset + f.size) - from)).catch((err: Error) => {
            throw new NovaError(this.readCode(f.stoc, err), `table ${name}: [${offset}, +${length}) on StoC ${f.stoc}: ${err.message}`);
          });
        }));
        const out = bytes.length === 1 ? bytes[0] : Buffer.concat(bytes);
        check?.(out);
        if (t > 0) this.counters.otherCopy++;
        return out;
      } catch (err) {
        errors.push(err);
        // One piece read: the copy it came from is the damaged one.
        if ((err as NovaError).code === 'CORRUPTION' && used.length === 1) this.markDamaged(file, used[0]);
      }
    }
    const parity = parityOf(fragments);
    const all = piecesOf(fragments, `table ${name}`);
    if (parity && parts.length === 1 && parts[0].offset !== all[all.length - 1].offset) {
      // Within one data piece (blocks never span two): the same span of the parity and the others, XORed.
      try {
        const out = await rebuildSpan(fragments, `table ${name}`, parts[0].offset, offset - parts[0].offset, length, (src, from, n) => {
          const copies = 'copies' in src ? src.copies : [src];
          return this.firstOf(copies, (f) => this.pool.on(f.stoc, (c) => c.read(name, from, n)));
        });
        check?.(out);
        this.counters.otherCopy++;
        return out;
      } catch (err) {
        errors.push(err);
      }
    }
    throw everyCopyFailed(`table ${name}`, errors);
  }

  /** `read` of the first of `copies` (those up first) that answers. */
  private async firstOf(copies: Fragment[], read: (f: Fragment) => Promise<Buffer>): Promise<Buffer> {
    const errors: unknown[] = [];
    for (const f of this.upFirst(copies)) {
      try {
        return await read(f);
      } catch (err) {
        errors.push(err);
      }
    }
    throw everyCopyFailed('a fragment', errors);
  }

  /** Removes the table from every StoC that answers (its fragments' places are not passed in). */
  async deleteTable(file: number): Promise<void> {
    const name = tableFileName(this.range, file);
    for (const key of this.damaged) if (key.startsWith(`${file}:`)) this.damaged.delete(key);
    await Promise.all(this.pool.healthy().map((id) => this.pool.on(id, (c) => c.remove(name)).catch(() => undefined)));
  }

  listTables(): Promise<number[]> {
    return filesOnStocs(this.pool, this.range, '.sst');
  }

  /**
   * A failed read's code: a StoC that is away makes it UNAVAILABLE (clients retry), not the
   * table bad; one removed from the cluster never answers again, so its copy counts as damaged.
   */
  private readCode(stoc: number, err: Error): ErrorCode {
    if (!this.pool.ids().includes(stoc)) return 'CORRUPTION';
    const code = (err as NovaError).code;
    return code === undefined || STOC_LOST.has(code) || !isErrorCode(code) ? 'UNAVAILABLE' : code;
  }

  /** `fragments` with the copies on StoCs that are up before the others (a stable sort). */
  private upFirst(fragments: Fragment[]): Fragment[] {
    const down = (f: Fragment): number => (this.pool.isHealthy(f.stoc) ? 0 : 1);
    return [...fragments].sort((a, b) => down(a) - down(b));
  }
}
