/**
 * One client connection of a StoC: its window of the StoC's file buffer, the client's staging
 * region, the requests under way, its appends' order, and its direct-write handles.
 */
import type { RemoteRegion } from '../transport/regions.js';
import { AppendOrder } from './append-order.js';
import type { StoredFile } from './stored-files.js';

/** Append parts that may wait for an earlier append, per connection. */
const MAX_WAITING_PARTS = 4096;

/** One client connection's state. */
export class Connection {
  client: RemoteRegion | undefined;
  inflight = 0;
  gone = false;
  freed = false;
  /** Called once the window is free (a bye waits for this). */
  readonly onFreed: Array<() => void> = [];
  readonly order = new AppendOrder(MAX_WAITING_PARTS);
  /** Direct-write handles opened on this connection (stoc.dopen), with their pinned files. */
  readonly direct = new Map<number, StoredFile>();
  /** The epoch under which this connection opened each range (stoc.fence; fences.ts). */
  readonly epochs = new Map<number, number>();
  /** Index of the connection's window in the buffer. */
  constructor(readonly window: number) {}
}
