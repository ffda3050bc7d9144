/**
 * The knob table (src/cluster/knobs.ts) is the one declaration of every cluster knob: the
 * defaults, the flags, the engine's shared defaults and README.md's table derive from it, and
 * an existing cluster refuses a knob that would change it.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { addClusterCommands } from '../../src/cli/cluster-commands.js';
import { DEFAULT_SETTINGS, configFromJson, configToJson, makeRanges, type ClusterConfig, type Settings } from '../../src/cluster/config.js';
import { KNOBS, clusterConflicts, engineSettings, knobTable, newSettings, settingsConflicts } from '../../src/cluster/knobs.js';
import { Coordinator, readConfigFile } from '../../src/coordinator/coordinator.js';
import { resolveOptions, type EngineOptions } from '../../src/ltc/engine-options.js';
import { tempDirs } from '../helpers/temp.js';

const README = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'README.md');
const BEGIN = '<!-- knobs:begin -->\n';
const END = '<!-- knobs:end -->';

describe('knob table', () => {
  it('README.md holds the table knobs.ts generates (NOVA_REWRITE=1 rewrites it)', () => {
    const text = readFileSync(README, 'utf8');
    const i = text.indexOf(BEGIN);
    const j = text.indexOf(END);
    expect(i, 'README.md lacks the knob-table markers').toBeGreaterThanOrEqual(0);
    const want = text.slice(0, i + BEGIN.length) + knobTable() + text.slice(j);
    if (process.env.NOVA_REWRITE === '1') writeFileSync(README, want);
    else expect(text, 'README.md knob table is stale: run NOVA_REWRITE=1 npx vitest run test/unit/knobs.test.ts').toBe(want);
  });

  it('declares every setting once, and the defaults are the table\'s', () => {
    const keys = KNOBS.map((k) => k.key);
    expect(new Set(keys).size).toBe(keys.length);
    expect(new Set(KNOBS.map((k) => k.flag)).size).toBe(keys.length);
    expect(Object.keys(DEFAULT_SETTINGS).sort()).toEqual([...keys].sort());
    for (const k of KNOBS) expect(DEFAULT_SETTINGS[k.key], k.key).toBe(k.default);
    // The defaults make a configuration that reads back whole.
    const c: ClusterConfig = { id: 1, ranges: makeRanges([], 1), lastRange: 1, members: [], settings: DEFAULT_SETTINGS };
    expect(configFromJson(JSON.parse(JSON.stringify(configToJson(c))), 'test').settings).toEqual(DEFAULT_SETTINGS);
  });

  it('the engine takes the defaults of the knobs it shares from the table, and each range the cluster\'s values', () => {
    const o = resolveOptions({});
    for (const key of ['memtableBytes', 'activeMemtables', 'l0Trigger', 'l0ScanTrigger', 'idleCompactionMs', 'sessionTimeoutMs', 'mergeUnderKeys', 'compactionJobs'] as const) {
      expect(o[key], key).toBe(DEFAULT_SETTINGS[key]);
    }
    expect(o.maxMemtables).toBe(2 * o.activeMemtables);
    expect(DEFAULT_SETTINGS.l0SlowdownTrigger).toBe(0);
    expect(o.l0SlowdownTrigger).toBe(2 * o.l0Trigger);
    // The knobs marked `engine` are options of the same name: a range opens with the cluster's value of each.
    const cluster = { ...DEFAULT_SETTINGS, memtableBytes: 4096, activeMemtables: 2, maxMemtables: 5, l0Trigger: 6, l0SlowdownTrigger: 15, l0ScanTrigger: 3, idleCompactionMs: 0, sessionTimeoutMs: 9_000, sync: true, mergeUnderKeys: 7 };
    const given = engineSettings(cluster);
    expect(Object.keys(given).sort()).toEqual(KNOBS.filter((k) => k.engine).map((k) => k.key).sort());
    const resolved = resolveOptions(given as EngineOptions);
    for (const key of Object.keys(given) as Array<keyof typeof given>) expect(resolved[key as keyof typeof resolved], key).toBe(cluster[key]);
  });

  it('nova up and nova coordinator have a flag per knob, with no default of their own', () => {
    const program = new Command();
    addClusterCommands(program, 'nova');
    for (const name of ['up', 'coordinator']) {
      const cmd = program.commands.find((c) => c.name() === name)!;
      for (const k of KNOBS) {
        const opt = cmd.options.find((o) => o.long === `--${k.flag}`);
        expect(opt, `${name} --${k.flag}`).toBeDefined();
        expect(opt!.defaultValue, `${name} --${k.flag}`).toBeUndefined();
        expect(opt!.description).toContain('(default ');
      }
    }
  });

  it('a new cluster takes the knobs given and the defaults; δ follows α unless given', () => {
    expect(newSettings({})).toEqual(DEFAULT_SETTINGS);
    expect(newSettings({ activeMemtables: 3 })).toMatchObject({ activeMemtables: 3, maxMemtables: 6 });
    // The slowdown trigger lies above L0's compaction trigger and at most at its stop (3 ×).
    expect(newSettings({ l0Trigger: 4, l0SlowdownTrigger: 12 })).toMatchObject({ l0SlowdownTrigger: 12 });
    expect(() => newSettings({ l0Trigger: 4, l0SlowdownTrigger: 13 })).toThrow(/--l0-slowdown-trigger 13 must be above --l0-trigger \(4\) and at most 3 × it \(12/);
    expect(() => newSettings({ l0SlowdownTrigger: 8 })).toThrow(/--l0-slowdown-trigger 8 must be above --l0-trigger \(8\)/);
    expect(newSettings({ activeMemtables: 3, maxMemtables: 4 })).toMatchObject({ maxMemtables: 4 });
  });

  const stored: Settings = { ...DEFAULT_SETTINGS, logMode: 'memory', activeMemtables: 2, maxMemtables: 4 };
  it.each<[string, Partial<Settings>, string[]]>([
    ['nothing given', {}, []],
    ['the same values', { logMode: 'memory', activeMemtables: 2, sync: false }, []],
    ['a different mode', { logMode: 'disk' }, ['--log-mode disk (the cluster has memory)']],
    ['sync turned on', { sync: true }, ['--sync true (the cluster has false)']],
    ['two knobs', { scatter: 2, maxMemtables: 5 }, ['--max-memtables 5 (the cluster has 4)', '--scatter 2 (the cluster has 1)']],
  ])('an existing cluster and %s', (_, given, want) => {
    expect(settingsConflicts(stored, given)).toEqual(want);
  });

  it('split keys given to an existing cluster must cut the ranges it has', () => {
    const c: ClusterConfig = { id: 3, ranges: makeRanges([Buffer.from('m')], 1), lastRange: 2, members: [], settings: DEFAULT_SETTINGS };
    expect(clusterConflicts(c, {}, undefined)).toEqual([]);
    expect(clusterConflicts(c, {}, [Buffer.from('m')])).toEqual([]);
    expect(clusterConflicts(c, {}, [])).toEqual(['ranges cut at [] (the cluster has [m])']);
  });
});

describe('coordinator with an existing configuration', () => {
  const tempDir = tempDirs('nova-knobs-');

  async function start(dir: string, settings: Partial<Settings>, splits?: Buffer[]): Promise<Coordinator> {
    return Coordinator.start({ dir, host: '127.0.0.1', port: 0, settings, splits });
  }

  it('keeps what it has when the same knobs are given, and refuses a different one, naming it', async () => {
    const dir = tempDir();
    const first = await start(dir, { logMode: 'memory', activeMemtables: 2 }, [Buffer.from('k')]);
    expect(first.current().settings).toMatchObject({ logMode: 'memory', activeMemtables: 2, maxMemtables: 4 });
    await first.close();
    const again = await start(dir, { logMode: 'memory' });
    expect(again.current().settings.logMode).toBe('memory');
    await again.close();
    await expect(start(dir, { logMode: 'disk', l0Trigger: 4 })).rejects.toMatchObject({
      code: 'BAD_ARGUMENT',
      message: expect.stringContaining('not --l0-trigger 4 (the cluster has 8), --log-mode disk (the cluster has memory)'),
    });
    await expect(start(dir, {}, [Buffer.from('q')])).rejects.toMatchObject({ message: expect.stringContaining('ranges cut at [q] (the cluster has [k])') });
  });

  it('a configuration that does not read is CORRUPTION naming its file, for the coordinator and for nova up', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'config.json'), '{ not json');
    await expect(start(dir, {})).rejects.toMatchObject({ code: 'CORRUPTION', message: expect.stringContaining(join(dir, 'config.json')) });
    expect(() => readConfigFile(dir)).toThrow(/config\.json: not valid JSON/);
  });
});
