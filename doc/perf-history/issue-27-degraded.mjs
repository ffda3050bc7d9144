// Read cost with a StoC down: copies against parity (ρ = 3, R = 2, 6 StoCs, 64 MiB of LTC memory so reads
// fetch blocks from the StoCs). Random point reads (64 in flight) for DURATION s with every StoC up, again
// after SIGKILL of StoC 1 (it holds a fragment of about half the tables under either scheme), and again once
// `nova stoc remove 1 --dead` has made its fragments again elsewhere. CONTROL=1: no kill, no removal.
// Run from the repository: node doc/perf-history/issue-27-degraded.mjs
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { NovaClient } from '../../dist/src/index.js';

const RECORDS = Number(process.env.RECORDS ?? 200_000);
const DURATION = Number(process.env.DURATION ?? 20);
const nova = (...args) => execFileSync(process.execPath, ['bin/nova.js', ...args], { encoding: 'utf8' });
const key = (i) => Buffer.from(`user${String(i).padStart(12, '0')}`);

async function reads(c) {
  let n = 0;
  let failed = 0;
  const ms = [];
  const end = Date.now() + DURATION * 1000;
  await Promise.all(Array.from({ length: 64 }, async () => {
    while (Date.now() < end) {
      const t0 = performance.now();
      try {
        await c.get(key(Math.floor(Math.random() * RECORDS)));
        ms.push(performance.now() - t0);
        n++;
      } catch {
        failed++;
      }
    }
  }));
  ms.sort((a, b) => a - b);
  const at = (q) => Math.round(ms[Math.min(ms.length - 1, Math.floor(q * ms.length))] ?? 0);
  return { opsPerSec: Math.round(n / DURATION), failed, p50: at(0.5), p99: at(0.99), max: at(1), over1s: ms.filter((x) => x > 1000).length };
}

for (const scheme of (process.env.SCHEMES ?? 'copies,parity').split(',')) {
  const dir = `/tmp/bench27/degraded-${scheme}`;
  try { nova('down', '--dir', dir); } catch { /* none */ }
  rmSync(dir, { recursive: true, force: true });
  nova('up', '--dir', dir, '--stocs', '6', '--scatter', '3', ...(scheme === 'parity' ? ['--parity'] : []), '--ltc-memory', String(64 * 2 ** 20));
  const c = await NovaClient.connect({ dir });
  const value = Buffer.alloc(1024, 7);
  for (let i = 0; i < RECORDS; i += 256) await Promise.all(Array.from({ length: Math.min(256, RECORDS - i) }, (_, j) => c.put(key(i + j), value)));
  await c.compact();
  const up = await reads(c);
  const stoc1 = JSON.parse(readFileSync(`${dir}/cluster.json`, 'utf8')).components.find((x) => x.role === 'stoc' && x.id === 1);
  if (!process.env.CONTROL) process.kill(stoc1.pid, 'SIGKILL');
  await new Promise((r) => setTimeout(r, 3000));
  const down = await reads(c);
  const other = (await c.stats()).reduce((s, r) => s + r.readsFromOtherCopy, 0);
  const t0 = Date.now();
  if (!process.env.CONTROL) nova('stoc', 'remove', '1', '--dead', '--dir', dir);
  const removeMs = Date.now() - t0;
  const removed = await reads(c);
  const show = (r) => `${r.opsPerSec} reads/s, p50 ${r.p50} ms, p99 ${r.p99} ms, max ${r.max} ms, ${r.over1s} over 1 s, ${r.failed} failed`;
  console.log(`${scheme}: all up ${show(up)}; StoC 1 down ${show(down)}; ${other} reads from another copy or rebuilt; ratio ${(down.opsPerSec / up.opsPerSec).toFixed(2)}; ` +
    `removed as dead in ${removeMs} ms, then ${show(removed)}, ratio ${(removed.opsPerSec / up.opsPerSec).toFixed(2)}`);
  c.close();
  nova('down', '--dir', dir);
}
