/**
 * LogC mode `none` (the paper's benchmark setting, never the default): memtables have no
 * log. A write is acknowledged from memory alone, so anything not yet flushed to an SSTable
 * is lost when the LTC stops without `nova down` (which flushes) or crashes.
 */
import type { LogStore, LogWriter } from './log-store.js';

const NOTHING: LogWriter = {
  append: async () => undefined,
  close: async () => undefined,
};

export class NoLogStore implements LogStore {
  readonly makeAhead = false; // making one costs nothing
  async create(): Promise<LogWriter> {
    return NOTHING;
  }

  /** Every log reads as empty: there was never anything in it. */
  async read(): Promise<Buffer> {
    return Buffer.alloc(0);
  }

  async remove(): Promise<void> {}

  async list(): Promise<number[]> {
    return [];
  }

  describe(file: number): string {
    return `(no log for memtable ${file}: LogC mode none)`;
  }
}
