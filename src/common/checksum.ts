/**
 * The checksum used by every Nova format: XXH32, seed 0, as an unsigned 32-bit number. One
 * function so that formats cannot drift apart.
 *
 * Native (native/xxh32.h, in the transport addon every component loads anyway): one call that
 * returns a number, where a hashing package returned each result in a new Buffer
 * (doc/decisions/native-checksum.md). A test holds this equal to that package and to the
 * JS xxh32 of filters (src/common/xxh32.ts).
 */
import { loadAddon } from './addon.js';

const native = loadAddon().checksum32;

export function checksum32(data: Uint8Array): number {
  return native(data);
}
