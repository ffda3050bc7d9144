/**
 * Offloads a range's compactions to StoCs (DESIGN.md §4 "Compaction"; the StoC side is
 * src/stoc/compaction-executor.ts): each job goes to the next StoC that is up, round-robin.
 *
 * A job that fails for a reason another place could mend — the StoC died or timed out, it
 * could not reach an input's StoC, its disk failed — is declined, and the engine merges it
 * itself (it holds the inputs in memory, so compaction goes on while a StoC holding an input
 * is down). Corruption is not declined: it fails the engine, which names the file.
 */
import type { NovaError } from '../common/errors.js';
import type { CompactArgs } from '../stoc/compaction-executor.js';
import type { CompactedTable, CompactionRequest, Compactor } from './engine-env.js';
import type { StocPool } from '../stoc/stoc-pool.js';

/** A job's deadline: a minute, plus 100 ms per MiB of input (a floor of 10 MB/s). */
function deadlineMs(inputBytes: number): number {
  return 60_000 + Math.ceil(inputBytes / 2 ** 20) * 100;
}

export class StocCompactor implements Compactor {
  private next = 0;
  /** Jobs run on StoCs, jobs declined (merged by the LTC), and time spent on the ones run. */
  readonly counters = { jobs: 0, declined: 0, ms: 0 };

  constructor(private readonly pool: StocPool, private readonly range: number, private readonly scatter: number,
    private readonly log: (line: string) => void) {}

  async compact(job: CompactionRequest): Promise<CompactedTable[] | undefined> {
    const up = this.pool.healthy();
    if (up.length === 0) return this.decline('no StoC is up');
    const id = up[this.next++ % up.length];
    const started = performance.now();
    // Outputs go to the first StoCs of this list after the one running the job: the healthy
    // ones, rotated per job so metadata fragments spread; the rest only as input holders.
    const rotated = up.map((_, i) => up[(this.next + i) % up.length]);
    const stocs: Array<[number, Uint8Array]> = [];
    for (const s of [...rotated, ...this.pool.ids().filter((x) => !up.includes(x))]) {
      const address = this.pool.address(s);
      if (address) stocs.push([s, address]);
    }
    const args: CompactArgs = {
      range: this.range,
      inputs: job.inputs.map((m) => ({ file: m.file, fragments: m.fragments })),
      stocs,
      smallestSnapshot: job.smallestSnapshot,
      deeper: job.deeper.map((d) => [d.smallest, d.largest]),
      targetBytes: job.targetBytes,
      firstFile: job.firstFile,
      maxFiles: job.maxFiles,
      scatter: this.scatter,
    };
    const timeoutMs = deadlineMs(job.inputs.reduce((n, m) => n + m.size, 0));
    let client;
    try {
      client = await this.pool.get(id);
      const outputs = await client.compact(args, { timeoutMs });
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

  private decline(why: string): undefined {
    this.counters.declined++;
    this.log(`range ${this.range}: compaction not offloaded: ${why}; the LTC merges it`);
    return undefined;
  }
}
