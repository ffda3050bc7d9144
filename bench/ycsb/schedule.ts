/**
 * `nova bench run --schedule`: cluster actions at given times of a run (the elasticity trace,
 * the paper's Figure 4.16), e.g. "20s ltc add, 40s stoc add, 60s rebalance, 80s ltc remove, 100s stoc remove".
 * Parsing is pure; the nova engine carries the actions out (store-nova.ts, KvStore.act).
 */

export const ACTIONS = ['ltc add', 'stoc add', 'rebalance', 'ltc remove', 'ltc kill', 'range move', 'stoc remove', 'cache kill', 'cache start'] as const;
export type ActionName = typeof ACTIONS[number];

export interface ScheduledAction {
  /** When, from the run's start. */
  atMs: number;
  name: ActionName;
  /** ltc remove [ID], ltc kill [ID], stoc remove [ID], range move R LTC, cache kill|start [ID] (a Gemini cache instance, default 1). */
  args: number[];
}

/** What an action did, for the report. */
export interface ActionOutcome {
  /** In a phrase. */
  detail: string;
  /** Each range move it made, with how long the range refused requests, and of it, letting go on the old LTC and the engine's open on the new one. */
  moves: Array<{ range: number; from: number; to: number; unavailableMs: number; releaseMs: number; engineOpenMs: number }>;
  /** ltc kill: from the kill until every range was served again. cache kill: until a secondary served each of its fragments. */
  failoverMs?: number;
  /** cache kill|start: the instance. */
  cacheInstance?: number;
}

export interface ScheduleEvent extends ScheduledAction {
  /** When it began (it may wait for the action before it) and how long it took. */
  startedMs: number;
  tookMs: number;
  outcome?: ActionOutcome;
  error?: string;
}

/** `"<seconds>s <action> [args], ..."` in time order; BAD input names what is wrong. */
export function parseSchedule(text: string): ScheduledAction[] {
  const out: ScheduledAction[] = [];
  for (const part of text.split(',').map((p) => p.trim()).filter(Boolean)) {
    const m = /^(\d+(?:\.\d+)?)s\s+(.+)$/.exec(part);
    if (!m) throw new Error(`schedule: "${part}" is not "<seconds>s <action>" (e.g. "20s ltc add")`);
    const words = m[2].trim().split(/\s+/);
    const name = ACTIONS.find((a) => words.slice(0, a.split(' ').length).join(' ') === a);
    if (!name) throw new Error(`schedule: unknown action "${m[2]}": use ${ACTIONS.join(', ')}`);
    const args = words.slice(name.split(' ').length).map((w) => {
      const n = Number(w);
      if (!Number.isSafeInteger(n) || n <= 0) throw new Error(`schedule: "${part}": "${w}" is not an id`);
      return n;
    });
    const max = name === 'range move' ? 2 : name === 'ltc remove' || name === 'ltc kill' || name === 'stoc remove' || name.startsWith('cache ') ? 1 : 0;
    if (args.length > max || (name === 'range move' && args.length !== 2)) {
      const what = name === 'stoc remove' ? 'a StoC' : name.startsWith('cache ') ? 'a cache instance' : 'an LTC';
      throw new Error(`schedule: "${part}": ${name === 'range move' ? 'range move takes a range and an LTC' : max === 1 ? `${name} takes at most ${what} id` : `${name} takes no arguments`}`);
    }
    const atMs = Number(m[1]) * 1000;
    if (out.length > 0 && atMs < out[out.length - 1].atMs) throw new Error(`schedule: "${part}" comes before the action listed ahead of it: list them in time order`);
    out.push({ atMs, name, args });
  }
  return out;
}
