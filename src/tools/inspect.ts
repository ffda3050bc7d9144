/**
 * Inspection of Nova's files, as library functions behind `nova tool` (STYLE.md #9):
 * dump prints what a file holds; check verifies every checksum and reports the first fault
 * with its offset. Both read the whole file; neither changes it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { checkCopy } from '../compaction/fragments.js';
import { BlockCache } from '../sstable/block-cache.js';
import { readFooter, type Footer } from '../sstable/format.js';
import { NovaError } from '../common/errors.js';
import { TRAILER_BYTES, sequenceOf, typeOf } from '../common/internal-key.js';
import { readLog } from '../log/log-format.js';
import { decodeSessions } from '../ltc/sessions.js';
import { idName } from '../common/write-id.js';
import { decodeEdit, ManifestState, type TableMeta } from '../log/version-edit.js';
import { decodeBatch } from '../log/write-batch.js';
import { TableReader } from '../sstable/table-reader.js';
import { printable } from '../common/printable.js';
import { readCacheLog, type CacheRecord } from '../stoc/cache-log.js';

function cacheRecordLine(r: CacheRecord): string {
  switch (r.type) {
    case 'set': return `set ${printable(r.key)} = ${printable(r.value)} (fragment ${r.fragment}, config ${r.configId})`;
    case 'delete': return `delete ${printable(r.key)}`;
    case 'dirtyInit': return `dirty list of fragment ${r.fragment} started with its marker (config ${r.configId})`;
    case 'dirtyAdd': return `dirty list of fragment ${r.fragment} += ${printable(r.key)}`;
    case 'dirtyDrop': return `dirty list of fragment ${r.fragment} dropped`;
    case 'dirtyDone': return `dirty list of fragment ${r.fragment} processed`;
  }
}

export type FileKind = 'sst' | 'log' | 'manifest' | 'cache';


function internal(k: Buffer): string {
  const type = typeOf(k) === 1 ? 'put' : typeOf(k) === 0 ? 'del' : `type${typeOf(k)}`;
  return `${printable(k.subarray(0, k.length - TRAILER_BYTES))} @${sequenceOf(k)} ${type}`;
}

/** Lines describing the file. Throws NovaError CORRUPTION (with offset) on a bad file. */
export function dumpFile(kind: FileKind, path: string, limit = Infinity): string[] {
  const bytes = readFileSync(path);
  const out: string[] = [];
  if (kind === 'sst') {
    const t = new TableReader(bytes, path);
    const f = t.footer;
    out.push(`table ${path}: ${bytes.length} bytes, ${f.entries} entries, format v${f.version}`,
      `index block at ${f.index.offset} (${f.index.size} bytes), filter block at ${f.filter.offset} (${f.filter.size} bytes)`);
    const it = t.iterator();
    let n = 0;
    for (it.first(); it.valid && n < limit; it.next(), n++) out.push(`${internal(it.key)} = ${printable(it.value)}`);
    return out;
  }
  if (kind === 'cache') {
    const c = readCacheLog(bytes, path);
    out.push(`cache log ${path}: ${bytes.length} bytes, ${c.records.length} records${c.tornTail ? `; ${c.tornTail}` : ''}`);
    for (const r of c.records.slice(0, limit)) out.push(cacheRecordLine(r));
    return out;
  }
  const log = readLog(bytes, path);
  out.push(`${kind} ${path}: ${bytes.length} bytes, ${log.records.length} records${log.tornAt !== undefined ? `, torn tail at offset ${log.tornAt}` : ''}`);
  log.records.slice(0, limit).forEach((r, i) => {
    if (kind === 'log') {
      const b = decodeBatch(r, `${path} record ${i}`);
      const client = b.session ? `, client ${idName(b.session)} write ${b.session.seq} (floor ${b.session.floor})` : '';
      out.push(`record ${i}: memtable ${b.memtableId}, sequences ${b.firstSequence}..${b.firstSequence + b.entries.length - 1}${client}`);
      for (const e of b.entries) out.push(`  ${e.type === 1 ? 'put' : 'del'} ${printable(e.key)}${e.type === 1 ? ` = ${printable(e.value)}` : ''}`);
    } else {
      const e = decodeEdit(r, `${path} record ${i}`);
      const parts: string[] = [];
      if (e.nextFile !== undefined) parts.push(`nextFile ${e.nextFile}`);
      if (e.lastSequence !== undefined) parts.push(`lastSequence ${e.lastSequence}`);
      for (const x of e.removed) parts.push(`remove L${x.level} #${x.file}`);
      for (const t of e.added) parts.push(`add L${t.level} #${t.file} ${t.size} B [${internal(t.smallest)} .. ${internal(t.largest)}]`);
      for (const b of e.boundLogs) parts.push(`bind memtable ${b.memtable} -> log ${b.log}`);
      for (const m of e.releasedLogs) parts.push(`release memtable ${m}`);
      if (e.dranges) parts.push(`dranges ${e.dranges.length + 1}: split at ${e.dranges.map((k) => printable(k)).join(', ')}`);
      if (e.sessions) {
        const sessions = decodeSessions(e.sessions, `${path} record ${i} sessions`);
        parts.push(`sessions ${sessions.length}: ${sessions.slice(0, 4).map((x) => `${idName(x)} floor ${x.floor} applied [${x.applied.join(',')}] idle ${x.idleMs} ms`).join(', ')}${sessions.length > 4 ? ', …' : ''}`);
      }
      out.push(`edit ${i}: ${parts.join('; ') || '(empty)'}`);
    }
  });
  return out;
}

