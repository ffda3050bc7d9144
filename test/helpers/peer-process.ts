/**
 * Spawns test/fixtures/peer.ts (compiled to dist/) as a real child process and talks to
 * it over JSON lines. Every request has a deadline; every child is killed at the end.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export type Tls = 'sm' | 'tcp';

export const ROOT = join(import.meta.dirname, '..', '..');
const PEER = join(ROOT, 'dist', 'test', 'fixtures', 'peer.js');

/** The UCX environment of a transport: shared memory, or TCP kept on loopback. */
export function tlsEnv(tls: Tls): Record<string, string> {
  return tls === 'sm' ? { UCX_TLS: 'sm' } : { UCX_TLS: 'tcp', UCX_NET_DEVICES: 'lo' };
}

/** Sets this process's UCX environment before a Fabric is opened in it. */
export function useTls(tls: Tls): void {
  Object.assign(process.env, tlsEnv(tls));
  if (tls === 'sm') delete process.env.UCX_NET_DEVICES;
}

type Reply = Record<string, unknown> & { id?: number; error?: string };

export class PeerProcess {
  readonly child: ChildProcess;
  readonly events: Reply[] = [];
  private nextId = 1;
  private readonly waiting = new Map<number, (r: Reply) => void>();
  private eventWaiters: Array<{ match: (e: Reply) => boolean; resolve: (e: Reply) => void }> = [];
  private stderr = '';

  constructor(tls: Tls) {
    if (!existsSync(PEER)) throw new Error(`${PEER} is missing: run npm run build`);
    this.child = spawn(process.execPath, [PEER], {
      env: { ...process.env, ...tlsEnv(tls) },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.child.stderr!.on('data', (d: Buffer) => { this.stderr += d.toString(); });
    this.child.once('exit', (code, signal) => {
      // A peer that dies fails what is waiting on it at once, saying how it died.
      for (const [id, settle] of this.waiting) {
        settle({ id, error: 'PEER_EXITED', message: `exit code ${code}, signal ${signal}; stderr: ${this.stderr}` });
      }
      this.waiting.clear();
    });
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      const msg = JSON.parse(line) as Reply;
      if (msg.event !== undefined) {
        this.events.push(msg);
        this.eventWaiters = this.eventWaiters.filter((w) => (w.match(msg) ? (w.resolve(msg), false) : true));
      } else if (msg.id !== undefined && !('blocking' in msg)) {
        this.waiting.get(msg.id)?.(msg);
        this.waiting.delete(msg.id);
      } else if ('blocking' in msg) {
        this.events.push({ event: 'blocking' });
        this.eventWaiters = this.eventWaiters.filter((w) => (w.match({ event: 'blocking' }) ? (w.resolve({ event: 'blocking' }), false) : true));
      }
    });
  }

  /** Sends a command; resolves with the reply, rejects on {error} or after `timeoutMs`. */
  request(op: string, args: Record<string, unknown> = {}, timeoutMs = 20_000): Promise<Reply> {
    const id = this.nextId++;
    return new Promise<Reply>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(new Error(`peer ${op} timed out after ${timeoutMs} ms; stderr: ${this.stderr}\n${this.diagnose()}`));
      }, timeoutMs);
      this.waiting.set(id, (r) => {
        clearTimeout(timer);
        if (r.error) reject(Object.assign(new Error(`peer ${op}: ${r.error} ${String(r.message)}`), { code: r.error }));
        else resolve(r);
      });
      this.child.stdin!.write(JSON.stringify({ id, op, ...args }) + '\n');
    });
  }

  /** Resolves with the first event (past or future) that matches. */
  waitEvent(match: (e: Reply) => boolean, timeoutMs = 10_000): Promise<Reply> {
    const seen = this.events.find(match);
    if (seen) return Promise.resolve(seen);
    return new Promise<Reply>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no matching event within ${timeoutMs} ms; stderr: ${this.stderr}`)), timeoutMs);
      this.eventWaiters.push({ match, resolve: (e) => { clearTimeout(timer); resolve(e); } });
    });
  }

  /** What a stuck peer is doing: its state and, where gdb is installed, its threads' stacks. */
  diagnose(): string {
    const pid = this.child.pid;
    if (pid === undefined || this.child.exitCode !== null || this.child.signalCode !== null) {
      return `peer exited: code ${this.child.exitCode}, signal ${this.child.signalCode}`;
    }
    const lines = [`peer ${pid} is alive`];
    try {
      lines.push(execFileSync('gdb', ['-p', String(pid), '-batch', '-ex', 'thread apply all bt'],
        { encoding: 'utf8', timeout: 20_000, stdio: ['ignore', 'pipe', 'ignore'] })
        .split('\n').filter((l) => /^(#|Thread)/.test(l)).slice(0, 120).join('\n'));
    } catch {
      lines.push('(no gdb stacks)');
    }
    return lines.join('\n');
  }

  kill9(): void {
    this.child.kill('SIGKILL');
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.stdin!.end();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(timer);
  }
}

/** The bytes test/fixtures/peer.ts `fill` writes, for checks on this side. */
export { pattern } from '../fixtures/pattern.js';
