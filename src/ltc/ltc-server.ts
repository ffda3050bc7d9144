/**
 * The LTC process (DESIGN.md §4): serves the ranges the coordinator assigns to it, each an
 * Engine whose tables live on StoCs (StocBlockStore) and whose memtable logs live on StoCs
 * through LogC (StocLogStore). Clients reach it over TCP (net/tcp-rpc-server.ts).
 *
 * Every client request carries the config id it routed by. A request with an older id, or
 * for a key in a range this LTC does not serve, fails with STALE_CONFIG carrying the
 * current id, so the client refreshes and retries; one with a newer id makes the LTC fetch
 * the configuration and answers UNAVAILABLE (retry).
 *
 * Each range's MANIFEST is on StoCs with R replicas (stoc-manifest-store.ts), so nothing of
 * a range's state is only on this LTC; its directory (`range-<id>/`) holds the lock. So a
 * range moves (doc/decisions/range-moves.md) by closing here, without a flush — its logs and
 * MANIFEST on the StoCs are then final — and opening on the other LTC, which replays the logs.
 * A range the configuration takes away is let go at once (its requests answered STALE_CONFIG,
 * writes already queued applied first); one given to this LTC with `from` set waits until the
 * coordinator says the old LTC has let go.
 *
 * The LTC serves only while its lease holds: once it has not renewed it (a heartbeat the
 * coordinator answered) for the cluster's ltcLeaseMs, its ranges may be another LTC's, so it
 * answers every request UNAVAILABLE and acknowledges no write until it hears from the
 * coordinator again.
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { withDeadline } from '../common/deadline.js';
import { NovaError } from '../common/errors.js';
import { lockDir } from '../common/files.js';
import { TcpRpcServer, advertisedHost } from '../net/tcp-rpc-server.js';
import { rangeOf, type ClusterConfig, type Fill, type RangeInfo } from '../cluster/config.js';
import { MAX_OPEN_ERROR, Membership } from '../cluster/membership.js';
import { Fabric } from '../transport/fabric.js';
import { Rpc } from '../transport/rpc.js';
import { Engine, type EngineStats } from './engine.js';
import type { IngestOutcome } from './ingest.js';
import { majorCollections, processPauses, type Pauses } from '../common/pauses.js';
import { memoryLimitOfSelf } from '../common/memory-limit.js';
import { heapFreeBytes, trimHeap } from '../common/heap-free.js';
import { MemoryGovernor } from './memory-governor.js';
import type { SessionRef } from '../common/write-id.js';
import { rangeEnv } from './range-env.js';
import type { EvacuationReport } from './evacuation.js';
import type { StocBlockStore } from './stoc-block-store.js';
import type { StocCompactor } from './stoc-compactor.js';
import { StocPool, namesOnStocs } from '../stoc/stoc-pool.js';
import { startWorkers } from '../compaction/worker-pool.js';

/** Largest scan one request may ask for; clients page through longer ones. */
export const MAX_SCAN = 10_000;
/** A scan page stops once it holds this many key and value bytes (it fits any frame). */
export const MAX_SCAN_BYTES = 4 * 1024 * 1024;
const REOPEN_MS = 1_000;
/** How often the LTC checks its resident memory against the limit it runs under (memory-governor.ts). */
const GOVERN_MS = 1_000;
/** The share of its lease after which an LTC stops serving: it gives up before the coordinator does. */
const LEASE_MARGIN = 0.9;
/** How long a retired LTC waits before it stops, so its answer to the coordinator leaves first. */
const RETIRE_MS = 200;
/** How long a range waits for as many StoCs as it wants log replicas before opening with fewer. */
const STOC_WAIT_MS = 10_000;
/** A fill or trim copies or deletes this many keys, or this many bytes, per write. */
const FILL_ROWS = 1_024;
const FILL_BYTES = 1024 * 1024;
/** How long recovery waits for every StoC to answer before replaying the best log replica it has. */
const STRICT_LOG_READ_MS = 30_000;

/** How often ranges are checked for table copies to repair; the scrub's longest pause. */
const MAINTAIN_MS = 5_000;
/** How long a range whose repair pass did nothing waits before the next (unless what needs repair changed). */
const REPAIR_BACKOFF_MS = 60_000;
/** The scrub's shortest pause between two tables. */
const SCRUB_MIN_PAUSE_MS = 50;

export interface LtcOptions {
  dir: string;
  id: number;
  coordinator: string;
  /** A cluster.json naming the coordinator, read again if it moves (MembershipOptions). */
  clusterFile?: string;
  /** Where to listen; `advertise`: the host clients reach it at, if not `host` (a wildcard needs it). */
  host?: string;
  advertise?: string;
  port?: number;
  onLog?: (line: string) => void;
  /** Called once the coordinator has taken this LTC out of the cluster (`nova ltc remove`): it should stop. */
  onRetired?: () => void;
}

interface Served {
  info: RangeInfo;
  engine?: Engine;
  store?: StocBlockStore;
  compactor?: StocCompactor;
  opening?: Promise<void>;
  /** How long the last Engine.open took. */
  openMs?: number;
  /** Why the range is not open yet, and since when (performance.now()) its opens have failed; reported in heartbeats. */
  openFailure?: { message: string; since: number };
  /** Set once the configuration took the range away: resolves when the engine is closed. */
  leaving?: Promise<void>;
  /** Requests routed to the range and bytes of keys and values written, since it was opened here. */
  requests: number;
  bytesWritten: number;
  /** Writes sent to its engine and not yet answered: a fill waits for them (fill()). */
  pending: Set<Promise<unknown>>;
  /** Fills and trims of its engine, one after another (they must not interleave). */
  work: Promise<void>;
  /** The fill (fillKey) under way or done here, and when done, what it copied. */
  fillKey?: string;
  filling?: Promise<FillReport>;
  filled?: FillReport;
  /** The report of the last fill, once the configuration no longer has it (filled may be asked late). */
  lastFilled?: FillReport;
  /** The interval (intervalKey) whose outside was last trimmed, or is being trimmed. */
  trimmedFor?: string;
  /** StoCs leaving the cluster whose files this engine no longer uses, the one it is taking files off, and what that did (evacuate). */
  evacuated?: Set<number>;
  evacuating?: Promise<void>;
  evacuation?: EvacuationReport;
  /** After a fill or evacuation failed: neither is tried again before this time (Date.now()). */
  retryAt?: number;
}

/** What a fill (a split's or merge's copy) did. */
export interface FillReport {
  keys: number;
  bytes: number;
  fillMs: number;
}

