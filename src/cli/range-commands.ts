/**
 * The elasticity commands (DESIGN.md §7): `nova range list|move|split|merge`. Each talks to the
 * coordinator; `--json` prints what it answered.
 */
import type { Command } from 'commander';
import { coordinatorOf } from '../client/nova-client.js';
import { fetchStatus, mergeRanges, moveRange, splitRange } from '../control/cluster-control.js';
import { printable } from '../common/printable.js';
import { positiveInt } from './args.js';

const DEFAULT_DIR = 'nova-data';

function where(cmd: Command): Command {
  return cmd
    .option('--coordinator <host:port,...>', 'the cluster\'s coordinator (several on etcd: the one that leads is found)')
    .option('--dir <path>', 'or the directory of `nova up`', DEFAULT_DIR)
    .option('--json', 'print JSON', false);
}

function rate(bytesPerSec: number): string {
  return bytesPerSec >= 2 ** 20 ? `${(bytesPerSec / 2 ** 20).toFixed(1)} MiB/s` : `${(bytesPerSec / 1024).toFixed(1)} KiB/s`;
}

export function addRangeCommands(program: Command): void {
  const range = program.command('range').description('list, move, split and merge the ranges (key intervals) the LTCs serve');

  where(range.command('list')
    .description('print each range: its key interval, its LTC (and the LTC it is moving from, or the range it is taking keys in from), and its load over the last 10 s (requests/s, bytes written/s)'))
    .action(async (o: { coordinator?: string; dir: string; json: boolean }) => {
      const s = await fetchStatus(o.coordinator ?? coordinatorOf(o.dir));
      const rows = s.config.ranges.map((r) => ({
        id: r.id, start: r.start.toString('utf8'), end: r.end?.toString('utf8') ?? null, ltc: r.ltc, ...(r.from !== undefined ? { movingFrom: r.from } : {}),
        ...(r.fill ? { fillingFrom: r.fill.from } : {}),
        requestsPerSec: Math.round(s.load[r.id]?.requestsPerSec ?? 0), bytesWrittenPerSec: Math.round(s.load[r.id]?.bytesWrittenPerSec ?? 0),
      }));
      if (o.json) {
        console.log(JSON.stringify({ configId: s.config.id, ranges: rows }, null, 2));
        return;
      }
      console.log(`config ${s.config.id}`);
      for (const [r, x] of s.config.ranges.map((r, i) => [r, rows[i]] as const)) {
        const moving = (r.from !== undefined ? ` (moving from LTC ${r.from})` : '') + (r.fill ? ` (taking in keys from range ${r.fill.from})` : '');
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

  where(range.command('split <range>')
    .description('cut a range in two while the cluster serves: the keys from the split key on go to a new range on the same LTC, which copies them in ' +
      '(their writes wait meanwhile; reads go on); prints the new range and how long it took')
    .option('--at <key>', 'the split key (UTF-8); by default the median key of the range\'s recent writes, or of its data'))
    .action(async (id: string, o: { coordinator?: string; dir: string; json: boolean; at?: string }) => {
      const r = await splitRange(o.coordinator ?? coordinatorOf(o.dir), positiveInt(id), o.at === undefined ? undefined : Buffer.from(o.at, 'utf8'));
      if (o.json) {
        console.log(JSON.stringify({ ...r, at: r.at?.toString('utf8') }, null, 2));
        return;
      }
      console.log(`range ${r.range} split at ${printable(r.at ?? Buffer.alloc(0), 40)}: range ${r.other} on LTC ${r.ltc} took ${r.keys} key(s), ${r.bytes} bytes, in ${r.fillMs} ms ` +
        `(their writes waited ${r.unavailableMs} ms; config ${r.configId})`);
    });

  where(range.command('merge <into> <from>')
    .description('merge range <from> into the adjacent range <into> on the same LTC: <into> copies its keys in (their writes wait meanwhile; reads go on) and <from> is removed')
  ).action(async (into: string, from: string, o: { coordinator?: string; dir: string; json: boolean }) => {
    const r = await mergeRanges(o.coordinator ?? coordinatorOf(o.dir), positiveInt(into), positiveInt(from));
    if (o.json) {
      console.log(JSON.stringify(r, null, 2));
      return;
    }
    console.log(`range ${r.other} merged into range ${r.range} on LTC ${r.ltc}: ${r.keys} key(s), ${r.bytes} bytes copied in ${r.fillMs} ms ` +
      `(their writes waited ${r.unavailableMs} ms; config ${r.configId})`);
  });
}
