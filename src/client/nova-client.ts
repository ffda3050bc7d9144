/**
 * NovaClient: the library applications use to talk to a Nova cluster (DESIGN.md §1).
 *
 * It caches the coordinator's configuration and sends each request to the LTC that owns the
 * key's range, over a pipelined, batched TCP connection per LTC. A request that the LTC
 * answers with STALE_CONFIG (ranges moved, a component restarted) makes the client fetch the
 * configuration and retry; UNAVAILABLE (a range recovering) and a lost connection (an LTC
 * restarting) are retried with backoff. Every call has an overall deadline.
 *
 * Writes are applied exactly once (doc/decisions/exactly-once-writes.md): the client has a
 * session (a random id, ClientId in sessions.ts) and numbers every put, delete and batch in
 * it; the number travels with each attempt, and the LTC answers a retry of a write it
 * applied from its session table instead of applying it again. So a write is retried after any failure that
 * may have left it applied (a lost connection, an LTC that died mid-commit), and a retry
 * inside the deadline is always safe. A write that fails in the end says which it was: FAILED
 * (certainly not applied) or UNKNOWN_OUTCOME (it may have been, or may yet be, applied).
 * An LTC that stops answering (paused, or its machine gone) while the coordinator gives its
 * ranges to another is left behind: calls that waited on it for SILENT_MS, once the
 * configuration sends a range of it elsewhere, are sent again where it routes them.
 *
 * An LTC that no longer knows the session (idle past the cluster's sessionTimeoutMs) answers
 * SESSION_EXPIRED to that attempt, which applies nothing; the client then starts a new
 * session and sends the write again under it — unless an earlier attempt may have applied it:
 * that can no longer be asked, so the write ends UNKNOWN_OUTCOME.
 *
 * With each write to a range the client sends its floor there: the lowest number among its
 * writes to that range still unfinished (sent and neither answered nor given up). The LTC
 * forgets numbers below it. A range's window (newest number minus floor) is kept under
 * SESSION_WINDOW: a new write to a range whose oldest write is stuck waits for it.
 */
import { secretInDir, useSecret } from '../common/cluster-secret.js';
import { tlsCaInDir, useTcpTls } from '../net/tcp-tls.js';
import { withDeadline } from '../common/deadline.js';
import { NovaError, type ErrorCode } from '../common/errors.js';
import { ConnectionCache } from '../common/connection-cache.js';
import { RpcRemoteError } from '../common/rpc-envelope.js';
import { TcpRpcClient } from '../net/tcp-rpc-client.js';
import { configFromWire, memberOf, rangeOf, type ClusterConfig } from '../cluster/config.js';
import { CoordinatorLocator } from '../cluster/locator.js';
import type { SalvageReport } from '../ltc/salvage.js';
import { idName, randomClientId, type ClientId } from '../common/write-id.js';
import type { CacheMode } from '../cluster/gemini.js';
import { CacheLinks } from './cache-links.js';
import { GeminiClient, type GeminiCounters } from './gemini-client.js';

export { coordinatorOf } from '../cluster/locator.js';


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
  /**
   * The cluster's secret, proved on every connection (default: the secret file in `dir`, if
   * it has one). It becomes the process's (cluster-secret.ts useSecret): one process talks to
   * one cluster's members.
   */
  secret?: Buffer;
  /** The CA (PEM) a cluster with TLS signed its certificates with (default: the one `nova up` kept in `dir`, if any); process-wide too. */
  tlsCa?: Buffer;
  /**
   * Read and write through the cluster's Gemini cache (gemini-client.ts): its mode, which must
   * be the cluster's (--cache-mode), or `none` (the default) for the LTCs alone.
   */
  cache?: CacheMode | 'none';
}

/** What NovaClient.ingest did: tables its LTCs ingested and their entries, and entries written as batches because an LTC refused them (why, the first few reasons). */
export interface IngestReport {
  tables: number;
  ingested: number;
  written: number;
  refusals: string[];
}

/** An LTC's answer to an ingest (ltc/ingest.ts IngestOutcome). */
type IngestResult = { level: number | null } | { refused: string };

