/**
 * A StoC's fences (doc/format/fences.md): per range, the newest epoch an LTC opened it under.
 * An LTC opening a range fences it on every StoC with the range's epoch (the configuration
 * id that gave it the range); from then on the StoC refuses writes to the range's files —
 * appends, direct writes, removes, memory log files — on a connection that fenced it under an
 * older epoch. So an LTC that was only paused while its range moved on cannot write the
 * range's logs or MANIFEST after the new LTC read them (doc/decisions/ltc-failover.md).
 *
 * The epochs are kept in the file FENCES in the StoC's directory, replaced atomically and
 * synced before a raise is answered: a restarted StoC still refuses the old LTC.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { checksum32 } from '../common/checksum.js';
import { NovaError } from '../common/errors.js';
import { replaceFile } from '../common/files.js';

export const FENCES_FILE = 'FENCES';
const HEADER = 'nova-fences 1';
/** The largest epoch a fence takes: what the file's 15 digits hold. */
export const MAX_EPOCH = 10 ** 15 - 1;
/** Ranges a StoC keeps fences for at most; more is BAD_ARGUMENT (a bogus client). */
export const MAX_FENCES = 100_000;

/** The file's text: a header, one `range epoch` line per range, and the checksum of all before it. */
export function encodeFences(epochs: ReadonlyMap<number, number>): string {
  const body = `${HEADER}\n${[...epochs].sort((a, b) => a[0] - b[0]).map(([r, e]) => `${r} ${e}\n`).join('')}`;
  return `${body}xxh32 ${checksum32(Buffer.from(body)).toString(16).padStart(8, '0')}\n`;
}

/** The epochs in `text`; CORRUPTION naming `path` and the byte offset of what is wrong. */
export function decodeFences(text: string, path: string): Map<number, number> {
  const bad = (offset: number, what: string): NovaError =>
    new NovaError('CORRUPTION', `${path}: ${what} at byte ${offset}; move the file away to start without fences (then a paused LTC is not fenced off until its ranges open again)`);
  const last = text.lastIndexOf('xxh32 ');
  if (!text.startsWith(`${HEADER}\n`)) throw bad(0, `not a fences file of version 1 (want "${HEADER}")`);
  if (last < 0 || !/^xxh32 [0-9a-f]{8}\n$/.test(text.slice(last))) throw bad(Math.max(0, last), 'no checksum line at the end (a torn write?)');
  const body = text.slice(0, last);
  const want = Number.parseInt(text.slice(last + 6, last + 14), 16);
  if (checksum32(Buffer.from(body)) !== want) throw bad(last, 'checksum mismatch');
  const epochs = new Map<number, number>();
  let at = HEADER.length + 1;
  for (const line of body.slice(at).split('\n').slice(0, -1)) {
    const m = /^(\d{1,15}) (\d{1,15})$/.exec(line);
    if (!m) throw bad(at, `bad line "${line.slice(0, 40)}"`);
    epochs.set(Number(m[1]), Number(m[2]));
    at += line.length + 1;
  }
  return epochs;
}

/** The range of a file named `r<range>-…` (tableFileName, logFileName, manifestFileName); else undefined. */
export function rangeOfFile(name: string): number | undefined {
  if (name.charCodeAt(0) !== 0x72) return undefined; // 'r'
  let range = 0;
  for (let i = 1; i < name.length && i < 17; i++) {
    const c = name.charCodeAt(i);
    if (c === 0x2d) return i > 1 ? range : undefined; // '-'
    if (c < 0x30 || c > 0x39) return undefined;
    range = range * 10 + (c - 0x30);
  }
  return undefined;
}

export class Fences {
  private readonly epochs: Map<number, number>;

  constructor(private readonly dir: string) {
    const path = join(dir, FENCES_FILE);
    this.epochs = existsSync(path) ? decodeFences(readFileSync(path, 'utf8'), path) : new Map();
  }

  /** The newest epoch range `range` was opened under here (0: none). */
  epoch(range: number): number {
    return this.epochs.get(range) ?? 0;
  }

  /** Records that `range` was opened under `epoch`; true if that raised its fence (then durably). */
  raise(range: number, epoch: number): boolean {
    if (epoch <= this.epoch(range)) return false;
    if (!this.epochs.has(range) && this.epochs.size >= MAX_FENCES) {
      throw new NovaError('BAD_ARGUMENT', `fences are kept for at most ${MAX_FENCES} ranges`);
    }
    const next = new Map(this.epochs).set(range, epoch);
    replaceFile(this.dir, FENCES_FILE, encodeFences(next));
    this.epochs.set(range, epoch);
    return true;
  }
}
