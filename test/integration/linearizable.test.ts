/**
 * Linearizability under faults: a cluster with eight concurrent clients on twenty keys, part
 * of the time 64 requests outstanding each, while the LTC is killed (also mid-append, with two
 * of three StoCs stopped: the history that used to apply a retried write twice) and components
 * are stopped; every operation is recorded and each key's history checked (bench/faults/).
 * With two LTCs the keys' range also moves between them. NOVA_SOAK=1 runs it for minutes
 * (NOVA_SOAK_SECONDS, default 300) with every fault kind, StoC and coordinator kills and range
 * moves too; NOVA_SEED replays a seed (each run prints its own).
 */
import { describe, expect, it } from 'vitest';
import { FAULT_KINDS, runFaults, type FaultRunOptions } from '../../bench/faults/runner.js';
import { faultSummary } from '../../bench/faults/report.js';
import { BIN } from '../helpers/cluster.js';

const SOAK = process.env.NOVA_SOAK === '1';
const SOAK_SECONDS = Number(process.env.NOVA_SOAK_SECONDS ?? 300);

async function run(o: FaultRunOptions): Promise<void> {
  const result = await runFaults({ ...o, bin: BIN, progress: (line) => process.stderr.write(`[faults] ${line}\n`) });
  const summary = faultSummary(result);
  process.stderr.write(`${summary.map((l) => `[faults] ${l}`).join('\n')}\n`);
  expect(result.check.violations, summary.join('\n')).toEqual([]);
  expect(result.check.undecided).toEqual([]);
  expect(result.check.keys).toBe(o.keys ?? 20);
  for (const kind of o.faults ?? FAULT_KINDS) expect(result.faults[kind], `${kind} never ran`).toBeGreaterThan(0);
  expect(result.operations.writes).toBeGreaterThan(1000);
}

describe('linearizable under faults', () => {
  it('LTC kills (also mid-append with two StoCs stopped) and SIGSTOPs: every key\'s history is linearizable', async () => {
    const seed = Number(process.env.NOVA_SEED ?? 20261126);
    await run({
      seed, durationMs: 40_000, clients: 8, keys: 20, depth: 64,
      faults: ['log-split', 'ltc-kill', 'ltc-stop', 'stoc-stop'], faultEveryMs: [1500, 3000], stopMs: [1000, 4000],
    });
  }, 240_000);

  it('two LTCs, the keys\' range moved between them, split and merged, failed over from a paused LTC, killed and stopped where it is: every key\'s history is linearizable', async () => {
    const seed = Number(process.env.NOVA_SEED ?? 20261127);
    await run({
      seed, durationMs: 40_000, clients: 8, keys: 20, depth: 64, ltcs: 2,
      faults: ['range-move', 'range-split', 'ltc-failover', 'ltc-kill', 'ltc-stop', 'log-split'], faultEveryMs: [1000, 2000], stopMs: [500, 1500],
    });
  }, 240_000);

  it.runIf(SOAK)(`soak: ${SOAK_SECONDS} s of every fault kind`, async () => {
    const seed = Number(process.env.NOVA_SEED ?? Math.floor(Math.random() * 1_000_000));
    process.stderr.write(`[faults] soak seed ${seed} (replay: NOVA_SEED=${seed})\n`);
    await run({ seed, durationMs: SOAK_SECONDS * 1000, clients: 8, keys: 20, depth: 64, ltcs: 2 });
  }, (SOAK_SECONDS + 600) * 1000);
});
