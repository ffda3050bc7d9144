/**
 * Version edits: the MANIFEST's records (doc/format/manifest.md). Each edit says what
 * changed in a range's tree: tables added (with level, size, key span and where its bytes
 * live) or removed, memtables bound to or released from their log files, the next file
 * number, the last sequence, the Drange and Trange boundaries when they change, and the range's client
 * sessions (sessions.ts) when a flush releases logs. Replaying edits in order rebuilds the
 * tree exactly.
 *
 *   edit  = u8 version (5) | field*
 *   field = u8 tag | fields of that tag        (tags never renumber)
 */
import { ByteBuilder, readU32, readVarint } from '../common/coding.js';
import { NovaError } from '../common/errors.js';

/**
 * Edit versions. Never renumber.
 * 1: tags 1–7.
 * 2: tag 8, the client session table.
 * 3: tag 9, the Trange boundaries.
 * 4: tag 10, active memtables per Drange (duplicated Dranges).
 * 5: each fragment of tag 4 carries flags, and with flag 1 the checksum of its bytes; a table
 *    may list several copies of a fragment (same offset and size, other StoCs).
 * 6: fragment flag 2, a parity fragment (the XOR of the table's data pieces).
 */
const EDIT_VERSION = 6;
/** Fragment flag: a checksum of the fragment's bytes follows. */
const FRAGMENT_CRC = 1;
/** Fragment flag (version 6): the fragment is the table's parity. */
const FRAGMENT_PARITY = 2;

/** Active memtables a range may have, all Dranges' copies together: a bound on what an edit may claim. */
export const MAX_ACTIVE_MEMTABLES = 1024;
const TAG_NEXT_FILE = 1;
const TAG_LAST_SEQUENCE = 2;
const TAG_REMOVE_TABLE = 3;
const TAG_ADD_TABLE = 4;
const TAG_BIND_LOG = 5;
const TAG_RELEASE_LOG = 6;
const TAG_DRANGES = 7;
const TAG_SESSIONS = 8;
const TAG_TRANGES = 9;
const TAG_COPIES = 10;

/**
 * Where a piece of a table's bytes lives: a StoC (or 0, a local directory), a span, and the
 * XXH32 of those bytes (tables written before edit version 5 have none). A table lists every
 * copy of a piece as a fragment of its own (src/compaction/fragments.ts).
 */
export interface Fragment {
  stoc: number;
  offset: number;
  size: number;
  crc?: number;
  /** The XOR of the table's data pieces (each zero-padded to the longest), not a part of the table (fragments.ts). */
  parity?: boolean;
}

export interface TableMeta {
  level: number;
  file: number;
  size: number;
  entries: number;
  smallest: Buffer; // internal keys
  largest: Buffer;
  fragments: Fragment[];
}

export interface VersionEdit {
  nextFile?: number;
  lastSequence?: number;
  removed: Array<{ level: number; file: number }>;
  added: TableMeta[];
  boundLogs: Array<{ memtable: number; log: number }>;
  releasedLogs: number[]; // memtable ids
  /** New Drange boundaries (split user keys, ascending), when they change. */
  dranges?: Buffer[];
  /** The Tranges' boundaries, with the Dranges' (each Drange bound is one of them). */
  tranges?: Buffer[];
  /** Active memtables per Drange, with new Drange bounds when some Drange has several. */
  copies?: number[];
  /** The whole client session table (SessionTable.encode), replacing the one before. */
  sessions?: Buffer;
}

export function emptyEdit(): VersionEdit {
  return { removed: [], added: [], boundLogs: [], releasedLogs: [] };
}

/**
 * A tree as a MANIFEST's edits so far leave it: replaying edits in order (apply) and stating
 * the result as one edit (snapshot), which is how a new MANIFEST starts. Pure.
 */
export class ManifestState {
  readonly tables = new Map<number, TableMeta>();
  readonly logs = new Map<number, number>(); // memtable -> log file
  bounds: Buffer[] = [];
  /** Trange bounds; undefined for a tree from before Tranges (each Drange one Trange). */
  tranges: Buffer[] | undefined;
  /** Active memtables per Drange; undefined: one each. */
  copies: number[] | undefined;
  sessions: Buffer | undefined;
  nextFile = 1;
  lastSequence = 0;

