import { describe, expect, it } from 'vitest';
import { ConnectionCache } from '../../src/common/connection-cache.js';

class Conn {
  closed = 0;
  lost: (() => void) | undefined;
  constructor(readonly key: string, readonly n: number) {}
  close(): void {
    this.closed++;
  }
}

describe('ConnectionCache', () => {
  it('shares a connection by key, and makes a new one after it is lost or failed to connect', async () => {
    let made = 0;
    let refuse = true;
    const cache = new ConnectionCache<string, Conn>(
      (key) => (key === 'refused' && refuse ? Promise.reject(new Error('refused')) : Promise.resolve(new Conn(key, ++made))),
      (c, lost) => { c.lost = lost; });
    const a = await cache.get('a');
    expect(await cache.get('a')).toBe(a);
    expect((await cache.get('b')).key).toBe('b');
    a.lost!();
    const a2 = await cache.get('a');
    expect(a2).not.toBe(a);
    a.lost!(); // a late loss of the old one does not drop its successor
    expect(await cache.get('a')).toBe(a2);
    await expect(cache.get('refused')).rejects.toThrow('refused');
    refuse = false;
    await Promise.resolve();
    expect((await cache.get('refused')).key).toBe('refused');
  });

  it('forget closes one connection, closeAll every one', async () => {
    const cache = new ConnectionCache<string, Conn>(async (key) => new Conn(key, 0), () => undefined);
    const c1 = await cache.get('1');
    const c2 = await cache.get('2');
    cache.forget('1');
    await Promise.resolve();
    expect([c1.closed, c2.closed, cache.has('1'), cache.has('2')]).toEqual([1, 0, false, true]);
    await cache.closeAll();
    expect([c2.closed, cache.has('2')]).toEqual([1, false]);
  });
});
