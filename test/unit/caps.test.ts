/**
 * --cap: its syntax (caps.ts) and what it writes into cgroups (cgroups.ts), on directories laid
 * out as cgroup v1 and v2 hierarchies.
 */
import { describe, expect, it } from 'vitest';
import { mkdirSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { capsText, parseCaps, parseRate, parseSize } from '../../src/control/caps.js';
import { groupsOf, memoryLimitOfSelf } from '../../src/common/memory-limit.js';
import { applyCap, cgroupHost, groupOf, removeClusterGroups } from '../../src/control/cgroups.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-caps-');

describe('parseCaps', () => {
  it('reads roles, resources and rates, and writes them back the same', () => {
    const caps = parseCaps('ltc.cpu=0.25, ltc.memory=1.5GiB, stoc.cpu=0.5,stoc.disk=40MB/s,stoc.disk-read=32MiB/s,cache.cpu=2,cache.memory=100MB');
    expect(caps).toEqual({ ltc: { cpu: 0.25, memoryBytes: 1.5 * 2 ** 30 }, stoc: { cpu: 0.5, diskWriteBps: 40e6, diskReadBps: 32 * 2 ** 20 },
      cache: { cpu: 2, memoryBytes: 100e6 } });
    expect(capsText(caps)).toBe('ltc.cpu=0.25,ltc.memory=1536MiB,stoc.cpu=0.5,stoc.disk=40MB/s,stoc.disk-read=32MiB/s,cache.cpu=2,cache.memory=100MB');
    expect(parseCaps(capsText(caps))).toEqual(caps);
    expect(parseCaps('none')).toEqual({});
    expect(capsText({})).toBe('none');
  });

  it('takes sizes and rates in powers of 1000 and 1024, with or without B (and /s for rates)', () => {
    expect(parseSize('2GiB')).toBe(2 * 2 ** 30);
    expect(parseSize('512m')).toBe(512e6);
    expect(parseSize('67108864')).toBe(2 ** 26);
    expect(parseRate('40MB/s')).toBe(40_000_000);
    expect(parseRate('40M')).toBe(40_000_000);
    expect(parseRate('1.5GiB/s')).toBe(1.5 * 2 ** 30);
    expect(parseRate('64kib')).toBe(65_536);
    expect(parseRate('1000000')).toBe(1_000_000);
  });

  it.each([
    ['ltc.cpu', /not role.resource=value/],
    ['ltcs.cpu=1', /"ltcs" is not a role/],
    ['ltc.swap=1G', /"swap" is not a resource/],
    ['ltc.memory=1G/s', /--cap: "1G\/s" is not a size.*the form is/],
    ['ltc.memory=1MiB', /under the smallest memory limit, 64 MiB.*the form is/],
    ['ltc.cpu=0', /CPUs are a number from 0.01/],
    ['ltc.cpu=fast', /CPUs are a number/],
    ['stoc.disk=40MB/min', /is not a rate/],
    ['stoc.disk=1kB/s', /under the smallest disk rate/],
    ['ltc.cpu=1,ltc.cpu=2', /given twice/],
    ['', /no cap given/],
  ])('refuses %j, saying what is wrong', (spec, why) => {
    expect(() => parseCaps(spec)).toThrow(why);
  });
});

/** A directory laid out as cgroup v1's cpu and blkio hierarchies (their root files only). */
function v1Root(): string {
  const root = tempDir();
  mkdirSync(join(root, 'cpu'));
  writeFileSync(join(root, 'cpu', 'cpu.cfs_quota_us'), '-1');
  mkdirSync(join(root, 'memory'));
  writeFileSync(join(root, 'memory', 'memory.limit_in_bytes'), '9223372036854771712');
  mkdirSync(join(root, 'blkio'));
  writeFileSync(join(root, 'blkio', 'blkio.throttle.write_bps_device'), '');
  return root;
}

const read = (...p: string[]): string => readFileSync(join(...p), 'utf8');

