/**
 * Where the coordinator is: a fixed HOST:PORT, several (coordinators on etcd, one leading and
 * the others standing by), or the cluster.json that `nova up` writes in its directory. The
 * file is read again whenever the coordinator cannot be reached, because `nova up` restarts a
 * coordinator on a new port when its old one is taken (another process got it meanwhile), and
 * clients and components that outlived the old one must follow it. With several addresses, a
 * standby's NOT_LEADER names the leader, and an address that does not answer gives way to the
 * next.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import { NovaError } from '../common/errors.js';
import { TcpRpcClient } from '../net/tcp-rpc-client.js';

/** Where `nova up` recorded the coordinator of the cluster in `dir`. */
export function coordinatorOf(dir: string): string {
  return coordinatorIn(join(dir, 'cluster.json'), dir);
}

function coordinatorIn(path: string, dir: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    throw new NovaError('UNAVAILABLE', `no cluster in ${dir} (${path} is missing): start one with \`nova up --dir ${dir}\`, or pass --coordinator HOST:PORT`);
  }
  let c: unknown;
  try {
    c = (JSON.parse(text) as { coordinator?: unknown }).coordinator;
  } catch (err) {
    throw new NovaError('CORRUPTION', `${path}: ${(err as Error).message}`);
  }
  if (typeof c !== 'string') throw new NovaError('CORRUPTION', `${path} names no coordinator`);
  return c;
}

/**
 * The coordinator's address and one link to it, shared by its users (a component's beats
 * and refreshes, a client's config fetches): one connect at a time, and a link made to an
 * address the coordinator has since left is replaced — a connect that started before a move
 * must not outlive it.
 */
export class CoordinatorLocator {
  private current: string;
  /** The coordinators given (one, or several on etcd), and which of them was tried last. */
  private readonly addresses: string[];
  private at = 0;
  private link: TcpRpcClient | undefined;
  private connecting: Promise<TcpRpcClient> | undefined;
  private closed = false;

  /** `address`: HOST:PORT[,HOST:PORT…], the first used first; `clusterFile` (a cluster.json) to read again if it does not answer. */
  constructor(address: string, private readonly clusterFile?: string) {
    this.addresses = address.split(',').map((a) => a.trim()).filter((a) => a.length > 0);
    if (this.addresses.length === 0) throw new NovaError('BAD_ARGUMENT', `no coordinator address in ${JSON.stringify(address)}: give HOST:PORT[,HOST:PORT…]`);
    this.current = this.addresses[0]!;
  }

  /** From `nova up`'s directory. */
  static ofDir(dir: string): CoordinatorLocator {
    return new CoordinatorLocator(coordinatorOf(dir), join(dir, 'cluster.json'));
  }

  get address(): string {
    return this.current;
  }

  /** The link to the coordinator where it now is, connecting (within `timeoutMs`) if needed. */
  connection(timeoutMs = 5_000): Promise<TcpRpcClient> {
    if (this.closed) return Promise.reject(new NovaError('CLOSED', 'the coordinator link is closed'));
    const link = this.link;
    if (link && !link.closed && link.address === this.current) return Promise.resolve(link);
    if (this.connecting) return this.connecting;
    link?.close();
    this.link = undefined;
    const address = this.current;
    this.connecting = TcpRpcClient.connect(address, { timeoutMs }).then((l) => {
      if (this.closed || address !== this.current) {
        l.close(); // closed, or the coordinator moved while this connected
        throw new NovaError(this.closed ? 'CLOSED' : 'UNAVAILABLE',
          this.closed ? 'the coordinator link is closed' : `the coordinator moved from ${address} while connecting`);
      }
      return (this.link = l);
    }).finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  /**
   * After the coordinator failed to answer with `err`: the leader a standby named, else the
   * address cluster.json now gives, else the next address given. True if that is another
   * address, which `connection` uses from now on (the old link is closed).
   */
  failed(err?: unknown): boolean {
    const e = err as { code?: unknown; detail?: unknown } | undefined;
    let now: string | undefined;
    if (e?.code === 'NOT_LEADER' && typeof e.detail === 'string' && e.detail !== this.current) now = e.detail;
    else if (this.clusterFile !== undefined) {
      try {
        now = coordinatorIn(this.clusterFile, this.clusterFile);
      } catch {
        return false; // being rewritten, or gone: keep trying the address we have
      }
    } else if (this.addresses.length > 1) {
      // The next given address, even after a leader's own (which may not be among them, or reachable).
      this.at = (this.at + 1) % this.addresses.length;
      now = this.addresses[this.at];
    }
    if (now === undefined || now === this.current) return false;
    this.current = now;
    this.link?.close();
    this.link = undefined;
    return true;
  }

  /**
   * Calls the coordinator that leads. A standby's NOT_LEADER, or an address that does not
   * connect when there is another to try, sends the call on (failed) until `untilMs` has
   * passed; any other failure is the answer, since the call may have been applied.
   */
  async call<T>(op: string, args: unknown[], timeoutMs: number, untilMs = 15_000): Promise<T> {
    const until = performance.now() + untilMs;
    for (;;) {
      let link: TcpRpcClient;
      try {
        link = await this.connection(Math.min(timeoutMs, 5_000));
      } catch (err) {
        // One address that does not connect is the answer; several are tried in turn.
        if (performance.now() > until || (err as NovaError).code === 'CLOSED' || !this.failed(err)) throw err;
        await new Promise((r) => setTimeout(r, 100));
        continue;
      }
      try {
        return await link.call<T>(op, args, timeoutMs);
      } catch (err) {
        if ((err as NovaError).code !== 'NOT_LEADER' || performance.now() > until) throw err;
        // A standby that knows no leader yet (a takeover under way) is asked again after a pause.
        if (!this.failed(err)) await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  /** Closes the link; later and pending connections fail with CLOSED. */
  close(): void {
    this.closed = true;
    this.link?.close();
    this.link = undefined;
  }
}
