import { describe, expect, it, vi } from 'vitest';
import { PendingCalls } from '../../src/common/pending-calls.js';

describe('PendingCalls', () => {
  it('settles each call once: by its answer, its deadline, a filter, or all at once', async () => {
    const table = new PendingCalls<string>((m) => `${m}: no answer`, true);
    const settled: string[] = [];
    const call = (meta: string, timeoutMs: number): number => table.add(meta, timeoutMs,
      (v) => settled.push(`${meta} ok ${String(v)}`), (e) => settled.push(`${meta} ${(e as { code?: string }).code ?? e.message}`));
    const a = call('a', 10_000);
    const b = call('b', 1);
    call('c', 10_000);
    call('d', 10_000);
    expect(new Set([a, b]).size).toBe(2);
    table.take(a)!.resolve(7);
    expect(table.take(a)).toBeUndefined(); // a late second answer finds nothing
    await new Promise((r) => setTimeout(r, 60));
    table.failWhere((m) => m === 'c', () => Object.assign(new Error('lost'), { code: 'PEER_LOST' }));
    table.failAll(Object.assign(new Error('closed'), { code: 'CLOSED' }));
    expect(settled).toEqual(['a ok 7', 'b DEADLINE_EXCEEDED', 'c PEER_LOST', 'd CLOSED']);
    expect(table.size).toBe(0);
  });

  it('ids go around below 2^31 and never repeat while a call is pending', () => {
    const table = new PendingCalls<number>(() => 'late', true);
    const ids = new Set<number>();
    for (let i = 0; i < 1000; i++) ids.add(table.add(i, 10_000, () => undefined, () => undefined));
    expect(ids.size).toBe(1000);
    expect(Math.max(...ids)).toBeLessThan(2 ** 31);
    table.failAll(new Error('done'));
  });

  it('a process that did not run for a while (paused) does not fail its calls for the time it lost: their answers may be waiting unread', () => {
    vi.useFakeTimers();
    try {
      const table = new PendingCalls<string>((m) => `${m}: no answer`, true);
      const settled: string[] = [];
      table.add('append', 500, () => settled.push('ok'), (e) => settled.push((e as { code?: string }).code ?? e.message));
      vi.advanceTimersByTime(100);
      vi.setSystemTime(Date.now() + 8_000); // SIGSTOP for 8 s, then SIGCONT: the next sweep is late
      vi.advanceTimersByTime(20);
      expect(settled).toEqual([]);
      table.take(1)!.resolve(undefined); // the answer read after the pause
      expect(table.size).toBe(0);
      // Without an answer, the call still fails, by its deadline counted in time the process ran.
      table.add('lost', 500, () => settled.push('late ok'), (e) => settled.push((e as { code?: string }).code ?? e.message));
      vi.advanceTimersByTime(600);
      expect(settled).toEqual(['ok', 'DEADLINE_EXCEEDED']);
    } finally {
      vi.useRealTimers();
    }
  });
});
