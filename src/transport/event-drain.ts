/**
 * A Fabric's completion events, taken from native code in batches: fixed-size records in one
 * reused buffer, small message payloads in a reused arena (copied out: far cheaper than an
 * external Buffer with a finalizer per message), large ones as Buffers of their own.
 */
import type { NativeFabric } from '../common/addon.js';
import { EVENT_BYTES, EventKind } from './codes.js';

/** Event records taken per native call. */
const EVENT_BATCH = 1024;
/** Bytes of small message payloads taken per native call. */
const ARENA_BYTES = 256 * 1024;

/** Where each kind of event goes. */
export interface EventSink {
  complete(opId: number, status: number): void;
  accepted(endpoint: number): void;
  lost(endpoint: number, status: number): void;
  message(endpoint: number, type: number, payload: Buffer): void;
  immediate(endpoint: number, imm: number): void;
}

export class EventDrain {
  private readonly records = Buffer.alloc(EVENT_BATCH * EVENT_BYTES);
  private readonly u32 = new Uint32Array(this.records.buffer, this.records.byteOffset, this.records.length / 4);
  private readonly i32 = new Int32Array(this.records.buffer, this.records.byteOffset, this.records.length / 4);
  private readonly arena = Buffer.alloc(ARENA_BYTES);
  private readonly large: Buffer[] = [];

  /** Takes every event `native` holds, batch by batch, and hands each to `sink`. */
  drain(native: NativeFabric, sink: EventSink): void {
    const u = this.u32;
    const s = this.i32;
    let more = true;
    while (more) {
      this.large.length = 0;
      const r = native.drain(this.records, this.arena, this.large);
      const n = r >>> 1;
      more = (r & 1) === 1;
      for (let k = 0; k < n; k++) {
        const i = k * (EVENT_BYTES / 4);
        switch (u[i]) {
          case EventKind.OpDone:
          case EventKind.Connected:
            sink.complete(u[i + 1], s[i + 2]);
            break;
          case EventKind.Accepted:
            sink.accepted(u[i + 3]);
            break;
          case EventKind.PeerLost:
            sink.lost(u[i + 3], s[i + 2]);
            break;
          case EventKind.Message:
            sink.message(u[i + 3], u[i + 6], this.payload(u[i + 1], u[i + 4], u[i + 7]));
            break;
          case EventKind.Imm:
            sink.immediate(u[i + 3], u[i + 6]);
            break;
        }
      }
    }
  }

  /** A message's payload: copied out of the arena (inArena = 1), or the large Buffer itself. */
  private payload(inArena: number, value: number, length: number): Buffer {
    if (inArena === 0) return this.large[value];
    const out = Buffer.allocUnsafe(length);
    this.arena.copy(out, 0, value, value + length);
    return out;
  }
}
