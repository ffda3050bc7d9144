/** How keys and values are shown to people: in logs, errors and the tools' output. */

/** Printable form of a key or value: text if it is plain ASCII, else hex. */
export function printable(b: Buffer, max = 48): string {
  const shown = b.subarray(0, max);
  const text = [...shown].every((c) => c >= 0x20 && c < 0x7f);
  const body = text ? JSON.stringify(shown.toString('latin1')) : `0x${shown.toString('hex')}`;
  return b.length > max ? `${body}…(${b.length} bytes)` : body;
}
