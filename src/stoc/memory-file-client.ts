/**
 * A StoC's in-memory files as a client uses them (stoc-protocol.ts mcreate…mremove): regions
 * imported once and then WRITTEN and READ one-sided, with no StoC CPU per access. Functions
 * over a StocClient (its connection, slots and deadlines), which exposes them as methods.
 */
import { constants as bufferConstants } from 'node:buffer';
import { NovaError } from '../common/errors.js';
import type { CallOptions } from '../transport/rpc.js';
import type { RemoteRegion } from '../transport/regions.js';
import { left, parseMemoryReply, wrap, type Op } from './client-calls.js';
import type { StocClient } from './stoc-client.js';
import { Method, checkName, checkUint, type MemoryFileReply } from './stoc-protocol.js';

/**
 * One StoC in-memory file as this client sees it: the regions it imported so far, in file
 * order. The file is the concatenation of its regions; bytes never written read as zeros.
 * Valid while its StocClient is; close it to drop the imported keys.
 */
export class MemoryFile {
  /** @internal Imported regions, grown by StocClient as writes reach past them. */
  readonly regions: RemoteRegion[] = [];
  /** @internal An mextend in flight, so concurrent writes ask for each region once. */
  extending: Promise<void> | undefined;
  private closed = false;

  /** @internal */
  constructor(private readonly client: StocClient, readonly name: string, readonly regionBytes: number) {}

