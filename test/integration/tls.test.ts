/**
 * A local cluster with TLS on the coordinator and the LTCs' client ports (src/net/tcp-tls.ts),
 * with real processes: clients that trust its CA are served, through the library and the CLI;
 * a client without TLS is not.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { NovaClient } from '../../src/client/nova-client.js';
import { down, fetchStatus, readClusterFile, up } from '../../src/control/cluster-control.js';
import { TcpRpcClient } from '../../src/net/tcp-rpc-client.js';
import { tcpTls, useTcpTls } from '../../src/net/tcp-tls.js';
import { BIN } from '../helpers/cluster.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-tls-');
const FIXTURES = join(fileURLToPath(new URL('.', import.meta.url)), '..', 'fixtures', 'tls');
let dir: string | undefined;
afterEach(async () => {
  if (dir) await down(dir).catch(() => undefined);
  dir = undefined;
  useTcpTls(undefined);
});

describe('TLS', () => {
  it('a cluster started with a certificate serves TLS clients that trust its CA, through NovaClient and the CLI, and no plain client', async () => {
    dir = tempDir();
    await up({ dir, host: '127.0.0.1', bin: BIN, coordinatorArgs: [], timeoutMs: 60_000,
      tls: { cert: join(FIXTURES, 'server.pem'), key: join(FIXTURES, 'server.key'), ca: join(FIXTURES, 'ca.pem') } });
    expect(JSON.parse(readFileSync(join(dir, 'tls.json'), 'utf8'))).toMatchObject({ ca: join(FIXTURES, 'ca.pem') });
    const c = await NovaClient.connect({ dir });
    await c.put(Buffer.from('k'), Buffer.from('over tls'));
    expect((await c.get(Buffer.from('k')))?.toString()).toBe('over tls');
    c.close();
    const cli = spawnSync(process.execPath, [BIN, 'get', 'k', '--dir', dir], { encoding: 'utf8', timeout: 60_000 });
    expect(cli.stderr).toBe('');
    expect(cli.stdout.trim()).toBe('over tls');
    // Without TLS, neither the coordinator nor an LTC answers.
    const { coordinator } = readClusterFile(dir)!;
    const ltc = (await fetchStatus(coordinator)).members.find((m) => m.role === 'ltc')!.address;
    const ca = tcpTls();
    useTcpTls(undefined);
    for (const address of [coordinator, ltc]) {
      const plain = await TcpRpcClient.connect(address, { timeoutMs: 2_000 }).then(async (l) => {
        try {
          return await l.call('config', [], 2_000);
        } finally {
          l.close();
        }
      }).catch((err: Error) => err);
      expect(plain).toBeInstanceOf(Error);
    }
    useTcpTls(ca);
    expect(readFileSync(join(dir, 'logs', 'coordinator.log'), 'utf8')).toMatch(/a TLS handshake failed/);
  }, 120_000);
});
