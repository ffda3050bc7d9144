/**
 * A component's link to the coordinator: register, heartbeat, and follow the configuration.
 * If the coordinator restarts or forgets us, the next beat registers again; a beat that
 * reports a newer config id fetches it and hands it to `onConfig`.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { NovaError } from '../common/errors.js';
import { configFromWire, type ClusterConfig, type Role } from './config.js';
import { CoordinatorLocator } from './locator.js';

/** How often a member tells the coordinator it is alive. */
export const HEARTBEAT_MS = 500;

/** Least time between two fetches of the configuration (refresh). */
const REFRESH_GAP_MS = 20;

export interface MembershipOptions {
  coordinator: string;
  /** A cluster.json to read the coordinator's address from again if it stops answering (`nova up`). */
  clusterFile?: string;
  role: Role;
  id: number;
  address: string;
  host?: string;
  /** What an LTC reports of its ranges; called on each beat. */
  ranges?: () => RangeReport;
  /** What a cache instance reports: [lookups, hits, secondary lookups, secondary hits], since it started. */
  counters?: () => number[];
  /** Called with `renewedAt` each time the lease is renewed (before onConfig, at registration). */
  onRenewed?: (at: number) => void;
  onConfig: (config: ClusterConfig) => void;
  onLog?: (line: string) => void;
  /** Called once the coordinator says this process was removed from the cluster: it should stop. */
  onRemoved?: () => void;
}

/** A heartbeat's open failure is cut to this many characters. */
export const MAX_OPEN_ERROR = 400;

export interface RangeReport {
  /** Ranges open and serving. */
  serving: number[];
  /** Ranges open, opening or closing: those it has not let go. */
  holding: number[];
  /** [range, requests, bytes written] since this process opened each range. */
  load: Array<[number, number, number]>;
  /** Ranges whose fill (a split or merge) is done here, under the configuration it reports. */
  filled: number[];
  /** [range, why its last open failed (at most MAX_OPEN_ERROR characters), ms since its opens began failing] for each range held and not open. */
  unopened?: Array<[number, string, number]>;
}

export class Membership {
  private timer: NodeJS.Timeout | undefined;
  private configId = 0;
  /**
   * When (performance.now()) the last heartbeat or registration the coordinator answered was
   * sent: the coordinator heard from us no earlier, so our lease runs at least until then plus
   * its length.
   */
  renewedAt = -Infinity;
  /** This process among every process that ever registered under our id (pids repeat across machines and containers). */
  private readonly incarnation = randomBytes(8).toString('hex');
  private beating = false;
  private stopped = false;
  /** The configuration fetch under way (refresh), and when the last was sent. */
  private fetching: Promise<number> | undefined;
  private lastFetch = -Infinity;
  private lastError = '';

  private readonly locator: CoordinatorLocator;

  private constructor(private readonly o: MembershipOptions) {
    this.locator = new CoordinatorLocator(o.coordinator, o.clusterFile);
  }

  /** Registers (retrying until `deadlineMs`) and starts heartbeats. */
  static async join(o: MembershipOptions, deadlineMs = 30_000): Promise<Membership> {
    const m = new Membership(o);
    const until = Date.now() + deadlineMs;
    for (;;) {
      try {
        await m.register();
        break;
      } catch (err) {
        m.followMove(err);
        if (Date.now() > until) {
          m.stop(); // and its link, which may be connected to something that never answers
          throw new NovaError('DEADLINE_EXCEEDED', `could not register with the coordinator at ${m.locator.address} in ${deadlineMs} ms: ${(err as Error).message}; is it running?`);
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    m.timer = setInterval(() => void m.beat(), HEARTBEAT_MS);
    return m;
  }

  private renew(at: number): void {
    this.renewedAt = at;
    this.o.onRenewed?.(at);
  }

  /**
   * Resolves once a fetch of the configuration sent after this call has been applied (after a
   * client or a heartbeat said ours is old). Callers share fetches: one at a time, at most one
   * per REFRESH_GAP_MS, however many requests name a newer id.
   */
  async refresh(): Promise<void> {
    const asked = performance.now();
    for (;;) {
      const fetching = this.fetching ?? this.fetch();
      const sentAt = await fetching;
      if (sentAt >= asked) return;
    }
  }

  /** One fetch, sent no sooner than REFRESH_GAP_MS after the last; resolves with when it was sent. */
  private fetch(): Promise<number> {
    const run = (async (): Promise<number> => {
      try {
        const wait = this.lastFetch + REFRESH_GAP_MS - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const sentAt = performance.now();
        this.lastFetch = sentAt;
        this.accept(configFromWire(await this.locator.call('config', [], 5_000, 5_000)));
        return sentAt;
      } finally {
        this.fetching = undefined;
      }
    })();
    this.fetching = run;
    return run;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.locator.close();
  }

  /** Follows the coordinator to where it is now, after it failed with `err` (CoordinatorLocator.failed). */
  private followMove(err: unknown): void {
    if (this.locator.failed(err)) this.o.onLog?.(`the coordinator is now at ${this.locator.address}`);
  }

  private async register(): Promise<void> {
    const link = await this.locator.connection();
    const sent = performance.now();
    const c = await link.call('register', [this.o.role, this.o.id, this.o.address, process.pid, this.o.host ?? '', this.incarnation]);
    this.renew(sent);
    this.accept(configFromWire(c));
  }

  /** Stops, and says so, if `err` is the coordinator saying this process was removed from the cluster. */
  private removedIf(err: NovaError): void {
    if ((err as { detail?: unknown }).detail !== 'removed' || this.stopped) return;
    this.o.onLog?.(`removed from the cluster: ${err.message}`);
    this.stop();
    this.o.onRemoved?.();
  }

  private accept(c: ClusterConfig): void {
    if (c.id <= this.configId) return;
    this.configId = c.id;
    this.o.onConfig(c);
  }

  private async beat(): Promise<void> {
    if (this.beating || this.stopped) return;
    this.beating = true;
    try {
      // What the LTC holds is read with the config id it holds it under (the coordinator ends moves by it).
      const link = await this.locator.connection();
      const r = this.o.ranges?.();
      const sent = performance.now();
      const id = await link.call<number>('heartbeat', [this.o.role, this.o.id, r?.serving ?? [], r?.holding ?? [], this.configId, r?.load ?? [], this.incarnation, r?.filled ?? [], this.o.counters?.() ?? null, r?.unopened ?? []]);
      // Renewed only with the configuration it renews under applied: else a deposed LTC would serve by the old one.
      if (id > this.configId) await this.refresh();
      this.renew(sent);
      this.lastError = '';
    } catch (err) {
      const e = err as NovaError;
      if (e.code === 'STALE_CONFIG') {
        // The coordinator forgot us (a new directory), or removed us (then we stop).
        if (!this.stopped) await this.register().catch((x: NovaError) => this.removedIf(x));
        return;
      }
      if (e.code === 'BUSY') {
        // Another process registered under our id, or we were removed: ours lapses, and we do not take the id back.
        if (e.message !== this.lastError) this.o.onLog?.(`heartbeat refused: ${e.message}; this process serves nothing more`);
        this.lastError = e.message;
        this.removedIf(e);
        return;
      }
      this.followMove(e);
      if (e.message !== this.lastError) {
        this.lastError = e.message;
        this.o.onLog?.(`heartbeat to the coordinator failed: ${e.message} (retrying)`);
      }
    } finally {
      this.beating = false;
    }
  }
}
