/**
 * A memtable: an in-memory sorted map of internal keys, kept in a skiplist (LevelDB
 * db/skiplist.h, db/memtable.cc). A memtable is a value with an id, so a range can hold
 * many of them, several active at once (DESIGN.md §4).
 *
 * Layout: keys and values are copied into one arena Buffer, and each node is a run of int32s
 * in one array (key abbreviation, offsets, lengths, forward links). An insert allocates no JS
 * objects, and a search step touches one place in memory. A first version with one object
 * and two Buffers per entry ran at ~0.1 M inserts/s; one with a typed array per field (five
 * reads in different places per step) at ~0.85 M/s, bound by cache misses.
 *
 * Invariants: nodes are never removed or moved once linked (the arena only grows, by copying;
 * views handed out keep the old copy alive, and entries never change), so an iterator stays
 * valid while inserts continue and sees every entry that sorts after it when it moves.
 * Keys are unique: a sequence number is never reused. Single-threaded, like all JS here.
 */
import { constants as bufferConstants } from 'node:buffer';
import { NovaError } from '../common/errors.js';
import { SEEK_TYPE, TRAILER_BYTES, ValueType, compareBytes, sequenceOf, writeTrailer } from '../common/internal-key.js';
import type { GetResult } from '../sstable/table-reader.js';

const MAX_HEIGHT = 12;
const NIL = -1;
// A node is a run of int32s in `nodes`, named by where it starts:
//   [abbrHi, abbrLo, keyOff, keyLen, valLen, next at level 0, …, next at level h−1]
// keyOff is an unsigned 32-bit offset (read with >>> 0), so an arena may reach 4 GiB.
// abbrHi/abbrLo are 3 + 3 bytes of the user key after the prefix all keys share (zero-padded):
// most comparisons end there. Links name the next node's start, so a search step reads one
// place in memory, not several parallel arrays.
const ABBR_HI = 0;
const ABBR_LO = 1;
const KEY_OFF = 2;
const KEY_LEN = 3;
const VAL_LEN = 4;
const LINKS = 5;
const HEAD = 0; // a node of MAX_HEIGHT links and no key
const MAX_PREFIX = 32;

export class Memtable {
  private arena: Buffer;
  private used = 0;
  private nodes: Int32Array;
  private nodesUsed = LINKS + MAX_HEIGHT;
  private count = 0;
  private height = 1;
  private readonly prev = new Int32Array(MAX_HEIGHT);
  private rand = 0x2545f491;
  private lookup = Buffer.allocUnsafe(256);
  // Bytes every user key here starts with (YCSB's "user0000…", a table prefix): the
  // abbreviations start after them, or they would all be equal. Shrinks when a key does not
  // share it, which re-abbreviates every node (rare: at most once per byte of it).
  private prefix = Buffer.alloc(0);

  /**
   * `capacity`: the bytes it is expected to hold (τ), so it need not grow by copying.
   * `frozen`: a read-only memtable over another's memory (see frozen()), on a worker thread.
   */
  constructor(readonly id: number, capacity = 1 << 20, frozen?: FrozenMemtable) {
    if (frozen) {
      this.arena = Buffer.from(frozen.arena.buffer, frozen.arena.byteOffset, frozen.arena.byteLength);
      this.nodes = frozen.nodes;
      this.count = frozen.entries;
      this.used = frozen.arena.byteLength;
      return;
    }
    this.arena = sharedBytes(Math.max(4096, capacity));
    // About 7 int32s per entry of ~100 bytes; grown by doubling when short.
    this.nodes = sharedInts(Math.max(1024, Math.ceil(capacity / 64)));
    this.nodes.fill(NIL, HEAD + LINKS, HEAD + LINKS + MAX_HEIGHT);
  }

