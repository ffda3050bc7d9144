/**
 * Loads the native transport addon (native/, built by cmake-js into build/Release) and
 * types its surface. Only src/transport/fabric.ts, src/common/checksum.ts, src/common/heap-free.ts,
 * src/common/cached-read.ts and src/common/files.ts import it.
 */
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface NativeRegion {
  id: number;
  memory: ArrayBuffer;
  address: bigint;
  rkey: Buffer;
}

export interface NativeStats {
  /** Operations handed to the progress thread. */
  opsPosted: number;
  /** Native submit calls that carried them (one per JS turn with work). */
  batches: number;
  /** Events delivered to JS. */
  events: number;
  /** Thread-safe-function calls that delivered them. */
  notifications: number;
  wakeups: number;
  malformedFrames: number;
  unknownEndpointFrames: number;
  /** Direct file writes done by the progress thread (Fabric.registerFile). */
  fileWrites: number;
}

export interface NativeFabric {
  address(): Buffer;
  mapRegion(length: number): NativeRegion;
  connect(address: Buffer, opId: number): number;
  importRkey(ep: number, rkey: Buffer, address: bigint, length: number): number;
  dropRkey(id: number): void;
  closeRegion(id: number, opId: number): void;
  closeEndpoint(id: number): void;
  registerFile(handle: number, fd: number, limit: number, ep: number, windowRegion: number, windowStart: number,
               windowLength: number): void;
  /** Returns the end of the furthest write the handle took. */
  unregisterFile(handle: number): number;
  fileEnd(handle: number): number;
  /** Queues operations; with waitUs > 0, waits that long for events and says if any are ready. */
  submit(descriptors: Buffer, count: number, messages: Buffer, messagesLength: number, waitUs?: number): boolean;
  /** Returns 2 * events written + 1 if more remain. See native/fabric.h DrainEvents. */
  drain(out: Buffer, arena: Buffer, large: Buffer[]): number;
  close(): void;
  stats(): NativeStats;
  ref(): void;
  unref(): void;
}

export interface NativeAddon {
  NativeFabric: new (
    options: { spinUs?: number; controlTimeoutMs?: number },
    onEvents: () => void,
  ) => NativeFabric;
  detach(memory: ArrayBuffer): void;
  ucxVersion(): string;
  /** XXH32, seed 0 (native/xxh32.h); src/common/checksum.ts is its caller. */
  checksum32(bytes: Uint8Array): number;
  /** preadv2 with RWF_NOWAIT: bytes read, or -1 when it would wait or cannot. src/common/cached-read.ts is its caller. */
  preadCached(fd: number, into: Buffer, position: number): number;
  /** glibc's mallinfo2().fordblks: bytes the C heap holds free for reuse (0 elsewhere). src/common/heap-free.ts is its caller. */
  heapFreeBytes(): number;
  /** malloc_trim(0) where glibc has it: whether pages went back to the kernel. src/common/heap-free.ts is its caller. */
  trimHeap(): boolean;
  /** flock(LOCK_EX | LOCK_NB): 0, or the errno (EWOULDBLOCK: held by another open file). src/common/files.ts is its caller. */
  lockFile(fd: number): number;
}

function findRoot(): string {
  // Works from src/common (vitest) and dist/src/common (compiled).
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    dir = dirname(dir);
  }
  throw new Error('cannot find the Nova package root');
}

let addon: NativeAddon | undefined;

/** Every function of the surface, checked at load; a key missing here fails the type check. */
const SURFACE: Record<keyof NativeAddon, true> = {
  NativeFabric: true, detach: true, ucxVersion: true, checksum32: true, preadCached: true, heapFreeBytes: true, trimHeap: true, lockFile: true,
};

/**
 * UCX defaults that DESIGN.md §2 found necessary. Some are read when libucs loads, so they
 * are set before the addon is; a value the user already set wins.
 */
const UCX_DEFAULTS: Record<string, string> = {
  UCX_TCP_CM_REUSEADDR: 'y',
  // Without these, UCX will not use shared memory for endpoints with peer-failure handling.
  UCX_POSIX_ERROR_HANDLING: 'y',
  UCX_SYSV_ERROR_HANDLING: 'y',
  // Dead peers are found well within the 2 s the transport promises.
  UCX_KEEPALIVE_INTERVAL: '300ms',
  // Leave fatal signals to Node; keep UCX's own log lines off stdout (a CLI's data channel).
  UCX_HANDLE_ERRORS: 'none',
  UCX_ERROR_SIGNALS: '',
  UCX_LOG_FILE: 'stderr',
  UCX_WARN_UNUSED_ENV_VARS: 'n',
  // No memory hooks. By default UCX patches mmap/munmap/brk in place ("bistro") when it
  // initialises, while V8's threads may be running them: a peer crashed in V8's GC about
  // once in 200 starts. Nova registers only UCX-allocated regions and passes their handles,
  // so it needs no registration cache and no hooks.
  UCX_MEM_EVENTS: 'n',
  UCX_MEM_MMAP_HOOK_MODE: 'none',
  UCX_MEM_MALLOC_HOOKS: 'n',
  UCX_MEM_MALLOC_RELOC: 'n',
};

export function loadAddon(): NativeAddon {
  if (addon) return addon;
  const path = join(findRoot(), 'build', 'Release', 'nova_transport.node');
  if (!existsSync(path)) {
    throw new Error(`native transport not built (${path} is missing): run scripts/setup.sh`);
  }
  for (const [name, value] of Object.entries(UCX_DEFAULTS)) {
    if (process.env[name] === undefined) process.env[name] = value;
  }
  const loaded = createRequire(import.meta.url)(path) as Partial<NativeAddon>;
  // A build from an older checkout lacks what this code calls: say so once, not as "x is not a function" later.
  const missing = (Object.keys(SURFACE) as Array<keyof NativeAddon>).filter((name) => typeof loaded[name] !== 'function');
  if (missing.length > 0) throw new Error(`native transport out of date (${path} lacks ${missing.join(', ')}): run scripts/setup.sh`);
  addon = loaded as NativeAddon;
  return addon;
}
