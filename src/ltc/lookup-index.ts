/**
 * The lookup index (DESIGN.md §4; paper §4.4.3): for each key written to a memtable, the
 * memtable that took its newest write; through an indirection (memtable id → where that
 * memtable's contents are now: itself, the memtable it was merged into, its L0 table, or gone
 * to L1 and below), so a flush, a merge or a compaction updates one slot, not every key.
 *
 * A get that finds its key goes straight to that one memtable or L0 table, or to L1 and below
 * when the table was compacted; a key not in a complete index is in no memtable nor L0 table.
 * The index holds at most `maxKeys` keys: past them it stops taking new keys and is no longer
 * complete, so a key it lacks means "search everything" (it degrades to search, never to a
 * wrong answer). Slots of tables compacted away are swept, with their keys, once they are
 * many. It becomes complete again once nothing it might lack can be in memtables or L0: L0
 * is empty and every memtable is newer than the last write it refused (refreshed()).
 */
import type { Memtable } from '../memtable/memtable.js';

export type Place =
  | { kind: 'memtable'; memtable: Memtable }
  | { kind: 'table'; file: number }
  /** Compacted into L1: the newest version is in L1 or below. */
  | { kind: 'deeper' };

type Slot = Place | { kind: 'merged'; into: number };

/** Bytes an index entry costs, about: the key string, a Map entry, a number. */
const ENTRY_OVERHEAD = 80;

export class LookupIndex {
  private readonly keys = new Map<string, number>();
  private readonly slots = new Map<number, Slot>();
  private keyBytes = 0;
  private goneSlots = 0;
  /** The newest memtable that took a write of a key the index refused (or a merge of one). */
  private refusedIn = -1;
  /** Every key in a memtable or an L0 table is in the index. */
  complete: boolean;
  readonly counters = { hits: 0, misses: 0, sweeps: 0 };

  constructor(readonly maxKeys: number, complete = true) {
    this.complete = complete;
  }

  get size(): number {
    return this.keys.size;
  }

  /** About the bytes the index holds. */
  get bytes(): number {
    return this.keyBytes + this.keys.size * ENTRY_OVERHEAD + this.slots.size * 48;
  }

  /** `m` takes writes from now on. */
  opened(m: Memtable): void {
    this.slots.set(m.id, { kind: 'memtable', memtable: m });
  }

  /** The slot of L0 table `file` when the index is rebuilt from tables (recovery): keys written to it name it. */
  table(file: number): number {
    this.slots.set(-file, { kind: 'table', file });
    return -file;
  }

  /** Marks the index as lacking keys of every memtable up to `id` (a rebuild that could not read them all). */
  lacks(id: number): void {
    this.complete = false;
    this.refusedIn = Math.max(this.refusedIn, id);
  }

  /** `key` was written to memtable `id` (its newest version is there). */
  wrote(key: Uint8Array, id: number): void {
    const k = Buffer.from(key.buffer, key.byteOffset, key.byteLength).toString('latin1');
    if (!this.keys.has(k)) {
      if (this.keys.size >= this.maxKeys) {
        this.complete = false;
        this.refusedIn = Math.max(this.refusedIn, id);
        return;
      }
      this.keyBytes += k.length;
    }
    this.keys.set(k, id);
  }

  /** Memtables `ids` were merged into `into` (which opened() names). */
  merged(ids: readonly number[], into: number): void {
    const gone = new Set(ids);
    // Slots that named an input (an earlier merge's) now name `into`: chains stay one hop long.
    for (const [id, s] of this.slots) if (s.kind === 'merged' && gone.has(s.into)) this.slots.set(id, { kind: 'merged', into });
    for (const id of ids) this.slots.set(id, { kind: 'merged', into });
    // Never lowered: a memtable numbered above `into` may have taken refused writes while the merge ran.
    if (ids.some((id) => id <= this.refusedIn)) this.refusedIn = Math.max(this.refusedIn, into);
  }

  /**
   * After L0 changed: complete again if L0 is empty and the oldest memtable holding data
   * (`oldest`, or none) is newer than every write the index refused.
   */
  refreshed(l0Empty: boolean, oldest: number | undefined): void {
    if (!this.complete && l0Empty && (oldest === undefined || oldest > this.refusedIn)) this.complete = true;
  }

  /** Memtable `id` is now L0 table `file` (or held nothing: then no key names it). */
  flushed(id: number, file: number | undefined): void {
    if (file === undefined) this.slots.delete(id);
    else this.slots.set(id, { kind: 'table', file });
  }

  /** L0 tables `files` were compacted into L1. */
  compacted(files: ReadonlySet<number>): void {
    for (const [id, s] of this.slots) {
      if (s.kind === 'table' && files.has(s.file)) {
        this.slots.set(id, { kind: 'deeper' });
        this.goneSlots++;
      }
    }
    if (this.goneSlots > 64 && this.goneSlots * 2 > this.slots.size) this.sweep();
  }

  /**
   * Where `key`'s newest version is: a memtable, an L0 table, or deeper; undefined when the
   * index does not know (search everything if it is not complete, else L1 and below).
   */
  find(key: Uint8Array): Place | undefined {
    const id = this.keys.get(Buffer.from(key.buffer, key.byteOffset, key.byteLength).toString('latin1'));
    if (id === undefined) {
      this.counters.misses++;
      return undefined;
    }
    this.counters.hits++;
    return this.resolve(id);
  }


  private resolve(id: number): Place {
    for (let hops = 0; hops < 64; hops++) {
      const s = this.slots.get(id);
      if (!s) return { kind: 'deeper' }; // a memtable that held nothing: nothing of it is anywhere
      if (s.kind !== 'merged') return s;
      id = s.into;
    }
    return { kind: 'deeper' };
  }

  /** Drops the keys whose newest version went to L1, and the slots no key needs (but live memtables'). */
  private sweep(): void {
    for (const [k, id] of this.keys) {
      if (this.resolve(id).kind === 'deeper') {
        this.keys.delete(k);
        this.keyBytes -= k.length;
      }
    }
    const keep = new Set<number>();
    for (let id of new Set(this.keys.values())) {
      for (let s = this.slots.get(id); s && !keep.has(id); s = this.slots.get(id)) {
        keep.add(id);
        if (s.kind !== 'merged') break;
        id = s.into;
      }
    }
    for (const [id, s] of this.slots) if (!keep.has(id) && s.kind !== 'memtable') this.slots.delete(id);
    this.goneSlots = 0;
    this.counters.sweeps++;
  }
}
