/**
 * --engine-memory (bench/ycsb/engine-memory.ts): each engine's group with the limit, its use read
 * back, the session's groups removed; on directories laid out as cgroup v1 and v2 hierarchies.
 */
import { describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { EngineMemory } from '../../bench/ycsb/engine-memory.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-engine-memory-');
const GiB = 2 ** 30;
/** Above Linux's largest pid_max: remove() kills what a group lists, and these are no process. */
const NO_PID = 2 ** 22 + 100;

describe('EngineMemory', () => {
  it('v1: a group per engine in the memory hierarchy, its peak and OOM kills read back, removed after', async () => {
    const root = tempDir();
    mkdirSync(join(root, 'memory'));
    writeFileSync(join(root, 'memory', 'memory.limit_in_bytes'), '9223372036854771712');
    const m = new EngineMemory(4 * GiB, '/tmp/nova-bench-x', root);
    expect(m.use(0, 'nova:ltc-memory=1073741824')).toBeUndefined();
    m.place(0, 'nova:ltc-memory=1073741824', NO_PID);
    m.place(1, 'leveldb', NO_PID + 1);
    const base = join(root, 'memory', 'nova-bench');
    const [session] = readdirSync(base) as string[];
    const nova = join(base, session, '0-nova_ltc-memory=1073741824');
    expect(readFileSync(join(nova, 'memory.limit_in_bytes'), 'utf8')).toBe(String(4 * GiB));
    expect(readFileSync(join(nova, 'cgroup.procs'), 'utf8')).toBe(String(NO_PID));
    expect(readFileSync(join(base, session, '1-leveldb', 'cgroup.procs'), 'utf8')).toBe(String(NO_PID + 1));
    // What the kernel would keep there.
    writeFileSync(join(nova, 'memory.max_usage_in_bytes'), String(3 * GiB));
    writeFileSync(join(nova, 'memory.oom_control'), 'oom_kill_disable 0\nunder_oom 0\noom_kill 2\n');
    expect(m.use(0, 'nova:ltc-memory=1073741824')).toEqual({ peakBytes: 3 * GiB, oomKills: 2 });
    // Two sessions never share a group.
    m.place(0, 'leveldb', NO_PID + 2);
    expect(new EngineMemory(GiB, '/tmp/nova-bench-y', root).use(0, 'leveldb')).toBeUndefined();
    // Groups are directories a test can remove only once emptied of the kernel's files.
    for (const g of ['0-nova_ltc-memory=1073741824', '1-leveldb', '0-leveldb']) {
      for (const f of ['memory.limit_in_bytes', 'cgroup.procs', 'memory.max_usage_in_bytes', 'memory.oom_control']) {
        rmSync(join(base, session, g, f), { force: true });
      }
    }
    await m.remove();
    expect(existsSync(base)).toBe(false);
  });

  it('v2: memory.max, memory.peak and memory.events', () => {
    const root = tempDir();
    writeFileSync(join(root, 'cgroup.controllers'), 'cpu io memory pids\n');
    const m = new EngineMemory(GiB, '/tmp/nova-bench-x', root);
    m.place(0, 'leveldb', NO_PID);
    const [session] = readdirSync(join(root, 'nova-bench')) as string[];
    const g = join(root, 'nova-bench', session, '0-leveldb');
    expect(readFileSync(join(g, 'memory.max'), 'utf8')).toBe(String(GiB));
    // The memory controller only: no cpu.max or io.max for the engine's group.
    expect(readFileSync(join(root, 'cgroup.subtree_control'), 'utf8')).toBe('+memory');
    expect(readFileSync(join(root, 'nova-bench', 'cgroup.subtree_control'), 'utf8')).toBe('+memory');
    expect(existsSync(join(g, 'cpu.max'))).toBe(false);
    writeFileSync(join(g, 'memory.peak'), String(GiB - 4096));
    writeFileSync(join(g, 'memory.events'), 'low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n');
    expect(m.use(0, 'leveldb')).toEqual({ peakBytes: GiB - 4096, oomKills: 1 });
  });

  it('is refused, naming its flag, where there is no memory controller', () => {
    const root = tempDir();
    writeFileSync(join(root, 'cgroup.controllers'), 'cpu io\n');
    expect(() => new EngineMemory(GiB, '/tmp/x', root)).toThrow(/--engine-memory: .*no memory controller.*leave out --engine-memory/);
  });
});
