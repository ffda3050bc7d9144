/**
 * A connection to one peer's Fabric, on which READ, WRITE, WRITE-with-immediate, flush and
 * messages are posted (through its Fabric, which stages and completes them).
 */
import { NovaError } from '../common/errors.js';
import { OpKind } from './codes.js';
import type { Fabric } from './fabric.js';
import type { MemoryRegion, RemoteRegion } from './regions.js';
import { RemoteKey } from './remote-key.js';

const TWO_32 = 0x1_0000_0000;

export type EndpointState = 'connecting' | 'ready' | 'lost' | 'closed';

/** A connection to one peer's fabric. */
export class Endpoint {
  private readonly lostListeners: Array<(code: 'PEER_LOST' | 'CLOSED') => void> = [];

  /** @internal */
  constructor(
    private readonly fabric: Fabric,
    /** @internal */ readonly id: number,
    /** @internal */ public state: EndpointState,
  ) {}

  get isReady(): boolean {
    return this.state === 'ready';
  }

  /** Unpacks a peer's remote key (or its serialised bytes) for use on this endpoint. */
  importKey(key: RemoteKey | Uint8Array): RemoteRegion {
    const parsed = key instanceof RemoteKey ? key : RemoteKey.parse(key);
    this.assertReady('importKey');
    return this.fabric.importKey(this, parsed);
  }

  /** RDMA READ: copies remote[remoteOffset, +length) into local[localOffset, +length). */
  read(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number,
       length: number): Promise<void> {
    const bad = this.check(local, localOffset, remote, remoteOffset, length, 'read');
    if (bad) return Promise.reject(bad);
    return this.fabric.post(OpKind.Read, this.id, local.id, localOffset, length, remote.id, 0, remoteOffset, 'read');
  }

  /** RDMA WRITE: copies local[localOffset, +length) to remote[remoteOffset, +length). */
  write(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number,
        length: number): Promise<void> {
    const bad = this.check(local, localOffset, remote, remoteOffset, length, 'write');
    if (bad) return Promise.reject(bad);
    return this.fabric.post(OpKind.Write, this.id, local.id, localOffset, length, remote.id, 0, remoteOffset, 'write');
  }

  /** WRITE, then a notification carrying `imm` that the peer receives after the data is visible. */
  writeWithImm(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number,
               length: number, imm: number): Promise<void> {
    const bad = this.check(local, localOffset, remote, remoteOffset, length, 'writeWithImm') ??
      (Number.isInteger(imm) && imm >= 0 && imm < TWO_32 ? undefined
        : new NovaError('BAD_ARGUMENT', `immediate must be a 32-bit unsigned integer, not ${imm}`));
    if (bad) return Promise.reject(bad);
    return this.fabric.post(OpKind.WriteImm, this.id, local.id, localOffset, length, remote.id, imm, remoteOffset, 'writeWithImm');
  }

  /**
   * WRITE, then send a message of `type` once the write is complete at the peer, so the peer
   * can act on the bytes the message names; the message is not sent if the write fails.
   * Resolves when the message is sent.
   */
  writeThenSend(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number, length: number,
                type: number, payload: Uint8Array, more?: Uint8Array): Promise<void> {
    const bad = this.check(local, localOffset, remote, remoteOffset, length, 'writeThenSend') ??
      (Number.isInteger(type) && type >= 0 && type < TWO_32 ? undefined
        : new NovaError('BAD_ARGUMENT', `message type must be a 32-bit unsigned integer, not ${type}`));
    if (bad) return Promise.reject(bad);
    return this.fabric.postWriteSend(this.id, local.id, localOffset, length, remote.id, remoteOffset, type, payload, more);
  }

  /** Sends a message of `type` (`payload`, then `more` if given) to the peer's handler for that type. Copied. */
  send(type: number, payload: Uint8Array, more?: Uint8Array): Promise<void> {
    if (!Number.isInteger(type) || type < 0 || type >= TWO_32) {
      return Promise.reject(new NovaError('BAD_ARGUMENT', `message type must be a 32-bit unsigned integer, not ${type}`));
    }
    const bad = this.stateError('send');
    if (bad) return Promise.reject(bad);
    return this.fabric.postSend(this.id, type, payload, more);
  }

  /** Resolves when every operation posted before it on this endpoint is complete at the peer. */
  flush(): Promise<void> {
    const bad = this.stateError('flush');
    if (bad) return Promise.reject(bad);
    return this.fabric.post(OpKind.Flush, this.id, 0, 0, 0, 0, 0, 0, 'flush');
  }

  /** Called once if the peer is lost or the endpoint closes. */
  onLost(listener: (code: 'PEER_LOST' | 'CLOSED') => void): void {
    if (this.state === 'lost' || this.state === 'closed') {
      queueMicrotask(() => listener(this.state === 'lost' ? 'PEER_LOST' : 'CLOSED'));
      return;
    }
    this.lostListeners.push(listener);
  }

  /** Closes the endpoint; operations still in flight finish or fail on their own. */
  close(): void {
    if (this.state === 'closed' || this.state === 'lost') return;
    this.fabric.closeEndpoint(this);
    this.markLost('CLOSED');
  }

  /** @internal */
  markLost(code: 'PEER_LOST' | 'CLOSED'): void {
    if (this.state === 'lost' || this.state === 'closed') return;
    this.state = code === 'PEER_LOST' ? 'lost' : 'closed';
    for (const listener of this.lostListeners.splice(0)) {
      try {
        listener(code);
      } catch (err) {
        // A listener's bug must not cut event delivery short (events already drained would
        // never settle).
        process.emitWarning(`nova transport onLost listener threw: ${(err as Error)?.stack ?? String(err)}`);
      }
    }
  }

  private stateError(what: string): NovaError | undefined {
    if (this.fabric.isClosed) return new NovaError('CLOSED', `${what}: fabric is closed`);
    if (this.state === 'lost') return new NovaError('PEER_LOST', `${what}: the peer is lost`);
    if (this.state !== 'ready') return new NovaError('CLOSED', `${what}: endpoint is ${this.state}`);
    return undefined;
  }

  private assertReady(what: string): void {
    const bad = this.stateError(what);
    if (bad) throw bad;
  }

  private check(local: MemoryRegion, localOffset: number, remote: RemoteRegion, remoteOffset: number,
                length: number, what: string): NovaError | undefined {
    const state = this.stateError(what);
    if (state) return state;
    if (local.isClosed) return new NovaError('CLOSED', `${what}: local region is closed`);
    if (remote.endpoint !== this || remote.isDropped) {
      return new NovaError('BAD_REMOTE_KEY', `${what}: remote region was not imported on this endpoint`);
    }
    return checkRange(`${what}: local`, localOffset, length, local.length) ??
      checkRange(`${what}: remote`, remoteOffset, length, remote.length);
  }
}

function checkRange(what: string, offset: number, length: number, size: number): NovaError | undefined {
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0 ||
      offset + length > size) {
    return new NovaError('OUT_OF_BOUNDS',
      `${what} [${offset}, ${offset}+${length}) is outside its ${size}-byte region`);
  }
  return undefined;
}
