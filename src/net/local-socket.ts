/**
 * The local socket a TCP RPC server also listens on, named for its address, and whether a
 * client may try it (doc/decisions/tcp-frames.md).
 */
import { createHash } from 'node:crypto';
import { networkInterfaces } from 'node:os';

/** Bytes of a Unix socket name: sun_path holds 108; one is kept spare for a terminator. */
const MAX_SOCKET_NAME = 107;

/**
 * The local socket of a server at `address` (HOST:PORT as it listens and is advertised): a
 * name in Linux's abstract namespace, so no file is left behind. An address too long for a
 * socket name (108 bytes, which the kernel would cut, not refuse) is named by its hash.
 * Undefined where there is no such namespace.
 */
export function localSocketOf(address: string): string | undefined {
  if (process.platform !== 'linux') return undefined;
  const name = `\0nova-rpc/${address}`;
  return Buffer.byteLength(name) <= MAX_SOCKET_NAME ? name : `\0nova-rpc/sha256:${createHash('sha256').update(address).digest('hex')}`;
}

/**
 * Whether a client may try the local socket of a server at `host`: only an address this
 * machine owns (loopback or one of its interfaces). Anyone on a machine can bind an abstract
 * name, but only the machine's own addresses can they bind over TCP too; trying the name of
 * another machine's server would hand its traffic to whoever took that name here.
 */
export function ownAddress(host: string): boolean {
  const h = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h)) return true;
  return Object.values(networkInterfaces()).some((list) => list?.some((i) => i.address === h));
}
