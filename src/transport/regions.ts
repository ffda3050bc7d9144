/**
 * Memory a Fabric hands out: a local region peers may READ and WRITE (MemoryRegion), and a
 * peer's region imported on an endpoint (RemoteRegion). Both belong to their Fabric and are
 * closed through it.
 */
import { loadAddon } from '../common/addon.js';
import type { Endpoint } from './endpoint.js';
import type { Fabric } from './fabric.js';
import type { RemoteKey } from './remote-key.js';

/** A region of local memory, registered for one-sided access by peers. */
export class MemoryRegion {
  /** The region's bytes. Length 0 once the region is closed. */
  readonly buffer: Buffer;
  private closing: Promise<void> | undefined;

  /** @internal */
  constructor(
    private readonly fabric: Fabric,
    /** @internal */ readonly id: number,
    readonly length: number,
    private readonly memory: ArrayBuffer,
    /** The key a peer needs to reach the whole region; narrow it with `key.slice`. */
    readonly key: RemoteKey,
  ) {
    this.buffer = Buffer.from(memory, 0, length);
  }

  get isClosed(): boolean {
    return this.closing !== undefined || this.fabric.isClosed;
  }

  /** Closes the region once no operation on it is pending. Idempotent. */
  close(): Promise<void> {
    if (!this.closing) {
      this.detach();
      this.closing = this.fabric.closeRegion(this);
    }
    return this.closing;
  }

  /** @internal */
  detach(): void {
    loadAddon().detach(this.memory);
  }
}

/** A peer's region, imported on one endpoint. */
export class RemoteRegion {
  private dropped = false;

  /** @internal */
  constructor(
    private readonly fabric: Fabric,
    readonly endpoint: Endpoint,
    /** @internal */ readonly id: number,
    readonly length: number,
  ) {}

  get isDropped(): boolean {
    return this.dropped;
  }

  /** Releases the unpacked key. Later operations through it fail with BAD_REMOTE_KEY. */
  drop(): void {
    if (this.dropped) return;
    this.dropped = true;
    this.fabric.dropKey(this.id);
  }
}
