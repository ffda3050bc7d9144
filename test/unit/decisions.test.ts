/**
 * The decisions the engine and the cluster make, as data-driven cases (test/testdata/*.txt):
 * which compaction is due, which StoCs a table goes to, where Dranges are cut, when writes stall,
 * how Gemini cache fragments move through their modes.
 * NOVA_REWRITE=1 rewrites the expected outputs.
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'vitest';
import { ValueType, makeInternalKey } from '../../src/common/internal-key.js';
import { pickCompactions, LEVELS } from '../../src/compaction/picker.js';
import type { TableMeta } from '../../src/log/version-edit.js';
import type { Placement } from '../../src/cluster/config.js';
import { isCacheMode, joinInstance, newLayer, reconcile, recoveryStep, type CacheLayer, type DirtyFinding } from '../../src/cluster/gemini.js';
import { place } from '../../src/cluster/placement.js';
import { planRebalance } from '../../src/cluster/rebalance.js';
import { boundsFromSample, drangeBounds, drangeLoads, drangeOf, imbalance, planReorganization, recut, REORG, slotLoads } from '../../src/ltc/dranges.js';
import { roomStep } from '../../src/ltc/make-room.js';
import { WriteDelay, type Triggers } from '../../src/ltc/write-delay.js';
import { run, type Case } from '../helpers/datadriven.js';
import { rng } from '../helpers/rng.js';

const DATA = join(dirname(fileURLToPath(import.meta.url)), '..', 'testdata');

/** `L<n>: file:smallest-largest[:size] ...` lines as levels of tables (user keys, sequence 1). */
function levelsOf(c: Case): TableMeta[][] {
  const levels: TableMeta[][] = Array.from({ length: LEVELS }, () => []);
  for (const line of c.input) {
    const m = /^L(\d):\s*(.*)$/.exec(line.trim());
    if (!m) throw new Error(`${c.where}: not a level line: ${line}`);
    const level = Number(m[1]);
    for (const t of m[2].split(/\s+/).filter(Boolean)) {
      const [file, span, size] = t.split(':');
      const [lo, hi] = span.split('-');
      levels[level].push({
        level, file: Number(file), size: Number(size ?? 100), entries: 1, fragments: [],
        smallest: makeInternalKey(Buffer.from(lo), 1, ValueType.Put), largest: makeInternalKey(Buffer.from(hi), 1, ValueType.Put),
      });
    }
  }
  return levels;
}

