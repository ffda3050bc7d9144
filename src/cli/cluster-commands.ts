/**
 * The cluster's commands: `nova up|down|status`, the components in the foreground
 * (`nova coordinator`, `nova stoc|ltc run`), adding and removing them (`nova stoc|ltc add|remove`,
 * `nova rebalance`), and the client commands `nova put|get|del|scan`.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { capsArg, nonNegativeInt, onOff, port, positiveInt } from './args.js';
import type { SalvageReport } from '../ltc/salvage.js';
import { join } from 'node:path';
import { NovaClient, coordinatorOf } from '../client/nova-client.js';
import type { Settings } from '../cluster/config.js';
import { KNOBS, defaultText, newSettings, refuseConflicts } from '../cluster/knobs.js';
import { benchSplits, keyOf } from '../../bench/ycsb/generators.js';
import { makeValue } from '../../bench/ycsb/values.js';
import { bulkLoad } from '../client/bulk-load.js';
import { NovaError } from '../common/errors.js';
import { parsePrintable, printable } from '../common/printable.js';
import { addComponent, down, fetchStatus, openFailures, readCaps, readClusterFile, rebalance, removeLtc, removeStocFrom, storedConfig, up } from '../control/cluster-control.js';
import { CAP_ROLES, capsText, type Caps } from '../control/caps.js';
import { DEFAULT_PEERS } from '../stoc/stoc-server.js';
import { runCache, runCoordinator, runLtc, runStoc } from './components.js';
import { CACHE_MODES, type CacheMode } from '../cluster/gemini.js';
import { TcpRpcClient } from '../net/tcp-rpc-client.js';
import type { CacheServerStats } from '../stoc/cache-server.js';
import { parseEndpoints } from '../coordinator/etcd-store.js';

const DEFAULT_DIR = 'nova-data';

/**
 * The flags of `nova up` and `nova coordinator` that shape a new cluster: how its key space is
 * cut into ranges, and every knob (cluster/knobs.ts). None has a commander default, so a flag
 * not given stays undefined: a new cluster takes the knob's default, an existing one keeps
 * what it has.
 */
interface LayoutFlags { ranges?: number; splitKeys?: string; benchRecords?: number }
type KnobFlags = LayoutFlags & Record<string, unknown>;

