/**
 * Offloaded compaction (src/stoc/compaction-executor.ts): three StoCs in this process, input
 * tables scattered over them, a job sent by an LTC-like client. The outputs must be the very
 * bytes the engine's own merge produces, placed and numbered as asked; failures leave no
 * output behind; bad requests get BAD_ARGUMENT and the StoC goes on serving.
 */
import { describe, expect, it } from 'vitest';
import { mergeTables } from '../../src/compaction/merge.js';
import { cutTable } from '../../src/compaction/fragments.js';
import { StocCompactor } from '../../src/ltc/stoc-compactor.js';
import type { TableMeta } from '../../src/log/version-edit.js';
import type { CompactArgs } from '../../src/stoc/compaction-executor.js';
import { StocClient } from '../../src/stoc/stoc-client.js';
import { Method, tableFileName } from '../../src/stoc/stoc-protocol.js';
import type { StocServer } from '../../src/stoc/stoc-server.js';
import { Fabric } from '../../src/transport/fabric.js';
import { Rpc } from '../../src/transport/rpc.js';
import { table } from '../fixtures/tables.js';
import { stocHarness } from '../helpers/stocs.js';

const MiB = 1024 * 1024;
const RANGE = 3;

const h = stocHarness('nova-stoc-compact-');

async function stocs(n: number): Promise<StocServer[]> {
  for (let i = 1; i <= n; i++) await h.startServer(i, { bufferBytes: 16 * MiB, onLog: () => undefined });
  return h.servers;
}

const client = (s: StocServer): Promise<StocClient> => h.connect(s);

/** Stores `bytes` as table `file` cut over `on` (StoC ids), as the LTC's StocBlockStore does. */
async function place(clients: Map<number, StocClient>, file: number, bytes: Buffer, on: number[]): Promise<CompactArgs['inputs'][number]> {
  const size = Math.ceil(bytes.length / on.length);
  const fragments = on.map((stoc, i) => ({ stoc, offset: i * size, size: Math.min(size, bytes.length - i * size) }));
  for (const f of fragments) await clients.get(f.stoc)!.write(tableFileName(RANGE, file), 0, bytes.subarray(f.offset, f.offset + f.size), true);
  return { file, fragments };
}

async function setup(): Promise<{ s: StocServer[]; clients: Map<number, StocClient>; inputs: Buffer[]; args: CompactArgs }> {
  const s = await stocs(3);
  const clients = new Map<number, StocClient>();
  for (const x of s) clients.set(x.id, await client(x));
  const inputs = [table(3000, 1, 10), table(3000, 2, 20), table(3000, 3, 30, (i) => i % 2 === 0)];
  const placed = [await place(clients, 1, inputs[0], [1]), await place(clients, 2, inputs[1], [2, 3]), await place(clients, 3, inputs[2], [3])];
  const args: CompactArgs = {
    range: RANGE, inputs: placed, stocs: s.map((x) => [x.id, x.address] as [number, Uint8Array]),
    smallestSnapshot: 1000, deeper: [], targetBytes: 64 * 1024, firstFile: 100, maxFiles: 40, scatter: 1,
  };
  return { s, clients, inputs, args };
}

async function tablesOn(c: StocClient): Promise<string[]> {
  return (await c.list(`r${RANGE}-`)).map((f) => f.name).filter((n) => Number(n.slice(3, 9)) >= 100);
}

