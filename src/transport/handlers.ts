/**
 * What a Fabric hands its events to: the handlers of messages by type, of immediates and of
 * new connections. A handler that throws is counted and reported, and never stops the
 * delivery of the events after it; an event nobody handles is counted.
 */
import type { Endpoint } from './endpoint.js';

export type MessageHandler = (payload: Buffer, from: Endpoint) => void;
export type ImmediateHandler = (imm: number, from: Endpoint) => void;

export class Handlers {
  readonly messages = new Map<number, MessageHandler>();
  immediate: ImmediateHandler | undefined;
  connection: ((ep: Endpoint) => void) | undefined;
  unhandled = 0;
  errors = 0;

  /** A message of `type` from `ep` (undefined: its endpoint is gone). */
  deliverMessage(ep: Endpoint | undefined, type: number, payload: Buffer): void {
    const handler = this.messages.get(type);
    if (!ep || !handler) {
      this.unhandled++;
      return;
    }
    this.guard(() => handler(payload, ep));
  }

  /** An immediate from `ep` (undefined: its endpoint is gone). */
  deliverImmediate(ep: Endpoint | undefined, imm: number): void {
    const handler = this.immediate;
    if (!ep || !handler) {
      this.unhandled++;
      return;
    }
    this.guard(() => handler(imm, ep));
  }

  /** A connection a peer opened, ready. */
  deliverConnection(ep: Endpoint): void {
    this.guard(() => this.connection?.(ep));
  }

  private guard(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.errors++;
      process.emitWarning(`nova transport handler threw: ${(err as Error)?.stack ?? String(err)}`);
    }
  }
}
