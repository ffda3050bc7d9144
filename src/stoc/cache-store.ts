/**
 * The storage of one Gemini cache instance: a look-aside key/value cache (hash index + LRU)
 * and the fragments' dirty lists, kept in memory and persisted in `cache.log`
 * (doc/format/cache.md, cache-log.ts) so that they survive a process restart.
 *
 * Ownership and concurrency:
 *  - A CacheStore owns `dir/cache.log` (and `cache.log.tmp` while it rewrites) alone: one
 *    store per directory at a time, which the caller ensures (e.g. with lockDir). Nothing else
 *    in the directory is touched.
 *  - Calls are synchronous, on one thread. Every record is written (writeSync, append-only)
 *    before the call that logs it returns, so a killed process loses nothing a call
 *    returned; `sync` adds fdatasync for machine crashes, group-committed in `durable()`.
 *  - Buffers passed in are copied. Values handed out (CacheEntry.value, dirtyKeys) are the
 *    store's: the caller must not modify them.
 *
 * Invariants:
 *  - The in-memory state is what replaying cache.log gives, less the LRU entries evicted since
 *    (evictions are not logged: a reloaded evicted entry is as valid as when it was evicted,
 *    because every later invalidation of its key is logged after its SET).
 *  - Invalidations are always logged: a DELETE even for an absent key (its SET may still be in
 *    the log), a discard as a DELETE, every change of a dirty list.
 *  - `bytes` = Σ (key + value + ENTRY_OVERHEAD) ≤ memoryBytes after every call.
 *  - `entries` iterates oldest first (Map order is LRU order: a touch deletes and re-sets).
 *  - A dirty list is either done (no keys), or has a marker (its keys since DIRTY_INIT, complete),
 *    or has no marker and at least one key (its keys since an eviction: incomplete).
 *  - After a write to cache.log fails, the store is failed: later changes and durable() throw
 *    DISK_FAILED (the log no longer says what memory holds, so nothing may be acknowledged).
 *
 * Replay orders the LRU by the last SET of each key (gets are not logged); a rewrite writes
 * entries oldest first, so the order at the rewrite is kept. A rewrite is synchronous: it
 * blocks for the time of writing and fsyncing the live content, which the memory budget bounds.
 */
