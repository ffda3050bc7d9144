/**
 * The cluster's secret (doc/decisions/cluster-secret.md): a random key `nova up` keeps in the
 * cluster's directory, mode 0600, that every member and client proves it knows on each
 * connection by an HMAC of a nonce the server chose (challenge-response); the secret itself is
 * never sent. A process holds one secret, the cluster's it serves or talks to (useSecret).
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { NovaError } from './errors.js';

/** The secret's file in a cluster's directory. */
export const SECRET_FILE = 'secret';

/** Bytes of a secret `nova up` makes (as hex in its file), and the least a file may hold. */
const SECRET_BYTES = 32;
const MIN_SECRET_BYTES = 16;

let current: Buffer | undefined;

/** Makes `secret` the one this process presents and asks for (undefined: none, an open cluster). */
export function useSecret(secret: Buffer | undefined): void {
  current = secret;
}

/** The secret this process presents and asks for, if it has one. */
export function clusterSecret(): Buffer | undefined {
  return current;
}

/** A fresh nonce for a challenge. */
export function newNonce(): Buffer {
  return randomBytes(16);
}

/** The proof that the secret's holder saw `nonce`, for connections of kind `purpose` (tcp, stoc). */
export function proofOf(secret: Buffer, nonce: Uint8Array, purpose: string): Buffer {
  return createHmac('sha256', secret).update(`nova-auth-v1\0${purpose}\0`).update(nonce).digest();
}

/** Whether `proof` is the proof for `nonce` (in constant time). */
export function checkProof(secret: Buffer, nonce: Uint8Array, purpose: string, proof: unknown): boolean {
  if (!(proof instanceof Uint8Array) || proof.length !== 32) return false;
  return timingSafeEqual(proofOf(secret, nonce, purpose), proof);
}

/**
 * The secret in file `path`: hex, at least 16 bytes. BAD_ARGUMENT if it is missing, malformed
 * or readable by others than its owner (a secret others can read keeps no one out).
 */
export function readSecretFile(path: string): Buffer {
  if (!existsSync(path)) throw new NovaError('BAD_ARGUMENT', `${path}: no such secret file (nova up makes one in the cluster's directory; copy it, mode 0600, to run members elsewhere)`);
  const mode = statSync(path).mode & 0o077;
  if (mode !== 0) throw new NovaError('BAD_ARGUMENT', `${path}: the secret file may be read by others (mode ${(statSync(path).mode & 0o777).toString(8)}); chmod 600 ${path}`);
  const text = readFileSync(path, 'utf8').trim();
  if (!/^[0-9a-f]+$/i.test(text) || text.length % 2 !== 0 || text.length / 2 < MIN_SECRET_BYTES) {
    throw new NovaError('BAD_ARGUMENT', `${path}: a secret file holds at least ${MIN_SECRET_BYTES} bytes as hex`);
  }
  return Buffer.from(text, 'hex');
}

/** The secret of the cluster whose directory is `dir`, if it keeps one there. */
export function secretInDir(dir: string): Buffer | undefined {
  const path = join(dir, SECRET_FILE);
  return existsSync(path) ? readSecretFile(path) : undefined;
}

/** The secret in `path`, made first (random, mode 0600) if there is none. */
export function ensureSecretFile(path: string): Buffer {
  if (!existsSync(path)) {
    try {
      const fd = openSync(path, 'wx', 0o600);
      try {
        writeSync(fd, randomBytes(SECRET_BYTES).toString('hex') + '\n');
      } finally {
        closeSync(fd);
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err; // another nova up made it first
    }
  }
  return readSecretFile(path);
}
