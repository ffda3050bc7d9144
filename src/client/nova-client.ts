/**
 * NovaClient: the library applications use to talk to a Nova cluster (DESIGN.md §1).
 *
 * It caches the coordinator's configuration and sends each request to the LTC that owns the
 * key's range, over a pipelined, batched TCP connection per LTC. A request that the LTC
 * answers with STALE_CONFIG (ranges moved, a component restarted) makes the client fetch the
 * configuration and retry; UNAVAILABLE (a range recovering) and a lost connection (an LTC
 * restarting) are retried with backoff. Every call has an overall deadline.
 *
 * Retried writes are safe: a put or delete applied twice leaves the same state.
 */
import { NovaError } from '../common/errors.js';
import { TcpRpcClient, TcpRemoteError } from '../common/tcp-rpc.js';
import { configFromWire, memberOf, rangeOf, type ClusterConfig } from '../coordinator/config.js';
import { CoordinatorLocator } from '../coordinator/locator.js';

export { coordinatorOf } from '../coordinator/locator.js';

export interface NovaClientOptions {
  /** HOST:PORT of the coordinator; or */
  coordinator?: string;
  /**
   * the directory of `nova up` (its cluster.json names the coordinator, and is read again if
   * the coordinator moved). Default ./nova-data.
   */
  dir?: string;
  /** Deadline of each call, retries included (default 30 s). */
  timeoutMs?: number;
}

export interface ScanOptions {
  /** Exclusive upper bound. */
  end?: Uint8Array;
  /** At most this many entries (default 100). */
  limit?: number;
}

/** A manual full compaction merges every table of a range: minutes for tens of GiB. */
const COMPACT_TIMEOUT_MS = 60 * 60_000;
const RETRY_FIRST_MS = 20;
/** Requests an LTC commits in groups (one log append per group): they do not cut a frame early. */
const GROUPED_OPS = ['put', 'del', 'write'];
const RETRY_MAX_MS = 500;

/** Puts and deletes applied atomically; all keys must fall in one range. */
export class ClientBatch {
  readonly ops: Array<[0, Buffer, Buffer] | [1, Buffer]> = [];
  put(key: Uint8Array, value: Uint8Array): this {
    this.ops.push([0, Buffer.from(key), Buffer.from(value)]);
    return this;
  }
  delete(key: Uint8Array): this {
    this.ops.push([1, Buffer.from(key)]);
    return this;
  }
}

export class NovaClient {
  private config!: ClusterConfig;
  private refreshing: Promise<void> | undefined;
  private readonly ltcs = new Map<string, Promise<TcpRpcClient>>();
  private closed = false;
  private readonly timeoutMs: number;
  private readonly coordinator: CoordinatorLocator;

  private constructor(o: NovaClientOptions) {
    this.coordinator = o.coordinator !== undefined ? new CoordinatorLocator(o.coordinator) : CoordinatorLocator.ofDir(o.dir ?? 'nova-data');
    this.timeoutMs = o.timeoutMs ?? 30_000;
  }

  static async connect(o: NovaClientOptions = {}): Promise<NovaClient> {
    const c = new NovaClient(o);
    await c.refresh();
    return c;
  }

  /** The configuration this client routes by. */
  get configuration(): ClusterConfig {
    return this.config;
  }

  async get(key: Uint8Array): Promise<Buffer | undefined> {
    const v = await this.call<Uint8Array | null>('get', key, (id) => [id, Buffer.from(key)]);
    return v === null ? undefined : Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  }

  async put(key: Uint8Array, value: Uint8Array): Promise<void> {
    await this.call('put', key, (id) => [id, Buffer.from(key), Buffer.from(value)]);
  }

  async delete(key: Uint8Array): Promise<void> {
    await this.call('del', key, (id) => [id, Buffer.from(key)]);
  }

  batch(): ClientBatch {
    return new ClientBatch();
  }

  /** Applies `batch` atomically. Its keys must all be in one range (else BAD_ARGUMENT). */
  async write(batch: ClientBatch): Promise<void> {
    if (batch.ops.length === 0) return;
    const first = rangeOf(this.config, batch.ops[0][1]).id;
    const other = batch.ops.find((op) => rangeOf(this.config, op[1]).id !== first);
    if (other) {
      throw new NovaError('BAD_ARGUMENT', `a batch spans ranges ${first} and ${rangeOf(this.config, other[1]).id}: batches are atomic within one range only; split it`);
    }
    await this.call('write', batch.ops[0][1], (id) => [id, batch.ops]);
  }