import {
  closeSync, existsSync, fdatasync, fdatasyncSync, fstatSync, fsyncSync, ftruncateSync, mkdirSync, openSync,
  readFileSync, renameSync, unlinkSync, writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { NovaError } from '../common/errors.js';
import { syncDir } from '../common/files.js';
import {
  CACHE_FRAME, CACHE_LOG, CACHE_LOG_HEADER, CACHE_LOG_VERSION, MAX_CACHE_KEY, MAX_CACHE_RECORD, cacheLogHeader, encodeCacheRecord,
  readCacheLog, type CacheLogContents, type CacheRecord,
} from './cache-log.js';

export interface CacheEntry { value: Buffer; configId: number; fragment: number }

/**
 * A fragment's dirty list. `marker`: it was created by dirtyInit and is complete; without it,
 * keys were lost to an eviction. `done`: a recovery worker processed it (no keys are left).
 * `configId`: the one dirtyInit gave (0 for a list without marker). `keys`: how many.
 */
export interface DirtyState { marker: boolean; done: boolean; configId: number; keys: number }

export interface CacheStoreOptions {
  /** Directory of cache.log; undefined: memory only (nothing persists). */
  dir?: string;
  /** Bytes of keys and values (plus a per-entry overhead of 64) held at most; LRU entries are evicted past it. */
  memoryBytes: number;
  /** Bytes cache.log may take; memoryBytes must be at most half of it (else BAD_ARGUMENT). */
  diskBytes: number;
  /** fdatasync invalidations (delete, dirty records) before `durable()` resolves. */
  sync: boolean;
  /** Keys a dirty list holds at most; the append past it evicts the list (it is dropped, and a later append starts one without marker). */
  maxDirtyKeys: number;
  /** Start empty even if cache.log exists (the volatile baseline): the old file is replaced. */
  volatile?: boolean;
  onLog?: (line: string) => void;
}

export interface CacheStoreStats {
  entries: number;
  /** Memory the entries take, as the budget counts it. */
  bytes: number;
  /** Entries evicted by the memory budget since open (while replaying included). */
  evicted: number;
  /** Entries held once open had replayed cache.log. */
  loaded: number;
  logBytes: number;
  rewrites: number;
  /** Dirty lists, done ones included. */
  dirtyLists: number;
}

/** Memory counted per entry besides its key and value (Map slot, object, Buffer headers). */
export const ENTRY_OVERHEAD = 64;
/** A log under this size is never rewritten: rewriting a small file would buy little. */
const MIN_REWRITE = 1024 * 1024;
/** Bytes a rewrite gathers before each write. */
const REWRITE_CHUNK = 1024 * 1024;

/** Bytes of the records that rewrite a SET of `keyLength` + `valueLength`, a DIRTY_INIT, a DIRTY_ADD, a DIRTY_DONE. */
const setRecord = (keyLength: number, valueLength: number): number => CACHE_FRAME + 17 + keyLength + valueLength;
const INIT_RECORD = CACHE_FRAME + 13;
const addRecord = (keyLength: number): number => CACHE_FRAME + 5 + keyLength;
const DONE_RECORD = CACHE_FRAME + 5;

interface DirtyList {
  marker: boolean;
  done: boolean;
  configId: number;
  /** Keys (latin1) in the order first appended; `seen` holds the same ones. */
  keys: string[];
  seen: Set<string>;
  /** Bytes a rewrite takes to write this list. */
  recordBytes: number;
}

export class CacheStore {
  /** LRU order, oldest first. Keys are the key bytes as latin1 (one char a byte). */
  private readonly entries = new Map<string, CacheEntry>();
  private readonly lists = new Map<number, DirtyList>();
  private memory = 0;
  /** Bytes a rewrite would write: header, entries and dirty lists. */
  private liveBytes = CACHE_LOG_HEADER;
  private evicted = 0;
  private loaded = 0;
  private rewrites = 0;
  /** Entries removed by discard(). */
  discarded = 0;

  private readonly path: string | undefined;
  private fd: number | undefined;
  private logBytes = 0;
  private closed = false;
  private failure: NovaError | undefined;
  /** No rewrite is tried before the log reaches this size (after a failed one). */
  private rewriteNotBefore = 0;

  /** Invalidations written so far, and how many of them an fdatasync (or rewrite) made durable. */
  private invalidations = 0;
  private syncedTo = 0;
  private syncing: Promise<void> | undefined;
  private queued: Promise<void> | undefined;
  /** Descriptors replaced while an fdatasync used them: closed when it ends. */
  private readonly retired: number[] = [];
  private readonly onLog: (line: string) => void;

  private constructor(private readonly o: CacheStoreOptions) {
    this.onLog = o.onLog ?? (() => undefined);
    this.path = o.dir === undefined ? undefined : join(o.dir, CACHE_LOG);
  }

  /**
   * Opens the store: replays cache.log (records in order, the memory budget applied as they
   * go), truncates a torn tail, and sets aside a corrupt file (renamed to
   * cache.log.corrupt-<ms>, never deleted) to start empty. Makes the file if there is none.
   */
  static open(o: CacheStoreOptions): CacheStore {
    if (!(Number.isSafeInteger(o.memoryBytes) && o.memoryBytes > 0)) throw new NovaError('BAD_ARGUMENT', `memoryBytes ${o.memoryBytes} is not a positive integer`);
    if (!(Number.isSafeInteger(o.diskBytes) && o.diskBytes > 0)) throw new NovaError('BAD_ARGUMENT', `diskBytes ${o.diskBytes} is not a positive integer`);
    // A rewrite leaves at most about memoryBytes of live entries: half the disk budget stays
    // free for the records that come before the next one.
    if (o.memoryBytes > o.diskBytes / 2) {
      throw new NovaError('BAD_ARGUMENT', `memoryBytes ${o.memoryBytes} exceeds half of diskBytes ${o.diskBytes}`);
    }
    if (!(Number.isSafeInteger(o.maxDirtyKeys) && o.maxDirtyKeys >= 1)) throw new NovaError('BAD_ARGUMENT', `maxDirtyKeys ${o.maxDirtyKeys} is not a positive integer`);
    const store = new CacheStore(o);
    if (o.dir !== undefined) store.load(o.dir);
    store.loaded = store.entries.size;
    return store;
  }

  private load(dir: string): void {
    const path = this.path!;
    mkdirSync(dir, { recursive: true });
    // A rewrite cut short before its rename: cache.log is whole without it.
    if (existsSync(`${path}.tmp`)) unlinkSync(`${path}.tmp`);
    let contents: CacheLogContents | undefined;
    if (!this.o.volatile && existsSync(path)) {
      try {
        contents = readCacheLog(readFileSync(path), path);
      } catch (err) {
        if (!(err instanceof NovaError && err.code === 'CORRUPTION')) throw err;
        // Kept for inspection; the cache is only a cache, so it starts empty rather than not at all.
        let aside = `${path}.corrupt-${Date.now()}`;
        for (let i = 1; existsSync(aside); i++) aside = `${path}.corrupt-${Date.now()}-${i}`;
        renameSync(path, aside);
        syncDir(dir);
        this.onLog(`${err.message}; moved to ${aside}, the cache starts empty`);
      }
    }
    if (!contents) {
      this.writeFresh();
      return;
    }
    for (const r of contents.records) this.apply(r);
    this.fd = openSync(path, 'a');
    if (contents.tornTail) {
      // Later appends go after the last whole record; the truncation is made durable before them.
      ftruncateSync(this.fd, contents.validBytes);
      fsyncSync(this.fd);
      this.onLog(`${contents.tornTail}; truncated to ${contents.validBytes} bytes`);
    }
    this.logBytes = contents.validBytes;
    // Lists longer than a lowered maxDirtyKeys are evicted as an append past it would.
    for (const [fragment, list] of this.lists) {
      if (list.keys.length > this.o.maxDirtyKeys) this.dirtyDrop(fragment);
    }
    // A file of an older format is written anew in the current one before anything is appended to it.
    if (contents.version !== CACHE_LOG_VERSION) {
      const before = this.rewrites;
      this.rewrite();
      if (this.rewrites === before) throw new NovaError('DISK_FAILED', `${path}: a log of format version ${contents.version} could not be written anew in version ${CACHE_LOG_VERSION} (see the line before); free space, or start the instance on an empty directory`);
    }
    this.maybeRewrite();
  }

  /** The entry of `key`, made the most recently used. */
  get(key: Buffer): CacheEntry | undefined {
    this.checkOpen();
    const k = key.toString('latin1');
    const e = this.entries.get(k);
    if (e) {
      this.entries.delete(k);
      this.entries.set(k, e);
    }
    return e;
  }

  /** The entry of `key`, its place in the LRU unchanged. */
  peek(key: Buffer): CacheEntry | undefined {
    this.checkOpen();
    return this.entries.get(key.toString('latin1'));
  }

  /** Sets `key` (most recently used), logged before it returns; evicts LRU entries past memoryBytes. */
  set(key: Buffer, value: Buffer, configId: number, fragment: number): void {
    this.checkWritable();
    checkKey(key);
    checkFragment(fragment);
    checkConfigId(configId);
    const size = 17 + key.length + value.length;
    if (size > MAX_CACHE_RECORD) throw new NovaError('BAD_ARGUMENT', `a cache entry of ${size} bytes exceeds ${MAX_CACHE_RECORD}`);
    this.log({ type: 'set', fragment, configId, key, value }, false);
    this.putEntry(key.toString('latin1'), Buffer.from(value), configId, fragment);
    this.maybeRewrite();
  }

  /**
   * Removes `key`; logs a DELETE even if it is absent (an evicted SET of it is still in the
   * log, and must not come back at the next open). Returns whether it was present.
   */
  delete(key: Buffer): boolean {
    this.checkWritable();
    checkKey(key);
    // Out of memory first: even if logging fails, the value the caller invalidates is not served.
    const present = this.removeEntry(key.toString('latin1'));
    this.log({ type: 'delete', key }, true);
    this.maybeRewrite();
    return present;
  }

  /** Removes an entry the caller found stale (its configId under the fragment's floor), logged as a DELETE. */
  /** The keys of the entries `drop` selects, least recently used first. */
  keysWhere(drop: (e: CacheEntry) => boolean): Buffer[] {
    this.checkOpen();
    const out: Buffer[] = [];
    for (const [k, e] of this.entries) if (drop(e)) out.push(Buffer.from(k, 'latin1'));
    return out;
  }

  discard(key: Buffer): void {
    this.checkWritable();
    checkKey(key);
    if (!this.removeEntry(key.toString('latin1'))) return;
    this.discarded++;
    this.log({ type: 'delete', key }, true);
    this.maybeRewrite();
  }

  /** Starts the dirty list of `fragment` with its marker, replacing any list it has. */
  dirtyInit(fragment: number, configId: number): void {
    this.checkWritable();
    checkFragment(fragment);
    checkConfigId(configId);
    this.log({ type: 'dirtyInit', fragment, configId }, true);
    this.apply({ type: 'dirtyInit', fragment, configId });
    this.maybeRewrite();
  }

  /**
   * Appends `key` to the dirty list of `fragment` (a key already in it is not appended again).
   * Starts a list without marker if the fragment has none, or a done one. A list full at
   * maxDirtyKeys is evicted (DIRTY_DROP) and `key` starts a list without marker.
   */
  dirtyAdd(fragment: number, key: Buffer): void {
    this.checkWritable();
    checkFragment(fragment);
    checkKey(key);
    const k = key.toString('latin1');
    const list = this.lists.get(fragment);
    if (list && !list.done) {
      if (list.seen.has(k)) return;
      if (list.keys.length >= this.o.maxDirtyKeys) {
        this.log({ type: 'dirtyDrop', fragment }, true);
        this.apply({ type: 'dirtyDrop', fragment });
      }
    }
    this.log({ type: 'dirtyAdd', fragment, key }, true);
    this.addKey(fragment, k);
    this.maybeRewrite();
  }

  /** Drops the dirty list of `fragment` (evicted: its keys are lost). Nothing is logged if it has none. */
  dirtyDrop(fragment: number): void {
    this.checkWritable();
    checkFragment(fragment);
    if (!this.lists.has(fragment)) return;
    this.log({ type: 'dirtyDrop', fragment }, true);
    this.apply({ type: 'dirtyDrop', fragment });
    this.maybeRewrite();
  }

  /**
   * Marks the dirty list of `fragment` processed: its keys go, a done tombstone stays (made,
   * without marker, if the fragment has no list), so "processed" differs from "lost".
   * Unconditional: a caller racing an eviction checks dirty() first.
   */
  dirtyDone(fragment: number): void {
    this.checkWritable();
    checkFragment(fragment);
    if (this.lists.get(fragment)?.done) return;
    this.log({ type: 'dirtyDone', fragment }, true);
    this.apply({ type: 'dirtyDone', fragment });
    this.maybeRewrite();
  }

  dirty(fragment: number): DirtyState | undefined {
    this.checkOpen();
    const l = this.lists.get(fragment);
    return l && { marker: l.marker, done: l.done, configId: l.configId, keys: l.keys.length };
  }

  /** Keys `from` to `from + limit` of the dirty list of `fragment`, in append order (each once). */
  dirtyKeys(fragment: number, from: number, limit: number): Buffer[] {
    this.checkOpen();
    const l = this.lists.get(fragment);
    if (!l) return [];
    return l.keys.slice(Math.max(0, from), Math.max(0, from) + Math.max(0, limit)).map((k) => Buffer.from(k, 'latin1'));
  }

  /**
   * Resolves once every invalidation logged so far is on disk. Group commit: callers that
   * come while an fdatasync runs share the next one. Immediate when !sync or memory only.
   */
  durable(): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.closed) return Promise.reject(closedError());
    if (this.fd === undefined || !this.o.sync || this.syncedTo >= this.invalidations) return Promise.resolve();
    if (this.queued) return this.queued;
    if (!this.syncing) return this.startSync();
    // The running fdatasync may have started before this caller's record was written.
    this.queued = this.syncing.catch(() => undefined).then(() => {
      this.queued = undefined;
      if (this.failure) throw this.failure;
      if (this.syncedTo >= this.invalidations) return undefined;
      if (this.fd === undefined) throw closedError();
      return this.startSync();
    });
    return this.queued;
  }

  stats(): CacheStoreStats {
    return {
      entries: this.entries.size, bytes: this.memory, evicted: this.evicted, loaded: this.loaded,
      logBytes: this.logBytes, rewrites: this.rewrites, dirtyLists: this.lists.size,
    };
  }

  /** Closes the file (after an fdatasync, with `sync`, of invalidations not yet synced). Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    const fd = this.fd;
    if (fd === undefined) return;
    this.fd = undefined;
    if (this.o.sync && !this.failure && this.syncedTo < this.invalidations) {
      try {
        fdatasyncSync(fd);
        this.syncedTo = this.invalidations;
      } catch (err) {
        this.fail(err, 'fdatasync');
      }
    }
    this.retire(fd);
  }

  /** Throws if an invariant of the contract fails (tests call it; it walks everything). */
  checkInvariants(): void {
    const fail = (why: string): never => {
      throw new Error(`CacheStore invariant: ${why}`);
    };
    let memory = 0;
    let live = CACHE_LOG_HEADER;
    for (const [k, e] of this.entries) {
      memory += k.length + e.value.length + ENTRY_OVERHEAD;
      live += setRecord(k.length, e.value.length);
    }
    if (memory !== this.memory) fail(`bytes ${this.memory}, entries hold ${memory}`);
    if (memory > this.o.memoryBytes) fail(`bytes ${memory} over memoryBytes ${this.o.memoryBytes}`);
    for (const [fragment, l] of this.lists) {
      if (l.seen.size !== l.keys.length || !l.keys.every((k) => l.seen.has(k))) fail(`fragment ${fragment}: keys and seen differ`);
      if (l.done && l.keys.length > 0) fail(`fragment ${fragment}: done with keys`);
      if (!l.done && !l.marker && l.keys.length === 0) fail(`fragment ${fragment}: no marker, no keys`);
      if (l.recordBytes !== listRecordBytes(l)) fail(`fragment ${fragment}: recordBytes ${l.recordBytes}`);
      live += l.recordBytes;
    }
    if (live !== this.liveBytes) fail(`liveBytes ${this.liveBytes}, content takes ${live}`);
    if (this.fd !== undefined && fstatSync(this.fd).size !== this.logBytes) fail(`logBytes ${this.logBytes}, file has ${fstatSync(this.fd).size}`);
  }

  // --- state changes (shared by the calls and by replay) ----------------------------------

  private apply(r: CacheRecord): void {
    switch (r.type) {
      case 'set': this.putEntry(r.key.toString('latin1'), Buffer.from(r.value), r.configId, r.fragment); break;
      case 'delete': this.removeEntry(r.key.toString('latin1')); break;
      case 'dirtyInit':
        this.setList(r.fragment, { marker: true, done: false, configId: r.configId, keys: [], seen: new Set(), recordBytes: 0 });
        break;
      case 'dirtyAdd': this.addKey(r.fragment, r.key.toString('latin1')); break;
      case 'dirtyDrop': this.setList(r.fragment, undefined); break;
      case 'dirtyDone': {
        const l = this.lists.get(r.fragment);
        this.setList(r.fragment, { marker: l?.marker ?? false, done: true, configId: l?.configId ?? 0, keys: [], seen: new Set(), recordBytes: 0 });
        break;
      }
    }
  }

  /** REQUIRES: `value` is the store's own copy. */
  private putEntry(k: string, value: Buffer, configId: number, fragment: number): void {
    this.removeEntry(k);
    this.entries.set(k, { value, configId, fragment });
    this.memory += k.length + value.length + ENTRY_OVERHEAD;
    this.liveBytes += setRecord(k.length, value.length);
    for (const [oldest, e] of this.entries) {
      if (this.memory <= this.o.memoryBytes) break;
      this.entries.delete(oldest);
      this.account(oldest, e, -1);
      this.evicted++;
    }
  }

  private removeEntry(k: string): boolean {
    const e = this.entries.get(k);
    if (!e) return false;
    this.entries.delete(k);
    this.account(k, e, -1);
    return true;
  }

  private account(k: string, e: CacheEntry, sign: 1 | -1): void {
    this.memory += sign * (k.length + e.value.length + ENTRY_OVERHEAD);
    this.liveBytes += sign * setRecord(k.length, e.value.length);
  }

  private setList(fragment: number, list: DirtyList | undefined): void {
    const old = this.lists.get(fragment);
    if (old) this.liveBytes -= old.recordBytes;
    if (!list) {
      this.lists.delete(fragment);
      return;
    }
    list.recordBytes = listRecordBytes(list);
    this.liveBytes += list.recordBytes;
    this.lists.set(fragment, list);
  }

  private addKey(fragment: number, k: string): void {
    let l = this.lists.get(fragment);
    if (!l || l.done) {
      l = { marker: false, done: false, configId: 0, keys: [], seen: new Set(), recordBytes: 0 };
      this.setList(fragment, l);
    }
    if (l.seen.has(k)) return;
    l.keys.push(k);
    l.seen.add(k);
    l.recordBytes += addRecord(k.length);
    this.liveBytes += addRecord(k.length);
  }

  // --- the file -----------------------------------------------------------------------------

  private checkOpen(): void {
    if (this.closed) throw closedError();
  }

  private checkWritable(): void {
    this.checkOpen();
    if (this.failure) throw this.failure;
  }

  /** Appends `r` (memory only: nothing). `invalidation`: durable() waits for it. */
  private log(r: CacheRecord, invalidation: boolean): void {
    if (this.fd === undefined) return;
    const bytes = encodeCacheRecord(r);
    try {
      writeAll(this.fd, bytes);
    } catch (err) {
      // Leave no part of the record for a later one to follow (that would read as corruption).
      try {
        ftruncateSync(this.fd, this.logBytes);
      } catch {
        // The failure below is reported either way.
      }
      throw this.fail(err, 'write');
    }
    this.logBytes += bytes.length;
    if (invalidation) this.invalidations++;
  }

  private fail(err: unknown, what: string): NovaError {
    const e = err as NodeJS.ErrnoException;
    this.failure ??= new NovaError('DISK_FAILED', `${this.path}: ${what} failed: ${e.code ?? e.message}`, { cause: err });
    return this.failure;
  }

  private startSync(): Promise<void> {
    const fd = this.fd!;
    const upTo = this.invalidations;
    const p = new Promise<void>((resolve, reject) => {
      fdatasync(fd, (err) => {
        this.syncing = undefined;
        for (const old of this.retired.splice(0)) closeQuietly(old);
        if (err) {
          // The kernel may have dropped the pages it failed to write: no later sync can vouch for them.
          reject(this.fail(err, 'fdatasync'));
          return;
        }
        this.syncedTo = Math.max(this.syncedTo, upTo);
        resolve();
      });
    });
    this.syncing = p;
    return p;
  }

  /** Closes `fd`, or once the running fdatasync (which may use it) ends. */
  private retire(fd: number): void {
    if (this.syncing) this.retired.push(fd);
    else closeQuietly(fd);
  }

  private maybeRewrite(): void {
    if (this.fd === undefined || this.failure || this.logBytes < this.rewriteNotBefore) return;
    const live = this.liveBytes;
    // Past the disk budget, a rewrite must free a fair part of it: otherwise a log whose live
    // content alone nears the budget (long dirty lists, which memoryBytes does not bound) would
    // be rewritten at every call.
    if (this.logBytes > Math.max(2 * live, MIN_REWRITE) ||
        (this.logBytes > this.o.diskBytes && this.logBytes - live > this.o.diskBytes / 4)) {
      this.rewrite();
    }
  }

  /**
   * Writes the live content (entries oldest first, then the dirty lists) to cache.log.tmp,
   * fsyncs it, renames it over cache.log, fsyncs the directory, and appends to it from then on.
   * A failure before the rename leaves the old log in use; after it, the store is failed.
   */
  private rewrite(): void {
    const dir = this.o.dir!;
    const path = this.path!;
    const tmp = `${path}.tmp`;
    let size = 0;
    try {
      const fd = openSync(tmp, 'w');
      try {
        const chunk: Buffer[] = [cacheLogHeader()];
        let chunkBytes = CACHE_LOG_HEADER;
        const add = (r: CacheRecord): void => {
          const b = encodeCacheRecord(r);
          chunk.push(b);
          chunkBytes += b.length;
          if (chunkBytes >= REWRITE_CHUNK) flush();
        };
        const flush = (): void => {
          writeAll(fd, Buffer.concat(chunk, chunkBytes));
          size += chunkBytes;
          chunk.length = 0;
          chunkBytes = 0;
        };
        for (const [k, e] of this.entries) {
          add({ type: 'set', fragment: e.fragment, configId: e.configId, key: Buffer.from(k, 'latin1'), value: e.value });
        }
        for (const [fragment, l] of this.lists) {
          if (l.marker) add({ type: 'dirtyInit', fragment, configId: l.configId });
          for (const k of l.keys) add({ type: 'dirtyAdd', fragment, key: Buffer.from(k, 'latin1') });
          // A done list without marker is what DIRTY_DONE makes of a fragment without a list.
          if (l.done) add({ type: 'dirtyDone', fragment });
        }
        flush();
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    } catch (err) {
      try {
        unlinkSync(tmp);
      } catch {
        // Removed at the next open.
      }
      this.rewriteNotBefore = this.logBytes + MIN_REWRITE;
      this.onLog(`${path}: rewrite failed (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); appending to the old log`);
      return;
    }
    try {
      renameSync(tmp, path);
      syncDir(dir);
      const fd = openSync(path, 'a');
      this.retire(this.fd!);
      this.fd = fd;
    } catch (err) {
      throw this.fail(err, 'rewrite');
    }
    this.logBytes = size;
    this.syncedTo = this.invalidations; // the new file and its name are on disk
    this.rewrites++;
  }

  /** Replaces cache.log by an empty one (durably: a crash leaves the old file or the new), and opens it for appending. */
  private writeFresh(): void {
    const path = this.path!;
    const tmp = `${path}.tmp`;
    const bytes = cacheLogHeader();
    const fd = openSync(tmp, 'w');
    try {
      writeAll(fd, bytes);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
    syncDir(this.o.dir!);
    this.fd = openSync(path, 'a');
    this.logBytes = bytes.length;
  }
}

function listRecordBytes(l: DirtyList): number {
  let n = (l.marker ? INIT_RECORD : 0) + (l.done ? DONE_RECORD : 0);
  for (const k of l.keys) n += addRecord(k.length);
  return n;
}

function writeAll(fd: number, bytes: Buffer): void {
  for (let done = 0; done < bytes.length;) done += writeSync(fd, bytes, done, bytes.length - done);
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // Nothing more can be done with this descriptor.
  }
}

function closedError(): NovaError {
  return new NovaError('CLOSED', 'the cache store is closed');
}

function checkKey(key: Buffer): void {
  if (key.length > MAX_CACHE_KEY) throw new NovaError('BAD_ARGUMENT', `a cache key of ${key.length} bytes exceeds ${MAX_CACHE_KEY}`);
}

function checkFragment(fragment: number): void {
  if (!(Number.isInteger(fragment) && fragment >= 0 && fragment <= 0xffff_ffff)) throw new NovaError('BAD_ARGUMENT', `fragment ${fragment} is not a u32`);
}

function checkConfigId(configId: number): void {
  if (!(Number.isSafeInteger(configId) && configId >= 0)) throw new NovaError('BAD_ARGUMENT', `configId ${configId} is not a non-negative safe integer`);
}
