/**
 * TCP frames: header, checksum, limits, and reading them back from any chunking.
 */
import { describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { FRAME_HEADER, FrameReader, encodeFrame, packFrame } from '../../src/net/frames.js';

describe('TCP frames', () => {
  it('cut a stream into payloads however it is chunked', () => {
    const payloads = [Buffer.from('a'), Buffer.alloc(0), Buffer.alloc(100_000, 7), Buffer.from('last')];
    const stream = Buffer.concat(payloads.map(encodeFrame));
    for (const chunk of [1, 3, 16, 17, 4096, stream.length]) {
      const r = new FrameReader('test');
      const out: Buffer[] = [];
      for (let i = 0; i < stream.length; i += chunk) out.push(...r.push(stream.subarray(i, i + chunk)));
      expect(out.map((b) => b.toString('hex'))).toEqual(payloads.map((b) => b.toString('hex')));
    }
  });

  it('packed in place stay intact while later frames are packed', () => {
    const packr = new Packr({ useRecords: false, moreTypes: false });
    const values = Array.from({ length: 3000 }, (_, i) => [i, Buffer.alloc(i % 700, i & 0xff)]);
    const frames = values.map((v) => packFrame(packr, v)); // many times the packer's buffer
    const r = new FrameReader('test');
    const back = r.push(Buffer.concat(frames)).map((p) => packr.unpack(p) as [number, Uint8Array]);
    expect(back.map(([i, b]) => [i, Buffer.from(b).toString('hex')])).toEqual(values.map(([i, b]) => [i, (b as Buffer).toString('hex')]));
  });

  it('reject a bad header, an oversize length and a flipped bit, naming the offset', () => {
    const good = encodeFrame(Buffer.from('hello'));
    const badMagic = Buffer.from(good);
    badMagic[0] ^= 1;
    expect(() => new FrameReader('conn').push(badMagic)).toThrow(/conn: bad frame header .* at stream offset 0/);
    const flipped = Buffer.from(good);
    flipped[FRAME_HEADER + 2] ^= 4;
    expect(() => new FrameReader('conn').push(Buffer.concat([good, flipped]))).toThrow(/checksum mismatch at stream offset 21/);
    const huge = Buffer.from(good);
    huge.writeUInt32LE(1 << 30, 8);
    expect(() => new FrameReader('conn', 1 << 20).push(huge)).toThrow(/exceeds the 1048576-byte limit/);
  });
});

