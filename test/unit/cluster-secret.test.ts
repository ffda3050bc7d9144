/**
 * The cluster's secret (src/common/cluster-secret.ts): its file, made once with mode 0600, and
 * refused when malformed or readable by others; proofs of a nonce that only its holder can make.
 */
import { chmodSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkProof, ensureSecretFile, newNonce, proofOf, readSecretFile } from '../../src/common/cluster-secret.js';
import { tempDirs } from '../helpers/temp.js';

const tempDir = tempDirs('nova-secret-');

describe('the cluster secret', () => {
  it('is made once, random, mode 0600, and read back the same', () => {
    const path = join(tempDir(), 'secret');
    const a = ensureSecretFile(path);
    expect(a.length).toBe(32);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(ensureSecretFile(path).equals(a)).toBe(true);
    expect(ensureSecretFile(join(tempDir(), 'secret')).equals(a)).toBe(false);
  });

  it('refuses a missing, malformed, short or world-readable file, saying what to do', () => {
    const dir = tempDir();
    expect(() => readSecretFile(join(dir, 'none'))).toThrow(/no such secret file/);
    const bad = join(dir, 'bad');
    writeFileSync(bad, 'not hex\n', { mode: 0o600 });
    expect(() => readSecretFile(bad)).toThrow(/at least 16 bytes as hex/);
    writeFileSync(bad, 'abcd\n', { mode: 0o600 });
    expect(() => readSecretFile(bad)).toThrow(/at least 16 bytes as hex/);
    writeFileSync(bad, 'ab'.repeat(32), { mode: 0o600 });
    chmodSync(bad, 0o644);
    expect(() => readSecretFile(bad)).toThrow(/may be read by others .*chmod 600/);
  });

  it('a proof answers one nonce, for one purpose, with one secret', () => {
    const secret = Buffer.alloc(32, 1);
    const nonce = newNonce();
    const proof = proofOf(secret, nonce, 'tcp');
    expect(checkProof(secret, nonce, 'tcp', proof)).toBe(true);
    expect(checkProof(secret, newNonce(), 'tcp', proof)).toBe(false);
    expect(checkProof(secret, nonce, 'stoc', proof)).toBe(false);
    expect(checkProof(Buffer.alloc(32, 2), nonce, 'tcp', proof)).toBe(false);
    expect(checkProof(secret, nonce, 'tcp', proof.subarray(0, 16))).toBe(false);
    expect(checkProof(secret, nonce, 'tcp', 'text')).toBe(false);
  });
});
