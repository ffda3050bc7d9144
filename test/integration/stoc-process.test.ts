/**
 * A StoC in its own process (the compiled dist/src/stoc/stoc-server.js, started by a few lines
 * of inline script), killed with SIGKILL: calls pending on it and calls made later fail
 * promptly with PEER_LOST, never hang. Needs `npm run build` first, like the peer tests.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { NovaError } from '../../src/common/errors.js';
import { StocClient } from '../../src/stoc/stoc-client.js';
import { Fabric } from '../../src/transport/fabric.js';
import { Rpc } from '../../src/transport/rpc.js';
import { ROOT, tlsEnv, useTls } from '../helpers/peer-process.js';
import { tempDirs } from '../helpers/temp.js';

const SERVER = join(ROOT, 'dist', 'src', 'stoc', 'stoc-server.js');

/** Starts a StoC; prints its address; a "block" line on stdin busy-blocks its JS thread. */
const SCRIPT = `
const { StocServer } = await import(process.env.STOC_MODULE);
const s = await StocServer.start({ dir: process.env.STOC_DIR, id: 3, bufferBytes: 16 << 20, windowBytes: 8 << 20 });
process.stdout.write(JSON.stringify({ address: s.address.toString('hex') }) + '\\n');
process.stdin.on('data', (d) => {
  if (!String(d).includes('block')) return;
  const end = Date.now() + 60000;
  while (Date.now() < end) { /* the native progress thread carries on; requests wait */ }
});
process.stdin.on('end', () => s.close().then(() => process.exit(0)));
`;

const dir = tempDirs('nova-stoc-proc-', 'all')();

function startStoc(): Promise<{ child: ChildProcess; address: Buffer }> {
  if (!existsSync(SERVER)) throw new Error(`${SERVER} is missing: run npm run build`);
  const child = spawn(process.execPath, ['--input-type=module', '-e', SCRIPT], {
    env: { ...process.env, ...tlsEnv('sm'), STOC_MODULE: pathToFileURL(SERVER).href, STOC_DIR: dir },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => { stderr += d.toString(); });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`StoC did not start; stderr: ${stderr}`)), 20_000);
    child.once('exit', (code) => reject(new Error(`StoC exited with ${code}; stderr: ${stderr}`)));
    createInterface({ input: child.stdout! }).once('line', (line) => {
      clearTimeout(timer);
      resolve({ child, address: Buffer.from((JSON.parse(line) as { address: string }).address, 'hex') });
    });
  });
}

describe('a StoC process killed with SIGKILL', () => {
  it('fails pending and later calls promptly with PEER_LOST', async () => {
    useTls('sm');
    const fabric = Fabric.open();
    const { child, address } = await startStoc();
    try {
      const client = await StocClient.connect(fabric, new Rpc(fabric), address, { timeoutMs: 20_000 });
      expect(client.stocId).toBe(3);
      const data = Buffer.alloc(3 << 20, 9);
      await client.write('before.sst', 0, data, true);
      expect((await client.readAll('before.sst'))!.equals(data)).toBe(true);

      const lost = new Promise<string>((resolve) => client.onLost(resolve));
      child.stdin!.write('block\n');
      await new Promise((r) => setTimeout(r, 200));
      const code = (p: Promise<unknown>): Promise<string> => p.then(() => 'resolved', (e: NovaError) => e.code);
      const pending = [
        code(client.write('during.sst', 0, Buffer.alloc(1 << 20, 1), true)),
        code(client.append('during.log', Buffer.alloc(100, 2), true)),
        code(client.read('before.sst', 0, 1 << 20)),
        code(client.list('')),
        code(client.load()),
      ];
      await new Promise((r) => setTimeout(r, 200));
      const killedAt = Date.now();
      child.kill('SIGKILL');
      const outcomes = await Promise.all(pending);
      expect(Date.now() - killedAt).toBeLessThan(3000);
      expect(outcomes.filter((c) => c !== 'PEER_LOST' && c !== 'DEADLINE_EXCEEDED')).toEqual([]);
      expect(await lost).toBe('PEER_LOST');
      expect(client.alive).toBe(false);

      const t = Date.now();
      const later = await code(client.write('after.sst', 0, Buffer.alloc(10), true));
      const err = await client.readAll('before.sst').catch((e: NovaError) => e);
      expect(later).toBe('PEER_LOST');
      expect(err).toMatchObject({ code: 'PEER_LOST', message: expect.stringMatching(/StoC 3.*before\.sst/) });
      expect(Date.now() - t).toBeLessThan(2000); // at once, not after the 10 s call deadline
      await client.close();
    } finally {
      child.kill('SIGKILL');
      await fabric.close();
    }
  });
});
