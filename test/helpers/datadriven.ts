/**
 * Data-driven tests (Pebble's datadriven): a file of cases, each a command line, its input
 * lines, `----`, and the output expected, ended by a blank line. `run` hands each case to
 * `fn` (which may be async) and compares what it returns; NOVA_REWRITE=1 writes the outputs into the file instead.
 *
 *   pick l0Trigger=4 l1Bytes=1000
 *   L0: 1:a-c 2:b-d
 *   ----
 *   L0 -> L1: inputs 1 2; overlapping none
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { expect } from 'vitest';

export interface Case {
  /** The command's first word, and its `key=value` arguments (bare words map to ''). */
  command: string;
  args: Record<string, string>;
  input: string[];
  /** Where the case is: file and line, for messages. */
  where: string;
}

interface Parsed { comments: string[]; head: string; input: string[]; output: string[]; line: number }

function parse(text: string): Parsed[] {
  const out: Parsed[] = [];
  const lines = text.split('\n');
  let comments: string[] = [];
  for (let i = 0; i < lines.length;) {
    if (lines[i].startsWith('#')) { comments.push(lines[i++]); continue; }
    if (lines[i].trim() === '') { i++; continue; }
    const line = i + 1;
    const head = lines[i++];
    const input: string[] = [];
    while (i < lines.length && lines[i] !== '----') input.push(lines[i++]);
    if (i >= lines.length) throw new Error(`line ${line}: a case without ----`);
    i++;
    const output: string[] = [];
    while (i < lines.length && lines[i].trim() !== '') output.push(lines[i++]);
    out.push({ comments, head, input, output, line });
    comments = [];
  }
  return out;
}

/** Runs every case of `file` through `fn`; with NOVA_REWRITE=1, rewrites the expected outputs. */
export async function run(file: string, fn: (c: Case) => string | Promise<string>): Promise<void> {
  const cases = parse(readFileSync(file, 'utf8'));
  const rewritten: string[] = [];
  for (const p of cases) {
    const [command, ...rest] = p.head.trim().split(/\s+/);
    const args = Object.fromEntries(rest.map((a) => (a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, ''])));
    const got = (await fn({ command, args, input: p.input, where: `${file}:${p.line}` })).trimEnd();
    if (process.env.NOVA_REWRITE === '1') rewritten.push([...p.comments, p.head, ...p.input, '----', got].join('\n'));
    else expect(got, `${file}:${p.line}: ${p.head}`).toBe(p.output.join('\n'));
  }
  if (process.env.NOVA_REWRITE === '1') writeFileSync(file, rewritten.join('\n\n') + '\n');
}
