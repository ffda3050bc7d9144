/**
 * `--engine-memory`: every engine of a session gets the same memory, the page cache its files fill
 * included. An engine's process (the bench's client, and a local engine itself) goes into a memory
 * cgroup of its own with that limit before it opens the engine, so every process it starts (a nova
 * cluster's) is in the group too, and every page of the engine's files it reads or writes is charged
 * to it. At the limit the kernel evicts the group's page cache; memory it cannot evict ends in the
 * group's OOM killer (doc/decisions/engine-memory.md).
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { cgroupRoot } from '../../src/common/memory-limit.js';
import { applyCap, cgroupHost, groupProcesses, removeGroups, type CgroupHost } from '../../src/control/cgroups.js';

export interface EngineMemoryUse {
  /** The most the group held, page cache included. */
  peakBytes: number;
  /** Processes the group's OOM killer killed. */
  oomKills: number;
}

export class EngineMemory {
  private readonly host: CgroupHost;
  private readonly base: string;

  /** Refuses (UNAVAILABLE, saying why) where this machine cannot put a process in a memory cgroup. */
  constructor(readonly bytes: number, sessionDir: string, private readonly root = cgroupRoot()) {
    // Memory alone: the cpu controller would take the engine's processes out of the scheduler's
    // per-session groups they run in without the limit (autogroups apply to the root group only).
    this.host = { ...cgroupHost([{ memoryBytes: bytes }], root, '--engine-memory'), cpu: false, io: false };
    this.base = join('nova-bench', createHash('sha256').update(sessionDir).digest('hex').slice(0, 12));
  }

  /** The group of `engine`, the `index`-th of the session. */
  private group(index: number, engine: string): string {
    return join(this.base, `${index}-${engine.replace(/[^A-Za-z0-9._=-]/g, '_')}`);
  }

  private dir(group: string): string {
    return this.host.version === 1 ? join(this.root, 'memory', group) : join(this.root, group);
  }

  /** Puts process `pid` in the group of `engine`. */
  place(index: number, engine: string, pid: number): void {
    applyCap(this.host, this.group(index, engine), pid, { memoryBytes: this.bytes }, undefined);
  }

  /** What the group of `engine` used; undefined before it has one. */
  use(index: number, engine: string): EngineMemoryUse | undefined {
    const dir = this.dir(this.group(index, engine));
    if (!existsSync(dir)) return undefined;
    const v1 = this.host.version === 1;
    const peak = join(dir, v1 ? 'memory.max_usage_in_bytes' : 'memory.peak');
    const events = readFileSync(join(dir, v1 ? 'memory.oom_control' : 'memory.events'), 'utf8');
    return {
      peakBytes: existsSync(peak) ? Number(readFileSync(peak, 'utf8').trim()) : NaN,
      oomKills: Number(/^oom_kill (\d+)$/m.exec(events)?.[1] ?? 0),
    };
  }

  /**
   * Kills what is left in the session's groups (a cluster its client started and could not write
   * down before it died), then removes them; a group whose processes do not go in five seconds is left.
   */
  async remove(): Promise<void> {
    const base = this.dir(this.base);
    if (!existsSync(base)) return;
    const groups = readdirSync(base, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => join(base, e.name));
    for (const pid of groups.flatMap(groupProcesses)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    await removeGroups(base);
  }
}