function camel(flag: string): string {
  return flag.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

function knobs(cmd: Command): Command {
  cmd
    .option('--ranges <n>', 'ranges of a new cluster, cut evenly over the bench key space (user + 12 digits below --bench-records) (default 1)', positiveInt)
    .option('--split-keys <k1,k2,...>', 'cut ranges at these keys instead (UTF-8, ascending)')
    .option('--bench-records <n>', 'key space --ranges cuts evenly (default 1000000)', positiveInt);
  for (const k of KNOBS) {
    const what = `${k.greek ? `${k.greek}: ` : ''}${k.meaning} (default ${defaultText(k)})`;
    if (k.type === 'bool') {
      cmd.option(`--${k.flag}`, what);
    } else if (k.type === 'switch') {
      cmd.option(`--${k.flag} <on|off>`, what, onOff);
    } else if (k.type === 'choice') {
      cmd.addOption(new Option(`--${k.flag} <v>`, what).choices([...k.choices!]));
    } else {
      const parse = k.min === 0 ? nonNegativeInt : positiveInt;
      cmd.option(`--${k.flag} <n>`, what, k.max === undefined ? parse : (v: string) => {
        const n = parse(v);
        if (n > k.max!) throw new InvalidArgumentError(`expected at most ${k.max}`);
        return n;
      });
    }
  }
  return cmd;
}

/** The knobs given on the command line, as settings. */
function givenSettings(o: KnobFlags): Partial<Settings> {
  const out: Record<string, unknown> = {};
  for (const k of KNOBS) {
    const v = o[camel(k.flag)];
    if (v !== undefined) out[k.key] = v;
  }
  return out as Partial<Settings>;
}

/** The flags given, as the coordinator's own (what `nova up` passes on). */
function knobArgs(o: KnobFlags): string[] {
  const out: string[] = [];
  if (o.ranges !== undefined) out.push('--ranges', String(o.ranges));
  if (o.splitKeys !== undefined) out.push('--split-keys', o.splitKeys);
  if (o.benchRecords !== undefined) out.push('--bench-records', String(o.benchRecords));
  const given = givenSettings(o);
  for (const k of KNOBS) {
    const v = given[k.key];
    if (v === undefined) continue;
    if (k.type === 'bool') {
      if (v) out.push(`--${k.flag}`);
    } else if (k.type === 'switch') {
      out.push(`--${k.flag}`, v ? 'on' : 'off');
    } else {
      out.push(`--${k.flag}`, String(v));
    }
  }
  return out;
}

/** Split keys of a new cluster, if the flags say how to cut it. */
function splitsOf(o: LayoutFlags): Buffer[] | undefined {
  if (o.splitKeys !== undefined) return o.splitKeys.split(',').map((s) => Buffer.from(s));
  if (o.ranges === undefined && o.benchRecords === undefined) return undefined;
  return benchSplits(o.ranges ?? 1, o.benchRecords ?? 1_000_000);
}

/** The records of a file of key<TAB>value lines (nova scan's), or of stdin for -. */
async function* recordsOfFile(path: string): AsyncGenerator<[Buffer, Buffer]> {
  const lines = createInterface({ input: path === '-' ? process.stdin : createReadStream(path), crlfDelay: Infinity });
  let n = 0;
  for await (const line of lines) {
    n++;
    if (line === '') continue;
    const tab = line.indexOf('\t');
    if (tab < 0) throw new NovaError('BAD_ARGUMENT', `${path}:${n}: no tab between key and value`);
    yield [parsePrintable(line.slice(0, tab), `${path}:${n}: key`), parsePrintable(line.slice(tab + 1), `${path}:${n}: value`)];
  }
}

/** The bench's records 0…n−1, as its load phase writes them. */
function* generated(n: number, valueSize: number): Generator<[Buffer, Buffer]> {
  for (let i = 0; i < n; i++) yield [keyOf(i), makeValue(i, 1, valueSize, false)];
}

/** Where the client commands find the cluster. */
function clientOptions(cmd: Command): Command {
  return cmd
    .option('--coordinator <host:port,...>', 'the cluster\'s coordinator (several on etcd: the one that leads is found)')
    .option('--dir <path>', 'or the directory of `nova up`', DEFAULT_DIR);
}

/** The client commands that read and write keys may go through the Gemini cache. */
function cacheOption(cmd: Command): Command {
  return cmd.addOption(new Option('--cache <mode>', 'read and write through the cluster\'s Gemini cache, whose mode (--cache-mode of the cluster) this must name; none: the LTCs alone')
    .choices(['none', ...CACHE_MODES]).default('none'));
}

async function withClient(o: { coordinator?: string; dir: string; cache?: CacheMode | 'none' }, fn: (c: NovaClient) => Promise<void>): Promise<void> {
  const c = await NovaClient.connect({ coordinator: o.coordinator, dir: o.dir, timeoutMs: 15_000, cache: o.cache });
  try {
    await fn(c);
  } finally {
    c.close();
  }
}

/** Each range's figures, from the LTCs serving them (a `stats` call each); why not, if they could not be had. */
async function rangeStats(coordinator: string): Promise<{ byRange: Map<number, Record<string, unknown>>; error?: string }> {
  try {
    const c = await NovaClient.connect({ coordinator, timeoutMs: 10_000 });
    try {
      const rows = (await c.stats()) as Array<Record<string, unknown> & { range: number }>;
      return { byRange: new Map(rows.map((r) => [r.range, r])) };
    } finally {
      c.close();
    }
  } catch (err) {
    return { byRange: new Map(), error: `${(err as Error).message} (is every LTC up?)` };
  }
}

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

/** A range's figures in a line: its Dranges and their shares, reorganizations, compactions, stalls, memory (and its LTC's RSS, which the budget does not bound). */
function rangeLine(x: Record<string, unknown>): string {
  const n = (k: string): number => (typeof x[k] === 'number' ? x[k] as number : 0);
  const copies = Array.isArray(x.drangeCopies) ? x.drangeCopies as number[] : [];
  // A duplicated Drange's share shows its copies: 40%×2.
  const shares = Array.isArray(x.drangeShares) ? (x.drangeShares as number[]).map((v, i) => `${Math.round(v * 100)}%${(copies[i] ?? 1) > 1 ? `×${copies[i]}` : ''}`).join(' ') : '';
  return `${n('dranges')} Dranges${shares ? ` (writes ${shares}; imbalance ${n('loadImbalance').toFixed(4)})` : ''}, ${n('duplicatedDranges')} duplicated, ` +
    `${n('minorReorganizations')} minor and ${n('majorReorganizations')} major reorganizations; ` +
    `${n('flushes')} flushes, ${n('compactions')} compactions (at once: max ${n('maxJobsInParallel')}, mean ${n('meanJobsInParallel').toFixed(2)}); ` +
    `tables per level ${Array.isArray(x.tablesPerLevel) ? (x.tablesPerLevel as number[]).join('/') : '?'}; ${n('delayedRounds')} commit rounds slowed (${Math.round(n('delayMs'))} ms), ${n('stalls')} write stalls (${Math.round(n('stallMs'))} ms); ` +
    `memory ${mib(n('memoryBytes'))}${n('memoryBudgetBytes') > 0 ? ` of ${mib(n('memoryBudgetBytes'))}` : ' (no budget: tables held whole)'}` +
    `; its LTC's resident memory ${mib(n('ltcRssBytes'))}${n('ltcMemoryLimitBytes') > 0 ? ` under a limit of ${mib(n('ltcMemoryLimitBytes'))} (the runtime beside its ranges: ${mib(n('ltcRuntimeBytes'))})` : ''}` +
    `; ${n('tablesToRepair')} tables with copies to repair, ${n('copiesFoundDamaged')} copies found damaged, ${n('readsFromOtherCopy')} reads from another copy` +
    (n('tablesDamaged') > 0 ? `; ${n('tablesDamaged')} tables damaged in every copy (no compaction takes them): run nova repair ${String(x.range)}` : '');
}

/** What `nova repair` (and `nova db repair`) found and did, as lines for a person. */
export function salvageLines(what: string, r: SalvageReport): string[] {
  const lines = [`${what}: ${r.tablesChecked} tables read (${(r.bytesRead / 2 ** 20).toFixed(1)} MiB); ${r.salvaged.length} damaged` +
    (r.salvaged.length > 0 ? `, ${r.entriesLost} entries lost${r.l0Merged > 0 ? `; L0 (${r.l0Merged} tables) merged into L1 to keep its order` : ''}` : '')];
  for (const t of r.salvaged) {
    lines.push(`  table ${t.file} (level ${t.level}): kept ${t.kept} of ${t.entries} entries; ${t.unreadable !== undefined ? `its index does not read (${t.unreadable})` : `${t.blocksLost} of ${t.blocks} blocks lost`}`);
    for (const l of t.lost) lines.push(`    lost: keys ${l.keys} (block at offset ${l.offset}${l.why ? `: ${l.why}` : ''})`);
  }
  return lines;
}

export function addClusterCommands(program: Command, bin: string): void {
  knobs(program.command('up')
    .description('start a local cluster in the background (or what is missing of it) and wait until it serves')
    .option('--dir <path>', 'the cluster\'s directory', DEFAULT_DIR)
    .option('--ltcs <n>', 'η: LTCs (default 1, or as many as the cluster had); on a running cluster, LTCs are added or removed to reach it', positiveInt)
    .option('--stocs <n>', 'β: StoCs (default 3, or as many as the cluster had); on a running cluster, StoCs are added or removed (drained) to reach it', positiveInt)
    .option('--caches <n>', 'Gemini cache instances (default none, or as many as the cluster had; --cache-mode says how they recover); on a running cluster, instances are added to reach it', nonNegativeInt)
    .option('--host <host>', 'address components listen on (0.0.0.0: every interface)', '127.0.0.1')
    .option('--advertise <host>', 'the address clients reach the coordinator and LTCs at (default: --host, or 127.0.0.1 for 0.0.0.0)')
    .option('--tls-cert <file>', 'TLS on the coordinator and the LTCs\' client ports: their certificate (PEM), for the address they are reached at; kept for later commands')
    .option('--tls-key <file>', 'TLS: the certificate\'s private key (PEM)')
    .option('--tls-ca <file>', 'TLS: the CA (PEM) that signed the certificate; components and clients check it')
    .option('--cap <caps>', `run each component in a cgroup of its own with these limits, so one machine behaves like many small ones: role.resource=value,... with role ${CAP_ROLES.join('|')}, ` +
      'resource cpu (CPUs), memory (bytes, its page cache included; an LTC gives its ranges less than --ltc-memory to keep within it), disk (bytes written per second: what a StoC syncs, its tables) or disk-read ' +
      '(e.g. ltc.cpu=0.25,stoc.cpu=0.25,stoc.memory=1GiB,stoc.disk=40MB/s); ' +
      'kept for components started later, applied to those running (memory: counting what they use from then on); none lifts them. Needs root and cgroups (v1 cpu, memory and blkio, or v2)', capsArg))
    .action(async (o: KnobFlags & { dir: string; ltcs?: number; stocs?: number; caches?: number; host: string; advertise?: string; tlsCert?: string; tlsKey?: string; tlsCa?: string; cap?: Caps }) => {
      const stored = storedConfig(o.dir);
      if (stored) refuseConflicts(stored, givenSettings(o), splitsOf(o), o.dir);
      else newSettings(givenSettings(o)); // knobs a new cluster's coordinator would refuse: refused before any process starts
      const file = await up({
        dir: o.dir, ltcs: o.ltcs, stocs: o.stocs, caches: o.caches, host: o.host, advertise: o.advertise, bin, coordinatorArgs: knobArgs(o), caps: o.cap,
        ...(o.tlsCert || o.tlsCa ? { tls: { cert: o.tlsCert, key: o.tlsKey, ca: o.tlsCa } } : {}),
        progress: (line) => process.stderr.write(`nova up: ${line}\n`),
      });
      const caps = readCaps(o.dir);
      console.log(`cluster serving: coordinator ${file.coordinator}; ${file.components.length} processes; state in ${o.dir}${caps ? `; caps ${capsText(caps)}` : ''}`);
      const mode = storedConfig(o.dir)?.settings.cacheMode;
      const cached = file.components.some((c) => c.role === 'cache') && mode ? ` --cache ${mode}` : '';
      console.log(`try: nova put hello world --dir ${o.dir}${cached} && nova get hello --dir ${o.dir}${cached}`);
    });

  program.command('down')
    .description('stop the local cluster gracefully: LTCs flush their memtables, then StoCs and the coordinator stop')
    .option('--dir <path>', 'the cluster\'s directory', DEFAULT_DIR)
    .action(async (o: { dir: string }) => {
      const n = await down(o.dir, (line) => process.stderr.write(`nova down: ${line}\n`));
      console.log(n === 0 ? 'nothing was running' : `stopped ${n} process(es)`);
    });

  clientOptions(program.command('status')
    .description('print the components (role, id, address, pid, up or down), the ranges and the config id, and each range\'s figures from its LTC (Dranges and their shares of writes, reorganizations, compactions, stalls), and for a range its LTC cannot open, why and for how long')
    .option('--json', 'print JSON instead (each range\'s figures whole, under "stats")', false))
    .action(async (o: { coordinator?: string; dir: string; json: boolean }) => {
      const address = o.coordinator ?? coordinatorOf(o.dir);
      const s = await fetchStatus(address);
      const stats = await rangeStats(address);
      const local = o.coordinator ? undefined : readClusterFile(o.dir);
      const pidOf = (role: string, id: number) => local?.components.find((c) => c.role === role && c.id === id)?.pid;
      if (o.json) {
        console.log(JSON.stringify({
          coordinator: address, configId: s.config.id, settings: s.config.settings,
          components: s.members.map((m) => ({ role: m.role, id: m.id, address: m.role === 'stoc' ? `fabric(${m.address.length} chars)` : m.address, pid: m.pid, up: m.alive, serving: m.serving,
            ...(m.role === 'ltc' ? { unopened: m.alive ? m.unopened ?? [] : [] } : {}) })),
          ...(s.cache ? { cache: s.cache } : {}),
          ranges: s.config.ranges.map((r) => ({ id: r.id, start: r.start.toString('utf8'), end: r.end?.toString('utf8') ?? null, ltc: r.ltc,
            stats: stats.byRange.get(r.id) ?? null })),
          ...(stats.error ? { statsError: stats.error } : {}),
        }, null, 2));
        return;
      }
      const caps = o.coordinator ? undefined : readCaps(o.dir);
      console.log(`coordinator ${address}  config ${s.config.id}  pid ${pidOf('coordinator', 1) ?? '?'}${caps ? `  caps ${capsText(caps)}` : ''}`);
      console.log('role   id  up    pid      address / serving');
      for (const m of s.members) {
        const where = m.role === 'ltc' ? `${m.address}  ranges ${m.serving.join(',') || '-'}` : m.role === 'cache' ? m.address : `fabric worker on ${m.host || 'this host'}`;
        console.log(`${m.role.padEnd(5)}  ${String(m.id).padEnd(2)}  ${(m.alive ? 'up' : 'DOWN').padEnd(4)}  ${String(m.pid).padEnd(7)}  ${where}`);
      }
      for (const r of s.config.ranges) {
        console.log(`range ${r.id}: [${printable(r.start, 40) || '""'}, ${r.end ? printable(r.end, 40) : '∞'}) on LTC ${r.ltc}`);
        const x = stats.byRange.get(r.id);
        if (x) console.log(`  ${rangeLine(x)}`);
        for (const u of openFailures(s, r.id)) console.log(`  not open on LTC ${u.ltc} for ${Math.round(u.forMs / 1000)} s: ${u.error}`);
      }
      if (stats.error) console.log(`range figures unavailable: ${stats.error}`);
      if (s.cache) {
        const f = s.cache.fragments;
        console.log(`cache (${s.cache.mode}): fragments ${f.normal} normal, ${f.transient} transient, ${f.recovery} recovery; ${s.cache.discards} discarded since the coordinator started`);
        for (const i of s.cache.instances) {
          console.log(`  instance ${i.id} ${i.alive ? 'up' : 'DOWN'}: ${i.gets} lookups, ${i.hits} hits${i.hitRatio !== undefined ? `; hit ratio ${(i.hitRatio * 100).toFixed(1)}% over 2 s` : ''}`);
        }
      }
    });

  knobs(program.command('coordinator')
    .description('run the coordinator in the foreground (multi-machine deployments)')
    .option('--dir <path>', 'its state directory', join(DEFAULT_DIR, 'coordinator'))
    .option('--host <host>', 'address to listen on (0.0.0.0: every interface, with --advertise)', '127.0.0.1')
    .option('--advertise <host>', 'the address components and clients reach it at (default: --host)')
    .option('--port <n>', 'port (0 picks a free one)', port, 7070)
    .option('--secret-file <path>', 'the cluster\'s secret (nova up makes one in the cluster\'s directory): components and clients must prove they know it; without one, the coordinator serves anyone who reaches its port')
    .option('--tls-cert <file>', 'TLS: this server\'s certificate (PEM); with --tls-key, it serves only TLS')
    .option('--tls-key <file>', 'TLS: the certificate\'s private key (PEM)')
    .option('--tls-ca <file>', 'TLS: the CA (PEM) the coordinator\'s and LTCs\' certificates are checked against')
    .option('--ltcs <n>', 'LTCs a new cluster\'s ranges are spread over', positiveInt, 1)
    .option('--etcd <host:port,...>', 'keep the configuration in etcd instead of --dir, and run as one of several coordinators: one leads, the others stand by and take over within seconds of its death (components and clients take --coordinator A,B,C)')
    .option('--etcd-prefix <key>', 'the etcd keys\' prefix: one etcd serves several clusters under different prefixes', '/nova'))
    .action((o: KnobFlags & { dir: string; host: string; advertise?: string; port: number; ltcs: number; etcd?: string; etcdPrefix: string }) =>
      runCoordinator({
        dir: o.dir, host: o.host, advertise: o.advertise, port: o.port, ltcs: o.ltcs, splits: splitsOf(o), settings: givenSettings(o),
        ...(o.etcd !== undefined ? { etcd: parseEndpoints(o.etcd), etcdPrefix: o.etcdPrefix } : {}),
      }));

  for (const role of ['stoc', 'ltc'] as const) {
    const name = role === 'stoc' ? 'StoC' : 'LTC';
    const group = program.command(role).description(role === 'stoc'
      ? 'StoCs: run one in the foreground (the default), add one to a running cluster, or remove one'
      : 'LTCs: run one in the foreground (the default), add one to a running cluster, or remove one');
    group.command('run', { isDefault: true })
      .description(role === 'stoc' ? 'run a StoC (storage component) in the foreground' : 'run an LTC (LSM-tree component) in the foreground')
      .requiredOption('--id <n>', `this ${name}'s id (1, 2, ...)`, positiveInt)
      .requiredOption('--coordinator <host:port,...>', 'the coordinator to register with (several on etcd: the one that leads is found)')
      .option('--cluster-file <path>', 'a cluster.json to read the coordinator\'s address from again if it stops answering (nova up passes its own)')
      .option('--secret-file <path>', `the cluster's secret (nova up passes its own); without one, the ${name} serves anyone who reaches it`)
      .option('--tls-cert <file>', 'LTC: TLS on its client port: its certificate (PEM), with --tls-key')
      .option('--tls-key <file>', 'LTC: the certificate\'s private key (PEM)')
      .option('--tls-ca <file>', 'the CA (PEM) the coordinator\'s and LTCs\' certificates are checked against (a cluster with TLS)')
      .option('--dir <path>', 'its directory (default nova-data/<role>-<id>)')
      .option('--host <host>', 'address to listen on (LTC: 0.0.0.0 for every interface, with --advertise)', '127.0.0.1')
      .option('--advertise <host>', 'LTC: the address clients reach it at (default: --host)')
      .option('--port <n>', 'client port (LTC; 0 picks a free one)', port, 0)
      .option('--peers <n>', `StoC: LTCs and StoCs it serves at once, each with an 8 MiB window of its file buffer; more are answered BUSY (default ${DEFAULT_PEERS})`, positiveInt)
      .action((o: { id: number; coordinator: string; clusterFile?: string; dir?: string; host: string; advertise?: string; port: number; peers?: number }) => {
        const c = { ...o, dir: o.dir ?? join(DEFAULT_DIR, `${role}-${o.id}`) };
        return role === 'stoc' ? runStoc(c) : runLtc(c);
      });
    group.command('add')
      .description(role === 'stoc'
        ? 'start one more StoC of the local cluster in --dir; it takes new tables, logs and compactions at once'
        : 'start one more LTC of the local cluster in --dir; it takes ranges by the rebalancing policy (nova rebalance). An LTC started by hand elsewhere (nova ltc run --coordinator …) joins the same way')
      .option('--id <n>', `its id (default: the next free one)`, positiveInt)
      .option('--dir <path>', 'the cluster\'s directory', DEFAULT_DIR)
      .option('--host <host>', 'address it listens on (0.0.0.0: every interface)', '127.0.0.1')
      .option('--advertise <host>', 'LTC: the address clients reach it at (default: --host, or 127.0.0.1 for 0.0.0.0)')
      .option('--json', 'print JSON', false)
      .action(async (o: { id?: number; dir: string; host: string; advertise?: string; json: boolean }) => {
        const c = await addComponent({ dir: o.dir, host: o.host, advertise: o.advertise, bin, progress: (line) => process.stderr.write(`nova ${role} add: ${line}\n`) }, role, o.id);
        const s = await fetchStatus(coordinatorOf(o.dir));
        const ranges = s.config.ranges.filter((r) => r.ltc === c.id).map((r) => r.id);
        if (o.json) console.log(JSON.stringify({ role, id: c.id, pid: c.pid, ...(role === 'ltc' ? { ranges } : {}) }, null, 2));
        else console.log(`${role} ${c.id} up (pid ${c.pid})${role === 'ltc' ? `; ranges ${ranges.join(', ') || 'none'}` : ''}`);
      });
    const remove = group.command('remove <id>')
      .description(role === 'stoc'
        ? 'remove a StoC: it takes no new files, every LTC copies its ranges\' tables, logs and MANIFESTs off it, then it stops and leaves the configuration. ' +
          'With --dead, for a StoC gone for good: it leaves at once, and each range drops the tables that had a fragment on it, listed by name'
        : 'remove an LTC: its ranges move to the other LTCs first, then it stops and leaves the configuration')
      .option('--coordinator <host:port>', 'the cluster\'s coordinator (a cluster on other machines: its process is not waited for)')
      .option('--dir <path>', 'or the directory of `nova up`', DEFAULT_DIR)
      .option('--json', 'print JSON', false);
    if (role === 'stoc') remove.option('--dead', 'the StoC is gone for good (refused while it is alive): recovery stops waiting for it; what only it held is lost and listed', false);
    remove
      .action(async (id: string, o: { coordinator?: string; dir: string; json: boolean; dead?: boolean }) => {
        if (role === 'stoc') {
          const r = await removeStocFrom(o.coordinator ? undefined : o.dir, o.coordinator ?? coordinatorOf(o.dir), positiveInt(id), o.dead === true);
          const lost = r.ltcs.flatMap((l) => l.lost.map((t) => `LTC ${l.ltc} ${t}`));
          if (lost.length > 0) process.exitCode = 1; // data is gone: scripts must notice
          if (o.json) {
            console.log(JSON.stringify(r, null, 2));
            return;
          }
          const copied = r.ltcs.reduce((n, l) => n + l.tablesCopied, 0);
          const merged = r.ltcs.reduce((n, l) => n + l.l0Merged, 0);
          console.log(`stoc ${r.stoc} removed${r.dead ? ' as dead' : ' (drained)'}: ${copied} table(s) copied and ${merged} L0 table(s) merged off it by ${r.ltcs.length} LTC(s); ${lost.length} table(s) lost`);
          for (const t of lost) console.log(`  lost: ${t}`);
          if (r.silent.length > 0) console.log(`  LTC ${r.silent.join(', ')} did not answer: their ranges drop what was lost when they open (see their logs)`);
          return;
        }
        const r = await removeLtc(o.coordinator ? undefined : o.dir, o.coordinator ?? coordinatorOf(o.dir), positiveInt(id));
        if (o.json) console.log(JSON.stringify(r, null, 2));
        else console.log(`ltc ${r.ltc} removed${r.stopped ? ' and stopped' : ' (it did not answer: stop it by hand if it runs)'}; ${r.moves.map((m) => `range ${m.range} to LTC ${m.to} (${m.unavailableMs} ms)`).join(', ') || 'it held no range'}`);
      });
  }

  const cache = program.command('cache').description('Gemini cache instances: run one in the foreground (the default), or print every instance\'s figures');
  cache.command('run', { isDefault: true })
    .description('run a cache instance in the foreground: entries in memory and in --dir (a restart reloads them), leases, dirty lists, and a recovery worker')
    .requiredOption('--id <n>', 'this instance\'s id (1, 2, ...)', positiveInt)
    .requiredOption('--coordinator <host:port,...>', 'the coordinator to register with')
    .option('--cluster-file <path>', 'a cluster.json to read the coordinator\'s address from again if it stops answering')
    .option('--secret-file <path>', 'the cluster\'s secret; without one, the instance serves anyone who reaches it')
    .option('--dir <path>', 'where its entries are kept (default nova-data/cache-<id>)')
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--advertise <host>', 'the address clients reach it at (default: --host)')
    .option('--port <n>', 'port (0 picks a free one)', port, 0)
    .option('--memory-bytes <n>', 'bytes of entries held (least recently used evicted past it)', positiveInt, 256 * 2 ** 20)
    .option('--disk-bytes <n>', 'bytes its file may take (at least twice --memory-bytes, at most 2 GiB)', positiveInt, 1024 * 2 ** 20)
    .option('--volatile', 'keep nothing on disk: a restart starts empty', false)
    .action((o: { id: number; coordinator: string; clusterFile?: string; dir?: string; host: string; advertise?: string; port: number; memoryBytes: number; diskBytes: number; volatile: boolean }) =>
      runCache({ ...o, dir: o.dir ?? join(DEFAULT_DIR, `cache-${o.id}`) }));
  clientOptions(cache.command('stats')
    .description('print each cache instance\'s figures: entries, lookups and hits, discarded entries, leases')
    .option('--json', 'print JSON', false))
    .action(async (o: { coordinator?: string; dir: string; json: boolean }) => {
      const s = await fetchStatus(o.coordinator ?? coordinatorOf(o.dir));
      const rows: Array<CacheServerStats | { id: number; error: string }> = [];
      for (const m of s.config.members.filter((x) => x.role === 'cache')) {
        try {
          const link = await TcpRpcClient.connect(m.address, { timeoutMs: 3_000 });
          try {
            rows.push(await link.call<CacheServerStats>('stats', [], 3_000));
          } finally {
            link.close();
          }
        } catch (err) {
          rows.push({ id: m.id, error: (err as Error).message });
        }
      }
      if (o.json) {
        console.log(JSON.stringify({ cache: s.cache ?? null, instances: rows }, null, 2));
        return;
      }
      if (rows.length === 0) console.log('no cache instances: start one with nova cache run --id 1 --coordinator HOST:PORT');
      for (const r of rows) {
        if ('error' in r) {
          console.log(`instance ${r.id}: unreachable (${r.error})`);
          continue;
        }
        const c = r.counters;
        console.log(`instance ${r.id}: ${r.store.entries} entries (${mib(r.store.bytes)}), file ${mib(r.store.logBytes)}; ${c.gets} lookups, ${c.hits} hits` +
          `${c.gets > 0 ? ` (${(100 * c.hits / c.gets).toFixed(1)}%)` : ''}; as a secondary ${c.secondaryGets} lookups, ${c.secondaryHits} hits; ` +
          `${c.inserts} inserts, ${c.refusedInserts} refused; ${c.invalidations} invalidations; ${c.discarded} entries discarded; ${r.store.dirtyLists} dirty lists; config ${r.configId}`);
      }
    });

  clientOptions(program.command('rebalance')
    .description('move ranges off LTCs whose load (requests/s and bytes written/s over 10 s) is above the mean by --rebalance-threshold-pct; prints each move')
    .option('--dry-run', 'print the moves without making them', false)
    .option('--json', 'print JSON', false))
    .action(async (o: { coordinator?: string; dir: string; dryRun: boolean; json: boolean }) => {
      const r = await rebalance(o.coordinator ?? coordinatorOf(o.dir), o.dryRun);
      if (o.json) {
        console.log(JSON.stringify(r, null, 2));
      } else if (r.plan.length === 0) {
        console.log('balanced: nothing to move');
      } else {
        for (const [i, m] of r.plan.entries()) {
          const done = r.moves[i];
          console.log(`range ${m.range}: LTC ${m.from} -> LTC ${m.to}${o.dryRun ? ' (planned)' : done ? ` (refused requests for ${done.unavailableMs} ms)` : ' (not made)'}`);
        }
      }
      if (r.error) {
        process.stderr.write(`nova rebalance: stopped: ${r.error}\n`);
        process.exitCode = 1;
      }
    });

  cacheOption(clientOptions(program.command('put <key> <value>').description('write a key (UTF-8 key and value)')))
    .action((key: string, value: string, o: { coordinator?: string; dir: string; cache: CacheMode | 'none' }) =>
      withClient(o, (c) => c.put(Buffer.from(key), Buffer.from(value))));
  cacheOption(clientOptions(program.command('get <key>').description('write the value of a key to stdout; exit 1 if it is absent')))
    .action((key: string, o: { coordinator?: string; dir: string; cache: CacheMode | 'none' }) => withClient(o, async (c) => {
      const v = await c.get(Buffer.from(key));
      if (v === undefined) {
        process.stderr.write(`nova: ${key}: not found\n`);
        process.exitCode = 1;
      } else {
        process.stdout.write(v);
        if (process.stdout.isTTY) process.stdout.write('\n');
      }
    }));
  clientOptions(program.command('compact').description('make every LTC flush and merge each range\'s whole tree into its deepest level (writes go on meanwhile)'))
    .action((o: { coordinator?: string; dir: string }) => withClient(o, (c) => c.compact()));
  clientOptions(program.command('repair <range>')
    .description('read every table of a range, each copy tried, and salvage those damaged in every copy: the entries of the blocks that read are kept, what was lost is reported, and the range\'s tree is made consistent again (compactions, which wait while a table is damaged, go on). Reads of lost keys may then see an older version, or none')
    .option('--json', 'print the report as JSON', false))
    .action((range: string, o: { coordinator?: string; dir: string; json: boolean }) => withClient(o, async (c) => {
      const r = await c.repairRange(positiveInt(range));
      if (o.json) console.log(JSON.stringify(r, null, 1));
      else for (const line of salvageLines(`range ${r.range}`, r)) console.log(line);
    }));
  cacheOption(clientOptions(program.command('del <key>').description('delete a key')))
    .action((key: string, o: { coordinator?: string; dir: string; cache: CacheMode | 'none' }) => withClient(o, (c) => c.delete(Buffer.from(key))));
  clientOptions(program.command('load')
    .description('bulk-load records: each chunk sorted and written as one table its LTC ingests off the write path (refused chunks as ordinary batches); input in key order loads fastest. Progress on stderr')
    .option('--file <path>', 'key<TAB>value lines as nova scan prints them (JSON strings or 0x-hex); - for stdin')
    .option('--generate <n>', 'instead, the bench\'s n records (user000000000000…, as nova bench loads them)', positiveInt)
    .option('--value-size <bytes>', 'with --generate: value size', positiveInt, 1024)
    .option('--chunk-bytes <n>', 'records per table ingested, in bytes (memory: about concurrency + 1 of them)', positiveInt, 16 * 2 ** 20)
    .option('--concurrency <n>', 'chunks in flight', positiveInt, 4)
    .option('--json', 'print the report as JSON', false))
    .action(async (o: { coordinator?: string; dir: string; file?: string; generate?: number; valueSize: number; chunkBytes: number; concurrency: number; json: boolean }) => {
      if ((o.file === undefined) === (o.generate === undefined)) throw new InvalidArgumentError('give one of --file or --generate');
      const source = o.file !== undefined ? recordsOfFile(o.file) : generated(o.generate!, o.valueSize);
      await withClient(o, async (c) => {
        const r = await bulkLoad(c, source, { chunkBytes: o.chunkBytes, concurrency: o.concurrency,
          onProgress: (n, s) => process.stderr.write(`nova load: ${n.toLocaleString('en-US')} records, ${Math.round(n / Math.max(s, 1e-3)).toLocaleString('en-US')}/s\n`) });
        if (o.json) {
          console.log(JSON.stringify(r, null, 1));
          return;
        }
        console.log(`loaded ${r.records.toLocaleString('en-US')} records (${(r.bytes / 2 ** 20).toFixed(1)} MiB) in ${r.seconds.toFixed(1)} s, ` +
          `${Math.round(r.records / Math.max(r.seconds, 1e-3)).toLocaleString('en-US')} records/s: ${r.tables} tables ingested (${r.ingested.toLocaleString('en-US')} records), ` +
          `${r.written.toLocaleString('en-US')} written as batches${r.refusals.length ? ` (refused: ${r.refusals.join('; ')})` : ''}`);
      });
    });

  clientOptions(program.command('scan <start>').description('print key<TAB>value lines from <start> in key order, across ranges')
    .option('--end <key>', 'stop before this key')
    .option('--limit <n>', 'at most this many entries', positiveInt, 100))
    .action((start: string, o: { coordinator?: string; dir: string; end?: string; limit: number }) => withClient(o, async (c) => {
      const rows = await c.scan(Buffer.from(start), { end: o.end === undefined ? undefined : Buffer.from(o.end), limit: o.limit });
      for (const [k, v] of rows) console.log(`${printable(k, Infinity)}\t${printable(v, Infinity)}`);
    }));
}
