/**
 * Exactly-once writes through a cluster of real processes: the history (a write whose
 * log append reached one replica of three when its LTC was killed, retried after another
 * client's newer write), session expiry, and what a client's failed write says.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { TcpRpcClient } from '../../src/net/tcp-rpc-client.js';
import { NovaClient } from '../../src/client/nova-client.js';
import { fetchStatus, readClusterFile } from '../../src/control/cluster-control.js';
import { until } from '../helpers/until.js';
import { startCluster, type TestCluster } from '../helpers/cluster.js';

let cluster: TestCluster | undefined;
const clients: NovaClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await cluster?.destroy();
  cluster = undefined;
});

async function ltcAddress(c: TestCluster): Promise<string> {
  const status = await fetchStatus(readClusterFile(c.dir)!.coordinator);
  return status.members.find((m) => m.role === 'ltc')!.address;
}

describe('exactly-once writes in a cluster', () => {
  it('a put whose append reached one StoC when the LTC died is replayed once; its retry after a newer write is answered, not applied', async () => {
    cluster = await startCluster();
    const k = Buffer.from('the-key');
    const b = cluster.client;
    // The put below must go to a log on all three StoCs. A range that opened while a StoC was
    // still registering (a loaded machine) has its first log on fewer, where one StoC is a
    // majority: a flush starts a new log on the StoCs up now, which are all three.
    // On a loaded machine a StoC may be briefly shunned when that log is made, so flush until it has all three.
    await until(async () => {
      await b.flush();
      return ((await b.stats()) as Array<{ fewestLogReplicas?: number }>)[0].fewestLogReplicas === 3;
    }, 30_000);
    await b.put(k, Buffer.from('before'));
    // Client A speaks the wire itself, so its retry comes exactly when the test says.
    const session = [randomBytes(6).readUIntLE(0, 6), 42, 1, 1, 1];
    const a = await TcpRpcClient.connect(await ltcAddress(cluster), { timeoutMs: 60_000 });
    // Two of three StoCs stopped: the append of X reaches one replica and waits for a majority.
    cluster.pause('stoc', 2, true);
    cluster.pause('stoc', 3, true);
    const first = a.call('put', [b.configuration.id, k, Buffer.from('X'), ...session]).catch((err: Error) => err);
    await new Promise((r) => setTimeout(r, 500));
    await cluster.kill('ltc', 1);
    // Usually no answer (PEER_LOST). On a loaded machine the LTC may have dropped the paused StoCs'
    // replicas as lost first, and the one left acknowledged X (the log's design: every replica
    // left, when fewer are left). Either way X must come back exactly once.
    const answer = await first;
    if (answer !== null) expect(answer).toMatchObject({ code: 'PEER_LOST' });
    cluster.pause('stoc', 2, false);
    cluster.pause('stoc', 3, false);
    await cluster.up();
    expect((await b.get(k))?.toString()).toBe('X'); // replayed from the replica it reached
    await b.put(k, Buffer.from('Y'));
    expect((await b.get(k))?.toString()).toBe('Y');
    // A's retry: the same session and number. Applying it again would bring X back.
    const retry = await TcpRpcClient.connect(await ltcAddress(cluster), { timeoutMs: 10_000 });
    await expect(retry.call('put', [b.configuration.id, k, Buffer.from('X'), ...session])).resolves.toBeNull();
    expect((await b.get(k))?.toString()).toBe('Y');
    type Stats = { sessions: { duplicates: number; sessions: number } };
    const [stats] = (await b.stats()) as Stats[];
    expect(stats.sessions.duplicates).toBe(1);
    expect(stats.sessions.sessions).toBe(2);
    // A bad session is refused, naming its shape, and applies nothing.
    for (const bad of [[-1, 0, 1, 1, 1], [2 ** 53, 0, 1, 1, 1], [1, 2, 0, 0, 1], [1, 2, 3, 4, 1], [1, 2, 1, 1, 2], [1, 2, 1, 1], ['x']]) {
      await expect(retry.call('put', [b.configuration.id, k, Buffer.from('Z'), ...bad])).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringContaining('a write\'s session is') });
    }
    expect((await b.get(k))?.toString()).toBe('Y');
    a.close();
    retry.close();
  });

  it('a client idle past the cluster\'s session timeout is told so by the LTC and goes on in a new session', async () => {
    cluster = await startCluster({ args: ['--session-timeout-ms', '4000'], clientTimeoutMs: 1900 });
    const c = cluster.client;
    await c.put(Buffer.from('a'), Buffer.from('1'));
    const before = c.sessionInfo;
    type Stats = { sessions: { sessions: number; expired: number } };
    const stats = async (): Promise<Stats> => ((await c.stats()) as Stats[])[0];
    for (const until = Date.now() + 20_000; (await stats()).sessions.expired === 0 && Date.now() < until;) await new Promise((r) => setTimeout(r, 250));
    expect(await stats()).toMatchObject({ sessions: { sessions: 0, expired: 1 } });
    await c.put(Buffer.from('a'), Buffer.from('2'));
    expect(c.sessionInfo.started).toBe(2);
    expect(c.sessionInfo.id).not.toBe(before.id);
    expect((await c.get(Buffer.from('a')))?.toString()).toBe('2');
    // A client whose deadline is not well inside the timeout is refused: its retry could outlive the record.
    await expect(NovaClient.connect({ dir: cluster.dir, timeoutMs: 2000 })).rejects.toThrow(/must be under half the cluster's sessionTimeoutMs \(4000\)/);
  });

  it('a failed write says UNKNOWN_OUTCOME when it was sent and not answered (it may land later), FAILED when never sent or refused', async () => {
    cluster = await startCluster();
    const c = await NovaClient.connect({ dir: cluster.dir, timeoutMs: 1500 });
    clients.push(c);
    await c.put(Buffer.from('k'), Buffer.from('v0'));
    // The LTC stopped: the put is sent and never answered by its deadline.
    cluster.pause('ltc', 1, true);
    await expect(c.put(Buffer.from('k'), Buffer.from('v1'))).rejects.toMatchObject({ code: 'UNKNOWN_OUTCOME', reason: 'DEADLINE_EXCEEDED' });
    cluster.pause('ltc', 1, false);
    // It was in the LTC's socket: it is applied once the LTC runs again.
    const until = Date.now() + 10_000;
    while ((await c.get(Buffer.from('k')))?.toString() !== 'v1' && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    expect((await c.get(Buffer.from('k')))?.toString()).toBe('v1');
    // Never sent: a client closed first. Refused before its log record: an oversize key.
    // (A dead LTC's port is no deterministic "never sent": another process may take the port
    // and accept the connection, and then the client cannot know.)
    const closed = await NovaClient.connect({ dir: cluster.dir, timeoutMs: 1500 });
    closed.close();
    await expect(closed.put(Buffer.from('k'), Buffer.from('v2'))).rejects.toMatchObject({ code: 'FAILED', reason: 'CLOSED' });
    await expect(c.put(Buffer.alloc(5000), Buffer.from('v'))).rejects.toMatchObject({ code: 'FAILED', reason: 'BAD_ARGUMENT' });
    expect((await c.get(Buffer.from('k')))?.toString()).toBe('v1');
  });
});
