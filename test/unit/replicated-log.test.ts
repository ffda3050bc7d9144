/**
 * A disk log's replicas (ReplicatedLog) against fake StoC connections that answer late, out of
 * order, or fail: acknowledgements in call order, each once a majority of R holds the append
 * and everything before it; a failed replica dropped; a dead log refusing everything after.
 */
import { describe, expect, it } from 'vitest';
import { NovaError } from '../../src/common/errors.js';
import { readLog } from '../../src/log/log-format.js';
import { ReplicatedLog, SLOW_WRITE_MS, type LogAppender } from '../../src/logc/stoc-log-store.js';
import { rng } from '../helpers/rng.js';

/** A replica whose appends wait until the test answers them (in any order). */
class FakeReplica implements LogAppender {
  readonly calls: Array<{ bytes: Buffer; resolve: () => void; reject: (err: Error) => void; answered: boolean }> = [];
  readonly stored: Buffer[] = []; // bytes of the appends it answered with success, by index (holes undefined)
  alive = true;

  private end = 0;

  write(offset: number, bytes: Uint8Array): Promise<void> {
    expect(offset).toBe(this.end); // groups at consecutive offsets, in call order
    this.end += bytes.length;
    return new Promise((resolve, reject) => this.calls.push({ bytes: Buffer.from(bytes), resolve, reject, answered: false }));
  }

  succeed(i: number): void {
    const c = this.calls[i];
    c.answered = true;
    this.stored[i] = c.bytes;
    c.resolve();
  }

  fail(i: number): void {
    this.calls[i].answered = true;
    this.calls[i].reject(new NovaError('PEER_LOST', 'the StoC went away'));
  }

  /** Records in its appends stored contiguously from the first: what recovery would read. */
  records(): number {
    let n = 0;
    while (this.stored[n]) n++;
    return readLog(Buffer.concat(this.stored.slice(0, n)), 'replica').records.length;
  }
}

const pool = { failed: () => Promise.resolve(), isHealthy: () => true, placeableForLogs: () => [1, 2, 3] };
const flush = () => new Promise((resolve) => setImmediate(resolve));

function makeLog(n = 3, lines: string[] = []): { log: ReplicatedLog; replicas: FakeReplica[] } {
  const replicas = Array.from({ length: n }, () => new FakeReplica());
  const log = new ReplicatedLog(pool, 'r1-000001.log', new Map(replicas.map((r, i) => [i + 1, r])), 3, (l) => lines.push(l));
  return { log, replicas };
}