  /**
   * Its memory, to be read on another thread (a flush builds its table on a worker) without
   * a copy. REQUIRES: nothing is added from here on (the memtable is immutable), so the other
   * thread reads memory no one writes.
   */
  frozen(): FrozenMemtable {
    return { arena: this.arena.subarray(0, this.used), nodes: this.nodes.subarray(0, this.nodesUsed), entries: this.count };
  }

  /** Memory the entries take (arena bytes plus nodes), for deciding when it is full. */
  get approximateBytes(): number {
    return this.used + this.nodesUsed * 4;
  }

  get entries(): number {
    return this.count;
  }

  /** REQUIRES: `sequence` was never used before for `userKey` in this memtable. */
  add(sequence: number, type: ValueType, userKey: Uint8Array, value: Uint8Array): void {
    const klen = userKey.length + TRAILER_BYTES;
    this.reserveArena(klen + value.length);
    const arena = this.arena;
    const koff = this.used;
    if (userKey.length <= 32) for (let i = 0; i < userKey.length; i++) arena[koff + i] = userKey[i];
    else arena.set(userKey, koff);
    writeTrailer(arena, koff + userKey.length, sequence, type);
    arena.set(value, koff + klen);
    if (this.count === 0) this.prefix = Buffer.from(userKey.subarray(0, MAX_PREFIX));
    else if (!this.sharesPrefix(userKey, 0, userKey.length)) this.shrinkPrefix(userKey);
    // Search with the key where it now lies in the arena (not yet linked, not yet `used`).
    const p = this.prefix.length;
    const hi = abbreviate3(userKey, p, userKey.length);
    const lo = abbreviate3(userKey, p + 3, userKey.length);
    const prev = this.prev;
    const nodes = this.nodes;
    let x = HEAD;
    for (let level = this.height - 1; level >= 0; level--) {
      for (;;) {
        const next = nodes[x + LINKS + level];
        if (next === NIL) break;
        const c = this.compareNode(next, hi, lo, arena, koff, klen);
        if (c >= 0) {
          if (c === 0) throw new NovaError('BAD_ARGUMENT', `memtable ${this.id}: sequence ${sequence} reused for a key`);
          break;
        }
        x = next;
      }
      prev[level] = x;
    }
    const h = this.randomHeight();
    if (h > this.height) {
      for (let level = this.height; level < h; level++) prev[level] = HEAD;
      this.height = h;
    }
    const n = this.newNode(h);
    const nn = this.nodes; // newNode may have grown it
    nn[n + ABBR_HI] = hi;
    nn[n + ABBR_LO] = lo;
    nn[n + KEY_OFF] = koff;
    nn[n + KEY_LEN] = klen;
    nn[n + VAL_LEN] = value.length;
    this.used += klen + value.length;
    for (let level = 0; level < h; level++) {
      const p = prev[level] + LINKS + level;
      nn[n + LINKS + level] = nn[p];
      nn[p] = n;
    }
    this.count++;
  }

  /** The newest version of `userKey` with sequence <= `snapshot`, if any. */
  get(userKey: Uint8Array, snapshot: number): GetResult {
    const n = this.versionNode(userKey, snapshot);
    if (n === NIL) return undefined;
    const off = this.nodes[n + KEY_OFF] >>> 0;
    if (this.arena[off + userKey.length] !== ValueType.Put) return { type: 'delete' };
    return { type: 'put', value: this.valueOf(n) };
  }

  /** The sequence of the version get() answers, or −1 if none. */
  sequenceOf(userKey: Uint8Array, snapshot: number): number {
    const n = this.versionNode(userKey, snapshot);
    if (n === NIL) return -1;
    const at = (this.nodes[n + KEY_OFF] >>> 0) + userKey.length;
    return sequenceOf(this.arena.subarray(at, at + TRAILER_BYTES));
  }

