/**
 * A range's MANIFEST on StoCs (DESIGN.md §3, "MANIFEST, one per range, stored on StoCs with
 * replicas"), so the range can open on any LTC. MANIFEST n is the file `r<range>-<n>.manifest`,
 * replicated on R StoCs exactly as a memtable's log is (StocLogStore: one append at a time to
 * every replica, so each replica is a prefix of the MANIFEST; the longest is read).
 *
 * There is no CURRENT file (a StoC has no atomic rename): the live MANIFEST is the highest
 * numbered one whose first edit reads whole. An open writes that first edit — the whole
 * tree — and syncs it before anything else, and only then deletes the older ones (install),
 * so a crash at any point leaves either the old MANIFEST or the new one live, never neither.
 *
 * Refusing beats starting empty: a range opens with an empty tree only when every configured
 * StoC answers and holds none of its tables or MANIFESTs (an empty tree would delete tables it
 * cannot see as orphans, and its MANIFEST would sort below the one on a StoC that was down). A MANIFEST still in the LTC's directory (written before
 * MANIFESTs moved to StoCs) is read from there once; installing the first StoC MANIFEST
 * removes it.
 */
import { NovaError } from '../common/errors.js';
import { readLog } from './log-format.js';
import type { LocalManifestStore, LogWriter, ManifestStore } from '../ltc/local-store.js';
import { filesOf } from '../ltc/stoc-block-store.js';
import type { StocPool } from '../ltc/stoc-pool.js';
import { StocLogStore } from './stoc-log-store.js';

export class StocManifestStore implements ManifestStore {
  private readonly files: StocLogStore;

  /**
   * @param strictUntil until this time (ms since the epoch), reading waits for every
   *   configured StoC (one that does not answer may hold the newest MANIFEST's replicas).
   * @param legacy the LTC directory's MANIFEST, read when the StoCs hold none.
   */
  constructor(private readonly pool: StocPool, private readonly range: number, replicas: number,
    onLog: (line: string) => void, strictUntil: number, private readonly legacy?: LocalManifestStore) {
    this.files = new StocLogStore(pool, range, replicas, onLog, strictUntil, 'manifest');
  }

  async readCurrent(): Promise<{ name: string; bytes: Buffer } | undefined> {
    for (const file of (await this.files.list()).sort((a, b) => b - a)) {
      const name = this.files.describe(file);
      const bytes = await this.files.read(file);
      // Without a whole first edit, an open died writing it: the one before is still live.
      if (bytes && readLog(bytes, name).records.length > 0) return { name, bytes };
    }
    const legacy = await this.legacy?.readCurrent();
    if (legacy) return legacy;
    await this.expectNothing();
    return undefined;
  }

  /**
   * Resolves only if every configured StoC answers and holds no table or MANIFEST of the
   * range: then, and only then, the range is new. Otherwise UNAVAILABLE (the caller retries).
   */
  private async expectNothing(): Promise<void> {
    const ids = this.pool.ids();
    const answers = await Promise.all(ids.map((id) =>
      this.pool.on(id, async (c) => (await c.list(`r${this.range}-`)).map((f) => f.name)).catch(() => undefined)));
    const silent = ids.filter((_, i) => answers[i] === undefined);
    if (silent.length > 0) {
      throw new NovaError('UNAVAILABLE', `range ${this.range}: no MANIFEST found, and StoC ${silent.join(', ')} did not answer; ` +
        'a range opens empty only when every StoC says it holds nothing of it');
    }
    const names = answers.flat() as string[];
    const held = filesOf(this.range, names, '.sst').length + filesOf(this.range, names, '.manifest').length;
    if (held > 0) {
      throw new NovaError('UNAVAILABLE', `range ${this.range}: the StoCs hold ${held} of its tables or MANIFESTs but no readable MANIFEST; ` +
        'not opening it empty (that would delete its tables): check the StoCs\' logs');
    }
  }

  create(file: number): Promise<LogWriter> {
    return this.files.create(file);
  }

  async install(file: number): Promise<void> {
    for (const old of await this.files.list()) if (old !== file) await this.files.remove(old);
    this.legacy?.removeAll();
  }
}