export interface RangeStats extends EngineStats {
  range: number;
  /** Tables written to StoCs (flushes and compactions), their bytes and the time it took. */
  tablesToStocs: number;
  bytesToStocs: number;
  msToStocs: number;
  /** Compactions declined by StoCs and merged on the LTC instead. */
  compactionsDeclined: number;
  /** Tables with a copy to make again: fewer on the configuration's StoCs than --table-replicas (written while StoCs were down, or on a StoC removed), or found damaged. */
  tablesToRepair: number;
  /** Table reads that went to another copy after one failed or failed its checksum. */
  readsFromOtherCopy: number;
  /** Table copies found damaged (by reads or the scrub) since the range opened here; repair writes them again. */
  copiesFoundDamaged: number;
  /** Tables damaged in every copy: reads that need them fail, and no compaction takes them until `nova repair`. */
  tablesDamaged: number;
  /**
   * Resident memory of the LTC process serving the range, all its ranges together: with Node's
   * heap and the transport's buffers, which the memory budget does not count.
   */
  ltcRssBytes: number;
  /** Of it: V8's heap in use, and memory outside it (Buffers) that Node tracks. */
  ltcHeapBytes: number;
  ltcExternalBytes: number;
  /**
   * The memory limit the LTC process runs under (its cgroup's; 0 for none), and what it learned
   * it holds beside its ranges' memory: under a limit, its ranges' budgets add up to what the
   * limit leaves after that and a margin (memory-governor.ts), --ltc-memory at most.
   */
  ltcMemoryLimitBytes: number;
  ltcRuntimeBytes: number;
  /** The LTC process's event-loop delays and GC pauses over the last PAUSE_WINDOW_S seconds. */
  ltcPauses: Pauses;
}

export class LtcServer {
  private config!: ClusterConfig;
  private readonly served = new Map<number, Served>();
  private server!: TcpRpcServer;
  private membership!: Membership;
  private readonly fabric: Fabric;
  private readonly rpc: Rpc;
  private readonly pool: StocPool;
  private readonly unlock: () => void;
  private closing = false;
  /** When the lease was last renewed (Membership.renewedAt). */
  private renewedAt = -Infinity;
  /** How long letting each range go last took (release answers it after the range is gone). */
  private readonly closeMs = new Map<number, number>();
  private readonly governor = new MemoryGovernor();
  private governing: NodeJS.Timeout | undefined;
  /** The memory limit the process ran under at the last check (memoryLimitOfSelf). */
  private memoryLimit: number | undefined;

  private constructor(private readonly o: LtcOptions) {
    mkdirSync(o.dir, { recursive: true });
    this.unlock = lockDir(o.dir);
    this.fabric = Fabric.open();
    this.rpc = new Rpc(this.fabric);
    this.pool = new StocPool(this.fabric, this.rpc);
  }

  static async start(o: LtcOptions): Promise<LtcServer> {
    processPauses(); // watched from the start, so its figures cover the serving
    startWorkers();
    const l = new LtcServer(o);
    void l.maintain();
    l.governing = setInterval(() => l.govern(), GOVERN_MS).unref();
    try {
      const advertise = advertisedHost(o.host, o.advertise);
      l.server = await TcpRpcServer.listen({ host: o.host, advertise, port: o.port, name: `ltc ${o.id}`, onLog: o.onLog, handlers: l.handlers() });
      l.membership = await Membership.join({
        coordinator: o.coordinator, clusterFile: o.clusterFile, role: 'ltc', id: o.id, address: `${advertise}:${l.server.port}`, host: advertise,
        ranges: () => {
          const all = [...l.served.values()];
          return {
            serving: all.filter((s) => s.engine && !s.leaving).map((s) => s.info.id),
            holding: all.map((s) => s.info.id),
            load: all.map((s) => [s.info.id, s.requests, s.bytesWritten] as [number, number, number]),
            filled: all.filter((s) => s.filled && s.fillKey === fillKeyOf(l.config, s.info.id)).map((s) => s.info.id),
            unopened: all.filter((s) => !s.engine && s.openFailure).map((s) => [s.info.id, s.openFailure!.message.slice(0, MAX_OPEN_ERROR), Math.round(performance.now() - s.openFailure!.since)] as [number, string, number]),
          };
        },
        onConfig: (c) => l.apply(c), onLog: o.onLog, onRenewed: (at) => { l.renewedAt = at; },
      });
    } catch (err) {
      l.closing = true; // ends maintain()
      clearInterval(l.governing);
      await l.server?.close();
      await l.fabric.close();
      l.unlock();
      throw err;
    }
    return l;
  }

  get port(): number {
    return this.server.port;
  }