/** An ingest's chunk by default: about a memtable's worth, as one table. */
const DEFAULT_INGEST_CHUNK = 16 * 1024 * 1024;
/** The largest chunk: under what one ingest request takes (ltc/ingest.ts MAX_INGEST_BYTES). */
const MAX_INGEST_CHUNK = 32 * 1024 * 1024;
/** Entries per batch when an ingest is written the ordinary way. */
const FALLBACK_BATCH = 1_000;
const MAX_REFUSALS_KEPT = 8;

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
/** Calls that waited this long on a silent LTC go elsewhere if the configuration changed. */
const SILENT_MS = 1_000;
/** A range's window of write numbers (newest minus floor) at most; the LTC keeps up to MAX_WINDOW (sessions.ts). */
const SESSION_WINDOW = 32_768;
/**
 * Errors an LTC answers only for a write whose log record was never appended, so an attempt
 * answered with one certainly did not apply it (ltc-server.ts: routing, argument and session
 * checks; Engine.enqueue and a queue refused before its round appended).
 */
const NOT_APPLIED: ReadonlySet<string> = new Set<ErrorCode>(['STALE_CONFIG', 'UNAVAILABLE', 'BAD_ARGUMENT', 'SESSION_EXPIRED', 'BUSY', 'UNKNOWN_METHOD', 'CLOSED']);
/** Errors a retry cannot mend: the call fails at once. */
const FINAL: ReadonlySet<string> = new Set<ErrorCode>(['BAD_ARGUMENT', 'UNKNOWN_METHOD', 'CORRUPTION']);

/**
 * A session: the client's id and the numbering of its writes. Per range, the numbers sent
 * there and not yet finished (ascending; the first is the floor) and whether the range has
 * acknowledged one of them (then its LTC holds a record of the session).
 */
class Session implements ClientId {
  readonly idHigh: number;
  readonly idLow: number;
  private next = 1;
  private readonly windows = new Map<number, Window>();

  constructor(id: ClientId = randomClientId()) {
    this.idHigh = id.idHigh;
    this.idLow = id.idLow;
  }

  take(): number {
    return this.next++;
  }

  window(range: number): Window {
    let w = this.windows.get(range);
    if (!w) this.windows.set(range, w = new Window());
    return w;
  }
}

class Window {
  acked = false;
  private readonly open: number[] = [];
  private waiters: Array<() => void> = [];

  get floor(): number | undefined {
    return this.open[0];
  }

