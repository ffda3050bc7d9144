import { describe, expect, it } from 'vitest';
import { RemoteKey } from '../../src/transport/remote-key.js';
import { openWorkerAddress, sealWorkerAddress } from '../../src/transport/worker-address.js';

const key = new RemoteKey(0x7f00_1234_5000n, 1 << 20, Buffer.from('packed-rkey-bytes'));

describe('RemoteKey format', () => {
  it('round-trips', () => {
    const parsed = RemoteKey.parse(key.serialize());
    expect(parsed.address).toBe(key.address);
    expect(parsed.length).toBe(key.length);
    expect(parsed.packed.equals(key.packed)).toBe(true);
  });

  it('rejects every single-bit flip, naming an offset', () => {
    const bytes = key.serialize();
    for (let i = 0; i < bytes.length; i++) {
      for (const bit of [0x01, 0x80]) {
        const bad = Buffer.from(bytes);
        bad[i] ^= bit;
        expect(() => RemoteKey.parse(bad)).toThrow(/remote key: .* at offset \d+/);
      }
    }
  });

  it('rejects truncation, extension, and other versions', () => {
    const bytes = key.serialize();
    for (const n of [0, 10, 27, bytes.length - 1]) {
      expect(() => RemoteKey.parse(bytes.subarray(0, n))).toThrow(expect.objectContaining({ code: 'BAD_REMOTE_KEY' }));
    }
    expect(() => RemoteKey.parse(Buffer.concat([bytes, Buffer.alloc(1)]))).toThrow(/offset 6/);
    const v2 = Buffer.from(bytes);
    v2[4] = 2;
    expect(() => RemoteKey.parse(v2)).toThrow(/unsupported version 2 at offset 4/);
  });

  it('slices within bounds only', () => {
    const s = key.slice(4096, 100);
    expect(s.address).toBe(key.address + 4096n);
    expect(s.length).toBe(100);
    expect(s.slice(0, 100).length).toBe(100);
    expect(() => s.slice(1, 100)).toThrow(expect.objectContaining({ code: 'OUT_OF_BOUNDS' }));
    expect(() => key.slice(-1, 1)).toThrow(expect.objectContaining({ code: 'OUT_OF_BOUNDS' }));
    expect(() => key.slice(0, (1 << 20) + 1)).toThrow(expect.objectContaining({ code: 'OUT_OF_BOUNDS' }));
  });
});

describe('worker address seal', () => {
  const ucx = Buffer.from('some ucx worker address bytes');
  it('round-trips', () => {
    expect(openWorkerAddress(sealWorkerAddress(ucx)).equals(ucx)).toBe(true);
  });
  it('rejects garbage, flips and truncation with BAD_ARGUMENT', () => {
    const sealed = sealWorkerAddress(ucx);
    expect(() => openWorkerAddress(Buffer.from('not an address'))).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
    for (let i = 0; i < sealed.length; i++) {
      const bad = Buffer.from(sealed);
      bad[i] ^= 0x10;
      expect(() => openWorkerAddress(bad)).toThrow(/worker address: .* at offset \d+/);
    }
    expect(() => openWorkerAddress(sealed.subarray(0, sealed.length - 1))).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
  });
});