  /** Stops serving; with `flush`, writes every memtable to an SSTable first (nova down). */
  async close(flush = true): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    clearInterval(this.governing);
    await this.server.close();
    this.membership.stop();
    for (const s of this.served.values()) {
      await s.opening?.catch(() => undefined);
      if (s.leaving) await s.leaving;
      if (!s.engine) continue;
      if (flush) await s.engine.flush().catch((err: Error) => this.log(`range ${s.info.id}: flush at shutdown failed: ${err.message}`));
      await s.engine.close().catch((err: Error) => this.log(`range ${s.info.id}: close failed: ${err.message}`));
    }
    this.pool.close();
    this.rpc.close();
    await this.fabric.close();
    this.unlock();
  }

  stats(): RangeStats[] {
    const mem = process.memoryUsage();
    const pauses = processPauses();
    return [...this.served.values()].filter((s) => s.engine).map((s) => ({
      range: s.info.id, ...s.engine!.stats,
      tablesToRepair: s.engine!.tablesToRepair,
      tablesDamaged: s.engine!.tablesDamaged,
      readsFromOtherCopy: s.store!.counters.otherCopy,
      copiesFoundDamaged: s.store!.counters.damaged,
      tablesToStocs: s.store!.counters.tables, bytesToStocs: s.store!.counters.bytes, msToStocs: s.store!.counters.ms,
      compactionsDeclined: s.compactor?.counters.declined ?? 0,
      ltcRssBytes: mem.rss, ltcHeapBytes: mem.heapUsed, ltcExternalBytes: mem.external, ltcPauses: pauses,
      ltcMemoryLimitBytes: this.memoryLimit ?? 0, ltcRuntimeBytes: this.governor.runtime,
    }));
  }

  private log(line: string): void {
    this.o.onLog?.(line);
  }

  /** Takes a new configuration: StoC addresses, ranges to let go and ranges to open. */
  private apply(config: ClusterConfig): void {
    const first = this.config === undefined;
    this.config = config;
    if (first) this.govern(); // a range opened before the first tick gets what a memory limit leaves
    this.pool.update(config);
    // Connected before a range needs them: a range moved here opens without waiting for that.
    for (const id of this.pool.placeable()) void this.pool.get(id).catch(() => undefined);
    for (const s of this.served.values()) {
      const r = config.ranges.find((x) => x.id === s.info.id);
      if (s.leaving) continue;
      // A range merged away stays open while one of ours is filled from it.
      const feeds = config.ranges.find((x) => x.ltc === this.o.id && x.fill?.from === s.info.id);
      if (!r && !feeds) this.letGo(s, 'it was merged into another range', true);
      // Another LTC may have opened it since, under a newer epoch: what we hold is old.
      else if (!r && feeds && feeds.epoch > s.info.epoch) this.letGo(s, `range ${feeds.id}, which it fills, is ours under epoch ${feeds.epoch}; reopening it from the StoCs`);
      else if (r && r.ltc !== this.o.id) this.letGo(s, 'the configuration moved it away');
      // Given back under a new epoch (it was another LTC's meanwhile): what we hold is old.
      else if (r && r.epoch !== s.info.epoch) this.letGo(s, `it is ours again under epoch ${r.epoch}; reopening it from the StoCs`);
    }
    for (const r of config.ranges) {
      if (r.ltc !== this.o.id) continue;
      const s = this.served.get(r.id);
      if (s) {
        if (!s.leaving) s.info = r;
      } else if (r.from === undefined) {
        void this.open(newServed(r));
      }
      // What a fill reads from, if the configuration no longer has it (a merge).
      const f = r.fill;
      if (f && r.from === undefined && !this.served.get(f.from) && !config.ranges.some((x) => x.id === f.from)) {
        // Fenced under this configuration's id: newer than any epoch the range had.
        void this.open(newServed({ id: f.from, start: f.start, end: f.end, ltc: this.o.id, epoch: config.id }));
      }
    }
    this.rebudget(); // the open ranges make room for those coming
    for (const s of this.served.values()) this.tend(s);
  }

  /**
   * Lets a range go: its engine closes once the writes already queued are applied, and the
   * background step running ends (no flush: the logs carry the memtables). The range is then
   * no longer held.
   */
  private letGo(s: Served, why: string, drop = false): void {
    const t0 = Date.now();
    this.log(`range ${s.info.id}: ${why}; letting it go`);
    s.leaving = (async () => {
      await s.opening?.catch(() => undefined);
      await s.work;
      // Without logs, the memtables are only here: they go to L0 first.
      if (this.config.settings.logMode === 'none') await s.engine?.flush().catch((err: Error) => this.log(`range ${s.info.id}: flush failed: ${err.message}`));
      await s.engine?.close().catch((err: Error) => this.log(`range ${s.info.id}: close failed: ${err.message}`));
      s.engine = undefined;
      if (drop) await this.drop(s.info.id);
      this.served.delete(s.info.id);
      this.pool.unfence(s.info.id);
      this.closeMs.set(s.info.id, Date.now() - t0);
      this.log(`range ${s.info.id} let go in ${Date.now() - t0} ms`);
      this.rebudget();
      if (!this.closing) this.apply(this.config); // it may have come back meanwhile
    })();
  }

  /**
   * What an open range's engine needs after a configuration: the fill of the keys it takes in
   * from another range (a split or merge), or the trim of keys outside its interval (left by a
   * split, or by an earlier attempt). Neither runs while another range is filled from it.
   */
  private tend(s: Served): void {
    if (!s.engine || s.leaving || this.closing) return;
    this.startEvacuation(s);
    const r = this.config.ranges.find((x) => x.id === s.info.id && x.ltc === this.o.id && x.from === undefined);
    if (!r) return;
    const key = fillKeyOf(this.config, r.id);
    if (key !== s.fillKey) {
      s.fillKey = key;
      if (s.filled) s.lastFilled = s.filled;
      s.filled = undefined;
      s.filling = undefined;
    }
    if (r.fill) {
      const src = this.served.get(r.fill.from);
      if (s.filling || !src?.engine || src.leaving || Date.now() < (s.retryAt ?? 0)) return; // the source's open, or the retry, calls tend again
      const f = r.fill;
      const filling = this.serially(s, () => this.fill(s, src, f, key!));
      s.filling = filling;
      filling.then((rep) => {
        if (s.filling === filling) s.filled = rep;
      }, (err: Error) => {
        if (s.filling !== filling) return;
        s.filling = undefined;
        this.retryLater(s, `filling from range ${f.from} failed: ${err.message}`);
      });
      return;
    }
    if (this.config.ranges.some((x) => x.fill?.from === r.id)) return;
    const interval = intervalKey(r);
    if (s.trimmedFor === interval) return;
    s.trimmedFor = interval;
    const still = (): boolean => s.trimmedFor === interval && !s.leaving && !this.config.ranges.some((x) => x.fill?.from === r.id);
    void this.serially(s, async () => {
      let n = 0;
      if (r.start.length > 0) n += await deleteKeys(s, Buffer.alloc(0), r.start, still);
      if (r.end) n += await deleteKeys(s, r.end, undefined, still);
      if (n > 0) this.log(`range ${r.id}: deleted ${n} key(s) outside its interval (left by a split or merge)`);
    }).catch((err: Error) => {
      if (s.trimmedFor === interval) s.trimmedFor = undefined;
      this.log(`range ${r.id}: deleting keys outside its interval failed: ${err.message}; trying again at the next configuration`);
    });
  }

  /**
   * Starts taking `s`'s files off the StoCs that are leaving the cluster (draining, or removed)
   * and that it has not yet left (Engine.evacuate), one evacuation at a time.
   */
  private startEvacuation(s: Served): void {
    if (s.evacuating || !s.engine || !s.evacuated || Date.now() < (s.retryAt ?? 0)) return;
    const away = [...this.config.members.filter((m) => m.role === 'stoc' && m.draining).map((m) => m.id), ...this.config.removedStocs ?? []];
    const todo = new Set(away.filter((id) => !s.evacuated!.has(id)));
    if (todo.size === 0) return;
    const engine = s.engine;
    const evacuating = this.serially(s, () => engine.evacuate(todo, () => !!s.leaving)).then((rep) => {
      for (const id of todo) s.evacuated!.add(id);
      const total = s.evacuation!;
      total.tablesCopied += rep.tablesCopied;
      total.bytesCopied += rep.bytesCopied;
      total.l0Merged += rep.l0Merged;
      total.lost = rep.lost;
      this.log(`range ${s.info.id}: off StoC ${[...todo].join(', ')}: ${rep.tablesCopied} table(s) (${rep.bytesCopied} bytes) copied, ${rep.l0Merged} L0 table(s) merged, ${rep.lost.length} lost`);
    }, (err: Error) => {
      if (!s.leaving) this.retryLater(s, `taking its files off StoC ${[...todo].join(', ')} failed: ${err.message}`);
    }).finally(() => {
      if (s.evacuating === evacuating) s.evacuating = undefined;
    });
    s.evacuating = evacuating;
  }

  /**
   * `evacuate [config id, stoc, timeout ms]` (the coordinator's, removing a StoC): resolves once
   * every range this LTC serves has taken its files off StoC `stoc`, with what that did.
   */
  private async awaitEvacuation(args: unknown[]): Promise<{ ranges: number } & EvacuationReport> {
    const [id, stoc, timeoutMs] = args;
    if (typeof id !== 'number' || typeof stoc !== 'number' || typeof timeoutMs !== 'number') throw new NovaError('BAD_ARGUMENT', 'evacuate takes [config id, StoC id, timeout ms]');
    if (id > this.config.id) await this.membership.refresh();
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const mine = this.config.ranges.filter((r) => r.ltc === this.o.id).map((r) => this.served.get(r.id));
      const open = [...this.served.values()].filter((s) => s.engine && !s.leaving);
      if (mine.every((s) => s?.engine && !s.leaving && s.evacuated?.has(stoc)) && open.every((s) => s.evacuated?.has(stoc))) {
        const lost = open.flatMap((s) => s.evacuation!.lost.map((t) => `range ${s.info.id}: ${t}`));
        const sum = (f: (e: EvacuationReport) => number): number => open.reduce((n, s) => n + f(s.evacuation!), 0);
        return { ranges: open.length, tablesCopied: sum((e) => e.tablesCopied), bytesCopied: sum((e) => e.bytesCopied), l0Merged: sum((e) => e.l0Merged), lost };
      }
      if (Date.now() > deadline) {
        throw new NovaError('DEADLINE_EXCEEDED', `LTC ${this.o.id}: its ranges did not all take their files off StoC ${stoc} within ${timeoutMs} ms (opening, or failing: see its log)`);
      }
      for (const s of open) this.tend(s);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** After a fill or evacuation of `s` failed: says why, and tends it again in REOPEN_MS, not sooner. */
  private retryLater(s: Served, why: string): void {
    s.retryAt = Date.now() + REOPEN_MS;
    this.log(`range ${s.info.id}: ${why}; retrying in ${REOPEN_MS} ms`);
    setTimeout(() => this.tend(s), REOPEN_MS).unref();
  }

  /**
   * The background care of every open range's tables, until close: the scrub reads one table's
   * copies after another, paced to scrubBytesPerSec over the LTC, and each MAINTAIN_MS the
   * ranges whose tables lack copies get them made again (Engine.repair).
   */
  private async maintain(): Promise<void> {
    const scrubbedUpTo = new Map<number, number>(); // range -> last table scrubbed
    // A repair that made nothing waits REPAIR_BACKOFF_MS before the range is tried again, unless
    // the count of its tables to repair changed (a StoC came back, or left).
    const idle = new Map<number, { until: number; count: number }>();
    let nextRepair = Date.now() + MAINTAIN_MS;
    let turn = 0;
    // Ranges come and go while it waits: each is taken with its engine of the moment, if any.
    const open = (): Array<{ s: Served; engine: Engine }> => [...this.served.values()]
      .filter((s) => s.engine && !s.leaving && !s.evacuating).map((s) => ({ s, engine: s.engine! }));
    while (!this.closing) {
      let pause = MAINTAIN_MS;
      try {
        const rate = this.config?.settings.scrubBytesPerSec ?? 0;
        const ranges = open();
        if (rate > 0 && ranges.length > 0) {
          const { s, engine } = ranges[turn++ % ranges.length];
          const done = await engine.scrubOne(scrubbedUpTo.get(s.info.id) ?? 0).catch(() => undefined);
          if (done) scrubbedUpTo.set(s.info.id, done.file);
          pause = Math.max(SCRUB_MIN_PAUSE_MS, Math.min(MAINTAIN_MS, ((done?.bytes ?? 0) / rate) * 1000));
        }
        if (Date.now() >= nextRepair) {
          nextRepair = Date.now() + MAINTAIN_MS;
          for (const { s, engine } of open()) {
            const count = s.engine === engine ? engine.tablesToRepair : 0;
            const last = idle.get(s.info.id);
            if (count === 0 || (last && last.count === count && Date.now() < last.until)) continue;
            await this.serially(s, () => engine.repair(() => !!s.leaving || this.closing || s.engine !== engine)).then((r) => {
              if (r.tablesRepaired > 0) this.log(`range ${s.info.id}: repaired ${r.tablesRepaired} table(s), ${r.copiesMade} copies written`);
              if (r.tablesRepaired === 0) idle.set(s.info.id, { until: Date.now() + REPAIR_BACKOFF_MS, count: engine.tablesToRepair });
              else idle.delete(s.info.id);
            }, (err: Error) => this.log(`range ${s.info.id}: repair stopped: ${err.message}`));
          }
        }
      } catch (err) {
        this.log(`table care failed: ${(err as Error).message}; trying again in ${MAINTAIN_MS} ms`);
      }
      await new Promise((resolve) => setTimeout(resolve, pause).unref());
    }
  }

  /** Runs `task` on `s`'s engine after the fills and trims before it. */
  private serially<T>(s: Served, task: () => Promise<T>): Promise<T> {
    const run = s.work.then(task);
    s.work = run.then(() => undefined, () => undefined);
    return run;
  }

  /**
   * Copies keys [f.start, f.end) of range `src` into `s` (doc/decisions/range-splits.md): their
   * writes are refused now, so once those already sent to `src` are answered, its keys there
   * are final. What an earlier attempt copied is deleted first, and `src`'s record of client writes adopted,
   * so a write applied there is not applied again here when a client retries it.
   */
  private async fill(s: Served, src: Served, f: Fill, key: string): Promise<FillReport> {
    const t0 = Date.now();
    await Promise.allSettled([...src.pending]);
    const stale = (): boolean => s.fillKey !== key || !!s.leaving || !!src.leaving || !s.engine || !src.engine;
    const gone = (): Error => new NovaError('UNAVAILABLE', `range ${s.info.id}: the fill from range ${f.from} was overtaken by a new configuration`);
    if (stale()) throw gone();
    await deleteKeys(s, f.start, f.end, () => !stale());
    await s.engine!.adoptSessions(src.engine!.sessions(), `range ${f.from}'s sessions`);
    let keys = 0;
    let bytes = 0;
    await eachPage(() => {
      if (stale()) throw gone();
      return src.engine;
    }, f.start, f.end, async (rows) => {
      if (stale()) throw gone();
      const b = s.engine!.newBatch();
      for (const [k, v] of rows) {
        b.put(k, v);
        bytes += k.length + v.length;
      }
      keys += rows.length;
      await s.engine!.write(b);
      return true;
    });
    // In tables before the fill is done: the source then lets these keys go (a trim, or its
    // files' removal), whatever the log mode keeps of the memtables.
    await s.engine!.flushMemtables();
    if (stale()) throw gone();
    const rep = { keys, bytes, fillMs: Date.now() - t0 };
    this.log(`range ${s.info.id}: filled from range ${f.from}: ${keys} key(s), ${bytes} bytes in ${rep.fillMs} ms`);
    return rep;
  }

  /** Removes a range merged away from the StoCs that answer, and its directory here. */
  private async drop(range: number): Promise<void> {
    const found = await namesOnStocs(this.pool, range);
    await Promise.all(found.flatMap(({ stoc, names }) => names.map((n) => this.pool.on(stoc, (c) => c.remove(n))
      .catch((err: Error) => this.log(`range ${range}: removing ${n} from StoC ${stoc} failed: ${err.message}`)))));
    rmSync(join(this.o.dir, `range-${range}`), { recursive: true, force: true });
    this.log(`range ${range}: merged away; removed its ${found.reduce((n, f) => n + f.names.length, 0)} file(s) from ${found.length} StoC(s)`);
  }

  /**
   * The LTC's memory (under a memory limit, what the governor leaves of it), evenly among the
   * ranges it serves now (they come and go with moves).
   */
  private rebudget(): void {
    const open = [...this.served.values()].filter((s) => s.engine && !s.leaving);
    // Ranges still opening count too, as the share they open with does (open()).
    const bytes = this.rangeMemory(Math.max(open.length, this.ownRanges()));
    if (bytes === 0) return;
    for (const s of open) s.engine!.setMemoryBudget(bytes);
  }

  /** Ranges the configuration gives this LTC. */
  private ownRanges(): number {
    return this.config.ranges.filter((r) => r.ltc === this.o.id).length;
  }

  /** A range's share of the LTC's memory (what a memory limit leaves of it) among `ranges`; 0 without a budget (tables held whole). */
  private rangeMemory(ranges: number): number {
    const budget = this.config.settings.ltcMemoryBytes;
    return budget === 0 ? 0 : Math.max(1, Math.floor(this.governor.share(budget) / Math.max(1, ranges)));
  }

  /** Keeps the process's resident memory under the memory limit it runs under, if any (memory-governor.ts). */
  private govern(): void {
    const budget = this.config?.settings.ltcMemoryBytes ?? 0;
    if (budget === 0 || this.closing) return; // without a budget, tables are held whole: nothing to shrink
    try {
      const limit = memoryLimitOfSelf();
      this.memoryLimit = limit;
      let counted = 0;
      if (limit !== undefined) for (const s of this.served.values()) counted += s.engine?.memoryBytes ?? 0;
      const before = this.governor.share(budget);
      const { share, trim } = this.governor.tick(limit === undefined ? { budget, rss: 0, counted: 0, free: 0, majorGcs: 0, limit }
        : { budget, rss: process.memoryUsage.rss(), counted, free: heapFreeBytes(), majorGcs: majorCollections(), limit });
      if (trim) trimHeap();
      if (share === before) return;
      const mib = (n: number): string => `${Math.round(n / 2 ** 20)} MiB`;
      this.log(limit === undefined ? `no memory limit now: ranges get ${mib(share)}`
        : `memory limit ${mib(limit)}, runtime ${mib(this.governor.runtime)}: ranges get ${mib(share)} of ${mib(budget)}`);
      this.rebudget();
    } catch (err) {
      this.log(`memory governor: ${(err as Error).message}; the ranges keep what they have`);
    }
  }

  /** `release [config id, range]` (the coordinator's): resolves once this LTC has let the range go. */
  private async release(args: unknown[]): Promise<{ closeMs: number }> {
    const [id, range] = args;
    if (typeof id !== 'number' || typeof range !== 'number') throw new NovaError('BAD_ARGUMENT', 'release takes [config id, range id]');
    if (id > this.config.id) await this.membership.refresh();
    const r = this.config.ranges.find((x) => x.id === range);
    if (r?.ltc === this.o.id) throw new NovaError('BAD_ARGUMENT', `range ${range} is on LTC ${this.o.id} in config ${this.config.id}: nothing to let go`);
    await this.served.get(range)?.leaving;
    return { closeMs: this.closeMs.get(range) ?? 0 };
  }

  /** `opened [config id, range, timeout ms]` (the coordinator's): resolves once the range is open here. */
  private async opened(args: unknown[]): Promise<{ openMs: number }> {
    const [id, range, timeoutMs] = args;
    if (typeof id !== 'number' || typeof range !== 'number' || typeof timeoutMs !== 'number') throw new NovaError('BAD_ARGUMENT', 'opened takes [config id, range id, timeout ms]');
    if (id > this.config.id) await this.membership.refresh();
    const s = this.served.get(range);
    if (!s || s.leaving) throw new NovaError('BAD_ARGUMENT', `range ${range} is not to open on LTC ${this.o.id} in config ${this.config.id}`);
    await withDeadline(s.opening ?? Promise.resolve(), timeoutMs,
      () => new NovaError('DEADLINE_EXCEEDED', `range ${range} did not open on LTC ${this.o.id} within ${timeoutMs} ms; see its log`));
    if (!s.engine) throw new NovaError('UNAVAILABLE', `range ${range} did not open on LTC ${this.o.id}`);
    return { openMs: s.openMs ?? 0 };
  }

  /** Opens a range, retrying while its StoCs cannot be read (they may be starting too). */
  private open(s: Served): Promise<void> {
    this.served.set(s.info.id, s);
    const since = Date.now();
    const attempt = async (): Promise<void> => {
      // Opening writes the range's MANIFEST: only while our lease holds (another process may have our id).
      const lapsed = this.leaseLapsed();
      if (lapsed) throw lapsed;
      const settings = this.config.settings;
      const stocs = this.pool.placeable().length;
      const want = Math.max(settings.logReplicas, settings.scatter);
      if (stocs === 0 || (stocs < want && Date.now() - since < STOC_WAIT_MS)) {
        throw new NovaError('UNAVAILABLE', `waiting for StoCs: ${stocs} registered, ${want} wanted`);
      }
      const dir = join(this.o.dir, `range-${s.info.id}`);
      // The LTC's memory, evenly among the ranges the configuration gives it now.
      const { store, compactor, options } = rangeEnv(this.pool, settings, s.info.id, dir, (line) => this.log(line), since + STRICT_LOG_READ_MS,
        this.rangeMemory(this.ownRanges()), () => this.leaseLapsed(), (stoc) => this.config.deadStocs?.includes(stoc) ?? false);
      const removed = this.config.removedStocs ?? [];
      const t0 = Date.now();
      // Fenced first: no write of an LTC that had the range before lands after we read it.
      await this.pool.fence(s.info.id, s.info.epoch);
      const engine = await Engine.open(dir, options);
      if (this.closing || s.leaving) {
        await engine.close();
        return;
      }
      s.store = store;
      s.compactor = compactor;
      s.engine = engine;
      // A StoC removed before this open holds none of the range's files, or (removed as dead)
      // copies of tables that have others: those are stored again by evacuating it.
      s.evacuated = new Set(removed.filter((id) => !engine.hasTablesOn(id)));
      s.evacuation = { tablesCopied: 0, bytesCopied: 0, l0Merged: 0, lost: [...engine.lostTables] };
      s.openMs = Date.now() - t0;
      this.log(`range ${s.info.id} open in ${s.openMs} ms (config ${this.config.id})`);
      this.rebudget();
      for (const x of this.served.values()) this.tend(x); // this one, and one filled from it
    };
    const loop = async (): Promise<void> => {
      let last = '';
      for (let tries = 1; !this.closing && !s.leaving; tries++) {
        try {
          await attempt();
          s.openFailure = undefined;
          return;
        } catch (err) {
          s.openFailure = { message: (err as Error).message, since: s.openFailure?.since ?? performance.now() };
          // Waiting for StoCs to register is normal at start-up: poll fast, log once.
          const waiting = (err as NovaError).code === 'UNAVAILABLE' && /^waiting for StoCs/.test((err as Error).message);
          const line = `range ${s.info.id}: not open yet: ${(err as Error).message}`;
          if (line !== last) this.log(waiting ? line : `${line} (attempt ${tries}); retrying every ${REOPEN_MS} ms`);
          last = line;
          await new Promise((r) => setTimeout(r, waiting ? 100 : REOPEN_MS));
        }
      }
    };
    s.opening = loop();
    return s.opening;
  }

  /**
   * The engine serving `key` for a request routed by config `id`, or the reason why not. Keys
   * a range is still taking in from another (a split or merge) are read there; writes to them
   * wait until the fill is done.
   */
  private engineFor(id: unknown, key: unknown, write: boolean): { engine: Engine; key: Buffer; served: Served } {
    const k = asKey(key);
    const range = this.route(id, k);
    let s = this.served.get(range.id);
    if (range.fill && inFill(range.fill, k)) {
      if (write) throw new NovaError('UNAVAILABLE', `range ${range.id} is taking in keys from range ${range.fill.from} (a split or merge); retry`);
      s = this.served.get(range.fill.from);
    }
    if (s?.engine?.failure && !s.leaving) this.reopen(s);
    if (!s?.engine) {
      const why = range.from !== undefined ? `is moving here from LTC ${range.from}` : `is recovering on LTC ${this.o.id}`;
      throw new NovaError('UNAVAILABLE', `range ${range.id} ${why}; retry`);
    }
    s.requests++;
    return { engine: s.engine, key: k, served: s };
  }

  /**
   * An engine that failed (say every replica of a log was lost) refuses all work until it
   * is reopened; reopening recovers from the MANIFEST and whatever log replicas answer.
   */
  private reopen(s: Served): void {
    const failed = s.engine!;
    this.log(`range ${s.info.id}: ${failed.failure!.message}; reopening it`);
    s.engine = undefined;
    s.opening = failed.close().catch(() => undefined).then(() => this.open(s));
  }

  /** Why this LTC may not serve now: its lease lapsed (the class comment). */
  private leaseLapsed(): NovaError | undefined {
    const silent = performance.now() - this.renewedAt;
    if (silent < this.config.settings.ltcLeaseMs * LEASE_MARGIN) return undefined;
    return new NovaError('UNAVAILABLE', `LTC ${this.o.id} has not renewed its lease with the coordinator for ${Number.isFinite(silent) ? Math.round(silent) : '∞'} ms ` +
      `(it lasts ${this.config.settings.ltcLeaseMs} ms), so its ranges may be another LTC's; retry`);
  }

  private route(id: unknown, key: Buffer): RangeInfo {
    // NaN compares neither older nor newer than any id: it would pass as current.
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) throw new NovaError('BAD_ARGUMENT', 'a request starts with the config id it was routed by (an integer of 0 or more)');
    if (this.closing) throw new NovaError('UNAVAILABLE', `LTC ${this.o.id} is shutting down`);
    const lapsed = this.leaseLapsed();
    if (lapsed) throw lapsed;
    if (id > this.config.id) {
      void this.membership.refresh().catch(() => undefined);
      throw new NovaError('UNAVAILABLE', `LTC ${this.o.id} has config ${this.config.id}, older than the client's ${id}; retry`);
    }
    const range = rangeOf(this.config, key);
    if (id < this.config.id || range.ltc !== this.o.id) {
      throw Object.assign(new NovaError('STALE_CONFIG', `config ${id} is not current (${this.config.id}) or range ${range.id} is not on LTC ${this.o.id}`), { detail: this.config.id });
    }
    return range;
  }

  private handlers(): Record<string, (a: unknown[]) => unknown> {
    return {
      get: ([id, key]) => {
        const t = this.engineFor(id, key, false);
        return t.engine.get(t.key);
      },
      put: (a) => {
        const t = this.engineFor(a[0], a[1], true);
        const v = asValue(a[2]);
        t.served.bytesWritten += t.key.length + v.length;
        return tracked(t.served, t.engine.put(t.key, v, { session: sessionAt(a, 3) }));
      },
      del: (a) => {
        const t = this.engineFor(a[0], a[1], true);
        return tracked(t.served, t.engine.delete(t.key, { session: sessionAt(a, 2) }));
      },
      write: (a) => this.write(a[0], a[1], sessionAt(a, 2)),
      ingest: (a) => this.ingest(a[0], a[1], a[2], sessionAt(a, 3)),
      scan: ([id, start, end, limit]) => {
        const t = this.engineFor(id, start, false);
        const n = typeof limit === 'number' && limit > 0 ? Math.min(limit, MAX_SCAN) : MAX_SCAN;
        const range = spanOf(rangeOf(this.config, t.key), t.key);
        const stop = end === null || end === undefined ? range.end : minKey(asKey(end), range.end);
        // A full page (by rows or bytes) continues just after its last key; a short one at
        // the next range.
        return t.engine.scan(t.key, { end: stop, limit: n, maxBytes: MAX_SCAN_BYTES }).then((rows) => {
          const full = rows.length === n || rows.reduce((b, [k, v]) => b + k.length + v.length, 0) >= MAX_SCAN_BYTES;
          return { rows, next: full ? Buffer.concat([rows[rows.length - 1][0], Buffer.alloc(1)]) : range.end ?? null };
        });
      },
      stats: () => this.stats(),
      release: (a) => this.release(a),
      // The coordinator's, before a move: the memtables to L0 while the range still serves.
      flushRange: async ([range]) => {
        const s = typeof range === 'number' ? this.served.get(range) : undefined;
        if (!s?.engine || s.leaving) throw new NovaError('BAD_ARGUMENT', `range ${String(range)} is not open on LTC ${this.o.id}`);
        await s.engine.flushMemtables();
        return null;
      },
      // The coordinator's, once this LTC holds nothing: it leaves the cluster.
      retire: () => {
        const holding = [...this.served.keys()];
        if (holding.length > 0) throw new NovaError('BAD_ARGUMENT', `LTC ${this.o.id} still holds ranges ${holding.join(', ')}`);
        this.membership.stop(); // no heartbeat may register it again once it is out of the configuration
        setTimeout(() => this.o.onRetired?.(), RETIRE_MS);
        return null;
      },
      opened: (a) => this.opened(a),
      filled: (a) => this.awaitFill(a),
      evacuate: (a) => this.awaitEvacuation(a),
      // The coordinator's, for a split without a key: where the range's load divides.
      splitKey: ([range]) => {
        const s = typeof range === 'number' ? this.served.get(range) : undefined;
        if (!s?.engine || s.leaving) throw new NovaError('BAD_ARGUMENT', `range ${String(range)} is not open on LTC ${this.o.id}`);
        return s.engine.splitKey(s.info.start, s.info.end) ?? null;
      },
      // Every memtable to an SSTable, then the compactions due.
      flush: async () => {
        for (const s of this.served.values()) await s.engine?.flush();
      },
      // nova repair: the range's damaged tables salvaged (Engine.salvage).
      repairRange: async ([range]) => {
        const s = typeof range === 'number' ? this.served.get(range) : undefined;
        if (!s?.engine || s.leaving) throw new NovaError('BAD_ARGUMENT', `range ${String(range)} is not open on LTC ${this.o.id}`);
        return { range, ...await s.engine.salvage(() => s.leaving !== undefined) };
      },
      // Every range's whole tree merged into its deepest level (Engine.compactAll).
      compact: async () => {
        for (const s of this.served.values()) await s.engine?.compactAll();
      },
    };
  }

  /** A batch: [[0, key, value] put | [1, key] delete, ...], all in one range (atomic there). */
  private write(id: unknown, ops: unknown, session: SessionRef | undefined): Promise<void> {
    if (!Array.isArray(ops) || ops.length === 0 || !ops.every((op) => Array.isArray(op))) {
      throw new NovaError('BAD_ARGUMENT', 'write takes a non-empty list of [0, key, value] or [1, key]');
    }
    const keys = (ops as unknown[][]).map((op) => asKey(op[1]));
    const first = rangeOf(this.config, keys[0]).id;
    const other = keys.find((k) => rangeOf(this.config, k).id !== first);
    if (other) throw new NovaError('BAD_ARGUMENT', `a batch spans ranges ${first} and ${rangeOf(this.config, other).id}: batches are atomic within one range only`);
    const { engine, served } = this.engineFor(id, keys[0], true);
    const fill = rangeOf(this.config, keys[0]).fill;
    if (fill && keys.some((k) => inFill(fill, k))) throw new NovaError('UNAVAILABLE', `range ${first} is taking in keys from range ${fill.from} (a split or merge); retry`);
    const b = engine.newBatch();
    (ops as unknown[][]).forEach((op, i) => {
      served.bytesWritten += keys[i].length;
      if (op[0] === 0) {
        const v = asValue(op[2]);
        served.bytesWritten += v.length;
        b.put(keys[i], v);
      } else if (op[0] === 1) {
        b.delete(keys[i]);
      } else {
        throw new NovaError('BAD_ARGUMENT', `unknown write op ${String(op[0])}`);
      }
    });
    return tracked(served, engine.write(b, { session }));
  }

  /**
   * `ingest [config id, keys, values, write number]`: keys ascending, all in one range, written as
   * one table off the write path (ingest.ts). Answers where it went, or why it was refused
   * (nothing applied: the client writes them as batches).
   */
  private ingest(id: unknown, keys: unknown, values: unknown, session: SessionRef | undefined): Promise<IngestOutcome> {
    if (!Array.isArray(keys) || !Array.isArray(values) || keys.length === 0 || keys.length !== values.length) {
      throw new NovaError('BAD_ARGUMENT', 'ingest takes a non-empty list of keys and a list of as many values');
    }
    const ks = keys.map(asKey);
    const vs = values.map(asValue);
    const { engine, served } = this.engineFor(id, ks[0], true);
    const range = rangeOf(this.config, ks[0]);
    // Ascending keys (the engine checks): the first and the last in the range, all are.
    const lastRange = rangeOf(this.config, ks[ks.length - 1]);
    if (lastRange.id !== range.id) throw new NovaError('BAD_ARGUMENT', `an ingest spans ranges ${range.id} and ${lastRange.id}: send each range its part`);
    const fill = range.fill;
    if (fill && ks.some((k) => inFill(fill, k))) {
      throw new NovaError('UNAVAILABLE', `range ${range.id} is taking in keys from range ${fill.from} (a split or merge); retry`);
    }
    for (let i = 0; i < ks.length; i++) served.bytesWritten += ks[i].length + vs[i].length;
    return tracked(served, engine.ingest(ks, vs, { session }));
  }

  /** `filled [config id, range, timeout ms]` (the coordinator's): resolves with the fill's report once the range has taken in its keys. */
  private async awaitFill(args: unknown[]): Promise<FillReport> {
    const [id, range, timeoutMs] = args;
    if (typeof id !== 'number' || typeof range !== 'number' || typeof timeoutMs !== 'number') throw new NovaError('BAD_ARGUMENT', 'filled takes [config id, range id, timeout ms]');
    if (id > this.config.id) await this.membership.refresh();
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const s = this.served.get(range);
      const key = fillKeyOf(this.config, range);
      // Ended already (a heartbeat told the coordinator first).
      if (s && key === undefined && s.lastFilled && this.config.id > id) return s.lastFilled;
      if (!s || s.leaving || key === undefined) throw new NovaError('BAD_ARGUMENT', `range ${range} is not being filled on LTC ${this.o.id} in config ${this.config.id}`);
      if (s.filled && s.fillKey === key) return s.filled;
      const left = deadline - Date.now();
      if (left <= 0) throw new NovaError('DEADLINE_EXCEEDED', `range ${range} did not take in its keys on LTC ${this.o.id} within ${timeoutMs} ms; it goes on (see its log)`);
      // Opening, or a failed attempt waiting to try again: poll.
      await withDeadline((s.filling ?? new Promise((r) => setTimeout(r, 100))).catch(() => undefined), left, () => new NovaError('DEADLINE_EXCEEDED', `range ${range} did not take in its keys on LTC ${this.o.id} within ${timeoutMs} ms; it goes on (see its log)`));
    }
  }
}

