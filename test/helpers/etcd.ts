/**
 * A real etcd for tests (Debian's etcd-server, installed by scripts/setup.sh): one member on
 * loopback ports in a temp directory, stopped and removed by `stop`.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, openSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { until } from './until.js';

export interface TestEtcd {
  /** HOST:PORT of its client endpoint. */
  endpoint: string;
  dir: string;
  /** SIGSTOPs (true) or SIGCONTs (false) the etcd process: etcd out of reach, as over a cut network. */
  pause(stopped: boolean): void;
  stop(): Promise<void>;
}

/** A free loopback port (listen on 0, then let go). */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

export async function startEtcd(): Promise<TestEtcd> {
  if (spawnSync('etcd', ['--version']).error) throw new Error('etcd is not installed: run ./scripts/setup.sh (it installs Debian\'s etcd-server)');
  const dir = mkdtempSync(join(tmpdir(), 'nova-etcd-'));
  const [client, peer] = [await freePort(), await freePort()];
  const url = (p: number): string => `http://127.0.0.1:${p}`;
  const log = openSync(join(dir, 'etcd.log'), 'a');
  const child: ChildProcess = spawn('etcd', [
    '--name', 'nova-test', '--data-dir', join(dir, 'data'),
    '--listen-client-urls', url(client), '--advertise-client-urls', url(client),
    '--listen-peer-urls', url(peer), '--initial-advertise-peer-urls', url(peer),
    '--initial-cluster', `nova-test=${url(peer)}`,
  ], { stdio: ['ignore', log, log] });
  const endpoint = `127.0.0.1:${client}`;
  const probe = new Etcd3({ hosts: url(client) });
  try {
    await until(async () => (await probe.get('probe').string().then(() => true, () => false)), 20_000);
  } finally {
    probe.close();
  }
  return {
    endpoint,
    dir,
    pause: (stopped) => { child.kill(stopped ? 'SIGSTOP' : 'SIGCONT'); },
    stop: async () => {
      if (child.exitCode === null) {
        child.kill('SIGCONT');
        child.kill('SIGKILL');
        await new Promise((r) => child.once('exit', r));
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