/**
 * Verifies a file end to end. Returns a one-line verdict; throws CORRUPTION on a fault. An .sst
 * file on a StoC may be one fragment of a table (src/compaction/fragments.ts): its metadata
 * fragment is checked by its own blocks, and a data fragment by the checksum its range's
 * MANIFEST records, read from the MANIFEST replicas in the same directory.
 */
export function checkFile(kind: FileKind, path: string): string {
  if (kind === 'sst') {
    const fragment = checkFragment(path);
    if (fragment) return fragment;
  }
  const lines = dumpFile(kind, path);
  if (kind === 'sst') {
    const t = new TableReader(readFileSync(path), path);
    const it = t.iterator();
    let n = 0;
    for (it.first(); it.valid; it.next()) n++;
    if (n !== t.entries) throw new NovaError('CORRUPTION', `${path}: footer says ${t.entries} entries but ${n} were read at offset ${t.footer.index.offset}`);
  }
  return `${path}: OK (${lines[0]})`;
}

/**
 * The verdict on `path` if it is a fragment of a table rather than a whole one; undefined for
 * a whole table (the caller checks it). Throws CORRUPTION naming the fault and its offset.
 */
function checkFragment(path: string): string | undefined {
  const bytes = readFileSync(path);
  let footer: Footer | undefined;
  try {
    footer = readFooter(bytes, path);
  } catch {
    // no footer: a data fragment (or a damaged table), judged by the MANIFEST below
  }
  if (footer) {
    const start = Math.min(footer.index.offset, footer.filter.offset);
    const tableBytes = start + bytes.length;
    // A whole table's metadata lies inside it; a metadata fragment's handles point past its start.
    if (footer.index.offset + footer.index.size <= bytes.length && footer.filter.offset + footer.filter.size <= bytes.length) return undefined;
    TableReader.metadataOnly(bytes, start, path, new BlockCache(0));
    return `${path}: OK (the metadata fragment of a table of ${tableBytes} bytes, ${footer.entries} entries: filter, index and footer from table offset ${start})`;
  }
  const name = /^r(\d+)-(\d+)\.sst$/.exec(basename(path));
  const stoc = /^stoc-(\d+)$/.exec(basename(dirname(resolve(path))));
  if (!name || !stoc) return undefined; // not a StoC's file: checked as a table, which names the fault
  const range = Number(name[1]);
  const table = Number(name[2]);
  const meta = tableInManifests(dirname(resolve(path)), range, table);
  if (!meta) {
    throw new NovaError('BAD_ARGUMENT', `${path}: no footer, so a data fragment of table ${table} of range ${range}; no MANIFEST in its directory names that table, so its checksum is not known here (check it in a StoC directory that holds a replica of the range's MANIFEST)`);
  }
  const own = meta.fragments.filter((f) => f.stoc === Number(stoc[1]));
  if (own.length === 0) throw new NovaError('BAD_ARGUMENT', `${path}: the MANIFEST places no fragment of table ${table} on StoC ${stoc[1]}: an orphan the range's next open deletes`);
  const f = own[0];
  if (bytes.length !== f.size) throw new NovaError('CORRUPTION', `${path}: ${bytes.length} bytes, where the MANIFEST's fragment at table offset ${f.offset} has ${f.size}, at offset ${Math.min(bytes.length, f.size)}`);
  if (f.crc === undefined) return `${path}: size OK (a data fragment of table ${table}, table offset ${f.offset}; written before fragments had checksums)`;
  checkCopy(f, bytes, path);
  if (f.parity) return `${path}: OK (the parity of table ${table}'s data fragments, ${f.size} bytes, checksum as the MANIFEST records)`;
  return `${path}: OK (a data fragment of table ${table}, ${f.size} bytes from table offset ${f.offset}, checksum as the MANIFEST records)`;
}

/** Table `table` as the newest readable MANIFEST replica of range `range` in `dir` describes it. */
function tableInManifests(dir: string, range: number, table: number): TableMeta | undefined {
  const prefix = `r${range}-`;
  const manifests = readdirSync(dir).filter((f) => f.startsWith(prefix) && f.endsWith('.manifest')).sort().reverse();
  for (const m of manifests) {
    const path = join(dir, m);
    try {
      const state = new ManifestState();
      readLog(readFileSync(path), path).records.forEach((r, i) => state.apply(decodeEdit(r, `${path} record ${i}`)));
      const t = state.tables.get(table);
      if (t) return t;
    } catch {
      // a damaged replica: an older one may still name the table
    }
  }
  return undefined;
}