  apply(e: VersionEdit): void {
    if (e.nextFile !== undefined) this.nextFile = Math.max(this.nextFile, e.nextFile);
    if (e.lastSequence !== undefined) this.lastSequence = Math.max(this.lastSequence, e.lastSequence);
    for (const x of e.removed) this.tables.delete(x.file);
    for (const t of e.added) this.tables.set(t.file, t);
    for (const b of e.boundLogs) this.logs.set(b.memtable, b.log);
    for (const m of e.releasedLogs) this.logs.delete(m);
    if (e.dranges !== undefined) {
      this.bounds = e.dranges;
      this.tranges = e.tranges;
      this.copies = e.copies;
    }
    if (e.sessions !== undefined) this.sessions = e.sessions;
  }

  /** One edit that states the whole tree. */
  snapshot(): VersionEdit {
    const e = emptyEdit();
    e.added = [...this.tables.values()].sort((a, b) => a.file - b.file);
    e.boundLogs = [...this.logs].map(([memtable, log]) => ({ memtable, log }));
    if (this.bounds.length > 0) e.dranges = this.bounds;
    if (this.bounds.length > 0 && this.tranges) e.tranges = this.tranges;
    if (this.bounds.length > 0 && this.copies) e.copies = this.copies;
    if (this.sessions !== undefined) e.sessions = this.sessions;
    e.nextFile = this.nextFile;
    e.lastSequence = this.lastSequence;
    return e;
  }
}

export function encodeEdit(e: VersionEdit): Buffer {
  const out = new ByteBuilder(128);
  out.u8(EDIT_VERSION);
  if (e.nextFile !== undefined) { out.u8(TAG_NEXT_FILE); out.varint(e.nextFile); }
  if (e.lastSequence !== undefined) { out.u8(TAG_LAST_SEQUENCE); out.varint(e.lastSequence); }
  for (const r of e.removed) { out.u8(TAG_REMOVE_TABLE); out.varint(r.level); out.varint(r.file); }
  for (const t of e.added) {
    out.u8(TAG_ADD_TABLE);
    out.varint(t.level); out.varint(t.file); out.varint(t.size); out.varint(t.entries);
    out.varint(t.smallest.length); out.bytes(t.smallest);
    out.varint(t.largest.length); out.bytes(t.largest);
    out.varint(t.fragments.length);
    for (const f of t.fragments) {
      out.varint(f.stoc); out.varint(f.offset); out.varint(f.size);
      out.varint((f.crc === undefined ? 0 : FRAGMENT_CRC) | (f.parity ? FRAGMENT_PARITY : 0));
      if (f.crc !== undefined) out.u32(f.crc);
    }
  }
  for (const b of e.boundLogs) { out.u8(TAG_BIND_LOG); out.varint(b.memtable); out.varint(b.log); }
  for (const m of e.releasedLogs) { out.u8(TAG_RELEASE_LOG); out.varint(m); }
  if (e.dranges !== undefined) {
    out.u8(TAG_DRANGES); out.varint(e.dranges.length);
    for (const k of e.dranges) { out.varint(k.length); out.bytes(k); }
  }
  if (e.sessions !== undefined) { out.u8(TAG_SESSIONS); out.varint(e.sessions.length); out.bytes(e.sessions); }
  if (e.tranges !== undefined) {
    out.u8(TAG_TRANGES); out.varint(e.tranges.length);
    for (const k of e.tranges) { out.varint(k.length); out.bytes(k); }
  }
  if (e.copies !== undefined) {
    out.u8(TAG_COPIES); out.varint(e.copies.length);
    for (const n of e.copies) out.varint(n);
  }
  return out.finish();
}

