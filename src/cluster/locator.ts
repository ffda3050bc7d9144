/**
 * Where the coordinator is: a fixed HOST:PORT, or the cluster.json that `nova up` writes in
 * its directory. The file is read again whenever the coordinator cannot be reached, because
 * `nova up` restarts a coordinator on a new port when its old one is taken (another process
 * got it meanwhile), and clients and components that outlived the old one must follow it.
 */
import { readFileSync } from 'node:fs';
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
  private link: TcpRpcClient | undefined;
  private connecting: Promise<TcpRpcClient> | undefined;
  private closed = false;

  /** `address` to use first; `clusterFile` (a cluster.json) to read again if it does not answer. */
  constructor(address: string, private readonly clusterFile?: string) {
    this.current = address;
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
   * After the coordinator failed to answer: reads the cluster file again, and true if it names
   * another address, which `connection` uses from now on (the old link is closed).
   */
  moved(): boolean {
    if (this.clusterFile === undefined) return false;
    let now: string;
    try {
      now = coordinatorIn(this.clusterFile, this.clusterFile);
    } catch {
      return false; // being rewritten, or gone: keep trying the address we have
    }
    if (now === this.current) return false;
    this.current = now;
    this.link?.close();
    this.link = undefined;
    return true;
  }

  /** Closes the link; later and pending connections fail with CLOSED. */
  close(): void {
    this.closed = true;
    this.link?.close();
    this.link = undefined;
  }
}
