/**
 * The LTC's connections to StoCs, by StoC id, following the configuration. A connection is
 * made when first needed; a lost one is dropped and made again on next use (a restarted
 * StoC registers a new address, which arrives with the next configuration). Each new
 * connection claims the ranges this LTC opened, under their epochs, before it is used
 * (fence), so the StoC can refuse it once another LTC has opened one of them.
 */
import { ConnectionCache } from '../common/connection-cache.js';
import { withDeadline } from '../common/deadline.js';
import { NovaError } from '../common/errors.js';
import type { ClusterConfig } from '../cluster/config.js';
import { StocClient } from './stoc-client.js';
import { filesOf, type StocFileSuffix, type StocLoad } from './stoc-protocol.js';
import type { Fabric } from '../transport/fabric.js';
import type { Rpc } from '../transport/rpc.js';

const CONNECT_MS = 5_000;
/** How often a StoC is probed while a request with a long deadline waits on it (watched): as often as a request's own deadline. */
const WATCH_MS = CONNECT_MS;
/**
 * How long a probe waits before the StoC is taken for gone (failed, watched): longer than
 * placement's LOAD_TIMEOUT_MS, since a StoC short of CPU (capped, or running merges) answers late.
 */
const SILENT_MS = 5_000;

/** Failure codes that mean a StoC went away (it is shunned), not that a request was bad. */
export const STOC_LOST: ReadonlySet<string> = new Set(['PEER_LOST', 'DEADLINE_EXCEEDED', 'CLOSED', 'UNAVAILABLE']);


/** How long a StoC's load is awaited before placement goes on without it. */
const LOAD_TIMEOUT_MS = 2_000;
/** How long a StoC whose disk failed a write is given no new file; then it is tried again. */
const DISK_REST_MS = 5_000;
/**
 * How long a StoC that failed is shunned: the first time, then twice as long for each failure
 * after (no success between), up to the most. A StoC that died makes each request sent to it
 * wait for its deadline, so it is tried again ever more rarely, not every few seconds.
 */
const SHUN_MS = 2_000;
const SHUN_MAX_MS = 30_000;

export class StocPool {
  private addresses = new Map<number, string>();
  private readonly clients = new ConnectionCache<number, StocClient>(async (id) => {
    const address = this.addresses.get(id);
    if (address === undefined) throw new NovaError('UNAVAILABLE', `StoC ${id} is not in the configuration`);
    const c = await StocClient.connect(this.fabric, this.rpc, Buffer.from(address, 'base64'), { timeoutMs: CONNECT_MS });
    // A claim the StoC refuses still marks the connection (its writes to that range are refused).
    for (const [range, epoch] of this.epochs) {
      await c.fence(range, epoch).catch((err: NovaError) => {
        if (err.code !== 'STALE_CONFIG') {
          void c.close();
          throw err;
        }
      });
    }
    return c;
  }, (c, lost) => c.onLost(lost));
  /** The ranges this LTC opened, with the epoch of each (fence). */
  private readonly epochs = new Map<number, number>();
  /** StoCs being drained (`nova stoc remove`): read, but given no new files. */
  private draining = new Set<number>();
  /** StoCs not yet heard from since they joined (Member.fresh): given no files, so holding none. */
  private fresh = new Set<number>();
  /** StoCs that failed recently: not offered for new files until this time. */
  private readonly shunned = new Map<number, number>();
  /** Failures of each StoC since its last success (the shun's length grows with them). */
  private readonly strikes = new Map<number, number>();
  /** A load probe under way of each StoC whose request passed its deadline (shunIfSilent). */
  private readonly probing = new Map<number, Promise<boolean>>();
  /** StoCs whose disk failed a write (DISK_FAILED), with why: given no new file until this time. */
  private readonly diskFailed = new Map<number, { until: number; why: string }>();

  constructor(private readonly fabric: Fabric, private readonly rpc: Rpc) {}

  /** Takes the StoC set and addresses from a new configuration. */
  update(config: ClusterConfig): void {
    const stocs = config.members.filter((m) => m.role === 'stoc');
    this.draining = new Set(stocs.filter((m) => m.draining).map((m) => m.id));
    this.fresh = new Set(stocs.filter((m) => m.fresh).map((m) => m.id));
    const next = new Map(stocs.map((m) => [m.id, m.address]));
    for (const [id, address] of this.addresses) {
      if (next.get(id) !== address) {
        this.forget(id); // moved or removed
        // A new address is a new process: what the old one failed is not held against it.
        this.strikes.delete(id);
        this.shunned.delete(id);
      }
    }
    this.addresses = next;
  }

