/**
 * `nova bench transport`: READ, WRITE and RPC over UCX shared memory and loopback TCP,
 * beside a plain Node `net` request/response baseline, all measured in one run so that
 * ratios are meaningful on a shared machine.
 *
 * Each transport gets its own target process (bench/transport-target.ts) with UCX_TLS set;
 * this process is the initiator, with its own fabric opened under the same UCX_TLS.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Fabric } from '../src/transport/fabric.js';
import type { Endpoint } from '../src/transport/endpoint.js';
import type { MemoryRegion, RemoteRegion } from '../src/transport/regions.js';
import { Rpc } from '../src/transport/rpc.js';
import { measure, type Measurement } from './measure.js';
import { htmlReport, textTable, type Column } from './report.js';

export type BenchTransport = 'sm' | 'tcp' | 'net';

export interface TransportRow {
  transport: BenchTransport;
  op: 'read' | 'write' | 'rpc';
  bytes: number;
  outstanding: number;
  opsPerSec: number;
  bytesPerSec: number;
  p50Us: number;
  p99Us: number;
}

export interface TransportBenchOptions {
  /** Measured milliseconds per row (after a warm-up). */
  durationMs: number;
  transports: Array<'sm' | 'tcp'>;
  sizes: number[];
  outstanding: number[];
  spinUs: number;
  inlineWaitUs: number;
  log: (line: string) => void;
}

const HERE = fileURLToPath(new URL('.', import.meta.url));
const MiB = 1024 * 1024;

const ENV: Record<'sm' | 'tcp', Record<string, string>> = {
  sm: { UCX_TLS: 'sm' },
  tcp: { UCX_TLS: 'tcp', UCX_NET_DEVICES: 'lo' }, // keep TCP on loopback
};

/** Spawns a helper script and resolves with the JSON line it prints first. */
async function startHelper(script: string, args: string[], env: Record<string, string>):
    Promise<{ child: ChildProcess; hello: Record<string, unknown> }> {
  const child = spawn(process.execPath, [join(HERE, script), ...args], {
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const hello = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${script} did not start within 15 s`)), 15_000);
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code} before it was ready`)));
    createInterface({ input: child.stdout! }).once('line', (line) => {
      clearTimeout(timer);
      resolve(JSON.parse(line) as Record<string, unknown>);
    });
  });
  return { child, hello };
}

async function stopHelper(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.stdin!.end();
  const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
  await exited;
  clearTimeout(timer);
}

function row(transport: BenchTransport, op: TransportRow['op'], bytes: number, outstanding: number, m: Measurement): TransportRow {
  return { transport, op, bytes, outstanding, opsPerSec: m.opsPerSec, bytesPerSec: m.opsPerSec * bytes, p50Us: m.p50Us, p99Us: m.p99Us };
}

async function benchUcx(tls: 'sm' | 'tcp', o: TransportBenchOptions, rows: TransportRow[], step: () => string): Promise<void> {
  const maxOutstanding = Math.max(...o.outstanding);
  const span = Math.max(...o.sizes);
  const regionBytes = span * maxOutstanding;
  Object.assign(process.env, ENV[tls]);
  if (tls === 'sm') delete process.env.UCX_NET_DEVICES;
  const { child, hello } = await startHelper('transport-target.js', [String(regionBytes)], { ...ENV[tls], NOVA_SPIN_US: String(o.spinUs) });
  const fabric = Fabric.open({ spinUs: o.spinUs, inlineWaitUs: o.inlineWaitUs });
  try {
    const local: MemoryRegion = fabric.allocate(regionBytes);
    const ep: Endpoint = await fabric.connect(Buffer.from(hello.address as string, 'hex'));
    const remote: RemoteRegion = ep.importKey(Buffer.from(hello.key as string, 'hex'));
    for (const op of ['read', 'write'] as const) {
      for (const bytes of o.sizes) {
        for (const outstanding of o.outstanding) {
          o.log(`${step()} ${tls} ${op} ${bytes} B x${outstanding}`);
          const m = await measure(op === 'read'
            ? (slot) => ep.read(local, slot * span, remote, slot * span, bytes)
            : (slot) => ep.write(local, slot * span, remote, slot * span, bytes), outstanding, o.durationMs);
          rows.push(row(tls, op, bytes, outstanding, m));
        }
      }
    }
    const rpc = new Rpc(fabric);
    const payload = Buffer.alloc(64, 1);
    for (const outstanding of o.outstanding) {
      o.log(`${step()} ${tls} rpc 64 B x${outstanding}`);
      rows.push(row(tls, 'rpc', 64, outstanding, await measure(() => rpc.call(ep, 'echo', payload), outstanding, o.durationMs)));
    }
    rpc.close();
  } finally {
    await fabric.close();
    await stopHelper(child);
  }
}

/** A pipelined request/response client over one socket: frames are u32 length + payload. */
class NetClient {
  private readonly waiting: Array<() => void> = [];
  private pending: Buffer = Buffer.alloc(0);
  private corked = false;

