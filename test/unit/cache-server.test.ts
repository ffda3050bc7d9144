/** A cache instance's server (cache-server.ts) refuses bad input with clear errors and changes nothing. */
import { afterEach, describe, expect, it } from 'vitest';
import { TcpRpcClient } from '../../src/net/tcp-rpc-client.js';
import { CacheServer } from '../../src/stoc/cache-server.js';
import { tempDirs } from '../helpers/temp.js';

const temp = tempDirs('nova-cache-server-');
let server: CacheServer | undefined;
let link: TcpRpcClient | undefined;
afterEach(async () => {
  link?.close();
  await server?.close();
  server = link = undefined;
});

const options = (dir: string | undefined) => ({ id: 1, dir, memoryBytes: 1 << 20, diskBytes: 4 << 20, host: '127.0.0.1', port: 0 });

describe('cache server', () => {
  it('answers malformed requests BAD_ARGUMENT, unknown ones UNKNOWN_METHOD, and stays up', async () => {
    server = await CacheServer.start(options(undefined));
    link = await TcpRpcClient.connect(server.address, { timeoutMs: 3_000, secret: null });
    const refused = async (op: string, args: unknown[], why: RegExp): Promise<void> => {
      await expect(link!.call(op, args)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(why) });
    };
    await refused('iqget', ['1', Buffer.from('k'), 0], /configuration id/);
    await refused('iqget', [1, 'k', 0], /key must be bytes/);
    await refused('iqget', [1, Buffer.alloc(0), 0], /not empty/);
    await refused('iqget', [1, Buffer.alloc(4097), 0], /exceeds the limit/);
    await refused('iqset', [1, Buffer.from('k'), 'v', 1, 0], /value must be bytes/);
    await refused('qareg', [1, Buffer.from('k'), -1], /fragment must be an integer/);
    await refused('dirtyFetch', [1, 0, 0, 1e9], /limit must be an integer from 0 to/);
    expect(await link.call('iqget', [1, Buffer.from('j'), 0])).toMatchObject({ token: expect.any(Number) }); // it knows configuration 1 now
    await refused('iqget', [1e12, Buffer.from('k'), 0], /not one the coordinator made/);
    await expect(link.call('nope', [])).rejects.toMatchObject({ code: 'UNKNOWN_METHOD' });
    expect(await link.call('iqget', [2, Buffer.from('k'), 0])).toMatchObject({ token: expect.any(Number) });
    expect(server.stats().configId).toBe(2);
  });

  it('refuses a second process on its directory and a log over 2 GiB', async () => {
    const dir = temp();
    server = await CacheServer.start(options(dir));
    await expect(CacheServer.start(options(dir))).rejects.toMatchObject({ code: 'BUSY' });
    await expect(CacheServer.start({ ...options(temp()), diskBytes: 2 ** 31 })).rejects.toThrow(/over 2147483647 bytes is not implemented yet/);
  });
});