  /** StoC ids in the configuration. */
  ids(): number[] {
    return [...this.addresses.keys()].sort((a, b) => a - b);
  }

  /** The fabric address of StoC `id` (as the configuration gives it), if it is configured. */
  address(id: number): Buffer | undefined {
    const a = this.addresses.get(id);
    return a === undefined ? undefined : Buffer.from(a, 'base64');
  }

  /** StoC ids that answer: configured and not failed in the last few seconds. */
  healthy(): number[] {
    const now = Date.now();
    return this.ids().filter((id) => (this.shunned.get(id) ?? 0) <= now);
  }

  /** Whether StoC `id` is configured and not failed in the last few seconds. */
  isHealthy(id: number): boolean {
    return this.addresses.has(id) && (this.shunned.get(id) ?? 0) <= Date.now();
  }

  /**
   * StoC ids to place new files on (tables, logs, MANIFESTs, compactions): healthy, heard from,
   * not leaving the cluster, and with no disk failure in the last DISK_REST_MS.
   */
  placeable(): number[] {
    const now = Date.now();
    return this.placeableForLogs().filter((id) => (this.diskFailed.get(id)?.until ?? 0) <= now);
  }

  /**
   * StoC ids to place new logs and MANIFESTs on: as placeable, but a disk that failed a write
   * is not left out. A StoC refuses tables before its disk is full (its reserve, tableRoom), so
   * logs and MANIFESTs still have room there when no table has; a disk truly failing fails the
   * replica, which the log drops.
   */
  placeableForLogs(): number[] {
    return this.healthy().filter((id) => !this.draining.has(id) && !this.fresh.has(id));
  }

  /** StoC ids that may hold files: all configured but those not yet heard from (Member.fresh). */
  mayHoldFiles(): number[] {
    return this.ids().filter((id) => !this.fresh.has(id));
  }

  /** StoCs given no new file because their disk failed a write recently, as `StoC 2 (ENOSPC)`. */
  disksFailed(): string[] {
    const now = Date.now();
    return [...this.diskFailed].filter(([, d]) => d.until > now).map(([id, d]) => `StoC ${id} (${d.why})`);
  }

  /** Marks a StoC as failing; it is not chosen for new files (nor read first) for a while, longer at each failure in a row. */
  shun(id: number): void {
    const n = this.strikes.get(id) ?? 0;
    this.strikes.set(id, n + 1);
    this.shunned.set(id, Date.now() + Math.min(SHUN_MAX_MS, SHUN_MS * 2 ** n));
    this.forget(id);
  }

  get(id: number): Promise<StocClient> {
    return this.clients.get(id);
  }

  /**
   * StoC `id`'s load, for placement, within `timeoutMs` (connecting included). A late answer
   * shuns nothing here (failed and watched decide that, on a longer wait): a StoC too busy to
   * answer in time is busy, not gone, and taking it for gone closed its connection and failed
   * every request on it (with one StoC, every range). One that cannot be reached (its connection
   * lost or refused) is shunned as by any request.
   */
  async probeLoad(id: number, timeoutMs = LOAD_TIMEOUT_MS): Promise<StocLoad> {
    const deadline = Date.now() + timeoutMs;
    try {
      return await withDeadline(this.get(id).then((c) => c.load({ timeoutMs: Math.max(1, deadline - Date.now()) })), timeoutMs,
        () => new NovaError('DEADLINE_EXCEEDED', `StoC ${id}: no load within ${timeoutMs} ms`));
    } catch (err) {
      const code = (err as NovaError).code;
      if (code !== 'DEADLINE_EXCEEDED' && STOC_LOST.has(code)) this.shun(id);
      throw err;
    }
  }

