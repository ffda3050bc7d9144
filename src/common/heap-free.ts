/**
 * The C heap's free memory (the addon's heapFreeBytes and trimHeap: glibc's mallinfo2 and
 * malloc_trim). glibc keeps what a process frees resident and hands it out again, so a process
 * that gives memory up (a cache shrunk, its Buffers collected) keeps its resident size until the
 * heap's whole free pages are handed back.
 */
import { loadAddon } from './addon.js';

/** Bytes the C heap holds free for reuse, every arena; 0 where the C library cannot say. */
export function heapFreeBytes(): number {
  return loadAddon().heapFreeBytes();
}

/** Hands the C heap's whole free pages back to the kernel; whether any went (false where the C library has no such call). */
export function trimHeap(): boolean {
  return loadAddon().trimHeap();
}
