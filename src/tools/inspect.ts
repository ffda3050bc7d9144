/**
 * Inspection of Nova's files, as library functions behind `nova tool` (STYLE.md #9):
 * dump prints what a file holds; check verifies every checksum and reports the first fault
 * with its offset. Both read the whole file; neither changes it.
 */
import { readFileSync } from 'node:fs';
import { NovaError } from '../common/errors.js';
import { TRAILER_BYTES, sequenceOf, typeOf } from '../common/internal-key.js';
import { readLog } from '../log/log-format.js';
import { decodeSessions } from '../ltc/sessions.js';
import { idName } from '../common/write-id.js';
import { decodeEdit } from '../log/version-edit.js';
import { decodeBatch } from '../log/write-batch.js';
import { TableReader } from '../sstable/table-reader.js';
import { printable } from '../common/printable.js';

export type FileKind = 'sst' | 'log' | 'manifest';


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

/** Verifies a file end to end. Returns a one-line verdict; throws CORRUPTION on a fault. */
export function checkFile(kind: FileKind, path: string): string {
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
