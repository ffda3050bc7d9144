/**
 * A file read served from the page cache on the spot (the addon's preadCached: preadv2 with
 * RWF_NOWAIT), for a server whose reads mostly hit the cache: without it each read is a round
 * trip through libuv's thread pool (queue, wake a thread, pread, wake the loop, settle a promise),
 * which costs far more CPU than copying a cached block.
 */
import { loadAddon } from './addon.js';

/** Bytes read into `into` from `position` (0: the end of the file), or -1 when the read would wait for the disk or cannot be done so: read the usual way then. */
export function readCached(fd: number, into: Buffer, position: number): number {
  return loadAddon().preadCached(fd, into, position);
}
