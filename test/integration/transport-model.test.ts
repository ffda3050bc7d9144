/**
 * Model-based random test: random batches of concurrent READs and WRITEs (and RPC checks)
 * against a peer process, compared with an oracle copy of the peer's region. A fixed seed
 * and a few seconds in the suite; NOVA_SOAK=1 runs it for NOVA_SOAK_SECONDS (default 300)
 * with a seed from the clock (printed, so a failure can be replayed with NOVA_SEED).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checksum32 } from '../../src/common/checksum.js';
import { Fabric } from '../../src/transport/fabric.js';
import type { Endpoint } from '../../src/transport/endpoint.js';
import type { MemoryRegion, RemoteRegion } from '../../src/transport/regions.js';
import { Rpc } from '../../src/transport/rpc.js';
import { PeerProcess, pattern, useTls, type Tls } from '../helpers/peer-process.js';
import { rng } from '../helpers/rng.js';

const SOAK = process.env.NOVA_SOAK === '1';
const SECONDS = SOAK ? Number(process.env.NOVA_SOAK_SECONDS ?? 300) : 3;
const SEED = Number(process.env.NOVA_SEED ?? (SOAK ? Date.now() % 0x7fffffff : 20261122));
const SIZE = 4 * 1024 * 1024;
const SLOTS = 64; // the region is cut into slots; one batch touches each slot at most once
const SLOT = SIZE / SLOTS;


describe.each(['sm', 'tcp'] as Tls[])('transport model over %s', (tls) => {
  let fabric: Fabric;
  let peer: PeerProcess;
  let ep: Endpoint;
  let local: MemoryRegion;
  let remote: RemoteRegion;
  let rpc: Rpc;

  beforeAll(async () => {
    useTls(tls);
    fabric = Fabric.open();
    rpc = new Rpc(fabric);
    peer = new PeerProcess(tls);
    const hello = await peer.request('hello');
    const region = await peer.request('alloc', { size: SIZE });
    await peer.request('fill', { region: 0, offset: 0, length: SIZE, seed: 1 });
    ep = await fabric.connect(Buffer.from(hello.address as string, 'hex'));
    remote = ep.importKey(Buffer.from(region.key as string, 'hex'));
    local = fabric.allocate(2 * SIZE); // [0, SIZE) sources for writes, [SIZE, 2 SIZE) read targets
  });

  afterAll(async () => {
    await fabric?.close();
    await peer?.stop();
  });

  it(`matches the oracle (seed ${SEED}, ${SECONDS} s)`, async () => {
    if (SOAK) console.log(`transport model over ${tls}: seed ${SEED}, ${SECONDS} s`);
    const r = rng(SEED);
    const oracle = Buffer.alloc(SIZE);
    pattern(oracle, 1);
    const deadline = Date.now() + SECONDS * 1000;
    let batches = 0;
    let ops = 0;
    while (Date.now() < deadline) {
      const inflight: Array<Promise<void>> = [];
      const checks: Array<() => void> = [];
      const writes: Array<() => void> = [];
      for (let slot = 0; slot < SLOTS; slot++) {
        const dice = r();
        if (dice < 0.3) continue;
        const length = 1 + Math.floor(r() * (r() < 0.8 ? 256 : SLOT - 1));
        const offset = slot * SLOT + Math.floor(r() * (SLOT - length));
        if (dice < 0.65) {
          const src = local.buffer.subarray(offset, offset + length);
          pattern(src, batches * SLOTS + slot + 7);
          const copy = Buffer.from(src);
          inflight.push(ep.write(local, offset, remote, offset, length));
          writes.push(() => copy.copy(oracle, offset));
        } else {
          inflight.push(ep.read(local, SIZE + offset, remote, offset, length));
          checks.push(() => {
            const got = local.buffer.subarray(SIZE + offset, SIZE + offset + length);
            if (!got.equals(oracle.subarray(offset, offset + length))) {
              throw new Error(`batch ${batches}: READ [${offset}, +${length}) differs from the oracle (seed ${SEED})`);
            }
          });
        }
      }
      await Promise.all(inflight);
      for (const check of checks) check(); // reads saw the state before this batch's writes
      for (const write of writes) write();
      ops += inflight.length;
      if (++batches % 25 === 0) {
        const sum = await rpc.call<number>(ep, 'checksum', { region: 0, offset: 0, length: SIZE });
        expect(sum, `peer memory after batch ${batches} (seed ${SEED})`).toBe(checksum32(oracle));
      }
    }
    const sum = await rpc.call<number>(ep, 'checksum', { region: 0, offset: 0, length: SIZE });
    expect(sum).toBe(checksum32(oracle));
    expect(ops).toBeGreaterThan(100);
  }, (SECONDS + 60) * 1000); // the soak runs for SECONDS; leave room for the final checks
});
