/**
 * A StoC's direct writes (stoc.dopen): files opened on a connection for writes that the
 * fabric's progress thread does and answers itself (native/direct_files.h), so a log append
 * costs this event loop nothing. Handles are pinned files; a handle the fabric would not close
 * keeps its file open, and its connection lingers until a later close succeeds.
 */
import { NovaError } from '../common/errors.js';
import type { Endpoint } from '../transport/endpoint.js';
import type { Fabric } from '../transport/fabric.js';
import type { MemoryRegion } from '../transport/regions.js';
import type { Connection } from './connection.js';
import type { StoredFiles, StoredFile } from './stored-files.js';
import { DIRECT_WRITE_VERSION, MAX_FILE_BYTES, Method, checkName, fields } from './stoc-protocol.js';

/** What the service needs of its StoC. */
export interface DirectHost {
  readonly id: number;
  readonly fabric: Fabric;
  readonly files: StoredFiles;
  /** The StoC's file buffer, cut into connection windows of windowBytes. */
  readonly buffer: MemoryRegion;
  readonly windowBytes: number;
  connections(): Iterable<Connection>;
  /** The connection of `ep`; BAD_ARGUMENT naming `method` if it said no hello. */
  connection(ep: Endpoint, method: string): Connection;
  /** STALE_CONFIG if `name`'s range is fenced off for this connection (fences.ts). */
  checkOwner(name: string, ep: Endpoint, method: string): unknown;
  track<T>(conn: Connection | undefined, kind: 'read' | 'write' | 'other', bytes: number, work: () => Promise<T>): Promise<T>;
  disk<T>(what: string, work: () => Promise<T>): Promise<T>;
  /** Frees an ended connection's window once nothing holds it. */
  freeIfDone(conn: Connection): void;
  log(line: string): void;
}

export class DirectFileService {
  private nextHandle = 1;
  /** Every open handle, for the files they write. */
  private readonly byFile = new Map<StoredFile, Set<number>>();
  /** Ended connections holding handles that would not close (see closeAll). */
  private readonly lingering = new Set<Connection>();

  constructor(private readonly host: DirectHost) {}

  /** Open handles, on live and lingering connections. */
  handles(): number {
    return [...this.host.connections(), ...this.lingering].reduce((n, c) => n + c.direct.size, 0);
  }

  /** Closes every handle of every connection (the StoC's shutdown). */
  closeEverywhere(): void {
    for (const conn of [...this.host.connections(), ...this.lingering]) this.closeAll(conn);
  }

  /**
   * Closes the direct handles of `conn` (those of file `name` only, if given). A handle that
   * would not close stays with its connection; a connection that ended with some is kept in
   * `lingering`, so a later remove or the shutdown tries them again.
   */
  closeAll(conn: Connection, name?: string): void {
    for (const [handle, file] of [...conn.direct]) if (name === undefined || file.name === name) this.close(conn, handle);
    if (conn.gone && conn.direct.size > 0) {
      this.lingering.add(conn);
    } else {
      this.lingering.delete(conn);
      this.host.freeIfDone(conn);
    }
  }

  closeOf(name: string): void {
    for (const conn of [...this.host.connections(), ...this.lingering]) this.closeAll(conn, name);
  }

  /**
   * Opens `file` for direct writes on this connection. Why: a log append is then a WRITE into
   * the connection's window and one small message that the fabric's progress thread writes
   * and answers, with no wake-up of this event loop (doc/decisions/direct-file-writes.md).
   */
  open(args: unknown, ep: Endpoint): Promise<number> {
    const { file: requested, version } = fields(Method.dopen, args);
    const name = checkName(requested);
    this.host.checkOwner(name, ep, Method.dopen);
    if (version !== DIRECT_WRITE_VERSION) {
      throw new NovaError('BAD_ARGUMENT', `StoC ${this.host.id}: direct writes of version ${String(version)} asked for; ` +
        `this StoC takes version ${DIRECT_WRITE_VERSION} (run the same Nova on every component)`);
    }
    const conn = this.host.connection(ep, Method.dopen);
    return this.host.track(conn, 'other', 0, () => this.host.disk(`direct open of ${name}`, async () => {
      const file = (await this.host.files.acquire(name, true))!;
      if (conn.gone) {
        file.unpin();
        throw new NovaError('CLOSED', `StoC ${this.host.id}: the connection ended`);
      }
      const handle = this.nextHandle++;
      try {
        // Again, with nothing awaited before the handle exists: a fence raised since refuses it,
        // one raised later closes it.
        this.host.checkOwner(name, ep, Method.dopen);
        // The client WRITEs each write's bytes into its window and names them (Rpc.writeFile).
        this.host.fabric.registerFile(handle, file.fd, MAX_FILE_BYTES, ep,
          { region: this.host.buffer, start: conn.window * this.host.windowBytes, length: this.host.windowBytes });
      } catch (err) {
        file.unpin();
        throw err;
      }
      conn.direct.set(handle, file);
      let handles = this.byFile.get(file);
      if (!handles) {
        const mine = new Set<number>();
        this.byFile.set(file, (handles = mine));
        file.directEnd = () => {
          let end = 0;
          for (const h of mine) end = Math.max(end, this.host.fabric.fileEnd(h));
          return end;
        };
      }
      handles.add(handle);
      return handle;
    }));
  }

  /**
   * Ends direct writes under `handle`. If the fabric cannot say they ended (a control call
   * that timed out), the handle and its pin stay: the descriptor must not close, nor its
   * number go to another file, while the progress thread may still write to it. A later
   * close (the connection's end, a remove of the file, the shutdown) tries again.
   */
  private close(conn: Connection, handle: number): void {
    const file = conn.direct.get(handle);
    if (!file) return;
    let end: number;
    try {
      end = this.host.fabric.unregisterFile(handle);
    } catch (err) {
      this.host.log(`StoC ${this.host.id}: direct handle ${handle} of ${file.name} not closed (kept open): ${(err as Error).message}`);
      return;
    }
    conn.direct.delete(handle);
    const handles = this.byFile.get(file)!;
    handles.delete(handle);
    if (handles.size === 0) {
      this.byFile.delete(file);
      file.directEnd = undefined;
    }
    file.cover(end);
    file.unpin();
  }
}