describe('cgroups', () => {
  it('v1: a CFS quota in the cpu hierarchy, a limit in memory, a throttle in blkio, the process in each', () => {
    const root = v1Root();
    const host = cgroupHost({ stoc: { cpu: 0.25, diskWriteBps: 8e6 } }, root);
    expect(host).toEqual({ version: 1, root, cpu: true, memory: true, io: true, flag: '--cap' });
    const group = groupOf('/data/cluster', 'stoc-2');
    expect(group).toMatch(/^nova\/[0-9a-f]{12}\/stoc-2$/);
    expect(groupOf('/data/other', 'stoc-2')).not.toBe(group);
    applyCap(host, group, 4242, { cpu: 0.25, diskWriteBps: 8e6 }, '254:0');
    // Not limited in memory: left in its memory group.
    expect(existsSync(join(root, 'memory', group))).toBe(false);
    applyCap(host, group, 4242, { cpu: 0.25, memoryBytes: 2 ** 30, diskWriteBps: 8e6 }, '254:0');
    expect(read(root, 'memory', group, 'memory.limit_in_bytes')).toBe(String(2 ** 30));
    expect(read(root, 'memory', group, 'cgroup.procs')).toBe('4242');
    expect(read(root, 'cpu', group, 'cpu.cfs_quota_us')).toBe('25000');
    expect(read(root, 'cpu', group, 'cpu.cfs_period_us')).toBe('100000');
    expect(read(root, 'cpu', group, 'cgroup.procs')).toBe('4242');
    expect(read(root, 'blkio', group, 'blkio.throttle.write_bps_device')).toBe('254:0 8000000');
    expect(read(root, 'blkio', group, 'blkio.throttle.read_bps_device')).toBe('254:0 0');
    expect(read(root, 'blkio', group, 'cgroup.procs')).toBe('4242');
    // Lifted: the limits go, the group stays until nova down.
    applyCap(host, group, 4242, {}, '254:0');
    expect(read(root, 'cpu', group, 'cpu.cfs_quota_us')).toBe('-1');
    expect(read(root, 'memory', group, 'memory.limit_in_bytes')).toBe('-1');
    expect(read(root, 'blkio', group, 'blkio.throttle.write_bps_device')).toBe('254:0 0');
    // A process never capped is left where it is.
    applyCap(host, groupOf('/data/cluster', 'ltc-1'), 4243, {}, '254:0');
    expect(existsSync(join(root, 'cpu', groupOf('/data/cluster', 'ltc-1')))).toBe(false);
  });

  it('v2: controllers enabled down the tree, cpu.max and io.max, the process in the group', () => {
    const root = tempDir();
    writeFileSync(join(root, 'cgroup.controllers'), 'cpuset cpu io memory pids\n');
    const host = cgroupHost({ ltc: { cpu: 1.5 } }, root);
    expect(host).toEqual({ version: 2, root, cpu: true, memory: true, io: true, flag: '--cap' });
    const group = groupOf('/data/cluster', 'ltc-1');
    applyCap(host, group, 77, { cpu: 1.5, memoryBytes: 2 ** 31, diskReadBps: 2 ** 20 }, '8:0');
    expect(read(root, 'cgroup.subtree_control')).toBe('+cpu +memory +io');
    expect(read(root, 'nova', 'cgroup.subtree_control')).toBe('+cpu +memory +io');
    expect(read(root, group, '..', 'cgroup.subtree_control')).toBe('+cpu +memory +io');
    expect(read(root, group, 'cpu.max')).toBe('150000 100000');
    expect(read(root, group, 'memory.max')).toBe(String(2 ** 31));
    expect(read(root, group, 'io.max')).toBe('8:0 rbps=1048576 wbps=max');
    expect(read(root, group, 'cgroup.procs')).toBe('77');
  });

  it('reads the memory limit this process runs under: the smallest of its group\'s and its ancestors\'', () => {
    const root = tempDir();
    const mine = groupsOf(process.pid);
    const v1 = mine.get('memory');
    const path = v1 ?? mine.get('') ?? '/';
    const at = (dir: string, text: string): void => {
      const d = v1 !== undefined ? join(root, 'memory', dir) : join(root, dir);
      mkdirSync(d, { recursive: true });
      writeFileSync(join(d, v1 !== undefined ? 'memory.limit_in_bytes' : 'memory.max'), text);
    };
    expect(memoryLimitOfSelf(root)).toBeUndefined(); // nothing set
    at(path, v1 !== undefined ? '9223372036854771712' : 'max');
    expect(memoryLimitOfSelf(root)).toBeUndefined(); // unlimited
    at(path, String(3 * 2 ** 30));
    expect(memoryLimitOfSelf(root)).toBe(3 * 2 ** 30);
    if (path !== '/') {
      at(join(path, '..'), String(2 ** 30));
      expect(memoryLimitOfSelf(root)).toBe(2 ** 30);
    }
  });

  it('refuses, saying what is missing, where the caps cannot be applied', () => {
    const none = tempDir();
    expect(() => cgroupHost({ ltc: { cpu: 1 } }, none)).toThrow(/no cgroups at .*leave out --cap/);
    const cpuOnly = tempDir();
    mkdirSync(join(cpuOnly, 'cpu'));
    writeFileSync(join(cpuOnly, 'cpu', 'cpu.cfs_quota_us'), '-1');
    expect(cgroupHost({ ltc: { cpu: 1 } }, cpuOnly).cpu).toBe(true);
    expect(() => cgroupHost({ stoc: { diskWriteBps: 1e6 } }, cpuOnly)).toThrow(/no cgroup v1 blkio hierarchy/);
    const v2 = tempDir();
    writeFileSync(join(v2, 'cgroup.controllers'), 'memory pids\n');
    expect(() => cgroupHost({ ltc: { cpu: 1 } }, v2)).toThrow(/has no cpu controller/);
    expect(() => cgroupHost({ ltc: { memoryBytes: 2 ** 30 } }, cpuOnly)).toThrow(/no cgroup v1 memory hierarchy/);
    const v2NoMemory = tempDir();
    writeFileSync(join(v2NoMemory, 'cgroup.controllers'), 'cpu io\n');
    expect(() => cgroupHost({ ltc: { memoryBytes: 2 ** 30 } }, v2NoMemory)).toThrow(/has no memory controller/);
    expect(() => applyCap(cgroupHost({}, v1Root()), 'nova/x/stoc-1', 1, { diskWriteBps: 1e6 }, undefined)).toThrow(/on a block device/);
  });

  // On a plain directory a group's cgroup.procs file stands for its processes: rmdir fails while
  // it is there, as a cgroup's does while a process is in it.
  it('removes a cluster\'s groups in every hierarchy once their processes have left, and leaves one that keeps its process', async () => {
    const root = tempDir();
    const cluster = '/srv/nova/c1';
    const group = (ctl: string, name: string, pids?: string): string => {
      const dir = join(root, ctl, groupOf(cluster, name));
      mkdirSync(dir, { recursive: true });
      if (pids !== undefined) writeFileSync(join(dir, 'cgroup.procs'), pids);
      return dir;
    };
    const exiting = group('cpu', 'ltc-1', '4242\n'); // stopped by nova down, its memory still being unmapped
    group('memory', 'ltc-1');
    group('blkio', 'stoc-1');
    setTimeout(() => rmSync(join(exiting, 'cgroup.procs')), 150);
    await removeClusterGroups(cluster, root, 5000);
    for (const ctl of ['cpu', 'memory', 'blkio']) expect(existsSync(join(root, ctl, 'nova'))).toBe(false);

    const stuck = group('cpu', 'stoc-2', '77\n');
    group('cpu', 'stoc-3');
    await removeClusterGroups(cluster, root, 100);
    expect(existsSync(stuck)).toBe(true);
    expect(existsSync(join(dirname(stuck), 'stoc-3'))).toBe(false);

    // A group another removed meanwhile is gone, not busy: removal ends then, not at its deadline.
    setTimeout(() => rmSync(stuck, { recursive: true }), 100);
    const started = Date.now();
    await removeClusterGroups(cluster, root, 60_000);
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(existsSync(join(root, 'cpu', 'nova'))).toBe(false);
  });
});
