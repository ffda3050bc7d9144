/**
 * The cluster's configuration: ranges, routing, and its JSON form.
 */
import { describe, expect, it } from 'vitest';
import { TcpRpcClient } from '../../src/net/tcp-rpc-client.js';
import { configFromJson, configToJson, makeRanges, rangeOf, DEFAULT_SETTINGS, type ClusterConfig } from '../../src/cluster/config.js';
import { benchSplits } from '../../bench/ycsb/generators.js';
import { Coordinator } from '../../src/coordinator/coordinator.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-coord-');

describe('cluster configuration', () => {
  const config = (splits: string[], ltcs: number): ClusterConfig => ({
    id: 1, members: [], settings: DEFAULT_SETTINGS, ranges: makeRanges(splits.map((s) => Buffer.from(s)), ltcs),
  });

  it('routes every key to the range holding it', () => {
    const c = config(['g', 'p', 'pz'], 2);
    expect(c.ranges.map((r) => r.ltc)).toEqual([1, 2, 1, 2]);
    const at = (k: string) => rangeOf(c, Buffer.from(k)).id;
    expect([at(''), at('a'), at('g'), at('gz'), at('p'), at('pa'), at('pz'), at('zzz')]).toEqual([1, 1, 2, 2, 3, 3, 4, 4]);
    expect(() => makeRanges([Buffer.from('b'), Buffer.from('a')], 1)).toThrow(/ascending/);
  });

  it('cuts the bench key space evenly and survives its JSON form', () => {
    expect(benchSplits(4, 1000).map(String)).toEqual(['user000000000250', 'user000000000500', 'user000000000750']);
    const c = config(['user000000000250', 'user000000000500'], 1);
    const back = configFromJson(JSON.parse(JSON.stringify(configToJson(c))), 'x');
    expect(back).toEqual(c);
    expect(() => configFromJson({ id: 'x' }, 'config.json')).toThrow(/config.json: not a cluster configuration/);
  });

  it('the coordinator keeps its configuration across restarts and bumps the id on membership changes', async () => {
    const dir = tempDir();
    let c = await Coordinator.start({ dir, ltcs: 2, splits: [Buffer.from('m')] });
    const link = await TcpRpcClient.connect(c.address);
    const first = await link.call<ClusterConfig>('register', ['stoc', 1, 'addr-a', 111, '']);
    const again = await link.call<ClusterConfig>('register', ['stoc', 1, 'addr-a', 111, '']);
    expect(again.id).toBe(first.id); // nothing changed
    const moved = await link.call<ClusterConfig>('register', ['stoc', 1, 'addr-b', 112, '']);
    expect(moved.id).toBe(first.id + 1);
    await expect(link.call('register', ['nope', 1, 'a', 1])).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    await expect(link.call('heartbeat', ['ltc', 9, []])).rejects.toMatchObject({ code: 'STALE_CONFIG' });
    link.close();
    await c.close();
    c = await Coordinator.start({ dir });
    expect(c.current().id).toBe(moved.id);
    expect(c.current().ranges.map((r) => r.ltc)).toEqual([1, 2]);
    expect(c.current().members).toMatchObject([{ role: 'stoc', id: 1, address: 'addr-b' }]);
    await c.close();
  });
});