/** A range's bookkeeping here as it starts opening. */
function newServed(info: RangeInfo): Served {
  return { info, requests: 0, bytesWritten: 0, pending: new Set(), work: Promise.resolve() };
}

/** `p`, counted among `s`'s writes in flight until it settles. */
function tracked<T>(s: Served, p: Promise<T>): Promise<T> {
  s.pending.add(p);
  const done = (): void => void s.pending.delete(p);
  p.then(done, done);
  return p;
}

/** Whether `key` is among those a fill still takes in. */
function inFill(f: Fill, key: Buffer): boolean {
  return Buffer.compare(key, f.start) >= 0 && (f.end === undefined || Buffer.compare(key, f.end) < 0);
}

/**
 * The part of `r` holding `key` that one engine serves: with a fill, the fill's keys (read
 * from its source) or the part before or after them.
 */
function spanOf(r: RangeInfo, key: Buffer): { end?: Buffer } {
  const f = r.fill;
  if (!f) return r;
  if (inFill(f, key)) return { end: f.end ?? r.end };
  return Buffer.compare(key, f.start) < 0 ? { end: f.start } : r;
}

/** Names range `range`'s fill in `config` (undefined: none), so a fill done under another is not taken for it. */
function fillKeyOf(config: ClusterConfig, range: number): string | undefined {
  const f = config.ranges.find((x) => x.id === range)?.fill;
  return f ? `${f.from}:${f.start.toString('hex')}:${f.end?.toString('hex') ?? ''}` : undefined;
}