  /** Resolves once `seq` may be sent without the window exceeding SESSION_WINDOW. */
  async room(seq: number): Promise<void> {
    while (this.open.length > 0 && seq - this.open[0] >= SESSION_WINDOW) {
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  add(seq: number): void {
    let i = this.open.length;
    if (i === 0 || this.open[i - 1] < seq) {
      this.open.push(seq);
      return;
    }
    while (i > 0 && this.open[i - 1] > seq) i--; // a write re-routed here may be older than the newest
    this.open.splice(i, 0, seq);
  }

  finish(seq: number): void {
    const i = this.open[0] === seq ? 0 : this.open.indexOf(seq);
    if (i < 0) return;
    if (i === 0) this.open.shift();
    else this.open.splice(i, 1);
    if (i === 0 && this.waiters.length > 0) {
      const w = this.waiters;
      this.waiters = [];
      for (const resolve of w) resolve();
    }
  }
}

/** Puts `w`'s number in range `range`'s window (moving it from the last one it was sent to). */
/**
 * Puts the write's number in the window of `range`, where it is sent now. It stays in the
 * windows of ranges it went to before until it finishes: a split or merge gave its key to
 * another range, which adopts the old one's record of this client's writes, and the old range must
 * not forget whether it applied the write (its floor passing it) while it may be retried.
 */
function track(w: WriteState, range: number): void {
  if (w.range === range) return;
  if (w.range !== undefined && !w.earlier.includes(w.range)) w.earlier.push(w.range);
  if (!w.earlier.includes(range)) w.session.window(range).add(w.seq);
  w.range = range;
}

/** The write is over (answered, given up, or renumbered): out of every window it is in. */
function untrack(w: WriteState): void {
  for (const r of new Set([...w.earlier, ...(w.range === undefined ? [] : [w.range])])) w.session.window(r).finish(w.seq);
  w.earlier = [];
  w.range = undefined;
}

/** One write's progress over its attempts. */
interface WriteState {
  session: Session;
  seq: number;
  /** The key its range is chosen by (a batch's first). */
  key: Uint8Array;
  /** The range its last attempt went to, if one did, and the ranges earlier attempts went to. */
  range: number | undefined;
  earlier: number[];
  /** The range of the attempt sent last (the one that answered, once it succeeds). */
  sentTo?: number;
  /** An attempt may have applied it. */
  maybeApplied: boolean;
}

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
  private readonly ltcs = new ConnectionCache<string, TcpRpcClient>(async (address) => {
    const link = await TcpRpcClient.connect(address, { timeoutMs: 5_000, grouped: GROUPED_OPS });
    this.links.set(link, this.routedTo(address));
    link.onClose(() => this.links.delete(link));
    return link;
  }, (link, lost) => link.onClose(lost));
  /** Each LTC connection, with the ranges the configuration sent to its LTC when it was made (watch). */
  private readonly links = new Map<TcpRpcClient, number[]>();
  private readonly watchdog = setInterval(() => void this.watch(), SILENT_MS / 2).unref();
  private closed = false;
  private readonly timeoutMs: number;
  private readonly coordinator: CoordinatorLocator;
  private session = new Session();
  /** Writes under way (write1), whose windows follow the configuration (refresh). */
  private readonly writing = new Set<WriteState>();
  private sessionsStarted = 1;
  private readonly cacheLinks: CacheLinks | undefined;
  private readonly gemini: GeminiClient | undefined;

  private constructor(o: NovaClientOptions) {
    this.coordinator = o.coordinator !== undefined ? new CoordinatorLocator(o.coordinator) : CoordinatorLocator.ofDir(o.dir ?? 'nova-data');
    this.timeoutMs = o.timeoutMs ?? 30_000;
    if (o.cache !== undefined && o.cache !== 'none') {
      const links = this.cacheLinks = new CacheLinks(() => this.config);
      this.gemini = new GeminiClient({
        config: () => this.config,
        refresh: async () => {
          // A fetch under way may have been sent before the caller's request: wait for it, then send one.
          await this.refreshing?.catch(() => undefined);
          await this.refresh();
          return this.config;
        },
        instance: (id) => links.instance(id),
        sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
        now: () => Date.now(),
      }, { timeoutMs: this.timeoutMs });
    }
  }

  static async connect(o: NovaClientOptions = {}): Promise<NovaClient> {
    const secret = o.secret ?? (o.coordinator === undefined ? secretInDir(o.dir ?? 'nova-data') : undefined);
    if (secret) useSecret(secret);
    const ca = o.tlsCa ?? (o.coordinator === undefined ? tlsCaInDir(o.dir ?? 'nova-data') : undefined);
    if (ca) useTcpTls({ ca });
    const c = new NovaClient(o);
    await c.refresh();
    const mode = c.config.settings.cacheMode;
    if (o.cache !== undefined && o.cache !== 'none' && o.cache !== mode) {
      c.close();
      throw new NovaError('BAD_ARGUMENT', `the cluster's cache runs ${mode}, not ${o.cache}: use --cache ${mode}, or none`);
    }
    const expiry = c.config.settings.sessionTimeoutMs;
    if (c.timeoutMs * 2 >= expiry) {
      c.close();
      throw new NovaError('BAD_ARGUMENT', `timeoutMs ${c.timeoutMs} must be under half the cluster's sessionTimeoutMs (${expiry}): a retry must not outlive the LTC's record of its write`);
    }
    return c;
  }

  /** This client's session id (hex) and how many sessions it has started (one more per expiry). */
  get sessionInfo(): { id: string; started: number } {
    return { id: idName(this.session), started: this.sessionsStarted };
  }

  /** The configuration this client routes by. */
  get configuration(): ClusterConfig {
    return this.config;
  }

  async get(key: Uint8Array): Promise<Buffer | undefined> {
    const read = async (): Promise<Buffer | undefined> => {
      const v = await this.call<Uint8Array | null>('get', key, (id) => [id, Buffer.from(key)]);
      return v === null ? undefined : Buffer.from(v.buffer, v.byteOffset, v.byteLength);
    };
    return this.gemini ? this.gemini.get(Buffer.from(key), read) : read();
  }

  /** Writes `key`. An error is FAILED (not applied) or UNKNOWN_OUTCOME, with a `reason`. */
  put(key: Uint8Array, value: Uint8Array): Promise<void> {
    const k = Buffer.from(key);
    const v = Buffer.from(value);
    return this.cached([k], () => this.write1('put', k, (id) => [id, k, v]));
  }

  /** Deletes `key`. An error is FAILED (not applied) or UNKNOWN_OUTCOME, with a `reason`. */
  delete(key: Uint8Array): Promise<void> {
    const k = Buffer.from(key);
    return this.cached([k], () => this.write1('del', k, (id) => [id, k]));
  }

  /** Cache lookups, hits and what the LTCs served instead, with `cache` (undefined without). */
  get cacheCounters(): GeminiCounters | undefined {
    return this.gemini?.counters;
  }

  /** A write through the cache: each key's Q lease taken before `apply`, its entry deleted after. */
  private cached(keys: Buffer[], apply: () => Promise<void>): Promise<void> {
    return this.gemini ? this.gemini.writeMany(keys, apply) : apply();
  }

  batch(): ClientBatch {
    return new ClientBatch();
  }

  /**
   * Applies `batch` atomically. Its keys must all be in one range (else FAILED, reason
   * BAD_ARGUMENT). An error is FAILED or UNKNOWN_OUTCOME, as for put.
   */
  async write(batch: ClientBatch): Promise<void> {
    if (batch.ops.length === 0) return;
    const first = rangeOf(this.config, batch.ops[0][1]).id;
    const other = batch.ops.find((op) => rangeOf(this.config, op[1]).id !== first);
    if (other) {
      const why = `a batch spans ranges ${first} and ${rangeOf(this.config, other[1]).id}: batches are atomic within one range only; split it`;
      throw new NovaError('FAILED', `write: not applied: ${why}`, { reason: 'BAD_ARGUMENT' });
    }
    const ops = batch.ops.slice();
    await this.cached([...new Set(ops.map((op) => op[1].toString('latin1')))].map((k) => Buffer.from(k, 'latin1')), () => this.write1('write', ops[0][1], (id) => [id, ops]));
  }

  /**
   * Writes `entries` (keys ascending, each once) the bulk-load way: each range's run of them,
   * in chunks of about `chunkBytes`, as one table its LTC ingests off the write path
   * (ltc/ingest.ts). A chunk the LTC refuses (versions of its keys in memtables, or written
   * since) is written as ordinary batches instead, as is everything through a cache. Each
   * chunk is atomic and applied at most once; errors are those of write().
   */
  async ingest(entries: Array<[Buffer, Buffer]>, o: { chunkBytes?: number } = {}): Promise<IngestReport> {
    const report: IngestReport = { tables: 0, ingested: 0, written: 0, refusals: [] };
    for (let i = 1; i < entries.length; i++) {
      if (Buffer.compare(entries[i - 1][0], entries[i][0]) >= 0) {
        throw new NovaError('FAILED', `ingest: not applied: key ${i} does not sort after key ${i - 1}; sort the entries (each key once)`, { reason: 'BAD_ARGUMENT' });
      }
    }
    const chunkBytes = Math.max(1, Math.min(o.chunkBytes ?? DEFAULT_INGEST_CHUNK, MAX_INGEST_CHUNK));
    for (let at = 0; at < entries.length;) {
      const range = rangeOf(this.config, entries[at][0]);
      let end = at;
      let bytes = 0;
      while (end < entries.length && (end === at || bytes < chunkBytes) && rangeOf(this.config, entries[end][0]).id === range.id) {
        bytes += entries[end][0].length + entries[end][1].length;
        end++;
      }
      await this.ingestChunk(entries.slice(at, end), report);
      at = end;
    }
    return report;
  }

  private async ingestChunk(chunk: Array<[Buffer, Buffer]>, report: IngestReport): Promise<void> {
    let refused: string;
    if (this.gemini) {
      refused = 'a cache is in front of the LTCs: its entries are invalidated write by write';
    } else {
      const keys = chunk.map(([k]) => k);
      const values = chunk.map(([, v]) => v);
      try {
        const r = await this.write1<IngestResult>('ingest', keys[0], (id) => [id, keys, values]);
        if (!('refused' in r)) {
          report.tables++;
          report.ingested += chunk.length;
          return;
        }
        refused = r.refused;
      } catch (err) {
        const e = err as NovaError;
        // Refused before the LTC applied anything (the ranges changed under it): as batches.
        if (e.code !== 'FAILED' || e.reason !== 'BAD_ARGUMENT') throw err;
        refused = e.message;
      }
    }
    if (report.refusals.length < MAX_REFUSALS_KEPT && !report.refusals.includes(refused)) report.refusals.push(refused);
    const batches: ClientBatch[] = [];
    for (const [k, v] of chunk) {
      let b = batches[batches.length - 1];
      if (!b || b.ops.length >= FALLBACK_BATCH || rangeOf(this.config, b.ops[0][1]).id !== rangeOf(this.config, k).id) batches.push(b = this.batch());
      b.put(k, v);
    }
    await Promise.all(batches.map((b) => this.write(b)));
    report.written += chunk.length;
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
   * `nova repair`: has the LTC serving `range` read every table of it and salvage those with
   * damage no copy escapes; what was lost (SalvageReport). It runs to the end on the LTC even
   * if this call's deadline passes first.
   */
  async repairRange(range: number): Promise<SalvageReport & { range: number }> {
    if (!this.config.ranges.some((r) => r.id === range)) throw new NovaError('BAD_ARGUMENT', `no range ${range}: see nova range list`);
    await this.refresh();
    const r = this.config.ranges.find((x) => x.id === range);
    const m = r && this.config.members.find((x) => x.role === 'ltc' && x.id === r.ltc);
    if (!m) throw new NovaError('UNAVAILABLE', `range ${range} has no LTC now; try again`);
    return (await this.ltc(m.address)).call('repairRange', [range], Math.max(this.timeoutMs, COMPACT_TIMEOUT_MS));
  }

  /**
   * Sends `op` (no arguments) to every LTC of the configuration at once; their answers.
   * Without `timeoutMs`, the connection's own deadline (a few seconds).
   */
  private everyLtc<T = unknown>(op: string, timeoutMs?: number): Promise<T[]> {
    // The LTCs ranges are on: one that holds none may be gone (killed, or on its way out).
    const holding = new Set(this.config.ranges.map((r) => r.ltc));
    const ltcs = this.config.members.filter((m) => m.role === 'ltc' && holding.has(m.id));
    return Promise.all(ltcs.map(async (m) => (await this.ltc(m.address)).call<T>(op, [], timeoutMs)));
  }

  close(): void {
    this.closed = true;
    clearInterval(this.watchdog);
    this.coordinator.close();
    void this.ltcs.closeAll();
    void this.cacheLinks?.close();
  }

  /** Sends a read `op` for `key` to its LTC, retrying as the configuration and the LTCs change. */
  private call<T>(op: string, key: Uint8Array, args: (configId: number) => unknown[]): Promise<T> {
    return this.attempt<T>(op, key, (id) => args(id), undefined);
  }

  /**
   * A numbered write: once, under this client's session; its errors say FAILED or
   * UNKNOWN_OUTCOME. `args` gives the request's own arguments; the session's five values
   * follow them (doc/format/wire.md).
   */
  private async write1<T = void>(op: string, key: Buffer, args: (configId: number) => unknown[]): Promise<T> {
    const session = this.session;
    const w: WriteState = { session, seq: session.take(), key, range: undefined, earlier: [], maybeApplied: false };
    this.writing.add(w);
    try {
      const answer = await this.attempt<T>(op, key, (id, range) => {
        const request = args(id);
        const window = w.session.window(range);
        request.push(w.session.idHigh, w.session.idLow, w.seq, window.floor!, window.acked ? 0 : 1);
        return request;
      }, w);
      w.session.window(w.sentTo!).acked = true;
      return answer;
    } catch (err) {
      const e = err as NovaError;
      const reason = e.code === 'FAILED' || e.code === 'UNKNOWN_OUTCOME' ? e.reason : e.code;
      const outcome = w.maybeApplied ? 'UNKNOWN_OUTCOME' : 'FAILED';
      throw new NovaError(outcome, `${op}: ${w.maybeApplied ? 'may have been applied' : 'not applied'}: ${e.message}`, { cause: e, reason });
    } finally {
      untrack(w);
      this.writing.delete(w);
    }
  }

  /**
   * Sends `op` for `key` to its LTC until it is answered, retrying as the configuration and
   * the LTCs change, until the deadline. A write (`w`) is also retried after failures that may
   * have applied it (its number makes the retry safe), moves to a new session on
   * SESSION_EXPIRED, and waits for room in its range's window before it is sent.
   */
  private async attempt<T>(op: string, key: Uint8Array, args: (configId: number, range: number) => unknown[], w: WriteState | undefined): Promise<T> {
    const deadline = Date.now() + this.timeoutMs;
    let wait = RETRY_FIRST_MS;
    for (let attempt = 1; ; attempt++) {
      if (this.closed) throw new NovaError('CLOSED', 'client is closed');
      // Sent under the configuration it was routed by, whatever arrives while it waits: a newer
      // one may give its key to another range, whose floor this request's must not set.
      const config = this.config;
      const range = rangeOf(config, key);
      // The write's number is in its range's window before anything awaits: a later write sent
      // meanwhile must not carry a floor above it (the LTC would refuse its retry).
      if (w) track(w, range.id);
      const ltc = memberOf(config, 'ltc', range.ltc);
      let error: NovaError;
      let sent = false;
      if (!ltc) {
        error = new NovaError('UNAVAILABLE', `LTC ${range.ltc} (range ${range.id}) has not registered yet`);
      } else {
        try {
          if (w && w.seq - w.session.window(range.id).floor! >= SESSION_WINDOW) await this.roomFor(w, range.id, deadline);
          const link = await this.ltc(ltc.address);
          const request = args(config.id, range.id);
          sent = !link.closed;
          if (w) w.sentTo = range.id;
          return await link.call<T>(op, request, Math.max(1, deadline - Date.now()));
        } catch (err) {
          error = err as NovaError;
        }
      }
      if (w && sent && !(error instanceof RpcRemoteError && NOT_APPLIED.has(error.code))) w.maybeApplied = true;
      if (w && error.code === 'SESSION_EXPIRED') {
        if (this.session === w.session) {
          this.session = new Session();
          this.sessionsStarted++;
        }
        // This attempt applied nothing; an earlier one that may have cannot be asked about any
        // more, so such a write ends here (UNKNOWN_OUTCOME). Else: again at once, renumbered in
        // the new session.
        if (w.maybeApplied || Date.now() > deadline) throw error;
        untrack(w);
        w.session = this.session;
        w.seq = this.session.take();
        continue;
      }
      // A write is retried unless a retry cannot help; a read only when the cluster is moving.
      const retry = w ? !FINAL.has(error.code) && !(error.code === 'CLOSED' && this.closed)
        : error.code === 'STALE_CONFIG' || error.code === 'UNAVAILABLE' || error.code === 'PEER_LOST';
      if (!retry || Date.now() + wait > deadline) {
        if (retry) throw new NovaError('DEADLINE_EXCEEDED', `${op}: gave up after ${this.timeoutMs} ms; last error: ${error.message}`);
        throw error;
      }
      if (error.code !== 'STALE_CONFIG' || attempt > 1) { // a first STALE_CONFIG retries at once
        await new Promise((r) => setTimeout(r, wait));
        wait = Math.min(RETRY_MAX_MS, wait * 2);
      }
      const newer = error instanceof RpcRemoteError && typeof error.detail === 'number' ? error.detail : undefined;
      if (newer === undefined || newer > this.config.id) await this.refresh().catch(() => undefined);
    }
  }

  /** Waits until `w`'s number fits range `range`'s window; DEADLINE_EXCEEDED (nothing sent) past the deadline. */
  private async roomFor(w: WriteState, range: number, deadline: number): Promise<void> {
    const window = w.session.window(range);
    await withDeadline(window.room(w.seq), Math.max(1, deadline - Date.now()),
      () => new NovaError('DEADLINE_EXCEEDED', `range ${range}'s oldest write (${window.floor}) is unfinished and ${SESSION_WINDOW} newer ones wait for it`));
  }

  private ltc(address: string): Promise<TcpRpcClient> {
    return this.ltcs.get(address);
  }

  /** Leaves behind LTC connections that have been silent while their ranges went elsewhere (the class comment). */
  private async watch(): Promise<void> {
    const silent = [...this.links.keys()].filter((l) => l.silentMs >= SILENT_MS);
    if (silent.length === 0 || this.closed) return;
    await this.refresh().catch(() => undefined);
    for (const l of silent) {
      const before = this.links.get(l);
      if (before === undefined) continue; // closed meanwhile
      const now = this.routedTo(l.address);
      if (before.some((r) => !now.includes(r))) {
        l.abandon(`no answer for ${l.silentMs} ms and its ranges went elsewhere: sent again where they are now`);
      }
    }
  }

  /** The ranges the configuration sends to the LTC at `address`. */
  private routedTo(address: string): number[] {
    const ltcs = new Set(this.config.members.filter((m) => m.role === 'ltc' && m.address === address).map((m) => m.id));
    return this.config.ranges.filter((r) => ltcs.has(r.ltc)).map((r) => r.id);
  }

  /** Fetches the configuration (one fetch at a time; callers share it). */
  private refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        const c = configFromWire(await this.coordinator.call('config', [], 5_000, 5_000));
        if (!this.config || c.id >= this.config.id) {
          this.config = c;
          // Before any request under it: writes whose keys went to another range (a split or
          // merge) count in that range's window now, so no floor sent there passes them.
          for (const w of this.writing) track(w, rangeOf(c, w.key).id);
        }
      } catch (err) {
        this.coordinator.failed(err);
        throw err;
      } finally {
        this.refreshing = undefined;
      }
    })();
    return this.refreshing;
  }
}
