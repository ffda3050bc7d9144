/** The engine's user-key iterator (Engine.iterator). */
import { makeInternalKey, SEEK_TYPE } from '../common/internal-key.js';
import { VisibleIterator } from '../sstable/merging-iterator.js';

/** User-key iterator over the engine. Keys and values are copies, safe to keep. */
export class EngineIterator {
  constructor(private readonly inner: VisibleIterator, private readonly sequence: number) {}

  get valid(): boolean {
    return this.inner.valid;
  }

  get key(): Buffer {
    return Buffer.from(this.inner.key);
  }

  get value(): Buffer {
    return Buffer.from(this.inner.value);
  }

  first(): void {
    this.inner.first();
  }

  /** Positions at the first key >= `key`. */
  seek(key: Uint8Array): void {
    this.inner.seek(makeInternalKey(key, this.sequence, SEEK_TYPE));
  }

  next(): void {
    this.inner.next();
  }
}
