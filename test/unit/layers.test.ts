/**
 * The layers of src/ and bench/ run one way (Pebble keeps such a lint test): a file imports
 * from its own folder or from a folder of a lower layer, never from a higher one or from a
 * sibling of its own layer. A new folder must be placed here before anything may import it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Lowest first. Folders of one entry are siblings: neither may import the other. */
const LAYERS: ReadonlyArray<readonly string[]> = [
  ['src/common'], // errors, byte coding, internal keys, checksums, write ids, the addon loader
  ['src/transport', 'src/net'], // the RDMA-style fabric and its RPC; TCP frames and RPC
  ['src/sstable', 'src/log'], // the table format; log framing, write batch and version edit records
  ['src/memtable'],
  ['src/compaction'], // what LTC and StoC both run: merges, flush builds, fragments, the picker
  ['src/cluster'], // the configuration schema, placement, membership
  ['src/stoc'],
  ['src/logc'], // memtable logs and MANIFESTs over StoCs
  ['src/ltc'],
  ['src/coordinator', 'src/client', 'src/tools'],
  ['src/control'], // a local cluster's processes (`nova up`/`down`)
  ['bench'],
  ['bench/ycsb', 'bench/faults'],
  ['src/cli', 'src'], // the `nova` command; the front door (src/index.ts)
];

interface Import { file: string; line: number; spec: string }

/** The relative imports of a TypeScript source: static, re-exports and dynamic. */
function importsOf(file: string, text: string): Import[] {
  const out: Import[] = [];
  const re = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)(['"])(\.{1,2}\/[^'"]+)\1/gm;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    out.push({ file, line: text.slice(0, m.index).split('\n').length, spec: m[2] });
  }
  return out;
}

/** Each import that goes against `layers`, as "file:line: why". Paths are posix, from the root. */
function violations(imports: readonly Import[], layers: ReadonlyArray<readonly string[]> = LAYERS): string[] {
  const rank = new Map<string, number>();
  layers.forEach((folders, i) => folders.forEach((f) => rank.set(f, i)));
  const out: string[] = [];
  for (const imp of imports) {
    const from = posix.dirname(imp.file);
    const to = posix.dirname(posix.normalize(posix.join(from, imp.spec)));
    if (to === from) continue;
    const a = rank.get(from);
    const b = rank.get(to);
    const where = `${imp.file}:${imp.line}`;
    if (a === undefined) out.push(`${where}: folder ${from} is in no layer (add it to LAYERS in test/unit/layers.test.ts)`);
    else if (b === undefined) out.push(`${where}: imports ${imp.spec}, whose folder ${to} is in no layer`);
    else if (b === a) out.push(`${where}: imports ${imp.spec} from ${to}, a sibling of ${from} in the same layer`);
    else if (b > a) out.push(`${where}: imports ${imp.spec} from ${to}, a higher layer than ${from}`);
  }
  return out;
}

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const path = posix.join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') ? [path] : [];
  });
}

describe('layers', () => {
  it('no file under src/ or bench/ imports against the layer order', () => {
    const files = [...sources('src'), ...sources('bench')];
    expect(files.length).toBeGreaterThan(50);
    const imports = files.flatMap((f) => importsOf(f, readFileSync(join(ROOT, f), 'utf8')));
    expect(imports.length).toBeGreaterThan(200);
    expect(violations(imports)).toEqual([]);
  });

  it('reports an upward import, a sibling import and an unplaced folder with file and line', () => {
    const text = "import { a } from '../ltc/engine.js';\nimport type { B } from '../net/tcp-rpc-client.js';\n" +
      "export { c } from './own.js';\nconst d = await import('../common/errors.js');\n";
    expect(importsOf('src/transport/x.ts', text).map((i) => i.line)).toEqual([1, 2, 3, 4]);
    expect(violations(importsOf('src/transport/x.ts', text))).toEqual([
      'src/transport/x.ts:1: imports ../ltc/engine.js from src/ltc, a higher layer than src/transport',
      'src/transport/x.ts:2: imports ../net/tcp-rpc-client.js from src/net, a sibling of src/transport in the same layer',
    ]);
    expect(violations(importsOf('src/newfolder/y.ts', "import x from '../common/coding.js';\n"))).toEqual([
      'src/newfolder/y.ts:1: folder src/newfolder is in no layer (add it to LAYERS in test/unit/layers.test.ts)',
    ]);
  });

  it('the layer table names only folders that exist', () => {
    for (const folder of LAYERS.flat()) {
      expect(readdirSync(join(ROOT, folder)).some((n) => n.endsWith('.ts')), folder).toBe(true);
    }
  });
});
