/**
 * `nova`: the program's one command. Subcommands are added here as the components land.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { closeSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { readSecretFile, secretInDir, useSecret } from '../common/cluster-secret.js';
import { readTlsFiles, tlsCaInDir, useTcpTls } from '../net/tcp-tls.js';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TRANSPORT_COLUMNS, judgeTargets, runTransportBench, writeTransportReports } from '../../bench/transport.js';
import { textTable } from '../../bench/report.js';
import { microTable, runMicroBench, writeMicroReports } from '../../bench/micro.js';
import { Fabric } from '../transport/fabric.js';
import { Engine } from '../ltc/engine.js';
import { ENGINES } from '../../bench/ycsb/engines.js';
import { DISTRIBUTIONS, type Distribution } from '../../bench/ycsb/generators.js';
import { cacheTable, compareTable, runTable, scheduleLines, sessionHtml } from '../../bench/ycsb/report.js';
import { ACTIONS, parseSchedule, type ScheduledAction } from '../../bench/ycsb/schedule.js';
import { CACHE_MODES } from '../cluster/gemini.js';
import { compareRows, runSession } from '../../bench/ycsb/session.js';
import { runScale, scaleHtml, scaleTable } from '../../bench/ycsb/scale.js';
import { WORKLOADS, parseWorkload } from '../../bench/ycsb/workload.js';
import { checkFile, dumpFile, type FileKind } from '../tools/inspect.js';
import { printable } from '../common/printable.js';
import { FAULT_KINDS, MULTI_LTC_FAULTS, runFaults, type FaultKind } from '../../bench/faults/runner.js';
import { faultHtml, faultSummary } from '../../bench/faults/report.js';
import { addClusterCommands, salvageLines } from './cluster-commands.js';
import { addRangeCommands } from './range-commands.js';
import { capsArg, intList, sizeArg, nonNegativeInt, positiveInt, positiveNumber } from './args.js';
import { capsText, type Caps } from '../control/caps.js';

const root = join(fileURLToPath(new URL('.', import.meta.url)), '..', '..', '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };

interface YcsbCliOptions {
  schedule?: ScheduledAction[];
  records: number; duration: number; operations?: number; concurrency: number; clients: number; valueSize: number; scanLength: number;
  zipfianConstant: number; verify: boolean; sync: boolean; seed: number; dir?: string; keep: boolean; json?: string; html?: string;
  coordinator?: string; secretFile?: string; ltcs: number; stocs: number; ranges: number; logMode?: string; compaction?: string; quietWait: number;
  cache: string; cacheInstances: number; cacheMemory: number; intervalMs: number; cap?: Caps; engineMemory?: number;
}

/** A bench's progress on stderr: one line rewritten on a terminal; otherwise a line now and then, and each final one. */
function progressLine(): (line: string, final: boolean) => void {
  const tty = process.stderr.isTTY === true;
  let lastLine = 0;
  return (line, final) => {
    if (tty) process.stderr.write(`\r\x1b[K${line}${final ? '\n' : ''}`);
    else if (final || Date.now() - lastLine > 5000) {
      lastLine = Date.now();
      process.stderr.write(`${line}\n`);
    }
  };
}