  /** The node of the newest version of `userKey` <= `snapshot`, or NIL. */
  private versionNode(userKey: Uint8Array, snapshot: number): number {
    if (this.lookup.length < userKey.length + TRAILER_BYTES) this.lookup = Buffer.allocUnsafe(userKey.length * 2 + TRAILER_BYTES);
    writeTrailer(this.lookup, userKey.length, snapshot, SEEK_TYPE);
    this.lookup.set(userKey, 0);
    const n = this.seekNode(this.lookup, userKey.length + TRAILER_BYTES);
    if (n === NIL) return NIL;
    const off = this.nodes[n + KEY_OFF] >>> 0;
    const ulen = this.nodes[n + KEY_LEN] - TRAILER_BYTES;
    return compareBytes(this.arena, off, off + ulen, userKey, 0, userKey.length) === 0 ? n : NIL;
  }

  iterator(): MemtableIterator {
    return new MemtableIterator(this);
  }

  /** @internal The first node with key >= target[0, len), or NIL. */
  seekNode(target: Uint8Array, len = target.length): number {
    const ulen = len - TRAILER_BYTES;
    const p = this.prefix.length;
    // A target without the prefix compares by its bytes alone (hi = −1: no abbreviation).
    const shares = this.sharesPrefix(target, 0, ulen);
    const hi = shares ? abbreviate3(target, p, ulen) : -1;
    const lo = shares ? abbreviate3(target, p + 3, ulen) : -1;
    const nodes = this.nodes;
    let x = HEAD;
    for (let level = this.height - 1; level >= 0; level--) {
      for (;;) {
        const next = nodes[x + LINKS + level];
        if (next === NIL || this.compareNode(next, hi, lo, target, 0, len) >= 0) break;
        x = next;
      }
    }
    return nodes[x + LINKS];
  }

  /** @internal */
  nextNode(n: number): number {
    return this.nodes[n + LINKS];
  }

  /** @internal */
  keyOf(n: number): Buffer {
    const off = this.nodes[n + KEY_OFF] >>> 0;
    return this.arena.subarray(off, off + this.nodes[n + KEY_LEN]);
  }

  /** @internal */
  valueOf(n: number): Buffer {
    const start = (this.nodes[n + KEY_OFF] >>> 0) + this.nodes[n + KEY_LEN];
    return this.arena.subarray(start, start + this.nodes[n + VAL_LEN]);
  }

  /** Compares node n's internal key with b[off, off+len) (an internal key), whose user key
   * abbreviates to `hi`, `lo` (−1: it does not share the prefix; compare bytes). */
  private compareNode(n: number, hi: number, lo: number, b: Uint8Array, off: number, len: number): number {
    const nodes = this.nodes;
    if (hi >= 0) {
      const nh = nodes[n + ABBR_HI];
      if (nh !== hi) return nh - hi;
      const nl = nodes[n + ABBR_LO];
      if (nl !== lo) return nl - lo;
    }
    const a = this.arena;
    const ao = nodes[n + KEY_OFF] >>> 0;
    const au = ao + nodes[n + KEY_LEN] - TRAILER_BYTES;
    const bu = off + len - TRAILER_BYTES;
    const c = compareBytes(a, ao, au, b, off, bu);
    if (c !== 0) return c;
    // Trailers: larger (newer) first. Compare the high word, then the low one.
    const ahi = (a[au + 4] | (a[au + 5] << 8) | (a[au + 6] << 16)) + a[au + 7] * 0x1000000;
    const bhi = (b[bu + 4] | (b[bu + 5] << 8) | (b[bu + 6] << 16)) + b[bu + 7] * 0x1000000;
    if (ahi !== bhi) return bhi - ahi;
    const alo = (a[au] | (a[au + 1] << 8) | (a[au + 2] << 16)) + a[au + 3] * 0x1000000;
    const blo = (b[bu] | (b[bu + 1] << 8) | (b[bu + 2] << 16)) + b[bu + 3] * 0x1000000;
    return blo - alo;
  }

  private sharesPrefix(b: Uint8Array, off: number, ulen: number): boolean {
    const p = this.prefix;
    if (ulen < p.length) return false;
    for (let i = 0; i < p.length; i++) if (b[off + i] !== p[i]) return false;
    return true;
  }