describe('ReplicatedLog', () => {
  it('acknowledges once two of three replicas hold an append and all before it, in call order', async () => {
    const { log, replicas: [a, b, c] } = makeLog();
    const acked: number[] = [];
    const appends = [0, 1, 2].map((i) => log.append([Buffer.from(`record ${i}`)], false).then(() => acked.push(i)));
    await flush();
    expect(a.calls).toHaveLength(3); // overlapping: all three sent at once
    a.succeed(1);
    b.succeed(1);
    await flush();
    expect(acked).toEqual([]); // append 1 is on two replicas, but append 0 is on none
    a.succeed(0);
    await flush();
    expect(acked).toEqual([]); // append 0 on one replica
    b.succeed(0);
    await flush();
    expect(acked).toEqual([0, 1]); // c, the slow one, is not waited for
    c.succeed(2);
    a.succeed(2);
    await flush();
    expect(acked).toEqual([0, 1]); // append 2 is on a, c, but c lacks 0 and 1
    b.succeed(2);
    await Promise.all(appends);
    expect(acked).toEqual([0, 1, 2]);
    await log.close(); // every append acknowledged: close does not wait for the slow replica
    let drained = false;
    const draining = log.drained().then(() => { drained = true; });
    await flush();
    expect(drained).toBe(false); // drained() does
    c.succeed(0);
    c.succeed(1);
    await draining;
    expect(readLog(Buffer.concat(c.stored), 'c').records.map(String)).toEqual(['record 0', 'record 1', 'record 2']);
  });

  it('drops a replica that fails, then needs every replica left; refuses everything once none is left', async () => {
    const lines: string[] = [];
    const { log, replicas: [a, b, c] } = makeLog(3, lines);
    const first = log.append([Buffer.from('one')], false);
    await flush();
    a.fail(0);
    b.succeed(0);
    await flush();
    expect(lines.join()).toMatch(/dropped replica\(s\) on StoC 1/);
    const second = log.append([Buffer.from('two')], false);
    await flush();
    expect(a.calls).toHaveLength(1); // a dropped replica is sent nothing more
    c.succeed(0);
    await first; // on b and c
    b.succeed(1);
    await flush();
    let secondDone = false;
    void second.then(() => { secondDone = true; });
    await flush();
    expect(secondDone).toBe(false); // two replicas left: both are needed
    c.fail(1);
    await second; // c dropped: b alone is every replica left
    const third = log.append([Buffer.from('three')], false);
    await flush();
    b.fail(2);
    await expect(third).rejects.toMatchObject({ code: 'UNAVAILABLE', message: expect.stringContaining('every replica failed') });
    await expect(log.append([Buffer.from('four')], false)).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    await log.close();
  });

  it('sends a synced group only once every earlier group was answered, so its fdatasync covers them', async () => {
    const { log, replicas: [a, b, c] } = makeLog();
    const first = log.append([Buffer.from('not synced')], false);
    const second = log.append([Buffer.from('synced')], true);
    await flush();
    expect(a.calls).toHaveLength(1); // the synced one waits
    a.succeed(0);
    b.succeed(0);
    await first; // acknowledged by two of three
    expect(a.calls).toHaveLength(1); // c has not answered the first yet
    c.succeed(0);
    await flush();
    expect([a.calls.length, b.calls.length, c.calls.length]).toEqual([2, 2, 2]);
    a.succeed(1);
    b.succeed(1);
    await second;
    c.succeed(1);
    await log.drained();
  });

  it('matches the model under random answers, delays and failures (seeded)', async () => {
    for (let seed = 1; seed <= 40; seed++) {
      const r = rng(seed);
      const { log, replicas } = makeLog();
      const dead = new Set<FakeReplica>();
      const acked: number[] = [];
      const refused: number[] = [];
      const pending: Array<Promise<unknown>> = [];
      let calls = 0;
      for (let step = 0; step < 200; step++) {
        if (r() < 0.3 && calls < 60) {
          const i = calls++;
          pending.push(log.append([Buffer.from(`record ${i}`)], false).then(() => {
            // At acknowledgement: a majority (or every live replica, if fewer) holds 0..i.
            const live = replicas.filter((x) => !dead.has(x));
            const holding = live.filter((x) => x.records() > i);
            expect(holding.length, `seed ${seed}, append ${i}`).toBeGreaterThanOrEqual(Math.min(2, live.length));
            acked.push(i);
          }, () => refused.push(i)));
        }
        // Answer a random outstanding call of a random replica.
        const x = replicas[Math.floor(r() * 3)];
        const open = x.calls.map((c, j) => (c.answered ? -1 : j)).filter((j) => j >= 0);
        if (open.length > 0) {
          const j = open[Math.floor(r() * open.length)];
          if (r() < 0.03) {
            x.fail(j);
            dead.add(x);
          } else {
            x.succeed(j);
          }
        }
        await flush();
      }
      // Answer everything left (successes), then every call has settled.
      for (const x of replicas) for (let j = 0; j < x.calls.length; j++) if (!x.calls[j].answered) x.succeed(j);
      await Promise.all(pending);
      await log.close();
      await log.drained();
      // Acknowledged in call order; refusals only once every replica failed, and then for good.
      expect(acked, `seed ${seed}`).toEqual([...acked].sort((p, q) => p - q));
      if (refused.length > 0) {
        expect(dead.size, `seed ${seed}`).toBe(3);
        expect(Math.min(...refused)).toBeGreaterThan(Math.max(-1, ...acked));
      } else {
        expect(acked).toHaveLength(calls);
      }
    }
  });

  it('is misplaced while a replica is on a StoC new logs avoid (failed, leaving), not written to or not', () => {
    const placeable = [1, 2, 3];
    const replicas = [1, 2, 3].map(() => new FakeReplica());
    const log = new ReplicatedLog({ ...pool, placeableForLogs: () => placeable }, 'r1-000001.log',
      new Map(replicas.map((r, i) => [i + 1, r])), 3, () => undefined);
    expect(log.misplaced).toBe(false);
    placeable.splice(1, 1); // StoC 2 shunned or leaving
    expect(log.misplaced).toBe(true);
    expect(log.degraded).toBe(false); // it has every replica it was made with
    placeable.splice(1, 0, 2);
    expect(log.misplaced).toBe(false);
    replicas[2].alive = false; // StoC 3's connection lost (a restart): its handle is gone
    expect(log.misplaced).toBe(true);
  });

  describe('a replica past its deadline', () => {
    /** One replica (one StoC) whose first `late` writes fail DEADLINE_EXCEEDED, then succeed; what it was sent. */
    function slowReplica(late: number): LogAppender & { writes: Array<{ offset: number; bytes: string; timeoutMs?: number }> } {
      const writes: Array<{ offset: number; bytes: string; timeoutMs?: number }> = [];
      return {
        writes,
        write: (offset, bytes, _sync, options) => {
          writes.push({ offset, bytes: Buffer.from(bytes).toString('hex'), timeoutMs: options?.timeoutMs });
          return writes.length <= late ? Promise.reject(new NovaError('DEADLINE_EXCEEDED', 'rpc stoc.sync: no response by its deadline')) : Promise.resolve();
        },
      };
    }

    it('is written again once, the same bytes at the same offset with a longer deadline, while its StoC answers a probe', async () => {
      const r = slowReplica(1);
      const probed: number[] = [];
      const lines: string[] = [];
      const log = new ReplicatedLog({ ...pool, failed: async (id) => { probed.push(id); } }, 'r1-000001.manifest', new Map([[1, r]]), 1, (l) => lines.push(l));
      await log.append([Buffer.from('edit')], true);
      expect(r.writes).toHaveLength(2);
      expect(r.writes[1]).toEqual({ ...r.writes[0], timeoutMs: SLOW_WRITE_MS });
      expect(r.writes[0].timeoutMs).toBeUndefined(); // the connection's own deadline first
      expect(probed).toEqual([1]);
      expect(log.replicaCount).toBe(1);
      expect(lines).toEqual([expect.stringMatching(/^log r1-000001.manifest: StoC 1 answers but did not write in time .*; writing again$/)]);
      await log.append([Buffer.from('next')], true); // the log goes on
      expect(r.writes[2].offset).toBe(r.writes[0].offset + r.writes[0].bytes.length / 2);
    });

    it('is dropped once its StoC is silent too (the probe shunned it), or when the second write is late too', async () => {
      let healthy = false;
      const shunning = { ...pool, isHealthy: () => healthy };
      const silent = slowReplica(1);
      const one = new ReplicatedLog(shunning, 'r1-000001.log', new Map([[1, silent]]), 1, () => undefined);
      await expect(one.append([Buffer.from('x')], false)).rejects.toThrow(/every replica failed; last error: rpc stoc.sync: no response by its deadline/);
      expect(silent.writes).toHaveLength(1);
      healthy = true;
      const stuck = slowReplica(Infinity);
      const two = new ReplicatedLog(shunning, 'r1-000002.log', new Map([[1, stuck]]), 1, () => undefined);
      await expect(two.append([Buffer.from('x')], false)).rejects.toThrow(/every replica failed/);
      expect(stuck.writes).toHaveLength(2);
    });

    it('is not written again if it was dropped while its StoC was probed (a later append failed on it)', async () => {
      let release!: () => void;
      const probe = new Promise<void>((resolve) => { release = resolve; });
      const calls: Array<{ reject: (err: Error) => void }> = [];
      const replica: LogAppender = { write: () => new Promise((_, reject) => calls.push({ reject })) };
      const log = new ReplicatedLog({ ...pool, failed: () => probe }, 'r1-000001.log', new Map([[1, replica]]), 1, () => undefined);
      const first = log.append([Buffer.from('a')], false);
      const second = log.append([Buffer.from('b')], false);
      await flush();
      expect(calls).toHaveLength(2);
      calls[0].reject(new NovaError('DEADLINE_EXCEEDED', 'no response by its deadline'));
      await flush();
      calls[1].reject(new NovaError('PEER_LOST', 'the StoC went away'));
      release();
      await expect(first).rejects.toThrow(/every replica failed/);
      await expect(second).rejects.toThrow(/every replica failed/);
      expect(calls).toHaveLength(2);
    });

    it('is dropped as before while other replicas are left (the log is then renewed: degraded)', async () => {
      const [a, b] = [new FakeReplica(), new FakeReplica()];
      const slow = slowReplica(Infinity);
      const lines: string[] = [];
      const log = new ReplicatedLog(pool, 'r1-000001.log', new Map<number, LogAppender>([[1, a], [2, b], [3, slow]]), 3, (l) => lines.push(l));
      const acked = log.append([Buffer.from('x')], false);
      await flush();
      expect(log.replicaCount).toBe(2);
      expect(slow.writes).toHaveLength(1);
      expect(lines).toEqual([expect.stringMatching(/dropped replica\(s\) on StoC 3 \(rpc stoc.sync: no response by its deadline\); 2 left/)]);
      a.succeed(0);
      b.succeed(0);
      await acked;
    });
  });
});
