/**
 * SSTables on StoCs: fragments placed, written, read and deleted (StocBlockStore).
 * StocServers and LTC-side clients on separate fabrics in this process, over shared memory.
 */
import { openSync, readFileSync, readSync, writeSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { NovaError } from '../../src/common/errors.js';
import { StocBlockStore } from '../../src/ltc/stoc-block-store.js';
import { NoRoom, type RepairResult } from '../../src/ltc/engine-env.js';
import { until } from '../helpers/until.js';
import { TableReader } from '../../src/sstable/table-reader.js';
import { Method, tableFileName } from '../../src/stoc/stoc-protocol.js';
import { table } from '../fixtures/tables.js';
import { stocHarness } from '../helpers/stocs.js';

const { servers, startServer, makePool, tempDir, config } = stocHarness('nova-stoc-tables-');

/** The new places a repair made (it made some). */
function placed(r: RepairResult): Exclude<RepairResult, 'rewrite' | undefined> {
  if (r === undefined || r === 'rewrite') throw new Error(`the repair did not place copies: ${String(r)}`);
  return r;
}

/** Flips one byte of `name` in directory `dir`, `at` bytes in. */
function flip(dir: string, name: string, at: number): void {
  const fd = openSync(join(dir, name), 'r+');
  const b = Buffer.alloc(1);
  readSync(fd, b, 0, 1, at);
  b[0] ^= 0x5a;
  writeSync(fd, b, 0, 1, at);
  closeSync(fd);
}

describe('tables on StoCs', () => {
  it('a table whose StoC is lost while it is written is placed again on StoCs that are up', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3)];
    const pool = makePool(stocs);
    const store = new StocBlockStore(pool, 7, { scatter: 1, tableReplicas: 1, placement: 'round-robin' });
    await servers.shift()!.close(); // StoC 1, which round-robin picks first; the pool does not know yet
    const bytes = table(2000, 1, 5);
    const fragments = await store.writeTable(5, bytes);
    expect(fragments.map((f) => f.stoc)).not.toContain(1);
    expect(fragments).toHaveLength(2); // data, and metadata on a StoC of its own
    expect((await store.readTable(5, fragments)).equals(bytes)).toBe(true);
  });

  it('with two copies, reads go to the other copy when a StoC is down or a copy fails its checksum', async () => {
    const dirs = [tempDir(), tempDir(), tempDir()];
    const stocs = [await startServer(1, {}, dirs[0]), await startServer(2, {}, dirs[1]), await startServer(3, {}, dirs[2])];
    const pool = makePool(stocs);
    const store = new StocBlockStore(pool, 7, { scatter: 1, tableReplicas: 2, placement: 'round-robin' });
    const bytes = table(2000, 1, 5);
    const fragments = await store.writeTable(5, bytes);
    // Three StoCs hold two copies of one piece (data and metadata together): a pair with the metadata apart needs four.
    expect(fragments.map((f) => [f.stoc, f.offset, f.size])).toEqual([[1, 0, bytes.length], [2, 0, bytes.length]]);
    expect(fragments[0].crc).toBe(fragments[1].crc);
    const name = tableFileName(7, 5);
    const reader = new TableReader(bytes, 't');
    const block = { offset: 0, size: reader.dataBlockEnds()[0] };
    const readBlock = (): Promise<Buffer> => store.readRange(5, fragments, block.offset, block.size, (b) => {
      if (!b.equals(bytes.subarray(block.offset, block.offset + block.size))) throw Object.assign(new Error('bad block'), { code: 'CORRUPTION' });
    });

    // A damaged copy: the whole-table read and the checked block read both get the good one.
    flip(dirs[0], name, 100);
    expect((await store.readTable(5, fragments)).equals(bytes)).toBe(true);
    expect((await readBlock()).equals(bytes.subarray(0, block.size))).toBe(true);
    expect(store.counters.otherCopy).toBeGreaterThan(0);

    // Its StoC gone too: still read, from StoC 2.
    await servers.shift()!.close();
    expect((await store.readTable(5, fragments)).equals(bytes)).toBe(true);
    expect((await readBlock()).equals(bytes.subarray(0, block.size))).toBe(true);

    // Both copies damaged: CORRUPTION naming each, never wrong bytes.
    flip(dirs[1], name, 100);
    await expect(store.readTable(5, fragments)).rejects.toMatchObject({ code: 'UNAVAILABLE' }); // StoC 1 is only away
    const alone = [fragments[1]];
    await expect(store.readTable(5, alone)).rejects.toThrow(/copy on StoC 2 .* fails its checksum/);
  });

  it('copies are kept on distinct StoCs, the metadata apart once there are StoCs for it, fewer copies only when too few are up', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3), await startServer(4)];
    const pool = makePool(stocs);
    const store = new StocBlockStore(pool, 7, { scatter: 1, tableReplicas: 2, placement: 'round-robin' });
    const bytes = table(500, 1, 5);
    const four = await store.writeTable(5, bytes);
    expect(new Set(four.map((f) => f.stoc)).size).toBe(4);
    expect(four.filter((f) => f.offset === 0)).toHaveLength(2); // two copies of the data, two of the metadata
    const three = new StocBlockStore(pool, 7, { scatter: 1, tableReplicas: 3, placement: 'round-robin' });
    expect(new Set((await three.writeTable(6, bytes)).map((f) => f.stoc)).size).toBe(3);
    const five = new StocBlockStore(pool, 7, { scatter: 1, tableReplicas: 5, placement: 'round-robin' });
    const f5 = await five.writeTable(7, bytes);
    expect(f5.map((f) => f.offset)).toEqual([0, 0, 0, 0]); // four StoCs: four copies of one piece
    expect((await five.readTable(7, f5)).equals(bytes)).toBe(true);
  });

  it('the scrub finds a damaged copy and repair writes it again in place; a copy on a StoC that left is made again on another', async () => {
    const dirs = [tempDir(), tempDir(), tempDir(), tempDir()];
    const stocs = await Promise.all(dirs.map((d, i) => startServer(i + 1, {}, d)));
    const pool = makePool(stocs.slice(0, 3));
    const store = new StocBlockStore(pool, 7, { scatter: 1, tableReplicas: 2, placement: 'round-robin' });
    const bytes = table(2000, 1, 5);
    const fragments = await store.writeTable(5, bytes);
    const name = tableFileName(7, 5);
    const [a, b] = fragments.map((f) => f.stoc);
    expect(store.needsRepair(5, fragments)).toBe(false);
    flip(dirs[a - 1], name, 500);
    expect(await store.scrubTable(5, fragments)).toBe(2 * bytes.length);
    expect(store.needsRepair(5, fragments)).toBe(true);
    expect(store.counters.damaged).toBe(1);
    let reads = 0;
    const fixed = placed(await store.repairTable(5, fragments, async () => { reads++; return store.readTable(5, fragments); }));
    expect(reads).toBe(1);
    expect(fixed).toMatchObject({ written: 1 });
    expect(fixed.fragments).toEqual(fragments); // written again where it was
    expect(readFileSync(join(dirs[a - 1], name)).equals(bytes)).toBe(true);
    expect(store.needsRepair(5, fragments)).toBe(false);

    // StoC b leaves the cluster (removed as dead): its copy is dropped, and a new one made on another StoC.
    pool.update(config([...stocs].filter((s) => s.id !== b)));
    expect(store.needsRepair(5, fragments)).toBe(true);
    const moved = placed(await store.repairTable(5, fragments, () => store.readTable(5, fragments)));
    const left = [1, 2, 3, 4].filter((id) => id !== a && id !== b);
    expect(moved.fragments.map((f) => f.stoc).sort()).toEqual([a, Math.min(...left)].sort());
    expect(store.needsRepair(5, moved.fragments)).toBe(false);
    for (const f of moved.fragments) expect(readFileSync(join(dirs[f.stoc - 1], name)).equals(bytes)).toBe(true);
    // Nothing to do: nothing read.
    let again = 0;
    expect(await store.repairTable(5, moved.fragments, async () => { again++; return bytes; })).toBeUndefined();
    expect(again).toBe(0);
  });

  it('copies leaving a StoC move under the table\'s own number, or the table is to be stored anew when they cannot', async () => {
    const stocs = [await startServer(1), await startServer(2)];
    const pool = makePool(stocs);
    const one = new StocBlockStore(pool, 7, { scatter: 1, tableReplicas: 1, placement: 'round-robin' });
    const bytes = table(500, 1, 5);
    const fragments = await one.writeTable(5, bytes);
    expect(fragments.map((f) => f.stoc)).toEqual([1, 2]); // data on 1, metadata on 2
    // StoC 1 leaves: its piece would go to a StoC that holds none of the table — there is none: the table must be stored anew.
    let read = 0;
    expect(await one.repairTable(5, fragments, async () => { read++; return bytes; }, new Set([1]))).toBe('rewrite');
    expect(read).toBe(0);
    const third = await startServer(3);
    const pool3 = makePool([...stocs, third]);
    const three = new StocBlockStore(pool3, 7, { scatter: 1, tableReplicas: 1, placement: 'round-robin' });
    const moved = placed(await three.repairTable(5, fragments, () => three.readTable(5, fragments), new Set([1])));
    expect(moved.fragments.map((f) => f.stoc).sort()).toEqual([2, 3]);
    expect((await three.readTable(5, moved.fragments)).equals(bytes)).toBe(true);
  });

  it('an empty data piece on a leaving StoC is dropped, not moved', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3), await startServer(4)];
    const pool = makePool(stocs);
    const store = new StocBlockStore(pool, 7, { scatter: 3, tableReplicas: 1, placement: 'round-robin' });
    const small = table(3, 1, 5); // one block: the second and third data pieces are empty
    const fragments = await store.writeTable(5, small);
    const empty = fragments.find((f) => f.size === 0)!;
    const moved = placed(await store.repairTable(5, fragments, () => store.readTable(5, fragments), new Set([empty.stoc])));
    expect(moved.fragments.map((f) => f.stoc)).not.toContain(empty.stoc);
    expect((await store.readTable(5, moved.fragments)).equals(small)).toBe(true);
  });

  it('a StoC too busy to tell its load in time is still written to, and the tables already going to it are not failed', async () => {
    const stocs = [await startServer(1)];
    const pool = makePool(stocs);
    const store = new StocBlockStore(pool, 7, { scatter: 1, tableReplicas: 1, placement: 'power-of-d' });
    const client = await pool.get(1);
    const load = vi.spyOn(client, 'load').mockRejectedValue(Object.assign(new Error('load: no answer by the deadline'), { code: 'DEADLINE_EXCEEDED' }));
    try {
      const bytes = table(2000, 1, 5);
      const [a, b] = await Promise.all([store.writeTable(5, bytes), store.writeTable(6, bytes, true)]);
      expect(load).toHaveBeenCalled();
      expect(pool.isHealthy(1)).toBe(true); // not shunned: a late load is a busy StoC, not a lost one
      expect(await pool.get(1)).toBe(client); // nor its connection closed
      expect((await store.readTable(5, a)).equals(bytes)).toBe(true);
      expect((await store.readTable(6, b)).equals(bytes)).toBe(true);
    } finally {
      load.mockRestore();
    }
  });

  it('a load probe that finds the StoC unreachable shuns it, as any request would', async () => {
    const pool = makePool([await startServer(1)]);
    const client = await pool.get(1);
    const load = vi.spyOn(client, 'load').mockRejectedValue(Object.assign(new Error('StoC 1: connection lost'), { code: 'PEER_LOST' }));
    try {
      await expect(pool.probeLoad(1)).rejects.toMatchObject({ code: 'PEER_LOST' });
      expect(pool.isHealthy(1)).toBe(false);
    } finally {
      load.mockRestore();
    }
  });

  it('a request past its deadline shuns its StoC only if the StoC does not answer a load probe either', async () => {
    const pool = makePool([await startServer(1)]);
    const client = await pool.get(1);
    const late = Object.assign(new Error('rpc stoc.sync: no response by its deadline'), { code: 'DEADLINE_EXCEEDED' });
    await pool.failed(1, late);
    expect(pool.isHealthy(1)).toBe(true); // busy on its disk, not gone
    expect(await pool.get(1)).toBe(client); // nor its connection closed
    await pool.failed(1, Object.assign(new Error('bad name'), { code: 'BAD_ARGUMENT' }));
    expect(pool.isHealthy(1)).toBe(true);
    const load = vi.spyOn(client, 'load').mockRejectedValue(Object.assign(new Error('load: no answer by the deadline'), { code: 'DEADLINE_EXCEEDED' }));
    try {
      await pool.failed(1, late);
      expect(load).toHaveBeenCalled();
      expect(pool.isHealthy(1)).toBe(false); // stopped, or as good as
    } finally {
      load.mockRestore();
    }
  });

  it('a table whose sync waits past the connection\'s deadline on a StoC that answers is stored there: the StoC is not shunned', async () => {
    const pool = makePool([await startServer(1)]);
    const store = new StocBlockStore(pool, 7, { scatter: 1, tableReplicas: 1, placement: 'round-robin' });
    const client = await pool.get(1);
    const call = client.call.bind(client);
    const sync = vi.spyOn(client, 'call').mockImplementation(async (op, method, args) => {
      if (method === Method.sync) await new Promise((r) => setTimeout(r, 6_000)); // a disk behind: past the connection's 5 s
      return call(op, method, args);
    });
    try {
      const bytes = table(2000, 1, 5);
      const fragments = await store.writeTable(5, bytes);
      expect(sync).toHaveBeenCalledWith(expect.anything(), Method.sync, expect.anything());
      expect(pool.isHealthy(1)).toBe(true);
      expect(await pool.get(1)).toBe(client);
      expect((await store.readTable(5, fragments)).equals(bytes)).toBe(true);
    } finally {
      sync.mockRestore();
    }
  }, 30_000);

  it('a table whose StoC stops answering while the table\'s sync waits is placed again once a probe finds it silent', async () => {
    const pool = makePool([await startServer(1), await startServer(2)]);
    const store = new StocBlockStore(pool, 7, { scatter: 1, tableReplicas: 1, placement: 'round-robin' });
    const client = await pool.get(1);
    const call = client.call.bind(client);
    // StoC 1 stopped: its sync is answered only by the connection closing; its load never.
    const sync = vi.spyOn(client, 'call').mockImplementation((op, method, args) => method !== Method.sync ? call(op, method, args)
      : new Promise((_, reject) => client.onLost((code) => reject(new NovaError(code, 'rpc stoc.sync: endpoint closed')))));
    const load = vi.spyOn(client, 'load').mockRejectedValue(Object.assign(new Error('load: no answer by the deadline'), { code: 'DEADLINE_EXCEEDED' }));
    try {
      const started = Date.now();
      const bytes = table(2000, 1, 5);
      const fragments = await store.writeTable(5, bytes);
      expect(Date.now() - started).toBeLessThan(20_000); // a probe's interval, not the write's minute
      expect(load).toHaveBeenCalled();
      expect(pool.isHealthy(1)).toBe(false);
      expect(fragments.map((f) => f.stoc)).toEqual([2]);
      expect((await store.readTable(5, fragments)).equals(bytes)).toBe(true);
    } finally {
      sync.mockRestore();
      load.mockRestore();
    }
  }, 30_000);

  it('a table with no StoC answering waits as for room (NoRoom), not failing its range, and is stored once one answers', async () => {
    const stocs = [await startServer(1)];
    const pool = makePool(stocs);
    const store = new StocBlockStore(pool, 7, { scatter: 1, tableReplicas: 1, placement: 'round-robin' });
    pool.shun(1); // it failed a moment ago
    const bytes = table(500, 1, 5);
    const refused = await store.writeTable(5, bytes).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(NoRoom);
    expect(refused).toMatchObject({ code: 'UNAVAILABLE', message: expect.stringContaining('it needs 1 and 0 answer now') });
    await until(() => pool.isHealthy(1), 5_000);
    expect((await store.readTable(5, await store.writeTable(5, bytes))).equals(bytes)).toBe(true);
  });
});