  /** Entries with start <= key < end in key order, continuing across ranges. */
  async scan(start: Uint8Array, options: ScanOptions = {}): Promise<Array<[Buffer, Buffer]>> {
    const limit = options.limit ?? 100;
    const out: Array<[Buffer, Buffer]> = [];
    let from: Buffer | undefined = Buffer.from(start);
    const end = options.end ? Buffer.from(options.end) : null;
    while (from !== undefined && out.length < limit) {
      const at: Buffer = from;
      const page = await this.call<{ rows: Array<[Uint8Array, Uint8Array]>; next: Uint8Array | null }>('scan', at,
        (id) => [id, at, end, limit - out.length]);
      for (const [k, v] of page.rows) out.push([Buffer.from(k), Buffer.from(v)]);
      from = page.next === null ? undefined : Buffer.from(page.next);
      if (from !== undefined && end !== null && Buffer.compare(from, end) >= 0) from = undefined;
    }
    return out;
  }

  /** Per-range statistics of every LTC. */
  async stats(): Promise<unknown[]> {
    return (await this.everyLtc<unknown[]>('stats')).flat();
  }

  /** Makes every LTC write its memtables to SSTables and run the compactions due. */
  async flush(): Promise<void> {
    await this.everyLtc('flush', this.timeoutMs);
  }

  /**
   * Makes every LTC flush its memtables and merge each range's whole tree into its deepest
   * level (a manual full compaction; writes wait only for the flush). It runs to the end on
   * the LTCs even if this call's deadline passes first.
   */
  async compact(): Promise<void> {
    await this.everyLtc('compact', Math.max(this.timeoutMs, COMPACT_TIMEOUT_MS));
  }

  /**
   * Sends `op` (no arguments) to every LTC of the configuration at once; their answers.
   * Without `timeoutMs`, the connection's own deadline (a few seconds).
   */
  private everyLtc<T = unknown>(op: string, timeoutMs?: number): Promise<T[]> {
    const ltcs = this.config.members.filter((m) => m.role === 'ltc');
    return Promise.all(ltcs.map(async (m) => (await this.ltc(m.address)).call<T>(op, [], timeoutMs)));
  }

  close(): void {
    this.closed = true;
    this.coordinator.close();
    for (const c of this.ltcs.values()) c.then((x) => x.close(), () => undefined);
    this.ltcs.clear();
  }

  /** Sends `op` for `key` to its LTC, retrying as the configuration and the LTCs change. */
  private async call<T>(op: string, key: Uint8Array, args: (configId: number) => unknown[]): Promise<T> {
    const deadline = Date.now() + this.timeoutMs;
    let wait = RETRY_FIRST_MS;
    for (let attempt = 1; ; attempt++) {
      if (this.closed) throw new NovaError('CLOSED', 'client is closed');
      const range = rangeOf(this.config, key);
      const ltc = memberOf(this.config, 'ltc', range.ltc);
      let error: NovaError;
      if (!ltc) {
        error = new NovaError('UNAVAILABLE', `LTC ${range.ltc} (range ${range.id}) has not registered yet`);
      } else {
        try {
          const link = await this.ltc(ltc.address);
          return await link.call<T>(op, args(this.config.id), Math.max(1, deadline - Date.now()));
        } catch (err) {
          error = err as NovaError;
        }
      }
      const retry = error.code === 'STALE_CONFIG' || error.code === 'UNAVAILABLE' || error.code === 'PEER_LOST';
      if (!retry || Date.now() + wait > deadline) {
        if (retry) throw new NovaError('DEADLINE_EXCEEDED', `${op}: gave up after ${this.timeoutMs} ms; last error: ${error.message}`);
        throw error;
      }
      if (error.code !== 'STALE_CONFIG' || attempt > 1) { // a first STALE_CONFIG retries at once
        await new Promise((r) => setTimeout(r, wait));
        wait = Math.min(RETRY_MAX_MS, wait * 2);
      }
      const newer = error instanceof TcpRemoteError && typeof error.detail === 'number' ? error.detail : undefined;
      if (newer === undefined || newer > this.config.id) await this.refresh().catch(() => undefined);
    }
  }

  private ltc(address: string): Promise<TcpRpcClient> {
    const known = this.ltcs.get(address);
    if (known) return known;
    const c = TcpRpcClient.connect(address, { timeoutMs: 5_000, grouped: GROUPED_OPS });
    this.ltcs.set(address, c);
    const drop = (): void => {
      if (this.ltcs.get(address) === c) this.ltcs.delete(address);
    };
    c.then((link) => link.onClose(drop), drop);
    return c;
  }

  /** Fetches the configuration (one fetch at a time; callers share it). */
  private refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        const c = configFromWire(await (await this.coordinator.connection()).call('config', []));
        if (!this.config || c.id >= this.config.id) this.config = c;
      } catch (err) {
        this.coordinator.moved();
        throw err;
      } finally {
        this.refreshing = undefined;
      }
    })();
    return this.refreshing;
  }
}
