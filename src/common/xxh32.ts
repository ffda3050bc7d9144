/**
 * XXH32 in plain JS, for hashing many short keys (bloom filters) without a native call per
 * key. Same function as src/common/checksum.ts (which uses the native addon for long
 * buffers); a test holds the two equal.
 */
const P1 = 0x9e3779b1;
const P2 = 0x85ebca77;
const P3 = 0xc2b2ae3d;
const P4 = 0x27d4eb2f;
const P5 = 0x165667b1;

function rotl(x: number, r: number): number {
  return (x << r) | (x >>> (32 - r));
}

function read32(b: Uint8Array, p: number): number {
  return b[p] | (b[p + 1] << 8) | (b[p + 2] << 16) | (b[p + 3] << 24);
}

function round(acc: number, input: number): number {
  acc = (acc + Math.imul(input, P2)) | 0;
  return Math.imul(rotl(acc, 13), P1);
}

/** XXH32 of b[start, end) with `seed`, as an unsigned 32-bit number. */
export function xxh32(b: Uint8Array, start = 0, end = b.length, seed = 0): number {
  let p = start;
  let h: number;
  if (end - start >= 16) {
    let v1 = (seed + P1 + P2) | 0;
    let v2 = (seed + P2) | 0;
    let v3 = seed | 0;
    let v4 = (seed - P1) | 0;
    const limit = end - 16;
    do {
      v1 = round(v1, read32(b, p));
      v2 = round(v2, read32(b, p + 4));
      v3 = round(v3, read32(b, p + 8));
      v4 = round(v4, read32(b, p + 12));
      p += 16;
    } while (p <= limit);
    h = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) | 0;
  } else {
    h = (seed + P5) | 0;
  }
  h = (h + (end - start)) | 0;
  while (p + 4 <= end) {
    h = (h + Math.imul(read32(b, p), P3)) | 0;
    h = Math.imul(rotl(h, 17), P4);
    p += 4;
  }
  while (p < end) {
    h = (h + Math.imul(b[p], P5)) | 0;
    h = Math.imul(rotl(h, 11), P1);
    p++;
  }
  h ^= h >>> 15;
  h = Math.imul(h, P2);
  h ^= h >>> 13;
  h = Math.imul(h, P3);
  h ^= h >>> 16;
  return h >>> 0;
}
