/**
 * The TCP RPC's sending side for one socket: messages gathered into frames (Outbox), and the
 * msgpack packer both ends use.
 */
import type { Socket } from 'node:net';
import { Packr } from 'msgpackr';
import { FRAME_HEADER, packFrame } from './frames.js';

/** The TCP RPC's msgpack: plain arrays and maps, no records, both ways. */
export const packr = new Packr({ useRecords: false, moreTypes: false });
/** Messages after which a frame leaves at once (Outbox; doc/decisions/tcp-frames.md). */
const FRAME_MESSAGES = 16;

export type Message = unknown[];

/**
 * Collects messages for one socket and writes them as one frame per event-loop turn, or
 * sooner once FRAME_MESSAGES that cut are waiting: then the peer starts on the first part of
 * a large batch while this side prepares the rest, instead of each side idling while the
 * other works. A message that does not cut (`push(m, false)`) rides along to the turn's end:
 * a request the peer handles in groups anyway (an LTC commits the writes that arrive together
 * as one group, one log append to every replica) gains nothing from leaving early, and a
 * group cut in two costs a second append.
 *
 * A frame never exceeds `maxFrame` (the peer would close the connection, failing every call
 * on it): a batch that packs larger is cut in halves, in order; a single message that is
 * larger goes to `oversize`, which may answer a message to send instead.
 */
export class Outbox {
  private queue: Message[] = [];
  private cutting = 0; // messages in `queue` that cut
  private scheduled = false;
  constructor(private readonly socket: Socket, private readonly maxFrame: number,
    private readonly oversize: (message: Message, bytes: number) => Message | undefined) {}

  push(message: Message, cuts = true): void {
    this.queue.push(message);
    if (cuts && ++this.cutting >= FRAME_MESSAGES) this.send();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.onTurn);
    }
  }

  private readonly onTurn = (): void => {
    this.scheduled = false;
    this.send();
  };

  private send(): void {
    const batch = this.queue;
    this.queue = [];
    this.cutting = 0;
    if (batch.length === 0 || this.socket.destroyed) return;
    this.write(batch);
  }

  private write(batch: Message[]): void {
    const frame = packFrame(packr, batch);
    const bytes = frame.length - FRAME_HEADER;
    if (bytes <= this.maxFrame) {
      this.socket.write(frame);
    } else if (batch.length > 1) {
      const half = batch.length >> 1;
      this.write(batch.slice(0, half));
      this.write(batch.slice(half));
    } else {
      const instead = this.oversize(batch[0], bytes);
      if (instead) this.write([instead]);
    }
  }
}
