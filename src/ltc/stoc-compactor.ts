/**
 * Offloads a range's compactions to StoCs (DESIGN.md §4 "Compaction"; the StoC side is
 * src/stoc/compaction-executor.ts). A job goes to the least loaded StoC that is up (fewest
 * compactions running, then the shortest queue, then the fewest bytes pending: placement.ts
 * leastLoaded), and its outputs go where the cluster's placement policy puts them, as a flushed
 * table's do, so compaction — most of the bytes written — spreads as placement says.
 *
 * A job that fails for a reason another place could mend — the StoC died or timed out, it
 * could not reach an input's StoC, its disk failed, it runs as many jobs as it may — is
 * declined, and the engine merges it itself (it holds the inputs in memory, so compaction goes
 * on while a StoC holding an input is down). Corruption is not declined: it fails the engine,
 * which names the file.
 */
import type { NovaError } from '../common/errors.js';
import { leastLoaded, placeMany, type PlacementState, type StocLoadView } from '../cluster/placement.js';
import { compactionDeadlineMs, copiesMissing, tableShape } from '../compaction/fragments.js';
import type { TableLayout } from './stoc-block-store.js';
import type { CompactArgs } from '../stoc/compaction-executor.js';
import type { CompactedTable, CompactionRequest, Compactor } from './engine-env.js';
import type { StocPool } from '../stoc/stoc-pool.js';

export class StocCompactor implements Compactor {
  private turn = 0;
  private readonly state: PlacementState = { next: 0 };
  /** Jobs run on StoCs, jobs declined (merged by the LTC), and time spent on the ones run. */
  readonly counters = { jobs: 0, declined: 0, ms: 0 };

  constructor(private readonly pool: StocPool, private readonly range: number, private readonly layout: TableLayout,
    private readonly log: (line: string) => void) {}

  async compact(job: CompactionRequest): Promise<CompactedTable[] | undefined> {
    const { scatter, tableReplicas, placement, parity } = this.layout;
    const up = this.pool.placeable().filter((s) => this.pool.address(s));
    if (up.length === 0) return this.decline('no StoC is up');
    if (up.length < scatter) return this.decline(`scatter ${scatter} needs ${scatter} StoCs and ${up.length} are up`);
    const shape = tableShape(up.length, scatter, tableReplicas, parity);
    const loads = await this.loads(up);
    const id = leastLoaded(up, loads, this.turn++);
    const depth = new Map([...loads].map(([s, l]) => [s, l.queueDepth]));
    // Every StoC the job may touch: those up take outputs; the others may hold inputs.
    const stocs: Array<[number, Uint8Array]> = [];
    for (const s of [...up, ...this.pool.ids().filter((x) => !up.includes(x))]) {
      const address = this.pool.address(s);
      if (address) stocs.push([s, address]);
    }
    const args: CompactArgs = {
      range: this.range,
      // Copies on StoCs that are up first: the job reads the first copy that answers.
      inputs: job.inputs.map((m) => ({ file: m.file, fragments: [...m.fragments].sort((a, b) => Number(!this.pool.isHealthy(a.stoc)) - Number(!this.pool.isHealthy(b.stoc))) })),
      stocs,
      smallestSnapshot: job.smallestSnapshot,
      deeper: job.deeper.map((d) => [d.smallest, d.largest]),
      targetBytes: job.targetBytes,
      firstFile: job.firstFile,
      maxFiles: job.maxFiles,
      scatter,
      copies: shape.copies,
      ...(shape.parity ? { parity: true } : {}),
      placements: placeMany(placement, up, scatter, shape, job.maxFiles, this.state, depth),
      cuts: job.cuts,
    };
    const started = performance.now();
    const timeoutMs = compactionDeadlineMs(job.inputs.reduce((n, m) => n + m.size, 0));
    let client;
    try {
      client = await this.pool.get(id);
      const outputs = await client.compact(args, { timeoutMs });
      // A StoC that does not know copies (an older one) writes one: not what the range asked for.
      const short = outputs.find((o) => copiesMissing(o.fragments, shape.copies) > 0);
      if (short) return this.decline(`StoC ${id} wrote output ${short.file} with fewer than the ${shape.copies} copies asked for`);
      this.counters.jobs++;
      this.counters.ms += performance.now() - started;
      return outputs.map((o) => ({ ...o, smallest: Buffer.from(o.smallest), largest: Buffer.from(o.largest) }));
    } catch (err) {
      if ((err as NovaError).code === 'CORRUPTION') throw err;
      // Shun the StoC only if the connection to it is what failed: not for a peer of its, nor
      // a job past its deadline (the connection is shared with other ranges' logs and tables).
      if (!client?.alive) this.pool.shun(id);
      return this.decline(`StoC ${id} failed it (${(err as Error).message})`);
    }
  }

  /** The loads of the StoCs in `ids` that answer in time (StocPool.probeLoad). */
  private async loads(ids: number[]): Promise<Map<number, StocLoadView>> {
    const out = new Map<number, StocLoadView>();
    await Promise.all(ids.map((id) => this.pool.probeLoad(id).then((l) => { out.set(id, l); }, () => undefined)));
    return out;
  }

  private decline(why: string): undefined {
    this.counters.declined++;
    this.log(`range ${this.range}: compaction not offloaded: ${why}; the LTC merges it`);
    return undefined;
  }
}
