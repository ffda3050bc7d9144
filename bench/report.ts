/**
 * Rendering of benchmark rows: an aligned text table for the terminal and a standalone
 * HTML page. Rows are plain objects; columns are given by the caller.
 */
export interface Column<Row> {
  title: string;
  value: (row: Row) => string;
  align?: 'left' | 'right';
}

export function textTable<Row>(rows: Row[], columns: Column<Row>[]): string {
  const cells = rows.map((row) => columns.map((c) => c.value(row)));
  const widths = columns.map((c, i) => Math.max(c.title.length, ...cells.map((r) => r[i].length)));
  const line = (values: string[]): string =>
    values.map((v, i) => (columns[i].align === 'left' ? v.padEnd(widths[i]) : v.padStart(widths[i]))).join('  ');
  return [line(columns.map((c) => c.title)), line(widths.map((w) => '-'.repeat(w))), ...cells.map(line)].join('\n');
}

export function htmlReport<Row>(title: string, notes: string[], rows: Row[], columns: Column<Row>[]): string {
  const esc = (s: string): string => s.replace(/[&<>"]/g, (ch) => `&#${ch.charCodeAt(0)};`);
  const head = columns.map((c) => `<th>${esc(c.title)}</th>`).join('');
  const body = rows.map((row) => `<tr>${columns.map((c) =>
    `<td class="${c.align === 'left' ? 'l' : 'r'}">${esc(c.value(row))}</td>`).join('')}</tr>`).join('\n');
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>${esc(title)}</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 2em; color: #222 }
table { border-collapse: collapse } th, td { padding: 4px 10px; border-bottom: 1px solid #ddd }
th { text-align: left; background: #f4f4f4 } td.r { text-align: right; font-variant-numeric: tabular-nums }
</style></head><body>
<h1>${esc(title)}</h1>
${notes.map((n) => `<p>${esc(n)}</p>`).join('\n')}
<table><thead><tr>${head}</tr></thead><tbody>
${body}
</tbody></table></body></html>
`;
}
