/**
 * Gemini's recovery worker (paper §5.2.2.3, Algorithm 3): for each fragment in recovery mode
 * whose dirty list is not yet processed, take the list's Redlease on the secondary (another
 * worker holding it: skip the fragment), and for each dirty key either overwrite the primary's
 * entry with the secondary's value under an I lease (gemini-o, gemini-o+w) or delete it
 * (gemini-i, gemini-i+w); then mark the list done and tell the coordinator. Stateless: a worker
 * that dies leaves the Redlease to expire, and another does the same work again, which is
 * idempotent (deleting or overwriting a dirty key with the secondary's current value).
 */
import type { ClusterConfig } from '../cluster/config.js';
import { overwrites } from '../cluster/gemini.js';
import { DIRTY_PAGE, type GeminiHost } from './gemini-client.js';

/** Dirty keys processed between two renewals of the Redlease (a few calls each, well inside the lease). */
const RENEW_EVERY = 256;

export interface RecoveryHost extends GeminiHost {
  /** Tells the coordinator that `fragment`'s dirty list was processed under configuration `configId`. */
  recovered(fragment: number, configId: number): Promise<void>;
}

/** What one pass did. */
export interface RecoveryPass {
  fragments: number;
  keys: number;
  overwritten: number;
}

/** One pass over the fragments in recovery mode of the host's configuration. */
export async function recoverFragments(host: RecoveryHost): Promise<RecoveryPass> {
  const config: ClusterConfig = host.config();
  const pass: RecoveryPass = { fragments: 0, keys: 0, overwritten: 0 };
  const layer = config.cache;
  if (!layer) return pass;
  const overwrite = overwrites(layer.mode);
  const cfg = config.id;
  for (const f of layer.fragments) {
    if (f.mode !== 'recovery' || f.dirtyDone || f.secondary === undefined) continue;
    const s = host.instance(f.secondary);
    const p = host.instance(f.primary);
    let token = await s.redlease(cfg, f.id).catch(() => undefined);
    if (token === undefined) continue;
    let complete = true;
    let doneBefore = false;
    for (let from = 0; ;) {
      const page = await s.dirtyFetch(cfg, f.id, from, DIRTY_PAGE);
      if (page.state === 'done') {
        doneBefore = true; // another worker finished it
        break;
      }
      if (page.state !== 'whole') {
        complete = false; // the coordinator discards the fragment once it learns the list is gone
        break;
      }
      for (const [n, key] of page.keys.entries()) {
        pass.keys++;
        if (n > 0 && n % RENEW_EVERY === 0) {
          const renewed = await s.redlease(cfg, f.id, token);
          if (renewed === undefined) {
            complete = false;
            break;
          }
          token = renewed;
        }
        if (!overwrite) {
          await p.delete(cfg, key);
          continue;
        }
        const lease = await p.iset(cfg, key);
        if (lease.token === undefined) continue; // a writer holds it: the key is deleted and its write will delete it again
        const v = await s.get(cfg, key, f.secondaryFloor ?? 0);
        if (v && await p.iqset(cfg, key, v, lease.token, f.id)) pass.overwritten++;
        else if (!v) await p.idelete(cfg, key, lease.token);
      }
      if (!complete) break;
      from += page.keys.length;
      const renewed = await s.redlease(cfg, f.id, token);
      if (renewed === undefined) {
        complete = false; // another worker took over after ours lapsed: it finishes the list
        break;
      }
      token = renewed;
      if (page.keys.length === 0 || from >= page.total) break;
    }
    if (!complete) continue;
    if (!doneBefore && !await s.dirtyDone(cfg, f.id, token)) continue;
    await host.recovered(f.id, cfg);
    pass.fragments++;
  }
  return pass;
}
