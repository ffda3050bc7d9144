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
import { performance } from 'node:perf_hooks';
import { Etcd3, type Lease } from 'etcd3';
import { withDeadline } from '../common/deadline.js';
import { NovaError } from '../common/errors.js';
import { configFromJson, configToJson, type ClusterConfig } from '../cluster/config.js';
import type { ConfigStore } from './config-store.js';

/** The leader's lease: how long after its death a standby may take over, at most. */
const LEASE_TTL_S = 2;
/** How long after a keepalive was sent etcd surely still holds the lease: its time, less a margin (clock rates differ a little). */
const HELD_MS = LEASE_TTL_S * 1000 - 250;
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
  /** Until when (performance.now()) etcd surely still holds our lease: the last keepalive answered, from when it was sent. */
  private heldUntil = 0;
  private keepaliveSentAt = 0;

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
    lease.on('keepaliveFired', () => { this.keepaliveSentAt = performance.now(); });
    lease.on('keepaliveSucceeded', () => { this.heldUntil = Math.max(this.heldUntil, this.keepaliveSentAt + HELD_MS); });
    const granting = performance.now();
    this.leaseId = await this.retried('a lease grant', () => lease.grant());
    this.heldUntil = granting + HELD_MS;
    const leaderKey = this.key('leader');
    let told = '';
    while (!this.closed) {
      if (this.lostErr) throw this.lostErr;
      const r = await this.retried('a campaign', () => this.client.if(leaderKey, 'Create', '==', 0)
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

  /**
   * Whether this leader may act now: etcd surely holds its lease (its last keepalive answered
   * within the lease's time). A leader cut off from etcd stops answering before a standby can
   * take over, so no member is told anything by two leaders at once.
   */
  holds(): boolean {
    return this.leading && !this.lostErr && performance.now() < this.heldUntil;
  }

  /** `work` again (a second apart) while it fails as etcd being away, until the lease is lost or the store closes. */
  private async retried<T>(what: string, work: () => Promise<T>): Promise<T> {
    for (;;) {
      try {
        return await this.call(what, work());
      } catch (err) {
        if (this.closed || this.lostErr) throw err;
        this.o.onLog?.(`${(err as Error).message}; trying again`);
        await new Promise((r) => setTimeout(r, 1_000));
      }
    }
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
      for (;;) {
        let r;
        try {
          r = await this.call('a write of the configuration', this.client.if(this.key('leader'), 'Lease', '==', this.leaseId)
            .and(configKey, 'Mod', '==', this.revision)
            .then(this.client.put(configKey).value(text))
            .commit());
        } catch (err) {
          // etcd away for a moment: the same write again while the lease holds (it may have landed: see below).
          if (!this.holds()) {
            this.fail(err as Error);
            throw err;
          }
          await new Promise((resolve) => setTimeout(resolve, 200));
          continue;
        }
        if (r.succeeded) {
          this.revision = r.header.revision;
          return;
        }
        // Refused: an earlier try of this very write landed (we still lead and the configuration is
        // what we wrote), or another coordinator leads or wrote since.
        const now = await this.call('a read of the configuration', this.client.if(this.key('leader'), 'Lease', '==', this.leaseId)
          .then(this.client.get(configKey)).commit()).catch(() => undefined);
        const kv = now?.succeeded ? now.responses[0]?.response_range?.kvs?.[0] : undefined;
        if (kv && kv.value.toString() === text && this.holds()) {
          this.revision = kv.mod_revision;
          return;
        }
        const err = new NovaError('UNAVAILABLE', `config ${c.id} was not written: another coordinator leads now, or wrote the configuration since`);
        this.fail(err);
        throw err;
      }
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
