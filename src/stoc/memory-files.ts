/**
 * The StoC's in-memory files (DESIGN.md §6; protocol in stoc-protocol.ts): each file is a
 * list of registered regions of one size, allocated by the fabric in this process. Clients
 * import the regions' keys and append by one-sided WRITE, read by one-sided READ: the StoC's
 * CPU takes part only to open, extend, list and remove a file, never per append.
 *
 * Contracts:
 *  - Memory files live only as long as this process: a StoC that dies or restarts has none.
 *    That is the memory log mode's documented limit (doc/durability.md, LogC modes).
 *  - A file's bytes past what its writer wrote are zero (regions are zeroed when allocated),
 *    so a reader can find the end of a log without the StoC knowing it.
 *  - The StoC does not know who writes a file or how much was written: a file's size here is
 *    the bytes allocated to it. One writer per file is the caller's rule (the LTC that owns the
 *    log), not enforced.
 *  - The total given out (live files, and removed ones still in quarantine) never exceeds
 *    `limitBytes`, nor the region count `maxRegions`; beyond either, requests fail with BUSY.
 *  - Removed regions are unmapped only after `graceMs`. Why: a peer's READ or WRITE posted
 *    before it learned of the remove must not reach unmapped memory. Over shared memory it
 *    would fail on the peer; over TCP, UCX emulates the WRITE with a memcpy in this process
 *    and would corrupt or crash it. Clients must not use a file's keys after removing it.
 *  - On server close every region is unmapped with the fabric (see closeAll).
 *
 * Not thread-safe: used from the StocServer's thread.
 */
import { NovaError } from '../common/errors.js';
import type { Fabric } from '../transport/fabric.js';
import type { MemoryRegion } from '../transport/regions.js';
import type { MemoryFileReply } from './stoc-protocol.js';

export interface MemoryFilesOptions {
  /** Bytes all memory files may hold at once, quarantined ones included (default 1 GiB). */
  limitBytes: number;
  /** Regions at once (default 1024). Why: a shared-memory region may be one SysV segment, a few thousand per host. */
  maxRegions: number;
  /** How long removed regions stay mapped before they are freed (ms, default 10 000). */
  graceMs: number;
}

export interface MemoryFilesStats {
  memoryFiles: number;
  memoryRegions: number;
  /** Bytes given out, quarantined regions included. */
  memoryBytes: number;
}

/** Regions smaller than this are refused: a log's region is a memtable, megabytes. */
export const MIN_REGION_BYTES = 4096;

class MemFile {
  readonly regions: MemoryRegion[] = [];
  constructor(readonly regionBytes: number) {}
}

export class MemoryFiles {
  private readonly files = new Map<string, MemFile>();
  private readonly quarantine = new Set<NodeJS.Timeout>();
  private usedBytes = 0;
  private usedRegions = 0;
  private closed = false;

  constructor(private readonly fabric: Fabric, private readonly stocId: number, private readonly o: MemoryFilesOptions) {}

  /** A new limit: files past it stay, and requests fail BUSY until enough is removed. */
  setLimit(bytes: number): void {
    this.o.limitBytes = bytes;
  }

  stats(): MemoryFilesStats {
    return { memoryFiles: this.files.size, memoryRegions: this.usedRegions, memoryBytes: this.usedBytes };
  }

  /**
   * Makes `name` a new file with one zeroed region of `regionBytes`. An existing file of that
   * name is removed first: a new log starts empty, whatever an earlier incarnation left.
   */
  create(name: string, regionBytes: number): MemoryFileReply {
    if (regionBytes < MIN_REGION_BYTES) {
      throw new NovaError('BAD_ARGUMENT', `StoC ${this.stocId}: memory file ${name}: regionBytes must be at least ${MIN_REGION_BYTES}, not ${regionBytes}`);
    }
    this.remove(name);
    const file = new MemFile(regionBytes);
    file.regions.push(this.allocate(name, regionBytes));
    this.files.set(name, file);
    return reply(file);
  }

