import { describe, expect, it } from 'vitest';
import { checksum32 } from '../../src/common/checksum.js';
import { ByteBuilder, readU32, readU64, readVarint } from '../../src/common/coding.js';
import { xxh32 } from '../../src/common/xxh32.js';
import xxhash from 'xxhash-addon';

describe('checksum32 (native XXH32)', () => {
  const reference = (b: Uint8Array): number => xxhash.XXHash32.hash(Buffer.from(b.buffer, b.byteOffset, b.byteLength)).readUInt32BE(0);
  it('equals the xxHash package for every length up to 300, at offsets, and for long inputs', () => {
    for (let n = 0; n <= 300; n++) {
      const b = Buffer.alloc(n + 5);
      for (let i = 0; i < b.length; i++) b[i] = (i * 131 + n * 7) & 0xff;
      expect(checksum32(b.subarray(0, n))).toBe(reference(b.subarray(0, n)));
      expect(checksum32(b.subarray(5, n + 5))).toBe(reference(b.subarray(5, n + 5)));
      expect(checksum32(new Uint8Array(b.buffer, b.byteOffset + 1, n))).toBe(reference(b.subarray(1, n + 1)));
    }
    let seed = 12345;
    for (const n of [4096, 65_537, 1 << 20]) {
      const b = Buffer.alloc(n);
      for (let i = 0; i < n; i++) b[i] = (seed = (Math.imul(seed, 1103515245) + 12345) | 0) >>> 24;
      expect(checksum32(b)).toBe(reference(b));
    }
    expect(checksum32(Buffer.from('abc'))).toBe(0x32d153ff); // the reference value
  });

  it('refuses what is not a Uint8Array with a TypeError', () => {
    for (const bad of ['abc', 42, undefined, new Uint16Array(4), new DataView(new ArrayBuffer(4))]) {
      expect(() => checksum32(bad as unknown as Uint8Array)).toThrow(TypeError);
    }
  });
});

describe('xxh32 in JS', () => {
  it('equals the native XXH32 for every length up to 300 and at offsets', () => {
    for (let n = 0; n <= 300; n++) {
      const b = Buffer.alloc(n + 3);
      for (let i = 0; i < b.length; i++) b[i] = (i * 131 + n * 7) & 0xff;
      expect(xxh32(b, 0, n)).toBe(checksum32(b.subarray(0, n)));
      expect(xxh32(b, 3, n + 3)).toBe(checksum32(b.subarray(3, n + 3)));
    }
    expect(xxh32(Buffer.from('abc'))).toBe(0x32d153ff); // the reference value
  });
});

describe('coding', () => {
  it('round-trips varints, u32 and u64 at their edges', () => {
    const values = [0, 1, 127, 128, 255, 16383, 16384, 2 ** 31 - 1, 2 ** 32 - 1, 2 ** 32, 2 ** 53 - 1];
    const b = new ByteBuilder(1);
    for (const v of values) b.varint(v);
    for (const v of values) b.u64(v);
    for (const v of values.filter((x) => x < 2 ** 32)) b.u32(v);
    const bytes = b.finish();
    const cur = { at: 0 };
    for (const v of values) expect(readVarint(bytes, cur, bytes.length)).toBe(v);
    for (const v of values) { expect(readU64(bytes, cur.at)).toBe(v); cur.at += 8; }
    for (const v of values.filter((x) => x < 2 ** 32)) { expect(readU32(bytes, cur.at)).toBe(v); cur.at += 4; }
    expect(cur.at).toBe(bytes.length);
  });

  it('refuses truncated and over-long varints', () => {
    expect(() => readVarint(Buffer.from([0x80, 0x80]), { at: 0 }, 2)).toThrow(/runs past/);
    expect(() => readVarint(Buffer.alloc(9, 0xff), { at: 0 }, 9)).toThrow(/too long/);
    const b = Buffer.alloc(8, 0xff);
    expect(() => readU64(b, 0)).toThrow(expect.objectContaining({ code: 'CORRUPTION' }));
  });
});
