/**
 * `nova`: the program's one command. Subcommands are added here as the components land.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TRANSPORT_COLUMNS, judgeTargets, runTransportBench, writeTransportReports } from '../../bench/transport.js';
import { textTable } from '../../bench/report.js';
import { microTable, runMicroBench, writeMicroReports } from '../../bench/micro.js';
import { Fabric } from '../transport/fabric.js';
import { Engine } from '../ltc/engine.js';
import { checkFile, dumpFile, printable, type FileKind } from '../tools/inspect.js';

const root = join(fileURLToPath(new URL('.', import.meta.url)), '..', '..', '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError('expected a positive integer');
  return n;
}

function nonNegativeInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('expected a non-negative integer');
  return n;
}

function intList(value: string): number[] {
  return value.split(',').map((v) => positiveInt(v.trim()));
}

export function buildProgram(): Command {
  const program = new Command('nova')
    .description('Nova: a distributed, component-based LSM-tree key-value store over an RDMA-style transport (UCX)')
    .version(pkg.version, '-V, --version', 'print the Nova version')
    .showHelpAfterError('(run with --help for usage)');

  program.command('info')
    .description('print the versions of Nova, UCX and Node')
    .action(() => {
      console.log(`nova ${pkg.version}\nucx  ${Fabric.ucxVersion()}\nnode ${process.version}`);
    });

  const bench = program.command('bench').description('run benchmarks (results as a table, JSON or HTML)');
  bench.command('transport')
    .description('READ/WRITE/RPC over UCX shared memory and TCP, beside a plain Node net baseline, in one run')
    .option('--duration <ms>', 'measured milliseconds per row, after a warm-up', positiveInt, 1000)
    .addOption(new Option('--transports <list>', 'UCX transports to measure').default('sm,tcp'))
    .option('--sizes <bytes,...>', 'READ/WRITE sizes in bytes', intList, [64, 4096, 1024 * 1024])
    .option('--outstanding <n,...>', 'operations in flight per row', intList, [1, 64])
    .option('--spin-us <us>', 'progress-thread spin before sleeping, in microseconds', positiveInt, 200)
    .option('--inline-wait-us <us>', 'wait this long for a batch\'s completions before sleeping (0: off)', nonNegativeInt, 30)
    .option('--json <file>', 'also write the rows as a JSON array to <file>')
    .option('--html <file>', 'also write an HTML report to <file>')
    .action(async (opts: { duration: number; transports: string; sizes: number[]; outstanding: number[];
      spinUs: number; inlineWaitUs: number; json?: string; html?: string }) => {
      const transports = opts.transports.split(',').map((t) => t.trim());
      for (const t of transports) {
        if (t !== 'sm' && t !== 'tcp') throw new InvalidArgumentError(`unknown transport "${t}" (expected sm or tcp)`);
      }
      const rows = await runTransportBench({
        durationMs: opts.duration,
        transports: transports as Array<'sm' | 'tcp'>,
        sizes: opts.sizes,
        outstanding: opts.outstanding,
        spinUs: opts.spinUs,
        inlineWaitUs: opts.inlineWaitUs,
        log: (line) => process.stderr.write(`${line}\n`),
      });
      console.log(textTable(rows, TRANSPORT_COLUMNS));
      console.log('');
      for (const line of judgeTargets(rows)) console.log(line);
      writeTransportReports(rows, opts.json, opts.html);
      if (opts.json) console.log(`rows written to ${opts.json}`);
      if (opts.html) console.log(`report written to ${opts.html}`);
    });
  const tool = program.command('tool').description('inspect Nova\'s files: SSTables, logs, MANIFESTs');
  for (const [kind, what] of [['sst', 'an SSTable'], ['log', 'a memtable log'], ['manifest', 'a MANIFEST']] as const) {
    const sub = tool.command(kind).description(`inspect ${what}`);
    sub.command('dump <file>')
      .description(`print what ${what} holds`)
      .option('--limit <n>', 'at most this many entries or records', positiveInt)
      .action((file: string, opts: { limit?: number }) => {
        for (const line of dumpFile(kind as FileKind, file, opts.limit)) console.log(line);
      });
    sub.command('check <file>')
      .description(`verify every checksum of ${what}; exit 1 naming the first fault and its offset`)
      .action((file: string) => {
        console.log(checkFile(kind as FileKind, file));
      });
  }

  const db = program.command('db').description('use a one-range engine (nova-embedded) in a directory: put, get, delete, scan, stats, flush');
  const withEngine = async (dir: string, fn: (e: Engine) => Promise<void>): Promise<void> => {
    const e = await Engine.open(dir, { onWarning: (w) => process.stderr.write(`nova: warning: ${w}\n`) });
    try {
      await fn(e);
    } finally {
      await e.close();
    }
  };
  db.command('put <dir> <key> <value>').description('write a key (UTF-8), synced before it returns')
    .action((dir: string, key: string, value: string) => withEngine(dir, (e) => e.put(Buffer.from(key), Buffer.from(value))));
  db.command('get <dir> <key>').description('write the value of a key, as it is, to stdout; exit 1 if it is absent')
    .action((dir: string, key: string) => withEngine(dir, async (e) => {
      const v = await e.get(Buffer.from(key));
      if (v === undefined) {
        process.stderr.write(`nova: ${key}: not found\n`);
        process.exitCode = 1;
      } else {
        process.stdout.write(v);
      }
    }));
  db.command('delete <dir> <key>').description('delete a key, synced before it returns')
    .action((dir: string, key: string) => withEngine(dir, (e) => e.delete(Buffer.from(key))));
  db.command('scan <dir>').description('print key<TAB>value lines in key order: JSON strings when printable ASCII, else 0x-hex')
    .option('--start <key>', 'first key (inclusive)', '')
    .option('--end <key>', 'last key (exclusive)')
    .option('--limit <n>', 'at most this many entries', positiveInt)
    .action((dir: string, opts: { start: string; end?: string; limit?: number }) => withEngine(dir, async (e) => {
      const rows = await e.scan(Buffer.from(opts.start), { end: opts.end === undefined ? undefined : Buffer.from(opts.end), limit: opts.limit });
      for (const [k, v] of rows) console.log(`${printable(k, Infinity)}\t${printable(v, Infinity)}`);
    }));
  db.command('stats <dir>').description('print the tree: tables per level, memtables, Dranges, sequence')
    .action((dir: string) => withEngine(dir, async (e) => { console.log(JSON.stringify(e.stats, null, 2)); }));
  db.command('flush <dir>').description('write every memtable to a table and run the compactions that are due')
    .action((dir: string) => withEngine(dir, (e) => e.flush()));

  bench.command('micro')
    .description('single-thread costs of the engine\'s parts: memtable, SSTable build and lookup, merge, filtered misses')
    .option('--entries <n>', 'memtable entries per run (tables use a quarter)', positiveInt, 200_000)
    .option('--json <file>', 'also write the rows as a JSON array to <file>')
    .option('--html <file>', 'also write an HTML report to <file>')
    .action((opts: { entries: number; json?: string; html?: string }) => {
      const rows = runMicroBench({ entries: opts.entries, log: (line) => process.stderr.write(`${line}\n`) });
      console.log(microTable(rows));
      writeMicroReports(rows, opts.json, opts.html);
      if (opts.json) console.log(`rows written to ${opts.json}`);
      if (opts.html) console.log(`report written to ${opts.html}`);
    });
  return program;
}

export async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    const e = err as Error & { code?: string };
    process.stderr.write(`nova: ${e.code ? `${e.code}: ` : ''}${e.message}\n`);
    process.exitCode = 1;
  }
}