  constructor(private readonly socket: Socket) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => {
      this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
      let at = 0;
      while (this.pending.length - at >= 4) {
        const length = this.pending.readUInt32LE(at);
        if (this.pending.length - at < 4 + length) break;
        at += 4 + length;
        this.waiting.shift()?.();
      }
      this.pending = this.pending.subarray(at);
    });
  }

  request(payload: Buffer): Promise<void> {
    const frame = Buffer.allocUnsafe(4 + payload.length);
    frame.writeUInt32LE(payload.length, 0);
    payload.copy(frame, 4);
    if (!this.corked) {
      // Requests issued in one turn leave in one write, as the UCX path batches per turn.
      this.corked = true;
      this.socket.cork();
      queueMicrotask(() => { this.corked = false; this.socket.uncork(); });
    }
    this.socket.write(frame);
    return new Promise<void>((resolve) => this.waiting.push(resolve));
  }
}

async function benchNet(o: TransportBenchOptions, rows: TransportRow[], step: () => string): Promise<void> {
  const { child, hello } = await startHelper('net-echo-server.js', [], {});
  const socket = netConnect(hello.port as number, '127.0.0.1');
  await new Promise<void>((resolve, reject) => { socket.once('connect', resolve); socket.once('error', reject); });
  try {
    const client = new NetClient(socket);
    const payload = Buffer.alloc(64, 1);
    for (const outstanding of o.outstanding) {
      o.log(`${step()} net rpc 64 B x${outstanding}`);
      rows.push(row('net', 'rpc', 64, outstanding, await measure(() => client.request(payload), outstanding, o.durationMs)));
    }
  } finally {
    socket.destroy();
    await stopHelper(child);
  }
}

export async function runTransportBench(o: TransportBenchOptions): Promise<TransportRow[]> {
  const rows: TransportRow[] = [];
  const total = o.transports.length * (2 * o.sizes.length * o.outstanding.length + o.outstanding.length) + o.outstanding.length;
  let done = 0;
  const step = (): string => `[${++done}/${total}]`;
  await benchNet(o, rows, step);
  for (const tls of o.transports) await benchUcx(tls, o, rows, step);
  return rows;
}

const fmtBytes = (n: number): string => (n >= MiB ? `${n / MiB} MiB` : n >= 1024 ? `${n / 1024} KiB` : `${n} B`);
const fmtRate = (n: number): string => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB/s` : `${(n / 1e6).toFixed(1)} MB/s`);

export const TRANSPORT_COLUMNS: Column<TransportRow>[] = [
  { title: 'transport', value: (r) => r.transport, align: 'left' },
  { title: 'op', value: (r) => r.op, align: 'left' },
  { title: 'size', value: (r) => fmtBytes(r.bytes) },
  { title: 'outstanding', value: (r) => String(r.outstanding) },
  { title: 'ops/s', value: (r) => Math.round(r.opsPerSec).toLocaleString('en-US') },
  { title: 'throughput', value: (r) => fmtRate(r.bytesPerSec) },
  { title: 'p50 µs', value: (r) => r.p50Us.toFixed(1) },
  { title: 'p99 µs', value: (r) => r.p99Us.toFixed(1) },
];

/** The targets, judged on this run's rows. */
export function judgeTargets(rows: TransportRow[]): string[] {
  const find = (t: BenchTransport, op: TransportRow['op'], bytes: number, outstanding: number): TransportRow | undefined =>
    rows.find((r) => r.transport === t && r.op === op && r.bytes === bytes && r.outstanding === outstanding);
  const lines: string[] = [];
  const small = find('sm', 'read', 64, 64);
  const net = find('net', 'rpc', 64, 64);
  const big = find('sm', 'read', MiB, 64) ?? find('sm', 'read', MiB, 1);
  if (small) {
    lines.push(`64 B READ over sm, 64 outstanding: ${Math.round(small.opsPerSec).toLocaleString('en-US')} ops/s ` +
      `(target >= 800,000: ${small.opsPerSec >= 800_000 ? 'met' : 'NOT met'})`);
    if (net) {
      const ratio = small.opsPerSec / net.opsPerSec;
      lines.push(`  vs net request/response, 64 outstanding, same run: ${ratio.toFixed(2)}x (target >= 3x: ${ratio >= 3 ? 'met' : 'NOT met'})`);
    }
  }
  if (big) {
    lines.push(`1 MiB READ over sm, ${big.outstanding} outstanding: ${fmtRate(big.bytesPerSec)} (target >= 3 GB/s: ${big.bytesPerSec >= 3e9 ? 'met' : 'NOT met'})`);
  }
  return lines;
}

export function writeTransportReports(rows: TransportRow[], json: string | undefined, html: string | undefined): void {
  if (json) writeFileSync(json, JSON.stringify(rows, null, 2) + '\n');
  if (html) {
    const notes = [`Measured ${new Date().toISOString()} with UCX ${Fabric.ucxVersion()}, Node ${process.version}.`, ...judgeTargets(rows)];
    writeFileSync(html, htmlReport('nova bench transport', notes, rows, TRANSPORT_COLUMNS));
  }
}
