/**
 * The elasticity commands (DESIGN.md §7): `nova range list|move`. Each talks to the
 * coordinator; `--json` prints what it answered.
 */
import type { Command } from 'commander';
import { coordinatorOf } from '../client/nova-client.js';
import { fetchStatus, moveRange } from '../control/cluster-control.js';
import { printable } from '../tools/inspect.js';
import { positiveInt } from './args.js';

const DEFAULT_DIR = 'nova-data';

function where(cmd: Command): Command {
  return cmd
    .option('--coordinator <host:port>', 'the cluster\'s coordinator')
    .option('--dir <path>', 'or the directory of `nova up`', DEFAULT_DIR)
    .option('--json', 'print JSON', false);
}

function rate(bytesPerSec: number): string {
  return bytesPerSec >= 2 ** 20 ? `${(bytesPerSec / 2 ** 20).toFixed(1)} MiB/s` : `${(bytesPerSec / 1024).toFixed(1)} KiB/s`;
}

export function addRangeCommands(program: Command): void {
  const range = program.command('range').description('list and move the ranges (key intervals) the LTCs serve');

  where(range.command('list')
    .description('print each range: its key interval, its LTC (and the LTC it is moving from), and its load over the last 10 s (requests/s, bytes written/s)'))
    .action(async (o: { coordinator?: string; dir: string; json: boolean }) => {
      const s = await fetchStatus(o.coordinator ?? coordinatorOf(o.dir));
      const rows = s.config.ranges.map((r) => ({
        id: r.id, start: r.start.toString('utf8'), end: r.end?.toString('utf8') ?? null, ltc: r.ltc, ...(r.from !== undefined ? { movingFrom: r.from } : {}),
        requestsPerSec: Math.round(s.load[r.id]?.requestsPerSec ?? 0), bytesWrittenPerSec: Math.round(s.load[r.id]?.bytesWrittenPerSec ?? 0),
      }));
      if (o.json) {
        console.log(JSON.stringify({ configId: s.config.id, ranges: rows }, null, 2));
        return;
      }
      console.log(`config ${s.config.id}`);
      for (const [r, x] of s.config.ranges.map((r, i) => [r, rows[i]] as const)) {
        const moving = r.from !== undefined ? ` (moving from LTC ${r.from})` : '';
        console.log(`range ${r.id}: [${printable(r.start, 40) || '""'}, ${r.end ? printable(r.end, 40) : '∞'}) on LTC ${r.ltc}${moving}; ` +
          `${x.requestsPerSec} requests/s, ${rate(x.bytesWrittenPerSec)} written`);
      }
    });

  where(range.command('move <range>')
    .description('move a range to another LTC while the cluster serves: the old LTC lets it go, the new one opens it from the StoCs; prints how long the range refused requests')
    .requiredOption('--to <ltc>', 'the LTC to move it to', positiveInt))
    .action(async (id: string, o: { coordinator?: string; dir: string; json: boolean; to: number }) => {
      const r = await moveRange(o.coordinator ?? coordinatorOf(o.dir), positiveInt(id), o.to);
      if (o.json) {
        console.log(JSON.stringify(r, null, 2));
        return;
      }
      console.log(`range ${r.range} moved from LTC ${r.from} to LTC ${r.to} (config ${r.configId}) after a ${r.flushMs} ms flush while it served; it refused requests for ${r.unavailableMs} ms ` +
        `(letting go ${r.releaseMs} ms, of it closing ${r.closeMs} ms; opening ${r.openMs} ms, of it the engine ${r.engineOpenMs} ms)`);
    });
}