  /**
   * Notes that a request to StoC `id` failed with `err`, shunning the StoC if that means it is
   * gone: a connection lost or refused does; a deadline passed does only if the StoC does not
   * answer a load probe within SILENT_MS either. A StoC behind on its disk (a capped one, or one
   * disk under many writes) answers from memory while its syncs wait, and taking it for gone
   * closed its connection and failed every request on it (with one StoC, every range's).
   */
  async failed(id: number, err: unknown): Promise<void> {
    const code = (err as NovaError | undefined)?.code ?? '';
    if (!STOC_LOST.has(code)) return;
    if (code === 'DEADLINE_EXCEEDED') return this.shunIfSilent(id);
    if (this.isHealthy(id)) this.shun(id);
  }

  /**
   * Shuns StoC `id` if it does not answer a load probe within SILENT_MS and `still()` holds then;
   * a StoC shunned already is not probed. One probe at a time per StoC, whoever asks.
   */
  private async shunIfSilent(id: number, still: () => boolean = () => true): Promise<void> {
    if (!this.isHealthy(id)) return;
    let probe = this.probing.get(id);
    if (!probe) {
      probe = this.probeLoad(id, SILENT_MS).then(() => true, () => false).finally(() => this.probing.delete(id));
      this.probing.set(id, probe);
    }
    // The probe's own failure (its connection lost) may have shunned it.
    if (!(await probe) && still() && this.isHealthy(id)) this.shun(id);
  }

  /**
   * As `on`, for a request given a deadline for its size (a table's synced write, whose sync may
   * wait behind every write queued on a slow disk): while it is under way the StoC is probed every
   * WATCH_MS, and one that does not answer is shunned, which closes its connection and fails the
   * request. So a StoC that stopped is found within WATCH_MS + SILENT_MS, not the request's deadline.
   */
  async watched<T>(id: number, fn: (c: StocClient) => Promise<T>): Promise<T> {
    let done = false;
    const watch = setInterval(() => void this.shunIfSilent(id, () => !done), WATCH_MS);
    try {
      return await this.on(id, fn);
    } finally {
      done = true;
      clearInterval(watch);
    }
  }

  /** Runs `fn` on StoC `id`; a failure that means the StoC is gone shuns it (failed), and is rethrown. */
  async on<T>(id: number, fn: (c: StocClient) => Promise<T>): Promise<T> {
    try {
      const r = await fn(await this.get(id));
      this.strikes.delete(id);
      return r;
    } catch (err) {
      const code = (err as NovaError).code;
      void this.failed(id, err); // the caller goes on (another copy, say) while a late StoC is probed
      if (code === 'DISK_FAILED') {
        this.diskFailed.set(id, { until: Date.now() + DISK_REST_MS, why: /\b(E[A-Z]+)\b/.exec((err as Error).message)?.[1] ?? 'disk failed' });
      }
      throw err;
    }
  }

  /**
   * Claims range `range` under `epoch` on every configured StoC that may hold files, and on every
   * connection made later: before the range's MANIFEST and logs are read, so no write of an LTC that had the
   * range before lands after. STALE_CONFIG if a StoC knows a newer epoch (another LTC has it);
   * UNAVAILABLE while a StoC does not answer.
   */
  async fence(range: number, epoch: number): Promise<void> {
    this.epochs.set(range, epoch);
    // Not StoCs never heard from: no LTC placed a file on one; its connection claims the range when made.
    await Promise.all(this.mayHoldFiles().map((id) => this.on(id, (c) => c.fence(range, epoch))));
  }

  /** Stops claiming `range` on new connections (it was let go). */
  unfence(range: number): void {
    this.epochs.delete(range);
  }

  close(): void {
    void this.clients.closeAll();
  }

  private forget(id: number): void {
    this.clients.forget(id);
  }
}

/** The names of `range`'s files on each StoC that answers (one that does not: none). */
export async function namesOnStocs(pool: StocPool, range: number): Promise<Array<{ stoc: number; names: string[] }>> {
  return Promise.all(pool.healthy().map(async (stoc) => ({
    stoc, names: await pool.on(stoc, async (c) => (await c.list(`r${range}-`)).map((f) => f.name)).catch(() => [] as string[]),
  })));
}

/** Numbers of the files of `range` with `suffix` on the StoCs that answer (orphan cleanup). */
export async function filesOnStocs(pool: StocPool, range: number, suffix: StocFileSuffix): Promise<number[]> {
  const found = await namesOnStocs(pool, range);
  return [...new Set(filesOf(range, found.flatMap((f) => f.names), suffix))];
}
