/**
 * Bloom filter over user keys (doc/format/sstable.md, "Filter"): bit array | u8 probes.
 * Keys are hashed once with XXH32 (src/common/xxh32.ts); the probes use double hashing as
 * LevelDB's bloom.cc does. ~10 bits per key gives about 1% false positives.
 */
import { xxh32 } from '../common/xxh32.js';

export function filterHash(userKey: Uint8Array, start = 0, end = userKey.length): number {
  return xxh32(userKey, start, end, 0xbc9f1d34);
}

/** Builds the filter for the given key hashes. */
export function buildFilter(hashes: readonly number[], bitsPerKey = 10): Buffer {
  const probes = Math.min(30, Math.max(1, Math.round(bitsPerKey * 0.69)));
  const bits = Math.max(64, hashes.length * bitsPerKey);
  const bytes = Math.ceil(bits / 8);
  const out = Buffer.alloc(bytes + 1);
  const nbits = bytes * 8;
  for (const hash of hashes) {
    let h = hash >>> 0;
    const delta = ((h >>> 17) | (h << 15)) >>> 0;
    for (let j = 0; j < probes; j++) {
      const bit = h % nbits;
      out[bit >>> 3] |= 1 << (bit & 7);
      h = (h + delta) >>> 0;
    }
  }
  out[bytes] = probes;
  return out;
}

/** False only if the key is certainly absent. A malformed filter answers true (no false negatives). */
export function filterMayContain(filter: Uint8Array, hash: number): boolean {
  if (filter.length < 2) return true;
  const bytes = filter.length - 1;
  const probes = filter[bytes];
  if (probes < 1 || probes > 30) return true;
  const nbits = bytes * 8;
  let h = hash >>> 0;
  const delta = ((h >>> 17) | (h << 15)) >>> 0;
  for (let j = 0; j < probes; j++) {
    const bit = h % nbits;
    if ((filter[bit >>> 3] & (1 << (bit & 7))) === 0) return false;
    h = (h + delta) >>> 0;
  }
  return true;
}
