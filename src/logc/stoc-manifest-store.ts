/**
 * A range's MANIFEST on StoCs (DESIGN.md §3, "MANIFEST, one per range, stored on StoCs with
 * replicas"), so the range can open on any LTC. MANIFEST n is the file `r<range>-<n>.manifest`,
 * replicated on R StoCs as a memtable's log is (StocLogStore: each edit acknowledged by a
 * majority; the engine sends the next edit only then, so the replicas that acknowledged the
 * last edit hold every edit whole; the longest whole replica is read).
 *
 * There is no CURRENT file (a StoC has no atomic rename): the live MANIFEST is the highest
 * numbered one whose first edit reads whole. An open writes that first edit — the whole
 * tree — and syncs it before anything else, and only then deletes the older ones (install),
 * so a crash at any point leaves either the old MANIFEST or the new one live, never neither.
 *
 * Refusing beats guessing: a MANIFEST is chosen only once every configured StoC has answered
 * (an older one would lose, and delete, what followed it), and a range with tables but no
 * readable MANIFEST does not open empty (that would delete its tables as orphans). A MANIFEST still in the LTC's directory (written before
 * MANIFESTs moved to StoCs) is read from there once; installing the first StoC MANIFEST
 * removes it.
 */
import { NovaError } from '../common/errors.js';
import { readLog } from '../log/log-format.js';
import type { LegacyManifest, LogWriter, ManifestStore } from './log-store.js';
import { filesOf } from '../stoc/stoc-protocol.js';
import type { StocPool } from '../stoc/stoc-pool.js';
import { StocLogStore } from './stoc-log-store.js';

export class StocManifestStore implements ManifestStore {
  private readonly files: StocLogStore;

  /** @param legacy the LTC directory's MANIFEST, read when the StoCs hold none. */
  constructor(private readonly pool: StocPool, private readonly range: number, private readonly replicas: number,
    onLog: (line: string) => void, private readonly legacy?: LegacyManifest) {
    // Reading waits for every configured StoC, however long: one that does not answer may
    // hold the newest MANIFEST, and opening an older one would lose (and delete) what
    // followed it. A range whose StoCs are not all up waits to open: safety over availability.
    this.files = new StocLogStore(pool, range, replicas, onLog, Number.POSITIVE_INFINITY, 'manifest');
  }

  placeableReplicas(): number {
    return Math.min(this.replicas, this.pool.placeableForLogs().length);
  }

  async readCurrent(): Promise<{ name: string; bytes: Buffer } | undefined> {
    const names = await this.listEverywhere();
    for (const file of filesOf(this.range, names, '.manifest').sort((a, b) => b - a)) {
      const name = this.files.describe(file);
      const bytes = await this.files.read(file);
      // Without a whole first edit, an open died writing it: the one before is still live.
      if (bytes && readLog(bytes, name).records.length > 0) return { name, bytes };
    }
    const legacy = await this.legacy?.readCurrent();
    if (legacy) return legacy;
    // A new range, unless the StoCs hold tables of it (then its MANIFEST is lost or damaged,
    // and an empty tree would delete those tables). MANIFESTs without a whole first edit
    // are left by opens that died before finishing one: they never held the tree.
    const tables = filesOf(this.range, names, '.sst').length;
    if (tables > 0) {
      throw new NovaError('UNAVAILABLE', `range ${this.range}: the StoCs hold ${tables} of its tables but no readable MANIFEST; ` +
        'not opening it empty (that would delete its tables): check the StoCs\' logs');
    }
    return undefined;
  }

  /**
   * The names of the range's files on every configured StoC that may hold any (not one that never
   * came up); UNAVAILABLE while one is silent.
   */
  private async listEverywhere(): Promise<string[]> {
    const ids = this.pool.mayHoldFiles();
    const answers = await Promise.all(ids.map((id) =>
      this.pool.on(id, async (c) => (await c.list(`r${this.range}-`)).map((f) => f.name)).catch(() => undefined)));
    const silent = ids.filter((_, i) => answers[i] === undefined);
    if (silent.length > 0) {
      throw new NovaError('UNAVAILABLE', `range ${this.range}: StoC ${silent.join(', ')} did not answer and may hold its newest MANIFEST; waiting`);
    }
    return answers.flat() as string[];
  }

  /** A fresh MANIFEST `file`: bytes a crashed open left under that number are removed first. */
  async create(file: number): Promise<LogWriter> {
    await this.files.remove(file);
    return this.files.create(file);
  }

  async install(file: number): Promise<void> {
    for (const old of await this.files.list()) if (old !== file) await this.files.remove(old);
    this.legacy?.removeAll();
  }
}