describe('decisions', () => {
  it('compaction picking (testdata/compaction-picking.txt)', async () => {
    await run(join(DATA, 'compaction-picking.txt'), (c) => {
      const levels = levelsOf(c);
      const cursor: Array<Buffer | undefined> = new Array(LEVELS);
      if (c.args.cursor) cursor[Number(c.args.cursorLevel ?? 1)] = makeInternalKey(Buffer.from(c.args.cursor), 1, ValueType.Put);
      const options = { l0Trigger: Number(c.args.l0Trigger ?? 4), l1Bytes: Number(c.args.l1Bytes ?? 1000), ...(c.args.memtableBytes ? { memtableBytes: Number(c.args.memtableBytes) } : {}) };
      // busy=: tables of compactions running. `pick`: room for one job; `pick-all`: for any number.
      const busy = new Set((c.args.busy ?? '').split(',').filter(Boolean).map(Number));
      const files = (ts: TableMeta[]): string => ts.map((t) => t.file).join(' ') || 'none';
      const jobs = pickCompactions(levels, options, cursor, busy, c.command === 'pick-all' ? Infinity : 1);
      const out = jobs.map((job) => `L${job.level} -> L${job.level + 1}: inputs ${files(job.inputs)}; overlapping ${files(job.overlapping)}`);
      return out.length > 0 ? out.join('\n') : 'nothing due';
    });
  });

  it('rebalancing (testdata/rebalance.txt)', async () => {
    await run(join(DATA, 'rebalance.txt'), (c) => {
      const ranges = c.input.join(' ').split(/\s+/).filter(Boolean).map((t) => {
        const m = /^r(\d+)@(\d+):(\d+)$/.exec(t);
        if (!m) throw new Error(`${c.where}: not range@ltc:load: ${t}`);
        return { range: Number(m[1]), ltc: Number(m[2]), load: Number(m[3]) };
      });
      const plan = planRebalance(ranges, c.args.ltcs.split(',').map(Number), Number(c.args.threshold));
      return plan.length === 0 ? 'nothing to move' : plan.map((m) => `r${m.range}: ${m.from} -> ${m.to}`).join('\n');
    });
  });

  it('placement (testdata/placement.txt)', async () => {
    await run(join(DATA, 'placement.txt'), async (c) => {
      const loads = new Map((c.args.loads ?? '').split(',').filter(Boolean).map((kv) => kv.split(':').map(Number) as [number, number]));
      const ids = c.args.stocs.split(',').map(Number);
      const state = { next: Number(c.args.next ?? 0) };
      const random = rng(Number(c.args.seed ?? 1));
      const picks: string[] = [];
      try {
        for (let i = 0; i < Number(c.args.rounds ?? 1); i++) {
          const got = await place(c.args.policy as Placement, ids, Number(c.args.rho), state, async (id) => {
            const load = loads.get(id);
            if (load === undefined) throw new Error(`StoC ${id} does not answer`);
            return load;
          }, random);
          picks.push(got.join(','));
        }
      } catch (err) {
        picks.push(`error: ${(err as Error).message}`);
      }
      return picks.join(' | ');
    });
  });

  it('Drange cuts (testdata/dranges.txt)', async () => {
    await run(join(DATA, 'dranges.txt'), (c) => {
      const sample = c.input.join(' ').split(/\s+/).filter(Boolean).map((k) => Buffer.from(k));
      const bounds = boundsFromSample(sample, Number(c.args.count));
      const probes = (c.args.probe ?? '').split(',').filter(Boolean);
      const where = probes.map((k) => `${k}->${drangeOf(bounds, Buffer.from(k))}`).join(' ');
      return `bounds [${bounds.map((b) => b.toString()).join(', ')}]${where ? `; ${where}` : ''}`;
    });
  });

  it('Drange reorganizations (testdata/reorganizations.txt)', async () => {
    await run(join(DATA, 'reorganizations.txt'), (c) => {
      if (c.command === 'recut') {
        const sample = c.input.join(' ').split(/\s+/).filter(Boolean).map((k) => Buffer.from(k));
        const l = recut(sample, Number(c.args.theta), Number(c.args.gamma));
        // Bytes outside printable ASCII as \xNN: a point Drange ends at its key and a zero byte.
        const str = (k: Buffer): string => k.toString('latin1').replace(/[^\x20-\x7e]/g, (ch) => `\\x${ch.charCodeAt(0).toString(16).padStart(2, '0')}`);
        return `tranges [${l.tranges.map(str).join(' ')}]; dranges [${drangeBounds(l).map(str).join(' ')}]${l.copies ? `; copies [${l.copies.join(' ')}]` : ''}`;
      }
      // Writes per Trange; `|` between Tranges is a Drange bound; `*n` gives a Drange n copies.
      const tokens = c.input.join(' ').split(/\s+/).filter(Boolean);
      const writes: number[] = [];
      const dranges: number[] = [];
      const copies: number[] = [1];
      for (const t of tokens) {
        if (t === '|') {
          dranges.push(writes.length - 1);
          copies.push(1);
        } else if (t.startsWith('*')) copies[copies.length - 1] = Number(t.slice(1));
        else writes.push(Number(t));
      }
      const layout = { tranges: writes.slice(1).map((_, i) => Buffer.from(`k${i}`)), dranges, ...(copies.some((n) => n > 1) ? { copies } : {}) };
      const show = (bounds: number[]): string => writes.map((w, i) => `${w}${bounds.includes(i) ? ' |' : ''}`).join(' ');
      const loads = (bounds: number[]): string => drangeLoads({ ...layout, dranges: bounds }, writes).join(' ');
      const before = `loads ${loads(dranges)}, imbalance ${imbalance(slotLoads(layout, writes)).toFixed(3)}`;
      const plan = planReorganization(layout, writes, { ...REORG, minWrites: Number(c.args.minWrites ?? 0) });
      if (plan.kind !== 'minor') return `${before}\n${plan.kind}`;
      const after = slotLoads({ ...layout, dranges: plan.dranges }, writes);
      return `${before}\nminor, ${plan.moved} Tranges moved: ${show(plan.dranges)}\nloads ${loads(plan.dranges)}, imbalance ${imbalance(after).toFixed(3)}`;
    });
  });

  it('stall rules (testdata/stalls.txt)', async () => {
    await run(join(DATA, 'stalls.txt'), (c) => {
      const n = (k: string, d: number): number => (c.args[k] === undefined ? d : Number(c.args[k]));
      const step = roomStep({
        flushNeedsActives: 'needsActives' in c.args, fullDrange: n('full', -1), memtables: n('memtables', 1),
        memtableLimit: n('limit', 2), l0Tables: n('l0', 0), l0StopTrigger: n('l0Stop', 24),
      });
      return step.kind === 'retire' ? `retire Drange ${step.drange}` : step.kind === 'stall' ? `stall${step.onL0 ? ' on L0' : ''}: ${step.cause}` : step.kind;
    });
  });

  it('write slowdown (testdata/write-delay.txt)', async () => {
    let delay = new WriteDelay();
    let triggers: Triggers = { slowdown: 16, stop: 24 };
    const rate = (): string => (delay.rate > 0 ? `${(delay.rate / 1024).toFixed(1)} KiB/s` : 'not slowed');
    await run(join(DATA, 'write-delay.txt'), (c) => {
      const n = (k: string): number => Number(c.args[k]);
      switch (c.command) {
        case 'new':
          delay = new WriteDelay();
          triggers = { slowdown: n('slowdown'), stop: n('stop') };
          return rate();
        case 'write':
          delay.charge(n('bytes'), n('at'), c.args.began === undefined ? undefined : n('began'));
          return `${rate()}; wait ${delay.waitMs(n('at')).toFixed(1)} ms`;
        case 'version':
          delay.adjust(n('l0'), triggers, 'stopped' in c.args);
          return rate();
        case 'wait':
          return `${rate()}; wait ${delay.waitMs(n('at')).toFixed(1)} ms`;
        default:
          throw new Error(`${c.where}: unknown command ${c.command}`);
      }
    });
  });

  it('Gemini fragment modes (testdata/gemini-fragments.txt)', async () => {
    // One layer carried from case to case; `new` starts another. Every case prints the layer after
    // it, one fragment a line, then what reconcile says changed (or `no change`).
    let layer: CacheLayer | undefined;
    const ids = (s: string | undefined): number[] => (s ?? '').split(',').filter(Boolean).map(Number);
    const show = (l: CacheLayer): string[] => l.fragments.map((f) => [
      `f${f.id} ${f.mode} p${f.primary} floor${f.floor}`,
      ...(f.secondary !== undefined ? [`s${f.secondary} sfloor${f.secondaryFloor ?? '?'}`] : f.mode === 'transient' ? ['served-by-none'] : []),
      ...(f.migrate !== undefined ? [f.migrate ? 'migrate' : 'no-migrate'] : []),
      ...(f.dirtyDone !== undefined ? [f.dirtyDone ? 'dirty-done' : 'dirty-pending'] : []),
    ].join(' '));
    await run(join(DATA, 'gemini-fragments.txt'), (c) => {
      if (c.command === 'new') {
        if (!isCacheMode(c.args.mode)) throw new Error(`${c.where}: not a cache mode: ${c.args.mode}`);
        layer = newLayer(c.args.mode, Number(c.args.fragments), ids(c.args.instances), Number(c.args.id));
        return show(layer).join('\n');
      }
      if (!layer) throw new Error(`${c.where}: no layer: start with new`);
      const out: string[] = [];
      if (c.command === 'reconcile') {
        // dirty=fragment:whole|partial|missing,...: what the secondaries say of the dirty lists.
        const dirty = new Map((c.args.dirty ?? '').split(',').filter(Boolean).map((kv) => {
          const [j, d] = kv.split(':');
          if (!['whole', 'partial', 'missing'].includes(d)) throw new Error(`${c.where}: not a dirty finding: ${kv}`);
          return [Number(j), d as DirtyFinding] as const;
        }));
        const r = reconcile(layer, { alive: new Set(ids(c.args.alive)), dirty }, Number(c.args.id));
        if (r) layer = r.layer;
        out.push(...show(layer));
        if (!r) out.push('no change');
        else for (const ch of r.changes) out.push(`change f${ch.fragment} ${ch.from} -> ${ch.to}: ${ch.why}${ch.discarded ? ' [discarded]' : ''}`);
      } else if (c.command === 'recovered') {
        if (c.args.what !== 'dirty' && c.args.what !== 'migration') throw new Error(`${c.where}: what=dirty or what=migration`);
        const next = recoveryStep(layer, Number(c.args.fragment), c.args.what as 'dirty' | 'migration');
        if (next) layer = next;
        out.push(...show(layer));
        if (!next) out.push('no change');
      } else if (c.command === 'join') {
        layer = joinInstance(layer, Number(c.args.instance), Number(c.args.id));
        out.push(...show(layer));
      } else throw new Error(`${c.where}: unknown command ${c.command}`);
      return out.join('\n');
    });
  });
});
