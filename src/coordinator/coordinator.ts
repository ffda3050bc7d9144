/**
 * The coordinator (DESIGN.md §7): holds the configuration in a store (config-store.ts: one
 * JSON file in its directory, or etcd shared by several coordinators of which one leads),
 * lets components register and heartbeat, and serves the configuration to clients and
 * components over TCP.
 *
 * The configuration changes (and its id grows) when a component registers with an address
 * it did not have (a restarted StoC has a new fabric address, a restarted LTC may have a new
 * port), and when a range moves. Liveness is not configuration: it is reported by `status`,
 * from heartbeats, and so is each range's load.
 *
 * A move (doc/decisions/range-moves.md) is two configurations: the first puts the range on its
 * new LTC with `from` naming the old one, which lets go (stops taking the range's requests and
 * closes its engine, so the logs and MANIFEST on the StoCs are final); the second clears `from`
 * once it has, and only then does the new LTC open the range. The coordinator learns that the
 * old LTC let go from its answer to `release`, or else from a heartbeat that shows the newest
 * configuration and not the range: so a move survives the coordinator's restart and the old
 * LTC's, and two LTCs never have the range open at once.
 */
import { mkdirSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import { withDeadline } from '../common/deadline.js';
import { NovaError } from '../common/errors.js';
import { lockDir, replaceFile } from '../common/files.js';
import { TcpRpcServer, advertisedHost } from '../net/tcp-rpc-server.js';
import { TcpRpcClient } from '../net/tcp-rpc-client.js';
import {
  abandonMove, endFill, endMove, failOver, makeRanges, memberOf, removeStoc, startDrain, startMerge, startMove, startSplit, type ClusterConfig, type Fill, type Member, type RangeInfo, type Role, type Settings,
} from '../cluster/config.js';
import { HEARTBEAT_MS, MAX_OPEN_ERROR } from '../cluster/membership.js';
import { newSettings, refuseConflicts } from '../cluster/knobs.js';
import { RangeLoad, type RangeRate } from './range-load.js';
import { loadOf, planRebalance, type PlannedMove } from '../cluster/rebalance.js';
import { FileConfigStore, type ConfigStore } from './config-store.js';
import { EtcdConfigStore } from './etcd-store.js';
import { CacheSteward, type CacheInstanceView } from './cache-keeper.js';
import { modeCounts, type CacheMode, type FragmentMode } from '../cluster/gemini.js';

export { readConfigFile } from './config-store.js';

/** A member missing this many heartbeats in a row is reported down. */
const MISSED_BEATS = 6;
/** Removed processes remembered, so that one that did not stop cannot join again unasked. */
const RETIRED_KEPT = 1_000;
/** The longest address a member may register (well above a StoC's fabric address in base64). */
const MAX_ADDRESS = 4_096;
/** The longest host name a member may register. */
const MAX_HOST = 255;
/** Members (LTCs and StoCs) a configuration holds at most, and the largest id one may have: the configuration stays well under a frame. */
const MAX_MEMBERS = 1_024;
const MAX_MEMBER_ID = 1_000_000;
/** Move reports status keeps. */
const RECENT_MOVES = 100;
/** Heartbeats a lease spans at least, so one late beat does not cost an LTC its ranges. */
const MIN_LEASE_BEATS = 4;
/** How often LTC leases are checked. */
const LEASE_TICK_MS = 100;
/** How long a move waits for the old LTC to let go, and then for the new one to open the range. */
const RELEASE_MS = 30_000;
/** How long a move waits for the old LTC's flush before it moves the range all the same. */
const FLUSH_MS = 5_000;
const OPEN_MS = 60_000;
/** How long removing a StoC waits for each LTC to take its ranges' files off it. */
const EVACUATE_MS = 600_000;
/** How long a split or merge waits for its LTC to copy the keys (it goes on after). */
const FILL_MS = 600_000;

export interface CoordinatorOptions {
  dir: string;
  /** Where to listen; `advertise`: the host components and clients reach it at, if not `host`. */
  host?: string;
  advertise?: string;
  port?: number;
  /** For a new cluster: LTCs the ranges are spread over, split keys, settings. */
  ltcs?: number;
  splits?: Buffer[];
  settings?: Partial<Settings>;
  /** Keep the configuration in etcd (HOST:PORT each) and lead or stand by; else in `dir`. */
  etcd?: string[];
  /** The etcd keys' prefix (one etcd, several clusters). */
  etcdPrefix?: string;
  onLog?: (line: string) => void;
  /** Called once this coordinator can no longer lead (etcd): it must stop, and a standby takes over. */
  onLost?: (err: Error) => void;
}

export interface MemberStatus extends Member {
  alive: boolean;
  /** LTC: the ranges it has open and serves. */
  serving: number[];
  /** LTC: ranges it holds and could not open yet, why, and for how long (ms). */
  unopened: Array<{ range: number; error: string; forMs: number }>;
  lastSeenMs: number;
}

export interface ClusterStatus {
  /** The coordinator's own process. */
  pid: number;
  config: ClusterConfig;
  members: MemberStatus[];
  /** Each range's load, by range id (ranges no LTC reported yet are missing). */
  load: Record<number, RangeRate>;
  /** A rebalance or an LTC's removal is running. */
  reshaping: boolean;
  /** LTCs that joined and wait for the rebalance that gives them ranges. */
  joining: number[];
  /** The last RECENT_MOVES moves, oldest first. */
  moves: MoveReport[];
  /** The Gemini cache layer, once it has instances. */
  cache?: { mode: CacheMode; fragments: Record<FragmentMode, number>; instances: CacheInstanceView[]; discards: number };
}

/** What one move did, and for how long the range refused requests. */
export interface MoveReport {
  range: number;
  from: number;
  to: number;
  /** The configuration that ended the move. */
  configId: number;
  /** Before the move: the old LTC wrote the range's memtables to L0 while it still served. */
  flushMs: number;
  /** From the move's start until the old LTC had let go; of it, closing the range's engine there. */
  releaseMs: number;
  closeMs: number;
  /** Until the new LTC had opened the range; of it, opening the engine there (MANIFEST, log replay). */
  openMs: number;
  engineOpenMs: number;
  /** From the move's start until the range served again: the time it refused requests. */
  unavailableMs: number;
}

/** What removing a StoC did: per LTC, what its ranges copied off it, and the tables lost with it. */
export interface StocRemoveReport {
  stoc: number;
  dead: boolean;
  ltcs: Array<{ ltc: number; ranges: number; tablesCopied: number; bytesCopied: number; l0Merged: number; lost: string[] }>;
  /** LTCs that did not answer (down): their ranges drop tables on a dead StoC when they open. */
  silent: number[];
}

/** What a split or merge did: the ranges, where the split was, and what the LTC copied. */
export interface ReshapeReport {
  /** The range that keeps serving, and the one made (a split) or merged into it (a merge). */
  range: number;
  other: number;
  ltc: number;
  /** A split's key. */
  at?: Buffer;
  /** Keys and bytes copied, and how long their writes were refused. */
  keys: number;
  bytes: number;
  fillMs: number;
  unavailableMs: number;
  configId: number;
}

/** What a rebalance planned and what its moves did (with `dryRun`, only the plan). */
export interface RebalanceReport {
  plan: PlannedMove[];
  moves: MoveReport[];
  /** Why it stopped before the end of its plan, if it did. */
  error?: string;
}

/** What removing an LTC did: its ranges' moves, and whether it was told to stop. */
export interface RemoveReport {
  ltc: number;
  moves: MoveReport[];
  /** False when it did not answer (it was down): it is out of the configuration all the same. */
  stopped: boolean;
}

interface Seen {
  at: number;
  serving: number[];
  unopened: MemberStatus['unopened'];
}

export class Coordinator {
  private config: ClusterConfig;
  private readonly seen = new Map<string, Seen>();
  private readonly loads = new RangeLoad();
  /** Moves waiting for their old LTC to let go, by range. */
  private readonly letGo = new Map<number, () => void>();
  /** The configuration id that started each move in progress, by range. */
  private readonly moves = new Map<number, number>();
  /** What the last RECENT_MOVES moves did (status). */
  private readonly recentMoves: MoveReport[] = [];
  private leaseTimer: NodeJS.Timeout | undefined;
  private rebalanceTimer: NodeJS.Timeout | undefined;
  /** A rebalance or an LTC's removal is running (one at a time). */
  private reshaping = false;
  /** LTCs that registered for the first time: a rebalance follows once they are alive (expireLeases). */
  private readonly joined = new Set<number>();
  /** LTCs being removed: no range goes to them. */
  private readonly removing = new Set<number>();
  /** Incarnations of processes removed from the cluster: they may not register again (RETIRED_KEPT at most). */
  private readonly retired = new Set<string>();
  private lastTick = performance.now();
  /** No lease expires before this (the coordinator just started, or was paused). */
  private graceUntil = 0;
  private server!: TcpRpcServer;
  private readonly unlock: () => void;
  private readonly store: ConfigStore;
  /** This coordinator leads: until then it answers NOT_LEADER, naming the leader if it knows it. */
  private leading = false;
  /** The newest configuration id durable in the store (what may be told to others), and its waiters. */
  private durableId = 0;
  private readonly durableWaiters: Array<{ id: number; resolve: () => void; reject: (err: Error) => void }> = [];
  private lostErr: Error | undefined;
  /** The campaign: resolves once this coordinator leads (led). */
  private leadership: Promise<void> = Promise.resolve();
  private readonly caches: CacheSteward = new CacheSteward({
    config: () => this.config,
    publish: (next, why) => this.publish(next, why),
    instance: (id) => ({
      dirtyFetch: (cfg, fragment, from, limit) => this.callMember<{ state: string }>('cache', id, 'dirtyFetch', [cfg, fragment, from, limit], 2_000),
      dirtyInit: async (cfg, fragment) => { await this.callMember('cache', id, 'dirtyInit', [cfg, fragment], 2_000); },
      fence: async (cfg) => { await this.callMember('cache', id, 'fence', [cfg], 2_000); },
    }),
    alive: (id, now) => now - (this.seen.get(memberKey('cache', id))?.at ?? -Infinity) < this.config.settings.cacheLeaseMs,
    knowsLiveness: (now) => now >= this.graceUntil,
    onLog: (line) => this.o.onLog?.(line),
  });

  private constructor(private readonly o: CoordinatorOptions) {
    mkdirSync(o.dir, { recursive: true });
    this.unlock = lockDir(o.dir);
    this.store = o.etcd ? new EtcdConfigStore({ endpoints: o.etcd, prefix: o.etcdPrefix ?? '/nova', onLog: o.onLog }) : new FileConfigStore(o.dir);
    this.config = { id: 0, ranges: [], lastRange: 0, members: [], settings: newSettings({}) }; // until it leads (load)
  }

  /** Starts serving, once it leads (with the file store, at once; with etcd, once the others let it). */
  static async start(o: CoordinatorOptions): Promise<Coordinator> {
    const c = await Coordinator.listen(o);
    try {
      await c.led();
    } catch (err) {
      await c.close().catch(() => undefined);
      throw err;
    }
    return c;
  }

  /** Listens (NOT_LEADER until it leads) and campaigns; `led()` says when it leads. */
  static async listen(o: CoordinatorOptions): Promise<Coordinator> {
    const advertise = advertisedHost(o.host, o.advertise);
    const c = new Coordinator(o);
    const lead = <A extends unknown[], R>(f: (...a: A) => R) => (...a: A): R => {
      if (!c.leading || !c.store.holds()) {
        const at = c.leading ? undefined : c.store.leader();
        throw Object.assign(new NovaError('NOT_LEADER', `this coordinator stands by${at ? `; the leader is at ${at}` : ' and knows no leader yet'}`), { detail: at ?? null });
      }
      return f(...a);
    };
    try {
      c.server = await TcpRpcServer.listen({
        host: o.host, advertise, port: o.port, name: 'coordinator', onLog: o.onLog,
        handlers: {
          register: lead((a) => c.told(c.register(a))),
          heartbeat: lead((a) => c.told(c.heartbeat(a))),
          config: lead(() => c.told(c.config)),
          status: lead(() => c.told(c.status())),
          move: lead((a) => c.move(a)),
          rebalance: lead((a) => c.rebalance(a)),
          removeLtc: lead((a) => c.removeLtc(a)),
          removeStoc: lead((a) => c.removeStoc(a)),
          split: lead((a) => c.split(a)),
          merge: lead((a) => c.merge(a)),
          cacheRecovered: lead((a) => c.told(c.caches.recovered(a))),
        },
      });
    } catch (err) {
      c.unlock();
      throw err;
    }
    replaceFile(o.dir, 'address', `${advertise}:${c.server.port}\n`);
    c.store.onLost((err) => c.lose(err));
    c.leadership = c.campaign(`${advertise}:${c.server.port}`);
    c.leadership.catch(() => undefined);
    return c;
  }

  /** Resolves once this coordinator leads (with etcd, once a standby took over). */
  led(): Promise<void> {
    return this.leadership;
  }

  private async campaign(address: string): Promise<void> {
    await this.store.lead(address);
    const config = await this.load();
    if (this.lostErr) throw this.lostErr; // lost while it loaded: it never leads
    this.config = config;
    this.durableId = this.config.id;
    this.graceUntil = performance.now() + Math.max(this.config.settings.ltcLeaseMs, this.config.settings.cacheLeaseMs);
    this.leading = true;
    if (this.o.etcd) this.o.onLog?.(`leading: config ${this.config.id} from ${this.store.where}`);
    // The coordinator before may have fenced cache instances with the next id and not published it.
    if (this.config.cache) this.publish({ ...this.config, id: this.config.id + 1 }, 'cache layer: a new leader takes a configuration id past any its cache instances were told of');
    this.leaseTimer = setInterval(() => this.expireLeases(), LEASE_TICK_MS);
    const every = this.config.settings.autoRebalanceMs;
    if (every > 0) this.rebalanceTimer = setInterval(() => this.autoRebalance('the periodic rebalance'), every);
  }

  /** Leadership lost for good (etcd): serve nothing more; the owner stops the process. */
  private lose(err: Error): void {
    if (this.lostErr) return;
    this.lostErr = err;
    this.leading = false;
    clearInterval(this.leaseTimer);
    clearInterval(this.rebalanceTimer);
    for (const w of this.durableWaiters.splice(0)) w.reject(err);
    this.o.onLog?.(`no longer leads: ${err.message}`);
    this.o.onLost?.(err);
  }

  /**
   * `answer` once the configuration it names (or holds) is durable in the store: nothing is
   * told about a configuration before.
   */
  private told<T extends number | ClusterConfig | ClusterStatus>(answer: T): Promise<T> {
    const a: number | ClusterConfig | ClusterStatus = answer;
    const id = typeof a === 'number' ? a : 'config' in a ? a.config.id : a.id;
    if (id <= this.durableId) return Promise.resolve(answer);
    if (this.lostErr) return Promise.reject(this.lostErr);
    return new Promise((resolve, reject) => this.durableWaiters.push({ id, resolve: () => resolve(answer), reject }));
  }

  get address(): string {
    return `${advertisedHost(this.o.host, this.o.advertise)}:${this.server.port}`;
  }

  current(): ClusterConfig {
    return this.config;
  }

  status(): ClusterStatus {
    const now = performance.now();
    return {
      pid: process.pid,
      config: this.config,
      members: this.config.members.map((m) => {
        const s = this.seen.get(memberKey(m.role, m.id));
        return { ...m, alive: this.alive(m.role, m.id, now), serving: s?.serving ?? [], unopened: s?.unopened ?? [], lastSeenMs: s ? Math.round(now - s.at) : -1 };
      }),
      load: Object.fromEntries(this.config.ranges.flatMap((r) => {
        const rate = this.loads.rate(r.id, now);
        return rate ? [[r.id, rate]] : [];
      })),
      reshaping: this.reshaping,
      joining: [...this.joined].filter((id) => this.alive('ltc', id, now)), // one that died joins no more
      moves: this.recentMoves,
      ...(this.config.cache ? { cache: { mode: this.config.cache.mode, fragments: modeCounts(this.config.cache), instances: this.caches.instances(now), discards: this.caches.discards } } : {}),
    };
  }

  async close(): Promise<void> {
    clearInterval(this.leaseTimer);
    clearInterval(this.rebalanceTimer);
    this.leading = false;
    try {
      await this.server.close();
      await this.store.close();
    } finally {
      this.unlock();
    }
  }

  private async load(): Promise<ClusterConfig> {
    const stored = await this.store.load();
    if (stored) {
      refuseConflicts(stored, this.o.settings ?? {}, this.o.splits, this.store.where);
      return stored;
    }
    const ranges = makeRanges(this.o.splits ?? [], this.o.ltcs ?? 1);
    const c: ClusterConfig = {
      id: 1,
      ranges,
      lastRange: ranges.length,
      members: [],
      settings: newSettings(this.o.settings ?? {}),
    };
    if (c.settings.ltcLeaseMs < MIN_LEASE_BEATS * HEARTBEAT_MS) {
      throw new NovaError('BAD_ARGUMENT', `--ltc-lease-ms ${c.settings.ltcLeaseMs} is too short: a lease must span ${MIN_LEASE_BEATS} heartbeats (${MIN_LEASE_BEATS * HEARTBEAT_MS} ms) or more`);
    }
    await this.store.save(c);
    return c;
  }

  /**
   * Makes `next` the configuration. The coordinator goes on from it at once; it is told to
   * others (told) only once durable. A save that fails means another coordinator leads (a
   * config file that cannot be written throws here).
   */
  private publish(next: ClusterConfig, why: string): void {
    if (this.lostErr) {
      // Another coordinator leads: this one changes nothing more (it is stopping).
      this.o.onLog?.(`${why}: not done, this coordinator no longer leads`);
      return;
    }
    const saved = this.store.save(next);
    this.config = next;
    this.o.onLog?.(`${why}; config ${next.id}`);
    saved.then(() => {
      this.durableId = Math.max(this.durableId, next.id);
      for (let i = this.durableWaiters.length - 1; i >= 0; i--) {
        const w = this.durableWaiters[i]!;
        if (w.id <= this.durableId) {
          this.durableWaiters.splice(i, 1);
          w.resolve();
        }
      }
    }, (err: Error) => this.lose(err));
  }

  private alive(role: Role, id: number, now = performance.now()): boolean {
    const s = this.seen.get(memberKey(role, id));
    return !!s && now - s.at < MISSED_BEATS * HEARTBEAT_MS;
  }

  /**
   * `move [range, to]`: moves a range to LTC `to` (the class comment) and answers once it
   * serves there, with what it took (MoveReport).
   */
  private async move(args: unknown[]): Promise<MoveReport> {
    const [range, to] = args;
    if (!isId(range) || !isId(to)) throw new NovaError('BAD_ARGUMENT', 'move takes [range id, LTC id]');
    // What a move needs of the two LTCs; checked again after the flush (the cluster may have
    // changed), but for the old LTC: one that stopped answering meanwhile is what the release's
    // deadline and failover are for.
    const check = (first: boolean): ClusterConfig => {
      const r = this.config.ranges.find((x) => x.id === range);
      if (r && r.from === undefined && r.ltc !== to) {
        if (first && !this.alive('ltc', r.ltc)) {
          throw new NovaError('UNAVAILABLE', `LTC ${r.ltc}, which holds range ${range}, is down: a move needs it to let the range go first ` +
            `(start it again, or wait: its ranges fail over once its lease expires)`);
        }
        if (memberOf(this.config, 'ltc', to) && !this.alive('ltc', to)) throw new NovaError('UNAVAILABLE', `LTC ${to} is down: start it first`);
      }
      if (this.removing.has(to)) throw new NovaError('BUSY', `LTC ${to} is being removed: move the range elsewhere`);
      return startMove(this.config, range, to); // the argument errors
    };
    const holder = check(true).ranges.find((x) => x.id === range)!.from!;
    // While the range still serves, its memtables go to L0: the new LTC then replays little.
    const flushed = performance.now();
    await this.callLtc(holder, 'flushRange', [range], FLUSH_MS).catch((err: Error) => this.o.onLog?.(`range ${range}: flush before the move failed (${err.message}); moving it all the same`));
    const flushMs = Math.round(performance.now() - flushed);
    const next = check(false);
    const from = next.ranges.find((x) => x.id === range)!.from!;
    const t0 = performance.now();
    const released = new Promise<void>((resolve) => this.letGo.set(range, resolve));
    this.publish(next, `range ${range} moving from LTC ${from} to LTC ${to}`);
    // This move, by the configuration that started it: a late answer must not end a later one.
    const mine = (): boolean => this.moves.get(range) === next.id;
    this.moves.set(range, next.id);

    // The old LTC lets go: its answer, or a heartbeat that shows it has (if the answer is lost).
    let closeMs = 0;
    const answer = this.callLtc<{ closeMs: number }>(from, 'release', [this.config.id, range], RELEASE_MS)
      .then((a) => {
        closeMs = a.closeMs;
        if (mine()) this.endMove(range, `LTC ${from} let range ${range} go`);
      }, (err: Error) => this.o.onLog?.(`range ${range}: LTC ${from} did not answer release (${err.message}); waiting for its heartbeats`));
    void answer;
    await withDeadline(released, RELEASE_MS, () => {
      // Abandoned: the range stays on the old LTC, under a new epoch (it reopens it once closed).
      const back = mine() ? abandonMove(this.config, range, from) : undefined;
      if (back) {
        this.publish(back, `range ${range}: LTC ${from} did not let it go within ${RELEASE_MS} ms; the move is abandoned`);
        this.settle(range);
      }
      return new NovaError('DEADLINE_EXCEEDED', `LTC ${from} did not let range ${range} go within ${RELEASE_MS} ms; the move was abandoned and the range stays on LTC ${from}`);
    });
    const releaseMs = Math.round(performance.now() - t0);

    // The new LTC opens it.
    const opened = await this.callLtc<{ openMs: number }>(to, 'opened', [this.config.id, range, OPEN_MS], OPEN_MS + 5_000);
    const unavailableMs = Math.round(performance.now() - t0);
    this.o.onLog?.(`range ${range} moved from LTC ${from} to LTC ${to}: refused requests for ${unavailableMs} ms`);
    const report = { range, from, to, configId: this.config.id, flushMs, releaseMs, closeMs, openMs: unavailableMs - releaseMs, engineOpenMs: opened.openMs, unavailableMs };
    this.recentMoves.push(report);
    if (this.recentMoves.length > RECENT_MOVES) this.recentMoves.shift();
    return report;
  }

  /**
   * `removeStoc [id, dead]`: takes a StoC out of the cluster. Drained (not `dead`): it takes no
   * new file, every LTC copies its ranges' files off it (evacuate), and only then does it leave
   * the configuration. `dead` (gone for good): it leaves at once, so recovery stops waiting for
   * it, and each range drops the tables that had a fragment there, named in the report.
   */
  private async removeStoc(args: unknown[]): Promise<StocRemoveReport> {
    const [id, dead] = args;
    if (!isId(id) || typeof dead !== 'boolean') throw new NovaError('BAD_ARGUMENT', 'removeStoc takes [StoC id, dead]');
    removeStoc(this.config, id, dead); // only to refuse a StoC the configuration does not have, or its last
    if (!dead && !this.alive('stoc', id)) {
      throw new NovaError('UNAVAILABLE', `StoC ${id} is down: draining it copies what it holds, so start it again; if it is gone for good, remove it with --dead`);
    }
    if (dead && !this.knowsLiveness(performance.now(), 'stoc')) {
      throw new NovaError('UNAVAILABLE', `the coordinator has not heard from every StoC since it started or was paused, so it cannot tell whether StoC ${id} is dead; try again in ${Math.ceil((this.graceUntil - performance.now()) / 1000)} s`);
    }
    if (dead && this.alive('stoc', id)) {
      throw new NovaError('BAD_ARGUMENT', `StoC ${id} is alive: drain it (remove it without --dead), which loses nothing; --dead is for a StoC that is gone for good`);
    }
    if (this.reshaping) throw new NovaError('BUSY', 'a rebalance or a removal is running; try again when it is done');
    this.reshaping = true;
    try {
      if (!dead) {
        if (!memberOf(this.config, 'stoc', id)?.draining) this.publish(startDrain(this.config, id), `StoC ${id} draining`);
        const drained = await this.evacuateAll(id);
        if (drained.silent.length > 0) {
          throw new NovaError('UNAVAILABLE', `LTC ${drained.silent.join(', ')} did not take its ranges' files off StoC ${id}; StoC ${id} stays (draining): run the removal again once they are up`);
        }
        this.retireMember('stoc', id);
        this.publish(removeStoc(this.config, id, false), `StoC ${id} drained and removed`);
        return { stoc: id, dead, ...drained };
      }
      this.retireMember('stoc', id);
      this.publish(removeStoc(this.config, id, true), `StoC ${id} removed as dead: tables with a fragment on it are lost`);
      return { stoc: id, dead, ...await this.evacuateAll(id) };
    } finally {
      this.reshaping = false;
    }
  }

  /**
   * Asks every LTC that is up or holds ranges to take its ranges' files off StoC `stoc`
   * (LtcServer evacuate). One that is down and holds none has no engine to take off; if it
   * comes back, a range it opens then is taken off at its open.
   */
  private async evacuateAll(stoc: number): Promise<Pick<StocRemoveReport, 'ltcs' | 'silent'>> {
    const holds = (id: number): boolean => this.config.ranges.some((r) => r.ltc === id || r.from === id);
    const ltcs = this.config.members.filter((m) => m.role === 'ltc' && (this.alive('ltc', m.id) || holds(m.id))).map((m) => m.id);
    const answers = await Promise.all(ltcs.map((l) => this.callLtc<StocRemoveReport['ltcs'][number]>(l, 'evacuate', [this.config.id, stoc, EVACUATE_MS], EVACUATE_MS + 5_000)
      .then((r) => ({ ...r, ltc: l }), (err: Error) => {
        this.o.onLog?.(`LTC ${l} did not take its files off StoC ${stoc}: ${err.message}`);
        return l;
      })));
    return { ltcs: answers.filter((a): a is StocRemoveReport['ltcs'][number] => typeof a !== 'number'), silent: answers.filter((a): a is number => typeof a === 'number') };
  }

  /** Remembers the process of member `role` `id` as removed: it may not register or heartbeat again. */
  private retireMember(role: Role, id: number): void {
    const member = memberOf(this.config, role, id);
    if (member?.incarnation !== undefined) {
      this.retired.add(member.incarnation);
      if (this.retired.size > RETIRED_KEPT) this.retired.delete(this.retired.values().next().value!);
    }
    this.seen.delete(memberKey(role, id));
  }

  /**
   * `split [range, at | null]`: cuts a range in two at `at` (by default where its LTC says its
   * load divides): the keys from `at` on go to a new range on the same LTC, which copies them in
   * (doc/decisions/range-splits.md). Answers once the new range serves them.
   */
  private async split(args: unknown[]): Promise<ReshapeReport> {
    const [range, at] = args;
    if (!isId(range) || (at !== null && at !== undefined && !(at instanceof Uint8Array))) throw new NovaError('BAD_ARGUMENT', 'split takes [range id, key or null]');
    const r = this.config.ranges.find((x) => x.id === range);
    if (!r) throw new NovaError('BAD_ARGUMENT', `there is no range ${range} (ranges: ${this.config.ranges.map((x) => x.id).join(', ')})`);
    let key = at instanceof Uint8Array ? Buffer.from(at) : undefined;
    if (key === undefined) {
      const k = await this.callLtc<Uint8Array | null>(r.ltc, 'splitKey', [range], 10_000);
      if (!k) throw new NovaError('BAD_ARGUMENT', `range ${range} holds no key to split at: give one (--at KEY)`);
      key = Buffer.from(k);
    }
    const next = startSplit(this.config, range, key);
    this.publish(next, `range ${range} splitting at ${key.toString('hex')}: range ${next.lastRange} takes the keys from there`);
    return this.awaitFill(range, next.lastRange, next, key);
  }

  /** `merge [into, from]`: range `from` (adjacent, on the same LTC) is copied into `into` and leaves the configuration. */
  private async merge(args: unknown[]): Promise<ReshapeReport> {
    const [into, from] = args;
    if (!isId(into) || !isId(from)) throw new NovaError('BAD_ARGUMENT', 'merge takes [range id, range id]');
    const next = startMerge(this.config, into, from);
    this.publish(next, `range ${from} merging into range ${into}`);
    return this.awaitFill(into, from, next);
  }

  /**
   * Waits for the LTC to fill the range that takes in keys (`range`, or with `at`, the new
   * range `other`) as configuration `started` has it, then ends that fill.
   */
  private async awaitFill(range: number, other: number, started: ClusterConfig, at?: Buffer): Promise<ReshapeReport> {
    const t0 = performance.now();
    const filling = at ? other : range;
    const r = started.ranges.find((x) => x.id === filling)!;
    const ltc = r.ltc;
    const rep = await this.callLtc<{ keys: number; bytes: number; fillMs: number }>(ltc, 'filled', [started.id, filling, FILL_MS], FILL_MS + 5_000).catch((err: Error) => {
      throw new NovaError((err as NovaError).code ?? 'UNAVAILABLE', `range ${filling} is taking in its keys on LTC ${ltc}, which did not say it is done (${err.message}); ` +
        'it goes on, and its LTC (or the one it fails over to) ends it: see nova range list');
    });
    this.endFill(filling, `range ${filling} took in its keys on LTC ${ltc}`, r.fill);
    return { range, other, ltc, ...(at ? { at } : {}), ...rep, unavailableMs: Math.round(performance.now() - t0), configId: this.config.id };
  }

  /** Ends the fill of `range`, if it is still filling (that fill, given `expect`). */
  private endFill(range: number, why: string, expect?: Fill): void {
    const next = endFill(this.config, range, expect);
    if (next) this.publish(next, why);
  }

  /**
   * Whether which members of `role` are alive is known: the grace after a start or pause is
   * over, or every one has been heard from since (silence means nothing until then).
   */
  private knowsLiveness(now: number, role: Role = 'ltc'): boolean {
    return now >= this.graceUntil || this.config.members.every((m) => m.role !== role || this.alive(role, m.id, now));
  }

  /**
   * Removes as dead a StoC silent for stocDeadMs, when tables keep copies elsewhere
   * (--table-replicas above 1) and it is the only StoC silent: with two or more silent (an
   * outage of many), tables may have every copy among them, so a person decides.
   */
  private removeDeadStocs(now: number): void {
    const { stocDeadMs, tableReplicas } = this.config.settings;
    if (stocDeadMs <= 0 || tableReplicas < 2 || this.reshaping) return;
    const stocs = this.config.members.filter((m) => m.role === 'stoc');
    // A StoC never heard from holds nothing: it is no second silent StoC a table could have copies on.
    const silent = stocs.filter((m) => !m.fresh && !this.alive('stoc', m.id, now));
    const gone = silent.find((m) => now - (this.seen.get(memberKey('stoc', m.id))?.at ?? 0) >= stocDeadMs);
    if (!gone || silent.length !== 1 || stocs.length < 2) return;
    this.o.onLog?.(`StoC ${gone.id} has been silent for ${stocDeadMs} ms: removing it as dead, and storing the copies it held again`);
    void this.removeStoc([gone.id, true]).catch((err: Error) => this.o.onLog?.(`removing StoC ${gone.id} as dead failed: ${err.message}`));
  }

  /** Gives the ranges of LTCs whose leases expired to live LTCs (the class comment). */
  private expireLeases(): void {
    const now = performance.now();
    const lease = this.config.settings.ltcLeaseMs;
    // A tick this late: we were paused (or starved), and the silence we saw was ours.
    if (now - this.lastTick > Math.min(1_000, lease / 4)) this.graceUntil = Math.max(this.graceUntil, now + lease);
    this.lastTick = now;
    // LTCs that joined and sent a heartbeat: a rebalance gives them ranges.
    const joined = [...this.joined].filter((id) => this.alive('ltc', id, now));
    if (joined.length > 0 && !this.reshaping && this.knowsLiveness(now)) {
      for (const id of joined) this.joined.delete(id);
      this.autoRebalance(`LTC ${joined.join(', ')} joined`);
    }
    if (now < this.graceUntil) return;
    this.caches.tick(now);
    this.removeDeadStocs(now);
    const ltcs = this.config.members.filter((m) => m.role === 'ltc').map((m) => m.id);
    const silent = (id: number): boolean => now - (this.seen.get(memberKey('ltc', id))?.at ?? 0) >= lease;
    const dead = new Set(ltcs.filter(silent));
    if (dead.size === 0) return;
    const next = failOver(this.config, dead, ltcs.filter((id) => !dead.has(id) && !this.removing.has(id)));
    if (!next) return;
    const moved = next.ranges.filter((r, i) => r.ltc !== this.config.ranges[i].ltc || r.from !== this.config.ranges[i].from);
    this.publish(next, `lease of LTC ${[...dead].join(', ')} expired: ${moved.map((r) => `range ${r.id} to LTC ${r.ltc}`).join(', ')}`);
    for (const r of moved) {
      this.loads.forget(r.id);
      if (r.from === undefined) this.settle(r.id);
      void this.callLtc(r.ltc, 'opened', [next.id, r.id, OPEN_MS], OPEN_MS + 5_000).catch(() => undefined); // a nudge: it opens at once
    }
  }

  /** The moves that would even out the LTCs' load now (cluster/rebalance.ts). */
  private plan(): PlannedMove[] {
    const now = performance.now();
    const live = this.config.members.filter((m) => m.role === 'ltc' && this.alive('ltc', m.id, now) && !this.removing.has(m.id)).map((m) => m.id);
    const reshaping = (r: RangeInfo): boolean => r.fill !== undefined || this.config.ranges.some((x) => x.fill?.from === r.id);
    const ranges = this.config.ranges.filter((r) => r.from === undefined && !reshaping(r)).map((r) => {
      const rate = this.loads.rate(r.id, now);
      return { range: r.id, ltc: r.ltc, load: rate ? loadOf(rate.requestsPerSec, rate.bytesWrittenPerSec) : 0 };
    });
    return planRebalance(ranges, live, this.config.settings.rebalanceThresholdPct);
  }

  /** `rebalance [dryRun]`: plans the moves and, unless `dryRun`, makes them one after another. */
  private async rebalance(args: unknown[]): Promise<RebalanceReport> {
    const dryRun = args[0] === true;
    if (this.reshaping) throw new NovaError('BUSY', 'a rebalance or an LTC\'s removal is running; try again when it is done');
    const plan = this.plan();
    if (dryRun || plan.length === 0) return { plan, moves: [] };
    this.reshaping = true;
    const moves: MoveReport[] = [];
    try {
      for (const m of plan) moves.push(await this.move([m.range, m.to]));
      return { plan, moves };
    } catch (err) {
      return { plan, moves, error: (err as Error).message };
    } finally {
      this.reshaping = false;
    }
  }

  /** A rebalance the coordinator starts on its own; one already running is enough. */
  private autoRebalance(why: string): void {
    if (this.reshaping || !this.knowsLiveness(performance.now())) return;
    void this.rebalance([false]).then((r) => {
      if (r.moves.length > 0 || r.error) this.o.onLog?.(`${why}: rebalanced, ${r.moves.length} of ${r.plan.length} move(s)${r.error ? `; stopped: ${r.error}` : ''}`);
    }, () => undefined);
  }

  /**
   * `removeLtc [id]`: moves the LTC's ranges to the other live LTCs (the lightest first), tells
   * it to stop, and takes it out of the configuration. An LTC that is down loses its ranges by
   * failover first: removing it waits for that.
   */
  private async removeLtc(args: unknown[]): Promise<RemoveReport> {
    const [id] = args;
    if (!isId(id)) throw new NovaError('BAD_ARGUMENT', 'removeLtc takes [LTC id]');
    if (!memberOf(this.config, 'ltc', id)) throw new NovaError('BAD_ARGUMENT', `there is no LTC ${id}`);
    const others = (): number[] => this.config.members.filter((m) => m.role === 'ltc' && m.id !== id && this.alive('ltc', m.id) && !this.removing.has(m.id)).map((m) => m.id);
    if (others().length === 0 && this.config.ranges.some((r) => r.ltc === id || r.from === id)) {
      throw new NovaError('BAD_ARGUMENT', `LTC ${id} is the only live LTC: its ranges would have nowhere to go (add an LTC first)`);
    }
    if (this.reshaping) throw new NovaError('BUSY', 'a rebalance or an LTC\'s removal is running; try again when it is done');
    this.reshaping = true;
    this.removing.add(id);
    const moves: MoveReport[] = [];
    try {
      const holds = (): RangeInfo | undefined => this.config.ranges.find((x) => x.ltc === id || x.from === id);
      let stopped = false;
      for (;;) {
        // Each range gets its own deadline: many may have to go.
        let until = performance.now() + RELEASE_MS + this.config.settings.ltcLeaseMs;
        for (let r = holds(); r; r = holds()) {
          if (performance.now() > until) throw new NovaError('DEADLINE_EXCEEDED', `range ${r.id} did not leave LTC ${id}; the removal stopped (run it again)`);
          if (r.ltc === id && r.from === undefined && this.alive('ltc', id)) {
            const count = (l: number): number => this.config.ranges.filter((x) => x.ltc === l).length;
            const to = others().sort((a, b) => count(a) - count(b) || a - b)[0];
            if (to === undefined) throw new NovaError('UNAVAILABLE', `no live LTC to take range ${r.id}`);
            moves.push(await this.move([r.id, to]));
            until = performance.now() + RELEASE_MS + this.config.settings.ltcLeaseMs;
          } else {
            await new Promise((resolve) => setTimeout(resolve, 100)); // a move under way, or failover of a dead LTC
          }
        }
        stopped = await this.callLtc(id, 'retire', [], 10_000).then(() => true, () => false);
        if (!holds()) break; // else a range came to it meanwhile: move that one too
      }
      this.retireMember('ltc', id);
      const members = this.config.members.filter((m) => !(m.role === 'ltc' && m.id === id));
      this.publish({ ...this.config, id: this.config.id + 1, members }, `LTC ${id} removed`);
      this.joined.delete(id);
      return { ltc: id, moves, stopped };
    } finally {
      this.removing.delete(id);
      this.reshaping = false;
    }
  }

  /** Ends the move of `range`, if it is still moving. */
  private endMove(range: number, why: string): void {
    const next = endMove(this.config, range);
    if (!next) return;
    this.publish(next, why);
    this.loads.forget(range);
    this.settle(range);
  }

  /** The move of `range` is over, one way or another: its waiter (move()) goes on. */
  private settle(range: number): void {
    this.moves.delete(range);
    this.letGo.get(range)?.();
    this.letGo.delete(range);
  }

  /** Calls LTC `id` (at its address in the configuration) once. */
  private callLtc<T>(id: number, op: string, args: unknown[], timeoutMs: number): Promise<T> {
    return this.callMember('ltc', id, op, args, timeoutMs);
  }

  /** Calls the LTC or cache instance `id` (at its address in the configuration) once. */
  private async callMember<T>(role: 'ltc' | 'cache', id: number, op: string, args: unknown[], timeoutMs: number): Promise<T> {
    const m = memberOf(this.config, role, id);
    if (!m) throw new NovaError('UNAVAILABLE', `${role === 'ltc' ? 'LTC' : 'cache instance'} ${id} is not registered`);
    const link = await TcpRpcClient.connect(m.address, { timeoutMs: 5_000 });
    try {
      return await link.call<T>(op, args, timeoutMs);
    } finally {
      link.close();
    }
  }

  private register(args: unknown[]): ClusterConfig {
    const [role, id, address, pid, host, incarnation] = args;
    if ((role !== 'ltc' && role !== 'stoc' && role !== 'cache') || !isId(id) || id > MAX_MEMBER_ID || typeof address !== 'string' || address.length === 0 || address.length > MAX_ADDRESS ||
      !isCount(pid) || (host !== undefined && (typeof host !== 'string' || host.length > MAX_HOST)) ||
      (incarnation !== undefined && (typeof incarnation !== 'string' || incarnation.length > 64))) {
      // Every member's fields are in the configuration every client fetches: bounded, so a
      // bogus registration cannot make it larger than a frame.
      throw new NovaError('BAD_ARGUMENT', `register takes [role ("ltc" | "stoc" | "cache"), id (1 to ${MAX_MEMBER_ID}), address (1 to ${MAX_ADDRESS} characters), ` +
        `pid (an integer of 0 or more), host (up to ${MAX_HOST} characters), incarnation (up to 64)]`);
    }
    // An LTC or cache instance is reached at host:port by clients; a StoC at its fabric address, in base64.
    const byTcp = role === 'ltc' || role === 'cache';
    if (byTcp ? !isHostPort(address) : !/^[A-Za-z0-9+/]+={0,2}$/.test(address)) {
      throw new NovaError('BAD_ARGUMENT', `register: ${role} ${id}'s address ${JSON.stringify(address.slice(0, 80))} is not ${byTcp ? 'HOST:PORT' : 'a fabric address in base64'}`);
    }
    if (!this.config.members.some((m) => m.role === role && m.id === id) && this.config.members.length >= MAX_MEMBERS) {
      throw new NovaError('BUSY', `register: the cluster has ${MAX_MEMBERS} members, the most it takes; remove one first`);
    }
    if (typeof incarnation === 'string' && this.retired.has(incarnation)) {
      throw Object.assign(new NovaError('BUSY', `${role} ${id}: this process was removed from the cluster; start a new one to join again`), { detail: 'removed' });
    }
    if (role === 'stoc' && this.config.removedStocs?.includes(id)) {
      throw Object.assign(new NovaError('BUSY', `StoC ${id} was removed from the cluster and its id is not used again: start the StoC with a new id`), { detail: 'removed' });
    }
    const old = this.config.members.find((m) => m.role === role && m.id === id);
    // A StoC restarted while it drains goes on draining.
    const member: Member = {
      role, id, address, pid, host: typeof host === 'string' ? host : '', ...(typeof incarnation === 'string' ? { incarnation } : {}),
      ...(old?.draining ? { draining: true } : {}),
      // A StoC new to the cluster is fresh until its first heartbeat; one seen before may hold files whatever it is now.
      ...(role === 'stoc' && (!old || old.fresh) ? { fresh: true } : {}),
    };
    if (!old && role === 'ltc') this.joined.add(id);
    const another = old !== undefined && (old.pid !== pid || old.incarnation !== member.incarnation);
    if (!old || old.address !== address || another) {
      const members = this.config.members.filter((m) => m !== old).concat(member)
        .sort((a, b) => a.role.localeCompare(b.role) || a.id - b.id);
      const next = this.config.id + 1;
      // Another process of this LTC: its ranges take a new epoch, so a paused older one is fenced off.
      const ranges = another && role === 'ltc' ? this.config.ranges.map((r) => (r.ltc === id ? { ...r, epoch: next } : r)) : this.config.ranges;
      this.publish({ ...this.config, id: next, members, ranges }, `${role} ${id} registered at ${address} (pid ${pid})`);
    }
    this.seen.set(memberKey(role, id), { at: performance.now(), serving: [], unopened: [] });
    return this.config;
  }

  /**
   * `heartbeat [role, id, serving, holding, config id, load, incarnation, filled, cache counters,
   * unopened]`: an LTC also names the ranges it holds (open, opening or closing), the configuration
   * it has, each range's counters, the ranges it has filled (a split or merge), and why each range
   * it holds is not open yet ([range, error, ms], for status). A process whose id another process has registered since, or that was removed, is
   * answered BUSY (it must not renew).
   */
  private heartbeat(args: unknown[]): number {
    const [role, id, serving, holding, configId, load, incarnation, filled, cacheCounters, unopened] = args;
    if ((role !== 'ltc' && role !== 'stoc' && role !== 'cache') || !isId(id)) throw new NovaError('BAD_ARGUMENT', 'heartbeat takes [role, id, serving, holding, config id, load, incarnation, filled, cache counters, unopened]');
    if (typeof incarnation === 'string' && this.retired.has(incarnation)) {
      throw Object.assign(new NovaError('BUSY', `${role} ${id}: this process was removed from the cluster`), { detail: 'removed' });
    }
    const member = memberOf(this.config, role, id);
    if (!member) throw new NovaError('STALE_CONFIG', `${role} ${id} is not registered: register first`);
    if (typeof incarnation === 'string' && member.incarnation !== undefined && incarnation !== member.incarnation) {
      throw new NovaError('BUSY', `${role} ${id} is registered by another process (pid ${member.pid}) since`);
    }
    const now = performance.now();
    this.seen.set(memberKey(role, id), { at: now, serving: Array.isArray(serving) ? serving.filter(isId) : [], unopened: unopenedOf(unopened, 2 * this.config.ranges.length + 16) });
    if (role === 'cache') this.caches.sample(id, now, cacheCounters);
    if (member.fresh) {
      const { fresh: _, ...up } = member;
      this.publish({ ...this.config, id: this.config.id + 1, members: this.config.members.map((m) => (m === member ? up : m)) }, `${role} ${id} is up`);
    }
    if (role === 'ltc') {
      if (Array.isArray(load)) {
        for (const x of load.slice(0, this.config.ranges.length)) {
          if (!Array.isArray(x) || !isId(x[0]) || !isCount(x[1]) || !isCount(x[2])) continue;
          if (this.config.ranges.some((r) => r.id === x[0] && r.ltc === id)) this.loads.sample(id, x[0], now, x[1], x[2]);
        }
      }
      // An LTC with the newest configuration that no longer holds a range moving away from it has let it go.
      if (configId === this.config.id && Array.isArray(holding)) {
        const held = new Set(holding.filter(isId));
        for (const r of this.config.ranges.filter((x: RangeInfo) => x.from === id && !held.has(x.id))) {
          this.endMove(r.id, `LTC ${id} no longer holds range ${r.id}`);
        }
      }
      // An LTC with the newest configuration that has filled a range it holds (the split's or merge's caller may be gone).
      if (configId === this.config.id && Array.isArray(filled)) {
        for (const r of this.config.ranges.filter((x) => x.fill && x.ltc === id && filled.includes(x.id))) this.endFill(r.id, `LTC ${id} filled range ${r.id}`);
      }
    }
    return this.config.id;
  }
}

function memberKey(role: Role, id: number): string {
  return `${role}/${id}`;
}

function isCount(x: unknown): x is number {
  return typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
}

/** Whether `a` is HOST:PORT (a name, an IPv4 or an IPv6 address, bracketed or not) with a port of 1 to 65535. */
function isHostPort(a: string): boolean {
  const m = /^([A-Za-z0-9._%:[\]-]+):(\d{1,5})$/.exec(a);
  return m !== null && Number(m[2]) >= 1 && Number(m[2]) <= 65_535;
}

function isId(x: unknown): x is number {
  return typeof x === 'number' && Number.isSafeInteger(x) && x > 0;
}

/** A heartbeat's `unopened` entries that are well formed, among its first `max` (an LTC may hold ranges leaving it as well as the configuration's). */
function unopenedOf(x: unknown, max: number): MemberStatus['unopened'] {
  if (!Array.isArray(x)) return [];
  return x.slice(0, max).flatMap((e) => (Array.isArray(e) && isId(e[0]) && typeof e[1] === 'string' && isCount(e[2])
    ? [{ range: e[0], error: e[1].slice(0, MAX_OPEN_ERROR), forMs: e[2] }] : []));
}
