/**
 * The StoC's persistent files: one directory, one open FileHandle per file (cached), and the
 * size each file will have once the writes already accepted for it land.
 *
 * Contracts:
 *  - `acquire` pins a file; the caller calls `release` exactly once. A pinned file is never
 *    closed (evicted or removed), so an fd is never closed under an operation, and a
 *    reserved-but-unwritten tail never loses its reservation to a reopen.
 *  - `size` is the logical size: it grows when a write or append is accepted (before its bytes
 *    reach the disk), so later appends go after it. Bytes inside it that are not yet written
 *    read as zeros.
 *  - `sync` is group-committed: callers that arrive while an fdatasync runs share the next one.
 *    After an fdatasync fails, every later sync of that open file fails too (the kernel may have
 *    dropped the dirty pages; pretending otherwise would lose data silently).
 *  - A newly created file's directory entry is synced with the first sync of the file.
 *  - Nothing is deleted except by `remove`; unknown files in the directory are listed and served.
 *  - A request for a name that arrives while it is being removed waits until it is gone.
 */
import { constants, writeSync } from 'node:fs';
import { open, readdir, stat, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { NovaError } from '../common/errors.js';
import { readCached } from '../common/cached-read.js';
import { RESERVED_NAMES } from './stoc-protocol.js';

/**
 * Writes and reads up to this size are done on the spot: a write lands in the page cache in
 * microseconds, without the thread pool's round trip, and a group commit's log append (tens of
 * KiB to a MiB) is one of them (doc/decisions/stoc-file-writes.md); a read takes what the page
 * cache holds without waiting for the disk (RWF_NOWAIT), and the rest of it goes through the pool,
 * as a cold read must not stall every other request meanwhile (doc/decisions/stoc-cached-reads.md).
 * Larger ones (whole tables for a compaction) would hold the event loop for milliseconds.
 */
const SYNC_IO_MAX = 1024 * 1024;

export class StoredFile {
  private logical: number;
  /**
   * While peers write this file directly (StocServer's direct handles, done by the fabric's
   * progress thread), the end of their furthest write: the size must cover it.
   */
  directEnd: (() => number) | undefined;
  private users = 0;
  private detached = false;
  private syncing: Promise<void> | undefined;
  private queued: Promise<void> | undefined;
  private syncFailure: Error | undefined;

  constructor(
    readonly name: string,
    private readonly handle: FileHandle,
    size: number,
    /** Whether this file's directory entry still needs a sync, and the sync that makes it durable. */
    private readonly dir: { pending: () => boolean; sync: () => Promise<void> },
  ) {
    this.logical = size;
  }

  get size(): number {
    if (this.directEnd) this.logical = Math.max(this.logical, this.directEnd());
    return this.logical;
  }

  set size(n: number) {
    this.logical = n;
  }

  /** The open descriptor, for direct writes. Valid while the file is pinned. */
  get fd(): number {
    return this.handle.fd;
  }

  get idle(): boolean {
    return this.users === 0;
  }

  pin(): void {
    this.users++;
  }

  /** Undoes one pin; closes the file if it was removed or evicted meanwhile. */
  unpin(): void {
    if (--this.users === 0 && this.detached) void this.closeNow();
  }

  /** Takes the file out of the table: closes it once no one pins it. */
  detach(): Promise<void> {
    this.detached = true;
    return this.users === 0 ? this.closeNow() : Promise.resolve();
  }

  /** Reserves `length` bytes at the end; returns their offset. */
  reserve(length: number): number {
    const at = this.size;
    this.size += length;
    return at;
  }

  /** Like extend, without asking directEnd (which may fail): for what direct writes reached. */
  cover(end: number): void {
    if (end > this.logical) this.logical = end;
  }

  /** Accepts a write of [offset, +length): the file is at least that long from now on. */
  extend(end: number): void {
    if (end > this.size) this.size = end;
  }

  async writeAt(bytes: Buffer, position: number): Promise<void> {
    let done = 0;
    while (done < bytes.length) {
      const n = bytes.length - done;
      done += n <= SYNC_IO_MAX
        ? writeSync(this.handle.fd, bytes, done, n, position + done)
        : (await this.handle.write(bytes, done, n, position + done)).bytesWritten;
    }
  }

  /** Fills `into` from `position`; bytes past the end of what is on disk read as zeros. */
  async readAt(into: Buffer, position: number): Promise<void> {
    let done = into.length <= SYNC_IO_MAX ? Math.max(0, readCached(this.handle.fd, into, position)) : 0;
    while (done < into.length) {
      const { bytesRead } = await this.handle.read(into, done, into.length - done, position + done);
      if (bytesRead === 0) break;
      done += bytesRead;
    }
    into.fill(0, done);
  }

  sync(): Promise<void> {
    if (this.queued) return this.queued;
    if (!this.syncing) return this.startSync();
    // The running fdatasync may have started before this caller's write finished.
    this.queued = this.syncing.catch(() => undefined).then(() => {
      this.queued = undefined;
      return this.startSync();
    });
    return this.queued;
  }

  private startSync(): Promise<void> {
    const p = this.runSync().finally(() => {
      if (this.syncing === p) this.syncing = undefined;
    });
    this.syncing = p;
    return p;
  }

  private async runSync(): Promise<void> {
    if (this.syncFailure) throw this.syncFailure;
    try {
      const dir = this.dir.pending();
      await this.handle.datasync();
      if (dir) await this.dir.sync();
    } catch (err) {
      this.syncFailure = err as Error;
      throw err;
    }
  }

  private async closeNow(): Promise<void> {
    try {
      await this.handle.close();
    } catch {
      // Already closed, or the close failed: nothing more can be done with this fd.
    }
  }
}

export class StoredFiles {
  private readonly open = new Map<string, StoredFile>(); // oldest use first
  private readonly opening = new Map<string, Promise<StoredFile | undefined>>();
  /**
   * Removals under way. Requests for the name that arrive meanwhile wait for the unlink:
   * otherwise one could open the old inode just before it goes, and what it wrote would be
   * acknowledged into a deleted file.
   */
  private readonly removing = new Map<string, Promise<void>>();
  /**
   * Files created whose directory entry no sync has made durable yet. Kept here, not on the
   * open file: a file evicted between its write and its sync is reopened as an old file.
   */
  private readonly newEntries = new Set<string>();

  constructor(private readonly dir: string, private readonly maxOpen: number) {}

  get openFiles(): number {
    return this.open.size;
  }

  /** Pins and returns `name`, opening it (and creating it if `create`); undefined if missing. */
  async acquire(name: string, create: boolean): Promise<StoredFile | undefined> {
    for (;;) {
      const removal = this.removing.get(name);
      if (removal) {
        await removal.catch(() => undefined);
        continue;
      }
      const f = this.open.get(name);
      if (f) {
        this.open.delete(name); // re-insert: most recently used last
        this.open.set(name, f);
        f.pin();
        return f;
      }
      const pending = this.opening.get(name);
      if (pending) {
        const got = await pending.catch(() => undefined);
        if (!got && !create) return undefined;
        continue;
      }
      const p = this.openFile(name, create);
      this.opening.set(name, p);
      try {
        const opened = await p;
        if (!opened) return undefined;
        this.open.set(name, opened);
        opened.pin();
        this.evict();
        return opened;
      } finally {
        this.opening.delete(name);
      }
    }
  }

  /** Size of `name` as the StoC knows it, or undefined if it does not exist. */
  async size(name: string): Promise<number | undefined> {
    await this.removing.get(name)?.catch(() => undefined);
    const f = this.open.get(name);
    if (f) return f.size;
    try {
      return (await stat(this.path(name))).size;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  }

  async list(prefix: string, valid: (name: string) => boolean): Promise<Array<[string, number]>> {
    const out: Array<[string, number]> = [];
    for (const name of (await readdir(this.dir)).sort()) {
      if (!name.startsWith(prefix) || !valid(name) || RESERVED_NAMES.has(name)) continue;
      const size = await this.size(name).catch(() => undefined);
      if (size !== undefined) out.push([name, size]);
    }
    return out;
  }

  /**
   * Unlinks `name`; operations already holding it finish on the unlinked file, and those that
   * ask for it from now on wait until it is gone (then it is missing, or made anew).
   */
  async remove(name: string): Promise<void> {
    const done = this.removeNow(name, this.removing.get(name));
    this.removing.set(name, done);
    try {
      await done;
    } finally {
      if (this.removing.get(name) === done) this.removing.delete(name);
    }
  }

  private async removeNow(name: string, earlier: Promise<void> | undefined): Promise<void> {
    await earlier?.catch(() => undefined);
    await this.opening.get(name)?.catch(() => undefined);
    const f = this.open.get(name);
    if (f) {
      this.open.delete(name);
      void f.detach();
    }
    this.newEntries.delete(name);
    try {
      await unlink(this.path(name));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }

  /** Closes every file; a file still pinned closes when its last pin goes. */
  async closeAll(): Promise<void> {
    const files = [...this.open.values()];
    this.open.clear();
    await Promise.all(files.map((f) => f.detach()));
  }

  private async openFile(name: string, create: boolean): Promise<StoredFile | undefined> {
    const path = this.path(name);
    let handle: FileHandle;
    try {
      handle = await open(path, constants.O_RDWR);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      if (!create) return undefined;
      // This open makes the file (one process per directory, and opens of a name are
      // deduplicated), so its directory entry needs a sync.
      handle = await open(path, constants.O_RDWR | constants.O_CREAT, 0o644);
      this.newEntries.add(name);
    }
    try {
      const { size } = await handle.stat();
      return new StoredFile(name, handle, size, {
        pending: () => this.newEntries.has(name),
        sync: async () => {
          await this.syncDirectory();
          this.newEntries.delete(name);
        },
      });
    } catch (err) {
      await handle.close().catch(() => undefined);
      throw err;
    }
  }

  private async syncDirectory(): Promise<void> {
    const d = await open(this.dir, constants.O_RDONLY);
    try {
      await d.sync();
    } finally {
      await d.close();
    }
  }

  /** Closes the least recently used files nobody pins, down to `maxOpen`. */
  private evict(): void {
    for (const [name, f] of this.open) {
      if (this.open.size <= this.maxOpen) return;
      if (!f.idle) continue;
      this.open.delete(name);
      void f.detach();
    }
  }

  private path(name: string): string {
    if (RESERVED_NAMES.has(name)) throw new NovaError('BAD_ARGUMENT', `${name} is reserved`);
    return join(this.dir, name);
  }
}
