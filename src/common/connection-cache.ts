/**
 * Connections kept by key (an LTC's address, a StoC's id or address): made on first use,
 * shared while they last, dropped when they are lost or fail to connect, so the next use makes
 * a new one. Connections do not have to be of one kind: anything that can say it was lost and
 * can be closed.
 */
export interface Closable {
  close(): unknown;
}

export class ConnectionCache<K, C extends Closable> {
  private readonly conns = new Map<K, Promise<C>>();

  /**
   * @param connect makes the connection of a key (a rejection is dropped like a loss).
   * @param watch calls `lost` once `c` is lost (its onClose or onLost).
   */
  constructor(private readonly connect: (key: K) => Promise<C>, private readonly watch: (c: C, lost: () => void) => void) {}

  /** The connection of `key`, made if there is none (or the last one was lost). */
  get(key: K): Promise<C> {
    const known = this.conns.get(key);
    if (known) return known;
    const c = this.connect(key);
    this.conns.set(key, c);
    const drop = (): void => {
      if (this.conns.get(key) === c) this.conns.delete(key);
    };
    c.then((conn) => this.watch(conn, drop), drop);
    return c;
  }

  /** Whether a connection of `key` is kept (made, or being made). */
  has(key: K): boolean {
    return this.conns.has(key);
  }

  /** Drops and closes the connection of `key`, if there is one. */
  forget(key: K): void {
    const c = this.conns.get(key);
    this.conns.delete(key);
    c?.then((conn) => conn.close(), () => undefined);
  }

  /** Drops every connection; resolves once each made one has been closed. */
  async closeAll(): Promise<void> {
    const all = [...this.conns.values()];
    this.conns.clear();
    await Promise.all(all.map((p) => p.then((c) => c.close(), () => undefined)));
  }
}
