/**
 * A memtable: an in-memory sorted map of internal keys, kept in a skiplist (LevelDB
 * db/skiplist.h, db/memtable.cc). A memtable is a value with an id, so a range can hold
 * many of them, several active at once (DESIGN.md §4).
 *
 * Layout: keys and values are copied into one arena Buffer, and nodes are rows of typed
 * arrays (offsets, lengths, and their forward links in one Int32Array). An insert allocates
 * no JS objects, and a search walks compact memory; a first version with one object and two
 * Buffers per entry ran at ~0.1 M inserts/s, bound by pointer chasing and allocation.
 *
 * Invariants: nodes are never removed or moved once linked (the arena only grows, by copying;
 * views handed out keep the old copy alive, and entries never change), so an iterator stays
 * valid while inserts continue and sees every entry that sorts after it when it moves.
 * Keys are unique: a sequence number is never reused. Single-threaded, like all JS here.
 */
import { NovaError } from '../common/errors.js';
import { SEEK_TYPE, TRAILER_BYTES, ValueType, abbreviateKey, compareBytes, writeTrailer } from '../common/internal-key.js';
import type { GetResult } from '../sstable/table-reader.js';

const MAX_HEIGHT = 12;
const HEAD = 0;
const NIL = -1;

export class Memtable {
  private arena = Buffer.allocUnsafe(1 << 20);
  private used = 0;
  // Node rows; node 0 is the head.
  private keyOff = new Uint32Array(1024);
  private keyLen = new Uint32Array(1024);
  private valLen = new Uint32Array(1024); // the value follows its key in the arena
  // The first 6 bytes of each user key as a number (zero-padded): most comparisons end
  // here, without touching the arena.
  private abbr = new Float64Array(1024);
  private linkAt = new Uint32Array(1024); // first link of the node in `links`
  private links = new Int32Array(4096);
  private nodes = 1;
  private linksUsed = MAX_HEIGHT;
  private height = 1;
  private readonly prev = new Int32Array(MAX_HEIGHT);
  private rand = 0x2545f491;
  private lookup = Buffer.allocUnsafe(256);

  constructor(readonly id: number) {
    this.links.fill(NIL, 0, MAX_HEIGHT);
  }

  /** Memory the entries take (arena bytes plus node rows), for deciding when it is full. */
  get approximateBytes(): number {
    return this.used + this.nodes * 16 + this.linksUsed * 4;
  }

  get entries(): number {
    return this.nodes - 1;
  }

  /** REQUIRES: `sequence` was never used before for `userKey` in this memtable. */
  add(sequence: number, type: ValueType, userKey: Uint8Array, value: Uint8Array): void {
    const klen = userKey.length + TRAILER_BYTES;
    this.reserveArena(klen + value.length);
    const koff = this.used;
    this.arena.set(userKey, koff);
    writeTrailer(this.arena, koff + userKey.length, sequence, type);
    this.arena.set(value, koff + klen);
    // Search with the key where it now lies in the arena (not yet linked, not yet `used`).
    const abbr = abbreviateKey(userKey, 0, userKey.length);
    const prev = this.prev;
    let x = HEAD;
    for (let level = this.height - 1; level >= 0; level--) {
      for (;;) {
        const next = this.links[this.linkAt[x] + level];
        if (next === NIL) break;
        const c = this.compareNode(next, abbr, this.arena, koff, klen);
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
    const n = this.newNode(koff, klen, value.length, h);
    this.abbr[n] = abbr;
    this.used += klen + value.length;
    for (let level = 0; level < h; level++) {
      const p = this.linkAt[prev[level]] + level;
      this.links[this.linkAt[n] + level] = this.links[p];
      this.links[p] = n;
    }
  }

  /** The newest version of `userKey` with sequence <= `snapshot`, if any. */
  get(userKey: Uint8Array, snapshot: number): GetResult {
    if (this.lookup.length < userKey.length + TRAILER_BYTES) this.lookup = Buffer.allocUnsafe(userKey.length * 2 + TRAILER_BYTES);
    writeTrailer(this.lookup, userKey.length, snapshot, SEEK_TYPE);
    this.lookup.set(userKey, 0);
    const n = this.seekNode(this.lookup, userKey.length + TRAILER_BYTES);
    if (n === NIL) return undefined;
    const off = this.keyOff[n];
    const ulen = this.keyLen[n] - TRAILER_BYTES;
    if (compareBytes(this.arena, off, off + ulen, userKey, 0, userKey.length) !== 0) return undefined;
    if (this.arena[off + ulen] !== ValueType.Put) return { type: 'delete' };
    return { type: 'put', value: this.valueOf(n) };
  }

  iterator(): MemtableIterator {
    return new MemtableIterator(this);
  }

  /** @internal The first node with key >= target[0, len), or NIL. */
  seekNode(target: Uint8Array, len = target.length): number {
    const abbr = abbreviateKey(target, 0, len - TRAILER_BYTES);
    let x = HEAD;
    for (let level = this.height - 1; level >= 0; level--) {
      for (;;) {
        const next = this.links[this.linkAt[x] + level];
        if (next === NIL || this.compareNode(next, abbr, target, 0, len) >= 0) break;
        x = next;
      }
    }
    return this.links[this.linkAt[x]];
  }

  /** @internal */
  nextNode(n: number): number {
    return this.links[this.linkAt[n]];
  }

  /** @internal */
  keyOf(n: number): Buffer {
    return this.arena.subarray(this.keyOff[n], this.keyOff[n] + this.keyLen[n]);
  }

  /** @internal */
  valueOf(n: number): Buffer {
    const start = this.keyOff[n] + this.keyLen[n];
    return this.arena.subarray(start, start + this.valLen[n]);
  }

  /** Compares node n's internal key with b[off, off+len) (an internal key), whose user key
   * abbreviates to `abbr`. */
  private compareNode(n: number, abbr: number, b: Uint8Array, off: number, len: number): number {
    const na = this.abbr[n];
    if (na !== abbr) return na < abbr ? -1 : 1;
    const a = this.arena;
    const ao = this.keyOff[n];
    const au = ao + this.keyLen[n] - TRAILER_BYTES;
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

  private reserveArena(n: number): void {
    if (this.used + n <= this.arena.length) return;
    let size = this.arena.length * 2;
    while (size < this.used + n) size *= 2;
    if (size > 0xffffffff) throw new NovaError('BAD_ARGUMENT', `memtable ${this.id}: over 4 GiB`);
    const next = Buffer.allocUnsafe(size);
    this.arena.copy(next, 0, 0, this.used);
    this.arena = next;
  }

  private newNode(koff: number, klen: number, vlen: number, h: number): number {
    const n = this.nodes;
    if (n === this.keyOff.length) {
      this.keyOff = grow(this.keyOff);
      this.keyLen = grow(this.keyLen);
      this.valLen = grow(this.valLen);
      this.linkAt = grow(this.linkAt);
      const abbr = new Float64Array(this.abbr.length * 2);
      abbr.set(this.abbr);
      this.abbr = abbr;
    }
    if (this.linksUsed + h > this.links.length) {
      const links = new Int32Array(this.links.length * 2);
      links.set(this.links);
      this.links = links;
    }
    this.keyOff[n] = koff;
    this.keyLen[n] = klen;
    this.valLen[n] = vlen;
    this.linkAt[n] = this.linksUsed;
    this.linksUsed += h;
    this.nodes++;
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

function grow(a: Uint32Array): Uint32Array<ArrayBuffer> {
  const b = new Uint32Array(a.length * 2);
  b.set(a);
  return b;
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
