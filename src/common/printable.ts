/** How keys and values are shown to people: in logs, errors and the tools' output. */
import { NovaError } from './errors.js';

/** Printable form of a key or value: text if it is plain ASCII, else hex. */
export function printable(b: Buffer, max = 48): string {
  const shown = b.subarray(0, max);
  const text = [...shown].every((c) => c >= 0x20 && c < 0x7f);
  const body = text ? JSON.stringify(shown.toString('latin1')) : `0x${shown.toString('hex')}`;
  return b.length > max ? `${body}…(${b.length} bytes)` : body;
}

/**
 * A key or value as printable() shows it in full (`nova scan`'s lines): a JSON string of
 * ASCII, or 0x and hex. BAD_ARGUMENT naming `where` for anything else.
 */
export function parsePrintable(text: string, where: string): Buffer {
  if (text.startsWith('"')) {
    let s: unknown;
    try {
      s = JSON.parse(text);
    } catch {
      s = undefined;
    }
    if (typeof s === 'string' && [...s].every((c) => c.charCodeAt(0) < 0x100)) return Buffer.from(s, 'latin1');
  } else if (/^0x([0-9a-fA-F]{2})*$/.test(text)) {
    return Buffer.from(text.slice(2), 'hex');
  }
  throw new NovaError('BAD_ARGUMENT', `${where}: "${text.length > 40 ? `${text.slice(0, 40)}…` : text}" is neither a JSON string nor 0x and hex digits (as nova scan prints keys and values)`);
}
