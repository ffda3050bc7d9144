/**
 * Optional TLS on the TCP servers (an LTC's client port, the coordinator) and their clients
 * (doc/decisions/tcp-tls.md): a server with a certificate and key serves only TLS; a client with
 * a CA connects with TLS and checks the server's certificate against it. A process holds one
 * TLS setting, as it holds one cluster secret (useTcpTls). Local sockets are not used under TLS.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { NovaError } from '../common/errors.js';

/** Paths of PEM files, as flags give them. */
export interface TlsFiles {
  cert?: string;
  key?: string;
  ca?: string;
}

/** The PEM bytes: `cert` and `key` to serve TLS, `ca` to connect with it. */
export interface TcpTls {
  cert?: Buffer;
  key?: Buffer;
  ca?: Buffer;
}

let current: TcpTls | undefined;

/** Reads `files` (BAD_ARGUMENT naming a missing file, or a certificate without its key). */
export function readTlsFiles(files: TlsFiles): TcpTls {
  if ((files.cert === undefined) !== (files.key === undefined)) {
    throw new NovaError('BAD_ARGUMENT', 'a TLS server needs both --tls-cert and --tls-key');
  }
  const read = (flag: string, path: string | undefined): Buffer | undefined => {
    if (path === undefined) return undefined;
    if (!existsSync(path)) throw new NovaError('BAD_ARGUMENT', `--${flag} ${path}: no such file`);
    return readFileSync(path);
  };
  return { cert: read('tls-cert', files.cert), key: read('tls-key', files.key), ca: read('tls-ca', files.ca) };
}

/** The TLS files a local cluster was started with, kept in its directory by nova up (none: plain TCP). */
export function clusterTlsFiles(dir: string): TlsFiles | undefined {
  const path = join(dir, TLS_FILE);
  if (!existsSync(path)) return undefined;
  const f = JSON.parse(readFileSync(path, 'utf8')) as TlsFiles;
  return { ...(typeof f.cert === 'string' ? { cert: f.cert } : {}), ...(typeof f.key === 'string' ? { key: f.key } : {}), ...(typeof f.ca === 'string' ? { ca: f.ca } : {}) };
}

/** The CA nova up kept for the cluster whose directory is `dir`, if it keeps one. */
export function tlsCaInDir(dir: string): Buffer | undefined {
  const ca = clusterTlsFiles(dir)?.ca;
  return ca ? readTlsFiles({ ca }).ca : undefined;
}

/** Where nova up keeps the cluster's TLS file paths. */
export const TLS_FILE = 'tls.json';

/** Makes `tls` the process's (undefined: plain TCP). */
export function useTcpTls(tls: TcpTls | undefined): void {
  current = tls && (tls.cert || tls.ca) ? tls : undefined;
}

/** The process's TLS setting, if it has one. */
export function tcpTls(): TcpTls | undefined {
  return current;
}
