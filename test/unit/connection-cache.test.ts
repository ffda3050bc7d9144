import { describe, expect, it } from 'vitest';
import { ConnectionCache } from '../../src/common/connection-cache.js';

class Conn {
  closed = 0;
  lost: (() => void) | undefined;
  constructor(readonly n: number) {}
  close(): void {
    this.closed++;
  }
}

describe('ConnectionCache', () => {
  it('shares a connection by key, and makes a new one after it is lost or failed to connect', async () => {
    const cache = new ConnectionCache<string, Conn>((c, lost) => { c.lost = lost; });
    let made = 0;
    const connect = (): Promise<Conn> => Promise.resolve(new Conn(++made));
    const a = await cache.get('a', connect);
    expect(await cache.get('a', connect)).toBe(a);
    expect((await cache.get('b', connect)).n).toBe(2);
    a.lost!();
    const a2 = await cache.get('a', connect);
    expect(a2).not.toBe(a);
    a.lost!(); // a late loss of the old one does not drop its successor
    expect(await cache.get('a', connect)).toBe(a2);
    await expect(cache.get('c', () => Promise.reject(new Error('refused')))).rejects.toThrow('refused');
    await Promise.resolve();
    expect((await cache.get('c', connect)).n).toBe(4);
  });

  it('forget closes one connection, closeAll every one', async () => {
    const cache = new ConnectionCache<number, Conn>(() => undefined);
    const c1 = await cache.get(1, async () => new Conn(1));
    const c2 = await cache.get(2, async () => new Conn(2));
    cache.forget(1);
    await Promise.resolve();
    expect([c1.closed, c2.closed, cache.has(1), cache.has(2)]).toEqual([1, 0, false, true]);
    await cache.closeAll();
    expect([c2.closed, cache.has(2)]).toEqual([1, false]);
  });
});
