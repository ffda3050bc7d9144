/**
 * A range's SSTables on StoCs (DESIGN.md §3–4). A table's data blocks are cut into ρ
 * fragments at block boundaries and its metadata (filter, index, footer) is one fragment
 * more (fragments.ts), on StoCs chosen by the placement policy; each fragment is a StoC file
 * `r<range>-<table>.sst` written with sync, so a table is durable before the MANIFEST names
 * it. The MANIFEST records each fragment's StoC, its offset in the table and its size.
 *
 * Reads fetch whole tables, or byte ranges of one (a block, a table's metadata) for the LTC's
 * block cache.
 */
import { NovaError } from '../common/errors.js';
import type { Placement } from '../cluster/config.js';
import type { BlockStore } from './engine-env.js';
import { cutTable, readFragments, writeFragments } from '../compaction/fragments.js';
import { place, placementWidth, type PlacementState } from '../cluster/placement.js';
import { tableFileName } from '../stoc/stoc-protocol.js';
import { STOC_LOST, filesOnStocs, type StocPool } from '../stoc/stoc-pool.js';
import type { Fragment } from '../log/version-edit.js';

/** Placements tried for one table before its write fails. */
const WRITE_ATTEMPTS = 3;

export class StocBlockStore implements BlockStore {
  private readonly state: PlacementState = { next: 0 };
  /** Bytes and time spent moving flushed and compacted tables to StoCs. */
  readonly counters = { tables: 0, bytes: 0, ms: 0 };

  constructor(private readonly pool: StocPool, private readonly range: number,
    private readonly scatter: number, private readonly policy: Placement) {}

  /**
   * Places and writes the table. A StoC lost meanwhile (the pool shuns it) does not fail the
   * table: it is placed again, on StoCs that are up, after removing what the attempt wrote.
   */
  async writeTable(file: number, bytes: Buffer): Promise<Fragment[]> {
    const started = performance.now();
    const name = tableFileName(this.range, file);
    const failed = new Set<number>(); // StoCs a late write of an earlier attempt may still reach
    for (let attempt = 1; ; attempt++) {
      const healthy = this.pool.placeable().filter((id) => !failed.has(id));
      const stocs = await place(this.policy, healthy, placementWidth(healthy.length, this.scatter), this.state,
        (id) => this.pool.on(id, async (c) => (await c.load()).queueDepth));
      const fragments = cutTable(bytes, stocs, this.scatter, name);
      try {
        await writeFragments(bytes, fragments, (f, part) => this.pool.on(f.stoc, (c) => c.write(name, 0, part, true)).catch((err: Error) => {
          failed.add(f.stoc);
          throw err;
        }));
      } catch (err) {
        if (attempt >= WRITE_ATTEMPTS || !STOC_LOST.has((err as NovaError).code)) throw err;
        await Promise.all(fragments.map((f) => this.pool.on(f.stoc, (c) => c.remove(name)).catch(() => undefined)));
        continue;
      }
      this.counters.tables++;
      this.counters.bytes += bytes.length;
      this.counters.ms += performance.now() - started;
      return fragments;
    }
  }

  async readTable(file: number, fragments: Fragment[]): Promise<Buffer> {
    const name = tableFileName(this.range, file);
    return readFragments(fragments, `table ${name}`, (f, into) => this.pool.on(f.stoc, (c) => c.read(name, 0, f.size, undefined, into)).then(() => undefined, (err: Error) => {
      throw new NovaError((err as NovaError).code ?? 'UNAVAILABLE', `table ${name}: fragment at table offset ${f.offset} on StoC ${f.stoc}: ${err.message}`);
    }));
  }

  async readRange(file: number, fragments: Fragment[], offset: number, length: number): Promise<Buffer> {
    const name = tableFileName(this.range, file);
    const end = offset + length;
    const parts = fragments.filter((f) => f.offset < end && f.offset + f.size > offset).sort((a, b) => a.offset - b.offset);
    const covered = parts.reduce((n, f) => n + Math.min(end, f.offset + f.size) - Math.max(offset, f.offset), 0);
    if (covered !== length) throw new NovaError('CORRUPTION', `table ${name}: its fragments do not hold [${offset}, +${length})`);
    const bytes = await Promise.all(parts.map((f) => {
      const from = Math.max(offset, f.offset);
      return this.pool.on(f.stoc, (c) => c.read(name, from - f.offset, Math.min(end, f.offset + f.size) - from)).catch((err: Error) => {
        // A StoC that is away makes the read UNAVAILABLE (clients retry), not the table bad.
        const code = (err as NovaError).code;
        throw new NovaError(code === undefined || STOC_LOST.has(code) ? 'UNAVAILABLE' : code, `table ${name}: [${offset}, +${length}) on StoC ${f.stoc}: ${err.message}`);
      });
    }));
    return bytes.length === 1 ? bytes[0] : Buffer.concat(bytes);
  }

  /** Removes the table from every StoC that answers (its fragments' places are not passed in). */
  async deleteTable(file: number): Promise<void> {
    const name = tableFileName(this.range, file);
    await Promise.all(this.pool.healthy().map((id) => this.pool.on(id, (c) => c.remove(name)).catch(() => undefined)));
  }

  listTables(): Promise<number[]> {
    return filesOnStocs(this.pool, this.range, '.sst');
  }
}
