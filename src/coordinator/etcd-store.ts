/**
 * The configuration in etcd, and one leader among the coordinators that share it
 * (doc/decisions/coordinator-on-etcd.md).
 *
 * Each coordinator holds an etcd lease it keeps alive. It leads once it has created the
 * leader key under its lease (a transaction that succeeds only if the key is absent), and the
 * key's value is its address, which standbys hand to those who ask them. A leader that dies
 * stops renewing; etcd deletes the key when the lease expires, and a standby creates it.
 *
 * Every save is a transaction that succeeds only while the leader key is still on this
 * coordinator's lease and the configuration is at the revision this coordinator last read or
 * wrote: a deposed leader (paused past its lease, or cut off from etcd) can never overwrite
 * what its successor wrote. Its saves fail, and it stops (onLost).
 */
import { Etcd3, type Lease } from 'etcd3';
import { withDeadline } from '../common/deadline.js';
import { NovaError } from '../common/errors.js';
import { configFromJson, configToJson, type ClusterConfig } from '../cluster/config.js';
import type { ConfigStore } from './config-store.js';

/** The leader's lease: how long after its death a standby may take over, at most. */
const LEASE_TTL_S = 2;
/** How often a standby tries to take the lead. */
const CAMPAIGN_MS = 250;
/** Each call to etcd's deadline. */
const CALL_MS = 5_000;

export interface EtcdStoreOptions {
  /** HOST:PORT of each etcd endpoint (http:// is assumed). */
  endpoints: string[];
  /** The keys' prefix: one etcd holds several clusters under different prefixes. */
  prefix: string;
  onLog?: (line: string) => void;
}

/** Parses `HOST:PORT[,HOST:PORT…]` (a URL scheme is allowed); BAD_ARGUMENT naming what is wrong. */
export function parseEndpoints(list: string): string[] {
  const out = list.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  if (out.length === 0) throw new NovaError('BAD_ARGUMENT', '--etcd takes HOST:PORT[,HOST:PORT…]');
  for (const e of out) {
    if (!/^(https?:\/\/)?[A-Za-z0-9._[\]:-]+:\d{1,5}$/.test(e)) throw new NovaError('BAD_ARGUMENT', `--etcd: ${JSON.stringify(e)} is not HOST:PORT`);
  }
  return out.map((e) => (/^https?:\/\//.test(e) ? e : `http://${e}`));
}

export class EtcdConfigStore implements ConfigStore {
  private readonly client: Etcd3;
  private lease: Lease | undefined;
  private leaseId = '';
  private leading = false;
  private leaderAddress: string | undefined;
  /** The configuration key's revision this coordinator last read or wrote. */
  private revision = '0';
  /** Saves in order: each waits for the one before. */
  private tail: Promise<void> = Promise.resolve();
  private lost: ((err: Error) => void) | undefined;
  private lostErr: Error | undefined;
  private closed = false;

  constructor(private readonly o: EtcdStoreOptions) {
    this.client = new Etcd3({ hosts: o.endpoints, dialTimeout: CALL_MS });
  }

  get where(): string {
    return `etcd ${this.o.endpoints.join(',')} under ${this.o.prefix}`;
  }

  private key(name: string): string {
    return `${this.o.prefix}/${name}`;
  }

  private call<T>(what: string, work: Promise<T>): Promise<T> {
    return withDeadline(work, CALL_MS, () => new NovaError('DEADLINE_EXCEEDED', `etcd did not answer ${what} within ${CALL_MS} ms (${this.o.endpoints.join(',')})`))
      .catch((err: Error) => {
        throw err instanceof NovaError ? err : new NovaError('UNAVAILABLE', `etcd ${what} failed (${this.o.endpoints.join(',')}): ${err.message}`);
      });
  }

  async lead(address: string): Promise<void> {
    const lease = this.client.lease(LEASE_TTL_S, { autoKeepAlive: true });
    this.lease = lease;
    lease.on('lost', (err) => this.fail(new NovaError('UNAVAILABLE', `lost the etcd lease that makes this coordinator the leader (${err.message})`)));
    this.leaseId = await this.call('a lease grant', lease.grant());
    const leaderKey = this.key('leader');
    let told = '';
    while (!this.closed) {
      if (this.lostErr) throw this.lostErr;
      const r = await this.call('a campaign', this.client.if(leaderKey, 'Create', '==', 0)
        .then(this.client.put(leaderKey).value(address).lease(this.leaseId))
        .else(this.client.get(leaderKey))
        .commit());
      if (r.succeeded) {
        this.leading = true;
        this.leaderAddress = address;
        return;
      }
      const kv = r.responses[0]?.response_range?.kvs?.[0];
      this.leaderAddress = kv ? kv.value.toString() : undefined;
      if (this.leaderAddress && this.leaderAddress !== told) {
        told = this.leaderAddress;
        this.o.onLog?.(`standing by: the coordinator at ${told} leads`);
      }
      await new Promise((r2) => setTimeout(r2, CAMPAIGN_MS));
    }
    throw new NovaError('CLOSED', 'the coordinator stopped before it led');
  }

  leader(): string | undefined {
    return this.leaderAddress;
  }

  async load(): Promise<ClusterConfig | undefined> {
    const r = await this.call('a read of the configuration', this.client.get(this.key('config')).exec());
    const kv = r.kvs[0];
    if (!kv) {
      this.revision = '0';
      return undefined;
    }
    this.revision = kv.mod_revision;
    let json: unknown;
    try {
      json = JSON.parse(kv.value.toString());
    } catch (err) {
      throw new NovaError('CORRUPTION', `${this.where}: the configuration is not valid JSON (${(err as Error).message})`);
    }
    return configFromJson(json, `${this.where}/config`);
  }

  save(c: ClusterConfig): Promise<void> {
    const text = JSON.stringify(configToJson(c));
    const run = this.tail.then(async () => {
      if (this.lostErr) throw this.lostErr;
      if (!this.leading) throw new NovaError('UNAVAILABLE', 'this coordinator does not lead');
      const configKey = this.key('config');
      const r = await this.call('a write of the configuration', this.client.if(this.key('leader'), 'Lease', '==', this.leaseId)
        .and(configKey, 'Mod', '==', this.revision)
        .then(this.client.put(configKey).value(text))
        .commit());
      if (!r.succeeded) {
        const err = new NovaError('UNAVAILABLE', `config ${c.id} was not written: another coordinator leads now, or wrote the configuration since`);
        this.fail(err);
        throw err;
      }
      this.revision = r.header.revision;
    });
    this.tail = run.catch(() => undefined);
    return run;
  }

  onLost(f: (err: Error) => void): void {
    this.lost = f;
  }

  private fail(err: Error): void {
    if (this.lostErr || this.closed) return;
    this.lostErr = err;
    this.leading = false;
    this.lost?.(err);
  }

  async close(): Promise<void> {
    this.closed = true;
    try {
      // Hands the lead over at once instead of after the lease's time.
      if (this.lease && !this.lease.revoked()) await withDeadline(this.lease.revoke(), CALL_MS, () => new Error('revoke')).catch(() => undefined);
    } finally {
      this.client.close();
    }
  }
}