  /** The file's regions, or undefined if there is no such file. */
  get(name: string): MemoryFileReply | undefined {
    const file = this.files.get(name);
    return file && reply(file);
  }

  /**
   * The key of region `index` of `name`, allocating it when `index` is the region count.
   * Asking for an existing index returns its key: a client that retries after a lost answer
   * gets the same region, not a second one.
   */
  extend(name: string, index: number): Uint8Array {
    const file = this.files.get(name);
    if (!file) throw new NovaError('CORRUPTION', `StoC ${this.stocId}: memory file ${name} does not exist`);
    if (index > file.regions.length) {
      throw new NovaError('BAD_ARGUMENT', `StoC ${this.stocId}: memory file ${name} has ${file.regions.length} regions; cannot make region ${index}`);
    }
    if (index === file.regions.length) file.regions.push(this.allocate(name, file.regionBytes));
    return file.regions[index].key.serialize();
  }

  /** Files whose names start with `prefix`, in name order, with the bytes allocated to each. */
  list(prefix: string): Array<[string, number]> {
    return [...this.files.entries()]
      .filter(([name]) => name.startsWith(prefix))
      .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
      .map(([name, f]) => [name, f.regions.length * f.regionBytes]);
  }

  /** Forgets `name` now and frees its memory after the grace period. A missing file is not an error. */
  remove(name: string): void {
    const file = this.files.get(name);
    if (!file) return;
    this.files.delete(name);
    const timer = setTimeout(() => {
      this.quarantine.delete(timer);
      void this.free(file.regions);
    }, this.o.graceMs);
    timer.unref(); // a quarantine must not hold the process open: closing the fabric frees the regions
    this.quarantine.add(timer);
  }

  /**
   * Forgets every file, live or quarantined. REQUIRES: the fabric closes next; it unmaps the
   * regions, after closing its endpoints, so no peer's transfer can reach them once unmapped
   * (closing them here first would leave that window open).
   */
  closeAll(): void {
    this.closed = true;
    for (const timer of this.quarantine) clearTimeout(timer);
    this.quarantine.clear();
    this.files.clear();
    this.usedBytes = 0;
    this.usedRegions = 0;
  }

  private allocate(name: string, bytes: number): MemoryRegion {
    if (this.closed) throw new NovaError('CLOSED', `StoC ${this.stocId} is closing`);
    if (this.usedBytes + bytes > this.o.limitBytes) {
      throw new NovaError('BUSY', `StoC ${this.stocId}: memory file ${name}: a region of ${bytes} bytes would exceed ` +
        `the memory limit (${this.usedBytes} of ${this.o.limitBytes} bytes given out)`);
    }
    if (this.usedRegions >= this.o.maxRegions) {
      throw new NovaError('BUSY', `StoC ${this.stocId}: memory file ${name}: all ${this.o.maxRegions} memory regions are in use`);
    }
    let region: MemoryRegion;
    try {
      region = this.fabric.allocate(bytes);
    } catch (err) {
      // Out of registered memory or segments: the same answer as the limit, so clients go elsewhere.
      throw new NovaError('BUSY', `StoC ${this.stocId}: memory file ${name}: cannot allocate ${bytes} bytes: ${(err as Error).message}`, { cause: err });
    }
    region.buffer.fill(0); // the zeros past a log's end are how a reader finds it
    this.usedBytes += bytes;
    this.usedRegions++;
    return region;
  }

  private async free(regions: MemoryRegion[]): Promise<void> {
    await Promise.all(regions.map(async (r) => {
      const bytes = r.length;
      await r.close().catch(() => undefined); // the fabric may be closing: it unmaps everything then
      if (!this.closed) {
        this.usedBytes -= bytes;
        this.usedRegions--;
      }
    }));
  }
}

function reply(file: MemFile): MemoryFileReply {
  return { regionBytes: file.regionBytes, regions: file.regions.map((r) => r.key.serialize()) };
}