function intervalKey(r: RangeInfo): string {
  return `${r.start.toString('hex')}:${r.end?.toString('hex') ?? ''}`;
}

/**
 * Deletes `s`'s keys in [start, end) a page at a time, while `still()` holds (checked before
 * each page's write); resolves with how many it deleted.
 */
async function deleteKeys(s: Served, start: Buffer, end: Buffer | undefined, still: () => boolean): Promise<number> {
  let n = 0;
  await eachPage(() => (still() ? s.engine : undefined), start, end, async (rows) => {
    if (!s.engine || !still()) return false;
    const b = s.engine.newBatch();
    for (const [k] of rows) b.delete(k);
    await tracked(s, s.engine.write(b));
    n += rows.length;
    return true;
  });
  return n;
}

/**
 * Reads the keys in [start, end) of the engine `engine()` gives (none: stop) a page at a time
 * (FILL_ROWS keys or FILL_BYTES), handing each page to `each`, until none is left or `each`
 * answers false.
 */
async function eachPage(engine: () => Engine | undefined, start: Buffer, end: Buffer | undefined,
  each: (rows: Array<[Buffer, Buffer]>) => Promise<boolean>): Promise<void> {
  for (let from = start; ;) {
    const e = engine();
    if (!e) return;
    const rows = await e.scan(from, { end, limit: FILL_ROWS, maxBytes: FILL_BYTES });
    if (rows.length === 0 || !await each(rows)) return;
    from = Buffer.concat([rows[rows.length - 1][0], Buffer.alloc(1)]); // just after the page's last key
  }
}