export function decodeEdit(b: Buffer, where: string): VersionEdit {
  const c = { at: 0 };
  const bad = (offset: number, why: string): never => {
    throw new NovaError('CORRUPTION', `${where}: version edit ${why} at offset ${offset}`);
  };
  const num = (): number => {
    try {
      return readVarint(b, c, b.length);
    } catch (err) {
      return bad(c.at, (err as Error).message);
    }
  };
  const bytes = (): Buffer => {
    const n = num();
    if (c.at + n > b.length) bad(c.at, `field of ${n} bytes overruns the edit`);
    const v = Buffer.from(b.subarray(c.at, c.at + n));
    c.at += n;
    return v;
  };
  const keys = (what: string): Buffer[] => {
    const count = num();
    if (count > b.length) bad(c.at, `claims ${count} ${what}`);
    const out: Buffer[] = [];
    for (let i = 0; i < count; i++) out.push(bytes());
    return out;
  };
  if (b.length < 1) bad(0, 'is empty');
  if (b[0] < 1 || b[0] > EDIT_VERSION) bad(0, `has unsupported version ${b[0]}`);
  const version = b[0];
  c.at = 1;
  const e = emptyEdit();
  while (c.at < b.length) {
    const tagAt = c.at;
    const tag = b[c.at++];
    switch (tag) {
      case TAG_NEXT_FILE: e.nextFile = num(); break;
      case TAG_LAST_SEQUENCE: e.lastSequence = num(); break;
      case TAG_REMOVE_TABLE: {
        const level = num();
        if (level >= 7) bad(tagAt + 1, `names level ${level}`);
        e.removed.push({ level, file: num() });
        break;
      }
      case TAG_ADD_TABLE: {
        const levelAt = c.at;
        const level = num(); const file = num(); const size = num(); const entries = num();
        if (level >= 7) bad(levelAt, `names level ${level}`);
        const keyAt = c.at;
        const smallest = bytes(); const largest = bytes();
        if (smallest.length < 8 || largest.length < 8) bad(keyAt, 'has a table key without its 8-byte trailer');
        const count = num();
        if (count > b.length) bad(c.at, `claims ${count} fragments`);
        const fragments: Fragment[] = [];
        for (let i = 0; i < count; i++) {
          const f: Fragment = { stoc: num(), offset: num(), size: num() };
          if (version >= 5) {
            const flagsAt = c.at;
            const flags = num();
            if ((flags & ~(version >= 6 ? FRAGMENT_CRC | FRAGMENT_PARITY : FRAGMENT_CRC)) !== 0) bad(flagsAt, `has fragment flags ${flags}`);
            if (flags & FRAGMENT_PARITY) f.parity = true;
            if (flags & FRAGMENT_CRC) {
              if (c.at + 4 > b.length) bad(c.at, 'ends inside a fragment checksum');
              f.crc = readU32(b, c.at);
              c.at += 4;
            }
          }
          fragments.push(f);
        }
        e.added.push({ level, file, size, entries, smallest, largest, fragments });
        break;
      }
      case TAG_BIND_LOG: e.boundLogs.push({ memtable: num(), log: num() }); break;
      case TAG_RELEASE_LOG: e.releasedLogs.push(num()); break;
      case TAG_DRANGES:
        e.dranges = keys('Drange bounds');
        break;
      case TAG_TRANGES:
        if (version < 3) bad(tagAt, `has tag ${tag}, which version ${version} does not have`);
        e.tranges = keys('Trange bounds');
        break;
      case TAG_COPIES: {
        if (version < 4) bad(tagAt, `has tag ${tag}, which version ${version} does not have`);
        const count = num();
        if (count > MAX_ACTIVE_MEMTABLES) bad(c.at, `claims ${count} Dranges' copies`);
        e.copies = [];
        let total = 0;
        for (let i = 0; i < count; i++) {
          const at = c.at;
          const n = num();
          total += n;
          if (n < 1 || total > MAX_ACTIVE_MEMTABLES) bad(at, `gives a Drange ${n} active memtables (${total} in all; at most ${MAX_ACTIVE_MEMTABLES})`);
          e.copies.push(n);
        }
        if (e.dranges !== undefined && e.copies.length !== e.dranges.length + 1) bad(tagAt, `gives ${count} Dranges copies, not ${e.dranges.length + 1}`);
        break;
      }
      case TAG_SESSIONS:
        if (version < 2) bad(tagAt, `has tag ${tag}, which version ${version} does not have`);
        e.sessions = bytes();
        break;
      default: bad(tagAt, `has unknown tag ${tag}`);
    }
  }
  return e;
}
