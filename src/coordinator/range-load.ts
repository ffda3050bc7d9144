/**
 * Each range's load as its LTC reports it: cumulative counters (requests, bytes written) on
 * every heartbeat, turned into rates over the last WINDOW_MS. Counters belong to one LTC
 * process: a range that moved, or an LTC that restarted, starts again from its first sample.
 */

/** The window rates are taken over. */
export const LOAD_WINDOW_MS = 10_000;

export interface RangeRate {
  /** The LTC whose counters these are. */
  ltc: number;
  requestsPerSec: number;
  bytesWrittenPerSec: number;
}

interface Sample {
  at: number;
  requests: number;
  bytes: number;
}

interface Track {
  ltc: number;
  samples: Sample[];
}

export class RangeLoad {
  private readonly tracks = new Map<number, Track>();

  /** A report from LTC `ltc` at `at` (ms) of range `range`'s counters. */
  sample(ltc: number, range: number, at: number, requests: number, bytes: number): void {
    let t = this.tracks.get(range);
    const last = t?.samples[t.samples.length - 1];
    // Another LTC, or counters that went back (a restart): a new track.
    if (!t || t.ltc !== ltc || (last && (requests < last.requests || bytes < last.bytes))) {
      this.tracks.set(range, t = { ltc, samples: [] });
    }
    t.samples.push({ at, requests, bytes });
    while (t.samples.length > 2 && at - t.samples[1].at >= LOAD_WINDOW_MS) t.samples.shift();
  }

  /** Range `range`'s rates over the window ending at `now`; zero when there are not two samples yet. */
  rate(range: number, now: number): RangeRate | undefined {
    const t = this.tracks.get(range);
    if (!t) return undefined;
    const s = t.samples;
    const first = s[0];
    const last = s[s.length - 1];
    // A track whose LTC stopped reporting has no current rate.
    if (now - last.at > LOAD_WINDOW_MS) return { ltc: t.ltc, requestsPerSec: 0, bytesWrittenPerSec: 0 };
    const secs = (last.at - first.at) / 1000;
    if (secs <= 0) return { ltc: t.ltc, requestsPerSec: 0, bytesWrittenPerSec: 0 };
    return { ltc: t.ltc, requestsPerSec: (last.requests - first.requests) / secs, bytesWrittenPerSec: (last.bytes - first.bytes) / secs };
  }

  forget(range: number): void {
    this.tracks.delete(range);
  }
}
