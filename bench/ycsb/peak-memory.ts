/**
 * Each process's peak resident memory during a run, from Linux's /proc/PID/status (`VmHWM`,
 * the high-water mark of its resident set), reset before the run by writing 5 to
 * /proc/PID/clear_refs, so each cell reports its own peak rather than the load's or an earlier
 * cell's. Where that cannot be done (not Linux, another user's process), nothing is reported.
 */
import { readFileSync, writeFileSync } from 'node:fs';

export interface NamedProcess {
  pid: number;
  /** What it is, for the report: an engine's name, or a cluster component's role and id. */
  name: string;
  /** The memory its knobs give it (src/control/budgets.ts), when it has a budget. */
  budget?: number;
}

export interface PeakRss {
  name: string;
  bytes: number;
  budget?: number;
}

/** Whether the process's peak passed the memory its knobs give it. */
export function overBudget(p: PeakRss): boolean {
  return p.budget !== undefined && p.bytes > p.budget;
}

/** A session's note on what a process over its budget means, if one of its runs had one; else none. */
export function overBudgetNotes(runs: ReadonlyArray<{ peakRss?: PeakRss[] }>): string[] {
  return runs.some((r) => r.peakRss?.some(overBudget)) ? [OVER_BUDGET_NOTE] : [];
}

const OVER_BUDGET_NOTE = 'Over budget: a component\'s budget (its knobs) bounds what it sizes by them, an LTC\'s its block cache, ' +
  'memtables and tables\' metadata; Node, V8\'s heap and the memory glibc keeps after freeing come on top. To bound the whole ' +
  'process, give it a memory limit (--cap ltc.memory=SIZE, here or to nova up): the LTC then keeps within it (doc/decisions/ltc-memory-limit.md).';

/** Starts each process's high-water mark afresh; false if any could not be reset. */
export function resetPeaks(processes: readonly NamedProcess[]): boolean {
  let all = true;
  for (const p of processes) {
    try {
      writeFileSync(`/proc/${p.pid}/clear_refs`, '5');
    } catch {
      all = false;
    }
  }
  return all;
}

/** Each process's peak resident memory since its last reset, or undefined if any cannot be read. */
export function peaks(processes: readonly NamedProcess[]): PeakRss[] | undefined {
  const out: PeakRss[] = [];
  for (const p of processes) {
    let text: string;
    try {
      text = readFileSync(`/proc/${p.pid}/status`, 'utf8');
    } catch {
      return undefined;
    }
    const m = /^VmHWM:\s*(\d+) kB$/m.exec(text);
    if (!m) return undefined;
    out.push({ name: p.name, bytes: Number(m[1]) * 1024, ...(p.budget !== undefined ? { budget: p.budget } : {}) });
  }
  return out.length > 0 ? out : undefined;
}