function asKey(x: unknown): Buffer {
  if (!(x instanceof Uint8Array)) throw new NovaError('BAD_ARGUMENT', 'keys are byte strings');
  return Buffer.isBuffer(x) ? x : Buffer.from(x.buffer, x.byteOffset, x.byteLength);
}

/**
 * A write's session (doc/format/wire.md): five values after the request's own arguments, from
 * `at`: id high, id low, write number, floor, open (0|1); none for a write no client numbered.
 * The values are checked where they are used (SessionTable.admit).
 */
function sessionAt(a: unknown[], at: number): SessionRef | undefined {
  if (a.length <= at) return undefined;
  if (a.length !== at + 5) throw new NovaError('BAD_ARGUMENT', `a write's session is five values after its arguments (id high, id low, write number, floor, open), not ${a.length - at}`);
  const open = a[at + 4];
  return { idHigh: a[at], idLow: a[at + 1], seq: a[at + 2], floor: a[at + 3], open: open === 1 ? true : open === 0 ? false : open } as SessionRef;
}

function asValue(x: unknown): Buffer {
  if (!(x instanceof Uint8Array)) throw new NovaError('BAD_ARGUMENT', 'values are byte strings');
  return Buffer.isBuffer(x) ? x : Buffer.from(x.buffer, x.byteOffset, x.byteLength);
}

function minKey(a: Buffer, b: Buffer | undefined): Buffer {
  return b === undefined || Buffer.compare(a, b) < 0 ? a : b;
}
