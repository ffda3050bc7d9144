/**
 * The checksum used by every Nova format: XXH32 (xxhash-addon), seed 0, as an unsigned
 * 32-bit number. One function so that formats cannot drift apart.
 */
import xxhash from 'xxhash-addon';

const { XXHash32 } = xxhash;

export function checksum32(data: Uint8Array): number {
  const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return XXHash32.hash(bytes).readUInt32BE(0);
}