  /** Cuts the prefix to what `key` shares with it and re-abbreviates every node. */
  private shrinkPrefix(key: Uint8Array): void {
    let c = 0;
    while (c < this.prefix.length && c < key.length && this.prefix[c] === key[c]) c++;
    this.prefix = this.prefix.subarray(0, c);
    const nodes = this.nodes;
    for (let n = nodes[HEAD + LINKS]; n !== NIL; n = nodes[n + LINKS]) {
      const off = nodes[n + KEY_OFF] >>> 0;
      const end = off + nodes[n + KEY_LEN] - TRAILER_BYTES;
      nodes[n + ABBR_HI] = abbreviate3(this.arena, off + c, end);
      nodes[n + ABBR_LO] = abbreviate3(this.arena, off + c + 3, end);
    }
  }

  private reserveArena(n: number): void {
    if (this.used + n <= this.arena.length) return;
    const limit = Math.min(0xffffffff, bufferConstants.MAX_LENGTH);
    if (this.used + n > limit) throw new NovaError('BAD_ARGUMENT', `memtable ${this.id}: over ${limit} bytes; use smaller memtables`);
    let size = this.arena.length * 2;
    while (size < this.used + n) size *= 2;
    size = Math.min(size, limit);
    const next = sharedBytes(size);
    this.arena.copy(next, 0, 0, this.used);
    this.arena = next;
  }

  /** Room for a node of height h; returns where it starts. */
  private newNode(h: number): number {
    const n = this.nodesUsed;
    if (n + LINKS + h > this.nodes.length) {
      if (this.nodes.length * 2 > 0x7fffffff / 4) throw new NovaError('BAD_ARGUMENT', `memtable ${this.id}: too many entries`);
      const bigger = sharedInts(this.nodes.length * 2);
      bigger.set(this.nodes);
      this.nodes = bigger;
    }
    this.nodesUsed += LINKS + h;
    return n;
  }

  private randomHeight(): number {
    let h = 1;
    while (h < MAX_HEIGHT) {
      let x = this.rand;
      x ^= x << 13; x ^= x >>> 17; x ^= x << 5;
      this.rand = x;
      if ((x & 3) !== 0) break; // branching factor 4
      h++;
    }
    return h;
  }
}

/**
 * A memtable's memory as frozen() hands it out: views of shared memory, which a worker
 * thread receives without a copy (postMessage shares a SharedArrayBuffer).
 */
export interface FrozenMemtable {
  arena: Uint8Array;
  nodes: Int32Array;
  entries: number;
}

/** Memory on a SharedArrayBuffer (zero-filled, as fresh pages are), so frozen() can share it. */
function sharedBytes(n: number): Buffer {
  return Buffer.from(new SharedArrayBuffer(n));
}

function sharedInts(n: number): Int32Array {
  return new Int32Array(new SharedArrayBuffer(n * 4));
}

/** Bytes [from, from+3) of b[0, end) as a 24-bit number, zero-padded past `end`. */
function abbreviate3(b: Uint8Array, from: number, end: number): number {
  return ((from < end ? b[from] : 0) << 16) | ((from + 1 < end ? b[from + 1] : 0) << 8) | (from + 2 < end ? b[from + 2] : 0);
}

/** Iterates a memtable in key order; stays valid while inserts continue. */
export class MemtableIterator {
  private node = NIL;

  constructor(private readonly table: Memtable) {}

  get valid(): boolean {
    return this.node !== NIL;
  }

  get key(): Buffer {
    return this.table.keyOf(this.node);
  }

  get value(): Buffer {
    return this.table.valueOf(this.node);
  }

  first(): void {
    this.node = this.table.nextNode(HEAD);
  }

  seek(target: Uint8Array): void {
    this.node = this.table.seekNode(target);
  }

  next(): void {
    this.node = this.table.nextNode(this.node);
  }
}
