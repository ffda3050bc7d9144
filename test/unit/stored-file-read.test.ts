/**
 * StoredFile.readAt (src/stoc/stored-files.ts): what the page cache serves on the spot
 * (readCached) and what the thread pool reads after it make the file's bytes exactly, whether
 * the cached read gave all, part, nothing or could not run; past the end reads as zeros.
 */
import { writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { tempDirs } from '../helpers/temp.js';

/** What the mocked readCached does: -1 (cannot), or serve at most `limit` bytes. */
const cached = vi.hoisted(() => ({ limit: -1, calls: 0 }));
vi.mock('../../src/common/cached-read.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../src/common/cached-read.js')>();
  return {
    readCached: (fd: number, into: Buffer, position: number): number => {
      cached.calls++;
      if (cached.limit < 0) return -1;
      return real.readCached(fd, into.subarray(0, Math.min(into.length, cached.limit)), position);
    },
  };
});
const { StoredFile } = await import('../../src/stoc/stored-files.js');

const tempDir = tempDirs('nova-stored-read-');

afterEach(() => {
  cached.limit = -1;
  cached.calls = 0;
});

describe('StoredFile.readAt', () => {
  it('reads the file exactly whatever the cached read served: all, part, nothing, or -1; zeros past the end', async () => {
    const path = join(tempDir(), 'f');
    const bytes = Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 7) % 253));
    writeFileSync(path, bytes);
    const handle = await open(path, 'r');
    const file = new StoredFile('f', handle, bytes.length, { pending: () => false, sync: async () => undefined });
    try {
      for (const limit of [-1, 0, 1000, 4095, 1 << 20]) {
        cached.limit = limit;
        for (const [position, length] of [[0, 4096], [5_000, 70_000], [290_000, 20_000]]) {
          const into = Buffer.alloc(length, 0xee);
          await file.readAt(into, position);
          const expected = Buffer.concat([bytes.subarray(position, position + length), Buffer.alloc(Math.max(0, position + length - bytes.length))]);
          expect(into.equals(expected), `cached ${limit}, ${position}+${length}`).toBe(true);
        }
      }
      // Over SYNC_IO_MAX it is not tried on the event loop at all.
      cached.calls = 0;
      await file.readAt(Buffer.alloc((1 << 20) + 1), 0);
      expect(cached.calls).toBe(0);
    } finally {
      await handle.close();
    }
  });
});