async function ycsbSession(o: YcsbCliOptions, engines: string[], workloads: string[], dists: string[] | undefined, baseline: string, rounds: number): Promise<void> {
  for (const d of dists ?? []) {
    if (!(DISTRIBUTIONS as readonly string[]).includes(d)) throw new Error(`unknown distribution "${d}": use ${DISTRIBUTIONS.join(', ')}`);
  }
  const progress = progressLine();
  const result = await runSession({
    engines, workloads: workloads.map(parseWorkload), dists: dists as Distribution[] | undefined,
    records: o.records, duration: o.duration, operations: o.operations, concurrency: o.concurrency, valueSize: o.valueSize,
    scanLength: o.scanLength, zipfianConstant: o.zipfianConstant, verify: o.verify, sync: o.sync, seed: o.seed,
    rounds, dir: o.dir, keep: o.keep, progress,
    cluster: { coordinator: o.coordinator, secretFile: o.secretFile, ltcs: o.ltcs, stocs: o.stocs, ranges: o.ranges, logMode: o.logMode, compaction: o.compaction,
      cache: o.cache, cacheInstances: o.cacheInstances, cacheMemoryBytes: o.cacheMemory, cap: o.cap && capsText(o.cap) }, clients: o.clients,
    quietWaitMs: o.quietWait * 1000, schedule: o.schedule, intervalMs: o.intervalMs, engineMemoryBytes: o.engineMemory,
  });
  console.log(runTable(result.runs));
  for (const line of scheduleLines(result.runs)) console.log(line);
  if (result.runs.some((r) => r.cache)) {
    console.log('');
    console.log(cacheTable(result.runs));
  }
  if (engines.length > 1) {
    console.log('');
    console.log(compareTable(compareRows(result.runs, engines, baseline), engines, baseline));
  }
  for (const n of result.notes) console.log(`note: ${n}`);
  if (o.json) {
    writeFileSync(o.json, JSON.stringify(result, null, 2));
    console.log(`results written to ${o.json}`);
  }
  if (o.html) {
    writeFileSync(o.html, sessionHtml(result, baseline));
    console.log(`report written to ${o.html}`);
  }
  const bad = result.runs.filter((r) => r.errors > 0 || (r.verify?.errors ?? 0) > 0);
  if (bad.length > 0) {
    for (const r of bad) {
      process.stderr.write(`nova: ${r.engine} ${r.workload}/${r.dist}: ${r.errors} operation errors, ${r.verify?.errors ?? 0} verify errors\n`);
      for (const m of [...r.errorSamples, ...(r.verify?.samples ?? [])].slice(0, 5)) process.stderr.write(`  ${m}\n`);
    }
    process.exitCode = 1;
  }
}

/** Writes `lines` to `file`, a line each, without holding them all. */
function writeLines(file: string, lines: Iterable<string>): void {
  const fd = openSync(file, 'w');
  try {
    let chunk: string[] = [];
    for (const line of lines) {
      chunk.push(line);
      if (chunk.length === 10_000) {
        writeSync(fd, chunk.join('\n') + '\n');
        chunk = [];
      }
    }
    if (chunk.length > 0) writeSync(fd, chunk.join('\n') + '\n');
  } finally {
    closeSync(fd);
  }
}

/** "LO-HI" milliseconds. */
function span(text: string, flag: string): [number, number] {
  const m = /^(\d+)-(\d+)$/.exec(text.trim());
  if (!m || Number(m[1]) > Number(m[2])) throw new InvalidArgumentError(`${flag} takes LO-HI in milliseconds (such as 3000-6000), not "${text}"`);
  return [Number(m[1]), Number(m[2])];
}

