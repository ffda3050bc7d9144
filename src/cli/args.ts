/**
 * Parsers for command-line values: each throws InvalidArgumentError saying what it expected.
 */
import { InvalidArgumentError } from 'commander';
import { parseCaps, parseSize, type Caps } from '../control/caps.js';

export function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError('expected a positive integer');
  return n;
}

export function nonNegativeInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('expected a non-negative integer');
  return n;
}

export function intList(value: string): number[] {
  return value.split(',').map((v) => positiveInt(v.trim()));
}

export function positiveNumber(value: string): number {
  const n = Number(value);
  if (!(n > 0 && Number.isFinite(n))) throw new InvalidArgumentError('expected a positive number');
  return n;
}

export function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('expected a port number (0 picks a free one)');
  return n;
}

export function onOff(value: string): boolean {
  if (value === 'on') return true;
  if (value === 'off') return false;
  throw new InvalidArgumentError('expected on or off');
}

/** A memory size (caps.ts parseSize): 2GiB, 512MB, bytes. */
export function sizeArg(value: string): number {
  try {
    return parseSize(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

/** --cap's value (caps.ts). */
export function capsArg(value: string): Caps {
  try {
    return parseCaps(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message.replace(/^--cap: /, ''));
  }
}