  /** Bytes allocated to the file as far as this handle knows. */
  get length(): number {
    return this.regions.length * this.regionBytes;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Writes `bytes` at `offset`, extending the file by whole regions as needed. */
  write(offset: number, bytes: Uint8Array, options?: CallOptions): Promise<void> {
    return write(this.client, this, offset, bytes, options);
  }

  /** The `length` bytes at `offset`, which must lie within the regions this handle knows. */
  read(offset: number, length: number, options?: CallOptions): Promise<Buffer> {
    return read(this.client, this, offset, length, options);
  }

  /** Drops the imported keys (the StoC keeps the file). Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const r of this.regions) r.drop();
  }
}


/**
 * Creates in-memory file `name` with one zeroed region of `regionBytes` (replacing a file
 * of that name) and imports it. BUSY when the StoC is at its memory limit.
 */
export async function create(c: StocClient, name: string, regionBytes: number, options?: CallOptions): Promise<MemoryFile> {
  const op = c.begin(`create of memory file ${String(name)}`, options);
  try {
    checkName(name);
    checkUint('regionBytes', regionBytes);
    c.usable();
    return importMemory(c, name, parseMemoryReply(await c.call(op, Method.mcreate, { file: name, regionBytes })));
  } catch (err) {
    throw wrap(err, `StoC ${c.stocId}: ${op.what}`);
  }
}

/** In-memory file `name` with all its regions imported, or undefined if the StoC has none. */
export async function open(c: StocClient, name: string, options?: CallOptions): Promise<MemoryFile | undefined> {
  const op = c.begin(`open of memory file ${String(name)}`, options);
  try {
    checkName(name);
    c.usable();
    const reply = await c.call(op, Method.mget, { file: name });
    return reply === null || reply === undefined ? undefined : importMemory(c, name, parseMemoryReply(reply));
  } catch (err) {
    throw wrap(err, `StoC ${c.stocId}: ${op.what}`);
  }
}

/** Every allocated byte of in-memory file `name` (zeros past what was written), or undefined. */
export async function readAll(c: StocClient, name: string, options?: CallOptions): Promise<Buffer | undefined> {
  const deadline = Date.now() + (options?.timeoutMs ?? c.timeoutMs);
  const file = await open(c, name, options);
  if (!file) return undefined;
  try {
    return await file.read(0, file.length, { timeoutMs: left(deadline) });
  } finally {
    file.close();
  }
}

/** In-memory files whose names start with `prefix`, in name order, with the bytes allocated to each. */
export function list(c: StocClient, prefix: string, options?: CallOptions): Promise<Array<{ name: string; size: number }>> {
  return c.listing(Method.mlist, 'memory files', prefix, options);
}


/** See MemoryFile.write. Parts go one after another, so a failure leaves a prefix written. */
export async function write(c: StocClient, file: MemoryFile, offset: number, bytes: Uint8Array, options?: CallOptions): Promise<void> {
  const op = c.begin(`write of memory file ${file.name} [${offset}, +${bytes?.length})`, options);
  try {
    checkUint('offset', offset);
    usableMemory(c, file);
    for (let at = 0; at < bytes.length;) {
      const pos = offset + at;
      const within = pos % file.regionBytes;
      const n = Math.min(bytes.length - at, file.regionBytes - within, c.pool.slotBytes);
      const region = await memoryRegion(c, op, file, Math.floor(pos / file.regionBytes));
      const part = bytes.subarray(at, at + n);
      await c.withSlot(c.pool, op.deadline, async (slot, state) => {
        usableMemory(c, file);
        c.staging.buffer.set(part, slot);
        state.sent = true;
        await c.oneSided(op, c.ep.write(c.staging, slot, region, within, n));
      });
      at += n;
    }
  } catch (err) {
    throw wrap(err, `StoC ${c.stocId}: ${op.what}`);
  }
}

/** See MemoryFile.read. Parts are in flight together. */
export async function read(c: StocClient, file: MemoryFile, offset: number, length: number, options?: CallOptions): Promise<Buffer> {
  const op = c.begin(`read of memory file ${file.name} [${offset}, +${length})`, options);
  try {
    checkUint('offset', offset);
    checkUint('length', length, bufferConstants.MAX_LENGTH);
    usableMemory(c, file);
    if (offset + length > file.length) {
      throw new NovaError('CORRUPTION', `the read is past the ${file.length} bytes of the file's regions`);
    }
    const out = Buffer.allocUnsafe(length);
    const parts: Array<Promise<void>> = [];
    for (let at = 0; at < length;) {
      const pos = offset + at;
      const within = pos % file.regionBytes;
      const n = Math.min(length - at, file.regionBytes - within, c.pool.slotBytes);
      const region = file.regions[Math.floor(pos / file.regionBytes)];
      const into = at;
      parts.push(c.withSlot(c.pool, op.deadline, async (slot, state) => {
        usableMemory(c, file);
        state.sent = true;
        await c.oneSided(op, c.ep.read(c.staging, slot, region, within, n));
        usableMemory(c, file);
        c.staging.buffer.copy(out, into, slot, slot + n);
      }));
      at += n;
    }
    const failed = (await Promise.allSettled(parts)).find((r) => r.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
    return out;
  } catch (err) {
    throw wrap(err, `StoC ${c.stocId}: ${op.what}`);
  }
}


function usableMemory(c: StocClient, file: MemoryFile): void {
  c.usable();
  if (file.isClosed) throw new NovaError('CLOSED', `memory file ${file.name}: the handle was closed`);
}

function importMemory(c: StocClient, name: string, reply: MemoryFileReply): MemoryFile {
  const file = new MemoryFile(c, name, reply.regionBytes);
  try {
    for (const key of reply.regions) file.regions.push(importRegion(c, key, reply.regionBytes));
  } catch (err) {
    file.close();
    throw err;
  }
  return file;
}

/** A memory region's key, checked to be as long as its file's regions, then imported. */
function importRegion(c: StocClient, key: Uint8Array, regionBytes: number): RemoteRegion {
  const region = c.ep.importKey(key);
  if (region.length !== regionBytes) {
    region.drop();
    throw new NovaError('CORRUPTION', `the StoC gave a region of ${region.length} bytes for a file of ${regionBytes}-byte regions`);
  }
  return region;
}

/** Region `index` of `file`, asking the StoC for the regions up to it that this handle lacks. */
async function memoryRegion(c: StocClient, op: Op, file: MemoryFile, index: number): Promise<RemoteRegion> {
  while (file.regions.length <= index) {
    file.extending ??= extendMemory(c, op, file).finally(() => { file.extending = undefined; });
    await file.extending;
    usableMemory(c, file);
  }
  return file.regions[index];
}

async function extendMemory(c: StocClient, op: Op, file: MemoryFile): Promise<void> {
  const key = await c.call(op, Method.mextend, { file: file.name, index: file.regions.length });
  if (!(key instanceof Uint8Array)) throw new NovaError('CORRUPTION', 'the StoC answered mextend without a key');
  usableMemory(c, file);
  file.regions.push(importRegion(c, key, file.regionBytes));
}