export function buildProgram(): Command {
  const program = new Command('nova')
    .description('Nova: a distributed, component-based LSM-tree key-value store over an RDMA-style transport (UCX)')
    .version(pkg.version, '-V, --version', 'print the Nova version')
    .showHelpAfterError('(run with --help for usage)');

  // The cluster's secret for the command's connections (cluster-secret.ts): --secret-file,
  // else NOVA_SECRET_FILE, else (a client's command) the one in the cluster's --dir or nova-data.
  program.hook('preAction', (_root, action) => {
    const o = action.opts() as { secretFile?: string; dir?: string };
    const component = action.name() === 'coordinator' || (action.name() === 'run' && ['ltc', 'stoc', 'cache'].includes(action.parent?.name() ?? ''));
    const file = o.secretFile ?? process.env.NOVA_SECRET_FILE;
    const dirs = component ? [] : [o.dir, 'nova-data'].filter((d): d is string => d !== undefined);
    const secret = file !== undefined ? readSecretFile(file) : dirs.map((d) => secretInDir(d)).find((s) => s !== undefined);
    if (secret) useSecret(secret);
    // TLS likewise: --tls-*, else NOVA_TLS_CA, else (a client's command) what nova up kept in the cluster's directory.
    const t = action.opts() as { tlsCert?: string; tlsKey?: string; tlsCa?: string };
    const tls = t.tlsCert || t.tlsKey || t.tlsCa ? readTlsFiles({ cert: t.tlsCert, key: t.tlsKey, ca: t.tlsCa })
      : process.env.NOVA_TLS_CA ? readTlsFiles({ ca: process.env.NOVA_TLS_CA })
        : dirs.map((d) => tlsCaInDir(d)).filter((ca) => ca !== undefined).map((ca) => ({ ca }))[0];
    if (tls) useTcpTls(tls);
  });

  addClusterCommands(program, join(root, 'bin', 'nova.js'));
  addRangeCommands(program);

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
  const tool = program.command('tool').description('inspect Nova\'s files: SSTables, logs, MANIFESTs, cache logs');
  for (const [kind, what] of [['sst', 'an SSTable'], ['log', 'a memtable log'], ['manifest', 'a MANIFEST'], ['cache', 'a Gemini cache instance\'s log (cache.log)']] as const) {
    const sub = tool.command(kind).description(`inspect ${what}`);
    sub.command('dump <file>')
      .description(`print what ${what} holds`)
      .option('--limit <n>', 'at most this many entries or records', positiveInt)
      .action((file: string, opts: { limit?: number }) => {
        for (const line of dumpFile(kind as FileKind, file, opts.limit)) console.log(line);
      });
    sub.command('check <file>')
      .description(`verify every checksum of ${what}; exit 1 naming the first fault and its offset${kind === 'sst' ? ' (a StoC\'s fragment file too: its metadata by its blocks, a data fragment by the checksum the MANIFEST replicas in its directory record)' : ''}`)
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
  db.command('compact <dir>').description('flush, then merge the whole tree into its deepest level (a manual full compaction)')
    .action((dir: string) => withEngine(dir, (e) => e.compactAll()));
  db.command('repair <dir>').description('read every table and salvage those that are damaged: the entries of the blocks that read are kept, what was lost is reported, and the tree is made consistent again (reads of lost keys may then see an older version, or none)')
    .option('--json', 'print the report as JSON', false)
    .action((dir: string, o: { json: boolean }) => withEngine(dir, async (e) => {
      const r = await e.salvage();
      if (o.json) console.log(JSON.stringify(r, null, 1));
      else for (const line of salvageLines(dir, r)) console.log(line);
    }));

  const ycsb = (cmd: Command): Command => cmd
    .option('--records <n>', 'records loaded before the runs', positiveInt, 100_000)
    .option('--duration <s>', 'seconds per run', positiveNumber, 10)
    .option('--operations <n>', 'operations per run instead of a duration', positiveInt)
    .option('--concurrency <n>', 'requests outstanding', positiveInt, 64)
    .option('--clients <n>', 'client processes per engine, each with --concurrency requests outstanding (engine nova only; the others run in one process)', positiveInt, 1)
    .option('--value-size <bytes>', 'value size', positiveInt, 1024)
    .option('--scan-length <n>', 'entries per scan', positiveInt, 10)
    .option('--zipfian-constant <θ>', 'Zipfian skew', positiveNumber, 0.99)
    .option('--verify', 'check every value read, then read every key back; any error fails the run', false)
    .option('--sync', 'make each write durable (fdatasync) before it is acknowledged', false)
    .option('--seed <n>', 'random seed', nonNegativeInt, 1)
    .option('--dir <path>', 'where the engines\' directories go (default: the OS temp dir)')
    .option('--keep', 'keep the engines\' directories after the run', false)
    .option('--quiet-wait <s>', 'before each run, wait up to <s> seconds for the machine\'s CPUs to go quiet (under a quarter of a CPU busy), so CPU work left by an earlier cell (compactions, any engine\'s) does not run during it; 0: start at once', nonNegativeInt, 30)
    .option('--interval-ms <n>', 'the timelines\' interval: throughput, p99 and the cache\'s hit ratio are reported per interval (a shorter one resolves a recovery finer)', positiveInt, 1000)
    .option('--json <file>', 'also write every figure as JSON to <file>')
    .option('--html <file>', 'also write an HTML report (throughput over time, latency distributions) to <file>')
    .option('--coordinator <host:port>', 'engine nova: use this running cluster (default: start one in the run\'s directory and stop it after)')
    .option('--secret-file <file>', 'engine nova with --coordinator: the running cluster\'s secret (the secret file in its directory; default: NOVA_SECRET_FILE)')
    .option('--ltcs <n>', 'engine nova: LTCs of the cluster it starts', positiveInt, 1)
    .option('--stocs <n>', 'engine nova: StoCs of the cluster it starts', positiveInt, 3)
    .option('--ranges <n>', 'engine nova: ranges, cut evenly over the loaded keys', positiveInt, 1)
    .addOption(new Option('--log-mode <m>', 'engine nova: LogC mode of the cluster it starts').choices(['disk', 'memory', 'memory+disk', 'none']))
    .addOption(new Option('--compaction <where>', 'engine nova: where the cluster it starts runs compaction merges (default stoc)').choices(['stoc', 'ltc']))
    .addOption(new Option('--cache <mode>', 'engine nova: read and write through a Gemini cache of this mode, whose instances the bench starts (an engine\'s own nova:cache-mode=MODE wins); the report adds the hit ratio over time')
      .choices(['none', ...CACHE_MODES]).default('none'))
    .option('--cache-instances <n>', 'engine nova with a cache: instances started', positiveInt, 3)
    .option('--cache-memory <bytes>', 'engine nova with a cache: each instance\'s memory', positiveInt, 256 * 2 ** 20)
    .option('--cap <caps>', 'engine nova: caps of the cluster it starts, as nova up --cap (e.g. ltc.cpu=0.5,stoc.cpu=0.25,stoc.disk=8MB/s), applied once it is loaded and settled: the runs are capped, the load is not', capsArg);
  const scheduleHelp = `engine nova: cluster actions during the run, "<s>s <action>, ..." with actions ${ACTIONS.filter((a) => a !== 'stoc remove').join(', ')} ` +
    '(ltc remove|kill [ID], range move R LTC, cache kill|start [ID]); e.g. "20s ltc add, 40s stoc add, 60s rebalance, 80s ltc remove", or "20s cache kill 1, 30s cache start 1". The report marks each and lists every range move\'s unavailability';
  const engineMemory = (cmd: Command): Command => cmd
    .option('--engine-memory <size>', 'give each engine this much memory, the page cache of its files included (e.g. 4GiB): its processes, a nova cluster\'s all together, ' +
      'run in a memory cgroup of their own with this limit, and files are not read into the page cache before a run. Needs root and cgroups (doc/decisions/engine-memory.md)', sizeArg);
  const checkSchedule = (schedule: ScheduledAction[] | undefined, engines: string[], opts: YcsbCliOptions): void => {
    if (!schedule) return;
    if (engines.some((e) => e.split(':')[0] !== 'nova') || opts.coordinator) throw new InvalidArgumentError('--schedule needs the nova engine with the cluster the bench starts (no --coordinator)');
    const last = schedule[schedule.length - 1];
    if (last && opts.operations === undefined && last.atMs >= opts.duration * 1000) throw new InvalidArgumentError(`--schedule: its last action (${last.atMs / 1000} s) is past --duration ${opts.duration}`);
  };
  ycsb(engineMemory(bench.command('run'))
    .description('YCSB-style run of one engine: load, settle, run a workload; progress on stderr, a table on stdout')
    .option('--engine <name>', `one of ${ENGINES.map((e) => e.name).join(', ')}; nova may carry knobs of nova up: nova:flag=value:...`, 'nova-embedded')
    .option('--workload <w>', `${Object.keys(WORKLOADS).join(', ')}, or a mix such as read=0.7,update=0.3`, 'A')
    .option('--dist <d>', `${DISTRIBUTIONS.join(', ')} (default: the workload's own)`)
    .option('--schedule <list>', scheduleHelp))
    .action(async (opts: YcsbCliOptions & { engine: string; workload: string; dist?: string; schedule?: string }) => {
      const schedule = opts.schedule === undefined ? undefined : parseSchedule(opts.schedule);
      checkSchedule(schedule, [opts.engine], opts);
      await ycsbSession({ ...opts, schedule }, [opts.engine], [opts.workload], opts.dist ? [opts.dist] : undefined, opts.engine, 1);
    });
  ycsb(engineMemory(bench.command('compare'))
    .description('several engines on the same workloads, interleaved, with ratios to a baseline engine')
    .option('--engines <list>', 'comma-separated (default: every installed one); nova may carry knobs of nova up: nova:flag=value:flag=value (e.g. nova:active-memtables=4), its name in the report')
    .option('--workloads <list>', 'comma-separated', 'RW50,W100,SW50,A,B,C')
    .option('--dists <list>', 'comma-separated', 'uniform,zipfian')
    .option('--baseline <engine>', 'the engine ratios are relative to (default: the first)')
    .option('--rounds <n>', 'times each cell runs (engines interleaved each time); the median counts', positiveInt, 1)
    .option('--schedule <list>', `${scheduleHelp}; every engine must be nova`))
    .action(async (opts: YcsbCliOptions & { engines?: string; workloads: string; dists: string; baseline?: string; rounds: number; schedule?: string }) => {
      let engines = opts.engines?.split(',').map((e) => e.trim()).filter(Boolean);
      if (!engines) {
        engines = [];
        for (const e of ENGINES) {
          const why = await e.available();
          if (why) process.stderr.write(`nova: skipping ${e.name}: ${why}\n`);
          else engines.push(e.name);
        }
      }
      const baseline = opts.baseline ?? engines[0];
      if (!engines.includes(baseline)) throw new Error(`baseline ${baseline} is not among the engines`);
      const { schedule: text, ...rest } = opts;
      const schedule = text === undefined ? undefined : parseSchedule(text);
      checkSchedule(schedule, engines, opts);
      await ycsbSession({ ...rest, schedule }, engines, opts.workloads.split(','), opts.dists.split(','), baseline, opts.rounds);
    });

  ycsb(bench.command('scale')
    .description('throughput as StoCs (β) or LTCs (η) are added, a fresh cluster per count, against the linear line through the smallest count (paper Figures 4.10, 4.11); with --cap each component is a small machine. A table on stdout; --html draws the curves')
    .addOption(new Option('--vary <what>', 'the components added').choices(['stocs', 'ltcs']).default('stocs'))
    .option('--counts <list>', 'how many of them, one session each', intList, [1, 2, 4, 8])
    .option('--ranges-per-ltc <n>', 'with --vary ltcs: ranges per LTC (ω), so every LTC has ranges (--ranges is then ignored)', positiveInt, 1)
    .option('--linear-from <count>', 'the count the linear line goes through (default: the smallest)', positiveInt)
    .option('--engines <list>', 'nova variants, interleaved in every cell (e.g. nova:placement=power-of-d,nova:placement=random:scatter=3)', 'nova')
    .option('--workloads <list>', 'comma-separated', 'RW50,W100')
    .option('--dists <list>', 'comma-separated', 'uniform')
    .option('--rounds <n>', 'times each cell runs per count; the median counts', positiveInt, 1))
    .action(async (opts: YcsbCliOptions & { vary: 'stocs' | 'ltcs'; counts: number[]; rangesPerLtc: number; linearFrom?: number; engines: string; workloads: string; dists: string; rounds: number }) => {
      const dists = opts.dists.split(',');
      for (const d of dists) {
        if (!(DISTRIBUTIONS as readonly string[]).includes(d)) throw new Error(`unknown distribution "${d}": use ${DISTRIBUTIONS.join(', ')}`);
      }
      const result = await runScale({
        vary: opts.vary, counts: opts.counts, rangesPerLtc: opts.rangesPerLtc, linearFrom: opts.linearFrom,
        engines: opts.engines.split(',').map((e) => e.trim()).filter(Boolean), workloads: opts.workloads.split(',').map(parseWorkload), dists: dists as Distribution[],
        records: opts.records, duration: opts.duration, operations: opts.operations, concurrency: opts.concurrency, valueSize: opts.valueSize,
        scanLength: opts.scanLength, zipfianConstant: opts.zipfianConstant, verify: opts.verify, sync: opts.sync, seed: opts.seed,
        rounds: opts.rounds, dir: opts.dir, keep: opts.keep, progress: progressLine(),
        cluster: { ltcs: opts.ltcs, stocs: opts.stocs, ranges: opts.ranges, logMode: opts.logMode, compaction: opts.compaction, cap: opts.cap && capsText(opts.cap) },
        clients: opts.clients, quietWaitMs: opts.quietWait * 1000, intervalMs: opts.intervalMs,
        onCount: (n) => process.stderr.write(`nova bench scale: ${n} ${opts.vary === 'stocs' ? 'StoC' : 'LTC'}(s)\n`),
      });
      console.log(scaleTable(result));
      if (opts.json) {
        writeFileSync(opts.json, JSON.stringify(result, null, 2));
        console.log(`results written to ${opts.json}`);
      }
      if (opts.html) {
        writeFileSync(opts.html, scaleHtml(result));
        console.log(`report written to ${opts.html}`);
      }
    });

  bench.command('faults')
    .description('clients on a few keys under injected faults (SIGKILL and SIGSTOP of LTC, StoCs, coordinator); every operation recorded and the history checked for linearizability; exit 1 on a violation')
    .option('--duration <s>', 'seconds of faults', positiveNumber, 60)
    .option('--seed <n>', 'seed of the fault schedule and the clients\' choices (printed; a replay takes the same steps)', nonNegativeInt)
    .option('--clients <n>', 'client sessions', positiveInt, 8)
    .option('--keys <n>', 'keys they share', positiveInt, 20)
    .option('--depth <n>', 'requests outstanding per client in its pipelined phases', positiveInt, 64)
    .option('--pipelined <share>', 'share of the time a client is in a pipelined phase (phases last 5 s)', positiveNumber, 0.5)
    .option('--faults <list>', `fault kinds, comma-separated: ${FAULT_KINDS.join(', ')} (default: all; ${MULTI_LTC_FAULTS.join(' and ')} with --ltcs 2 or more)`)
    .option('--ltcs <n>', 'LTCs of the cluster (range-move and ltc-failover move the keys\' range between them)', positiveInt, 1)
    .option('--fault-every <lo-hi>', 'milliseconds between faults', '3000-6000')
    .option('--stop-for <lo-hi>', 'milliseconds a SIGSTOP lasts', '2000-15000')
    .option('--client-timeout <ms>', 'each client\'s deadline per operation (shorter than a stop: writes of unknown outcome)', positiveInt, 30_000)
    .option('--dir <path>', 'where the cluster runs (kept); default: a temporary directory, removed after unless the run failed or found a violation')
    .option('--history <file>', 'also write every operation as JSON lines to <file>')
    .option('--json <file>', 'also write the figures as JSON to <file>')
    .option('--html <file>', 'also write an HTML report (operations per second, faults) to <file>')
    .action(async (opts: { duration: number; seed?: number; clients: number; keys: number; depth: number; pipelined: number; faults?: string; ltcs: number;
      faultEvery: string; stopFor: string; clientTimeout: number; dir?: string; history?: string; json?: string; html?: string }) => {
      const kinds = opts.faults?.split(',').map((f) => f.trim()).filter(Boolean) ?? FAULT_KINDS.filter((k) => !MULTI_LTC_FAULTS.includes(k) || opts.ltcs > 1);
      for (const k of kinds) if (!(FAULT_KINDS as readonly string[]).includes(k)) throw new InvalidArgumentError(`unknown fault "${k}": use ${FAULT_KINDS.join(', ')}`);
      const seed = opts.seed ?? Math.floor(Math.random() * 1_000_000);
      console.log(`seed ${seed} (replay: --seed ${seed})`);
      const result = await runFaults({
        seed, durationMs: opts.duration * 1000, clients: opts.clients, keys: opts.keys, depth: opts.depth, pipelinedShare: Math.min(1, opts.pipelined), ltcs: opts.ltcs,
        faults: kinds as FaultKind[], faultEveryMs: span(opts.faultEvery, '--fault-every'), stopMs: span(opts.stopFor, '--stop-for'), clientTimeoutMs: opts.clientTimeout, dir: opts.dir,
        keep: opts.dir !== undefined, onHistory: opts.history ? (lines) => writeLines(opts.history!, lines) : undefined,
        progress: (line) => process.stderr.write(`${line}\n`),
      });
      for (const line of faultSummary(result)) console.log(line);
      if (opts.json) {
        writeFileSync(opts.json, JSON.stringify(result, null, 2));
        console.log(`results written to ${opts.json}`);
      }
      if (opts.html) {
        writeFileSync(opts.html, faultHtml(result));
        console.log(`report written to ${opts.html}`);
      }
      if (result.check.violations.length > 0 || result.check.undecided.length > 0) process.exitCode = 1;
    });

  bench.command('micro')
    .description('single-thread costs of the engine\'s parts: memtable, SSTable build and lookup, merge, filtered misses, scans')
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