describe('offloaded compaction on a StoC', () => {
  it('reads inputs from itself and other StoCs, merges exactly as the engine does, and writes the outputs it was asked for', async () => {
    const { s, clients, inputs, args } = await setup();
    const expected = [...mergeTables({ tables: inputs, names: ['1', '2', '3'], smallestSnapshot: 1000, deeper: [], targetBytes: 64 * 1024 })];
    expect(expected.length).toBeGreaterThan(3);

    const outputs = await clients.get(1)!.compact(args);
    expect(outputs.map((o) => o.file)).toEqual(expected.map((_, i) => 100 + i));
    const stored = async (o: (typeof outputs)[number]): Promise<Buffer> =>
      Buffer.concat(await Promise.all(o.fragments.map((f) => clients.get(f.stoc)!.read(tableFileName(RANGE, o.file), 0, f.size))));
    for (const [i, o] of outputs.entries()) {
      // ρ = 1: the data blocks here, the metadata on the next StoC of the job.
      expect(o.fragments).toEqual(cutTable(expected[i].bytes, [1, 2], 1, 'expected'));
      expect([o.size, o.entries]).toEqual([expected[i].bytes.length, expected[i].entries]);
      expect(Buffer.from(o.smallest).equals(expected[i].smallest) && Buffer.from(o.largest).equals(expected[i].largest)).toBe(true);
      expect((await stored(o)).equals(expected[i].bytes)).toBe(true);
    }
    expect(s[0].stats().compactions).toBe(1);
    expect(await tablesOn(clients.get(3)!)).toEqual([]);

    // ρ = 2 on StoC 2: data on 2 and 1 (the job's next), the metadata on 3.
    const two = await clients.get(2)!.compact({ ...args, firstFile: 200, scatter: 2 });
    for (const [i, o] of two.entries()) {
      expect(o.fragments.map((f) => f.stoc)).toEqual([2, 1, 3]);
      expect((await stored(o)).equals(expected[i].bytes)).toBe(true);
    }

    // Placed by the LTC: output n where placements[n] says, even on none of the job's own
    // StoC; outputs past the list fall back to the job's order.
    const placements = [[3, 2], [2, 3], [3]];
    const placed = await clients.get(1)!.compact({ ...args, firstFile: 300, placements });
    for (const [i, o] of placed.entries()) {
      expect(o.fragments.map((f) => f.stoc)).toEqual(placements[i] ?? [1, 2]);
      expect((await stored(o)).equals(expected[i].bytes)).toBe(true);
    }
  });

  it('cuts outputs at the cuts it is given, so no output spans one', async () => {
    const { clients, inputs, args } = await setup();
    const key = (i: number): Buffer => Buffer.from(`k${String(i).padStart(5, '0')}`);
    const merged = [...mergeTables({ tables: inputs, names: ['1', '2', '3'], smallestSnapshot: 1000, deeper: [], targetBytes: 64 * 1024 })];
    const all = merged.reduce((n, t) => n + t.entries, 0);
    const cuts = [key(500), key(501), key(1700)];
    const outputs = await clients.get(1)!.compact({ ...args, cuts });
    expect(outputs.reduce((n, o) => n + o.entries, 0)).toBe(all);
    expect(outputs.length).toBeGreaterThan(merged.length);
    const user = (k: Uint8Array): Buffer => Buffer.from(k.subarray(0, k.length - 8));
    for (const o of outputs) {
      for (const c of cuts) expect(Buffer.compare(user(o.smallest), c) < 0 && Buffer.compare(user(o.largest), c) >= 0).toBe(false);
    }
    // An output starts at each cut.
    for (const c of cuts) expect(outputs.some((o) => user(o.smallest).equals(c))).toBe(true);
  });

  it('keeps its inputs\' and outputs\' memory from job to job, and jobs in reused memory (two at once too) write the merge\'s very bytes', async () => {
    const s = await stocs(3);
    const clients = new Map<number, StocClient>();
    for (const x of s) clients.set(x.id, await client(x));
    // Tables of ~2 MB, outputs cut at 1 MiB: past the pool's 1 MiB granule.
    const inputs = [table(9000, 1, 10), table(9000, 1, 20, (i) => i % 5 === 0)];
    const placed = [await place(clients, 1, inputs[0], [1]), await place(clients, 2, inputs[1], [2, 3])];
    const targetBytes = 1024 * 1024;
    const expected = [...mergeTables({ tables: inputs, names: ['1', '2'], smallestSnapshot: 1000, deeper: [], targetBytes })];
    expect(expected.length).toBeGreaterThanOrEqual(2);
    const args: CompactArgs = {
      range: RANGE, inputs: placed, stocs: s.map((x) => [x.id, x.address] as [number, Uint8Array]),
      smallestSnapshot: 1000, deeper: [], targetBytes, firstFile: 100, maxFiles: 10, scatter: 1,
    };
    const check = async (outputs: Awaited<ReturnType<StocClient['compact']>>): Promise<void> => {
      expect(outputs.length).toBe(expected.length);
      for (const [i, o] of outputs.entries()) {
        const stored = Buffer.concat(await Promise.all(o.fragments.map((f) => clients.get(f.stoc)!.read(tableFileName(RANGE, o.file), 0, f.size))));
        expect(stored.equals(expected[i].bytes)).toBe(true);
        expect(Buffer.from(o.smallest).equals(expected[i].smallest) && Buffer.from(o.largest).equals(expected[i].largest)).toBe(true);
      }
    };
    await check(await clients.get(1)!.compact(args));
    expect(s[0].stats().compactionMemoryReuses).toBe(0);
    expect(s[0].stats().compactionMemoryBytes).toBeGreaterThan(2 * targetBytes);
    await check(await clients.get(1)!.compact({ ...args, firstFile: 200 }));
    // Both inputs, and spares for the outputs, were taken from the first job's memory.
    expect(s[0].stats().compactionMemoryReuses).toBeGreaterThanOrEqual(3);
    const both = await Promise.all([300, 400].map((firstFile) => clients.get(1)!.compact({ ...args, firstFile })));
    for (const outputs of both) await check(outputs);
  });

  it('an input it cannot read fails the job (not as corruption) and leaves no output', async () => {
    const { s, clients, args } = await setup();
    await s[2].close(); // StoC 3 holds inputs 2 and 3
    const err = await clients.get(1)!.compact(args).then(() => undefined, (e: unknown) => e as { code: string; message: string });
    expect(err?.message).toMatch(/compaction input r3-00000[23]\.sst/); // whichever of the two failed first
    expect(err?.code).not.toBe('CORRUPTION');
    expect(await tablesOn(clients.get(1)!)).toEqual([]);
  });

  it('too few output numbers, or an output that exists, fail the job without touching other files', async () => {
    const { clients, args } = await setup();
    await expect(clients.get(1)!.compact({ ...args, maxFiles: 2 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringContaining('more than the 2 outputs') });
    expect(await tablesOn(clients.get(1)!)).toEqual([]);
    expect(await tablesOn(clients.get(2)!)).toEqual([]); // the metadata fragments went too

    const mine = Buffer.from('not a table of this job');
    await clients.get(1)!.write(tableFileName(RANGE, 101), 0, mine, true);
    await expect(clients.get(1)!.compact(args)).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringContaining('exists already') });
    expect(await tablesOn(clients.get(1)!)).toEqual([tableFileName(RANGE, 101)]);
    expect(await tablesOn(clients.get(2)!)).toEqual([]);
    expect((await clients.get(1)!.read(tableFileName(RANGE, 101), 0, mine.length)).equals(mine)).toBe(true);
  });

  it('runs at most two jobs at once and answers BUSY beyond', async () => {
    const { clients, args } = await setup();
    const results = await Promise.allSettled([100, 300, 500].map((firstFile) => clients.get(1)!.compact({ ...args, firstFile })));
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected']);
    expect((results[2] as PromiseRejectedResult).reason).toMatchObject({ code: 'BUSY' });
    expect((await clients.get(1)!.compact({ ...args, firstFile: 700 })).length).toBeGreaterThan(0); // and serves the next
  });

  it('a damaged input fails the job with CORRUPTION naming the table', async () => {
    const { clients, args, inputs } = await setup();
    const bad = Buffer.from(inputs[0]);
    bad[100] ^= 0xff;
    await clients.get(1)!.write(tableFileName(RANGE, 1), 0, bad, true);
    await expect(clients.get(2)!.compact(args)).rejects.toMatchObject({ code: 'CORRUPTION', message: expect.stringContaining('r3-000001.sst') });
    expect(await tablesOn(clients.get(2)!)).toEqual([]);
  });

  it('malformed requests get BAD_ARGUMENT; the StoC goes on serving', async () => {
    const [s] = await stocs(1);
    const { fabric, rpc } = h.openFabric();
    const ep = await fabric.connect(s.address);
    const good = { range: 1, inputs: [{ file: 1, fragments: [{ stoc: 1, offset: 0, size: 10 }] }], stocs: [], smallestSnapshot: 0, deeper: [], targetBytes: 4096, firstFile: 10, maxFiles: 4, scatter: 1 };
    for (const bad of [
      null, [], { ...good, inputs: [] }, { ...good, inputs: 'x' }, { ...good, targetBytes: 10 }, { ...good, scatter: 0 },
      { ...good, firstFile: -1 }, { ...good, stocs: [[1]] }, { ...good, deeper: [[Buffer.alloc(1), 'x']] },
      { ...good, inputs: [{ file: 1, fragments: [{ stoc: 1, offset: 0, size: 2 ** 40 }] }] },
      { ...good, stocs: [[1, Buffer.alloc(1)]], placements: [[2]] }, { ...good, stocs: [[1, Buffer.alloc(1)]], placements: [[1, 1]] },
      { ...good, stocs: [[1, Buffer.alloc(1)]], placements: [[]] }, { ...good, placements: new Array(5).fill([1]) },
      { ...good, cuts: [Buffer.from('b'), Buffer.from('a')] }, { ...good, cuts: ['a'] },
    ]) {
      await expect(rpc.call(ep, Method.compact, bad, { timeoutMs: 5000 })).rejects.toMatchObject({ code: 'BAD_ARGUMENT' });
    }
    // A well-formed job whose input is missing: CORRUPTION naming it; then ordinary work goes on.
    await expect(rpc.call(ep, Method.compact, good, { timeoutMs: 5000 })).rejects.toMatchObject({ code: 'CORRUPTION', message: expect.stringContaining('r1-000001.sst') });
    const c = await client(s);
    await c.write('plain', 0, Buffer.from('still serving'), true);
    expect((await c.read('plain', 0, 13)).toString()).toBe('still serving');
  });

  it('a job whose LTC is lost before it ends removes its outputs', async () => {
    const { s, args } = await setup();
    const fabric = Fabric.open();
    const rpc = new Rpc(fabric);
    const ep = await fabric.connect(s[0].address);
    // Big enough to be still merging when the requester goes away.
    const job = rpc.call(ep, Method.compact, { ...args, targetBytes: 8 * 1024, maxFiles: 1000 }, { timeoutMs: 10_000 }).catch(() => undefined);
    await new Promise((r) => setTimeout(r, 5));
    await fabric.close();
    await job;
    const watcher = await client(s[0]);
    for (let i = 0; i < 200 && s[0].stats().failures === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(s[0].stats().failures).toBe(1);
    expect(await tablesOn(watcher)).toEqual([]);
  });
});

