#!/usr/bin/env node
// The `nova` command. Runs the compiled CLI (npm run build, or scripts/setup.sh).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const cli = new URL('../dist/src/cli/nova.js', import.meta.url);
if (!existsSync(fileURLToPath(cli))) {
  process.stderr.write('nova: not built yet. Run ./scripts/setup.sh first.\n');
  process.exit(1);
}
const { main } = await import(cli.href);
await main(process.argv);
// Benchmarks and tools end when their work is done, whatever handles remain open.
process.exit(process.exitCode ?? 0);
