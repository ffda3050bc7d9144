/**
 * SSTables on StoCs: fragments placed, written, read and deleted (StocBlockStore).
 * StocServers and LTC-side clients on separate fabrics in this process, over shared memory.
 */
import { describe, expect, it } from 'vitest';
import { StocBlockStore } from '../../src/ltc/stoc-block-store.js';
import { table } from '../fixtures/tables.js';
import { stocHarness } from '../helpers/stocs.js';

const { servers, startServer, makePool } = stocHarness('nova-stoc-tables-');

describe('tables on StoCs', () => {
  it('a table whose StoC is lost while it is written is placed again on StoCs that are up', async () => {
    const stocs = [await startServer(1), await startServer(2), await startServer(3)];
    const pool = makePool(stocs);
    const store = new StocBlockStore(pool, 7, 1, 'round-robin');
    await servers.shift()!.close(); // StoC 1, which round-robin picks first; the pool does not know yet
    const bytes = table(2000, 1, 5);
    const fragments = await store.writeTable(5, bytes);
    expect(fragments.map((f) => f.stoc)).not.toContain(1);
    expect(fragments).toHaveLength(2); // data, and metadata on a StoC of its own
    expect((await store.readTable(5, fragments)).equals(bytes)).toBe(true);
  });
});