describe('StocCompactor (the LTC side)', () => {
  function compactor(s: StocServer[]): { c: StocCompactor; lines: string[] } {
    const pool = h.makePool(s);
    const lines: string[] = [];
    return { c: new StocCompactor(pool, RANGE, { scatter: 1, tableReplicas: 1, placement: 'round-robin' }, (l: string) => lines.push(l)), lines };
  }

  const request = (args: CompactArgs) => ({
    inputs: args.inputs.map((i) => ({ ...i, level: 0, size: i.fragments.reduce((n, f) => n + f.size, 0), entries: 0, smallest: Buffer.alloc(0), largest: Buffer.alloc(0) }) as TableMeta),
    smallestSnapshot: args.smallestSnapshot, deeper: [], targetBytes: args.targetBytes, cuts: [], firstFile: args.firstFile, maxFiles: args.maxFiles,
  });

  it('sends each job to the least loaded StoC (equal ones in turn), places outputs by the policy; declines a job no StoC could run; corruption is not declined', async () => {
    const { clients, args } = await setup();
    const { c, lines } = compactor(h.servers);
    const first = await c.compact(request(args));
    const second = await c.compact({ ...request(args), firstFile: 300 });
    expect(first!.length).toBeGreaterThan(3);
    expect(h.servers.map((x) => x.stats().compactions)).toEqual([1, 1, 0]);
    // Round-robin placement, ρ = 1 and a metadata StoC: the outputs spread over all three
    // StoCs, not only over the one that ran the job.
    expect(first!.map((o) => o.fragments.map((f) => f.stoc))).toEqual(first!.map((_, i) => [(2 * i) % 3 + 1, (2 * i + 1) % 3 + 1]));
    expect(new Set(second!.map((o) => o.fragments[0].stoc)).size).toBe(3);

    // StoC 3, which holds inputs 2 and 3, is gone: the job can run nowhere, so it is declined.
    await h.servers[2].close();
    expect(await c.compact({ ...request(args), firstFile: 400 })).toBeUndefined();
    expect(c.counters.declined).toBe(1);
    expect(lines.join('\n')).toContain('the LTC merges it');

    const bad = Buffer.from(await clients.get(1)!.read(tableFileName(RANGE, 1), 0, args.inputs[0].fragments[0].size));
    bad[100] ^= 0xff;
    await clients.get(1)!.write(tableFileName(RANGE, 1), 0, bad, true);
    const onlyFirst = { ...request(args), inputs: request(args).inputs.slice(0, 1), firstFile: 500 };
    await expect(c.compact(onlyFirst)).rejects.toMatchObject({ code: 'CORRUPTION' });
  });
});
