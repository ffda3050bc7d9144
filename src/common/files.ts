/**
 * Files shared by every component's directory: atomic replacement, directory sync, and the
 * LOCK that keeps two processes out of one directory.
 */
import { closeSync, constants as fsConstants, fstatSync, fsyncSync, ftruncateSync, openSync, readFileSync, renameSync, writeFileSync, writeSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { join, resolve } from 'node:path';
import { NovaError } from './errors.js';
import { loadAddon } from './addon.js';

/** Directories this process holds locks on, to name the holder in the refusal. */
const heldHere = new Set<string>();

/**
 * Takes `dir/LOCK` for this open: two engines on one directory would each rewrite the
 * MANIFEST and delete the other's files. The lock is the kernel's (flock, as LevelDB's
 * fcntl lock): it ends with its holder, however that ends, so a pid that a later process
 * reuses (after a reboot, or a wrap of the pid space) cannot keep a directory locked. The
 * file holds the owner's pid only to name it, and stays after release: deleting it would let a
 * process that opened it before the deletion and one that makes a new one both hold "LOCK".
 * Returns the release function.
 */
export function lockDir(dir: string): () => void {
  const path = join(dir, 'LOCK');
  const key = resolve(dir);
  if (heldHere.has(key)) throw new NovaError('BUSY', `${dir} is in use by this process (an engine already open on it): close that engine first`);
  let writable = true;
  let fd: number;
  try {
    fd = openSync(path, fsConstants.O_RDWR | fsConstants.O_CREAT, 0o644);
  } catch (err) {
    // A LOCK this user may not write (made by another user) locks all the same: flock needs no write access.
    if ((err as NodeJS.ErrnoException).code !== 'EACCES') throw err;
    fd = openSync(path, 'r');
    writable = false;
  }
  try {
    const errno = loadAddon().lockFile(fd);
    if (errno === osConstants.errno.EWOULDBLOCK || errno === osConstants.errno.EAGAIN) {
      throw new NovaError('BUSY', `${dir} is in use by ${lockHolder(fd, path)}: close that engine first`);
    }
    if (errno !== 0) throw new NovaError('BAD_ARGUMENT', `cannot lock ${path}: ${errnoName(errno)} (a file system without locks?)`);
    if (writable) {
      ftruncateSync(fd, 0);
      writeSync(fd, `${process.pid}\n`, 0);
    }
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  heldHere.add(key);
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    heldHere.delete(key);
    closeSync(fd);
  };
}

/**
 * Who holds the flock on `path` (open as `fd`): the kernel's record in /proc/locks, else the pid
 * the file names (which may be stale: a holder that has not written it yet, or one that never does).
 */
function lockHolder(fd: number, path: string): string {
  try {
    const { dev, ino } = fstatSync(fd);
    // Linux's device numbers: /proc/locks writes major:minor:inode, the first two in hex.
    const major = ((dev >> 8) & 0xfff).toString(16).padStart(2, '0');
    const minor = ((dev & 0xff) | ((dev >> 12) & 0xfff00)).toString(16).padStart(2, '0');
    const line = readFileSync('/proc/locks', 'utf8').split('\n').find((l) => /\bFLOCK\b/.test(l) && l.split(/\s+/)[5] === `${major}:${minor}:${ino}`);
    const pid = line?.split(/\s+/)[4];
    if (pid && /^\d+$/.test(pid)) return `process ${pid}`;
  } catch {
    // no /proc: the file's word below
  }
  const text = readFileSync(path, 'utf8').trim();
  return /^\d+$/.test(text) ? `another process (its LOCK names process ${text})` : 'another process';
}

/** The name of an errno value ("ENOLCK"), or the number. */
function errnoName(errno: number): string {
  return Object.entries(osConstants.errno).find(([name, v]) => v === errno && name.startsWith('E'))?.[0] ?? `errno ${errno}`;
}

/**
 * Whether `pid` is a running process. A zombie (killed, not yet reaped: its parent exited
 * and, in a container, PID 1 may never reap it) answers kill(0) but holds nothing, once it is
 * all that is left: a killed process's main thread turns zombie while its other threads still
 * exit, holding its files and locks.
 */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const stat = procStat(pid);
  return stat === undefined || stat.state !== 'Z' || stat.threads > 1; // no /proc: trust kill(0)
}

/**
 * Whether `pid` is exiting: its memory (and command line) may be gone while its files and
 * locks are not yet closed.
 */
export function processExiting(pid: number): boolean {
  const stat = procStat(pid);
  return stat !== undefined && ((stat.flags & PF_EXITING) !== 0 || (stat.state === 'Z' && stat.threads > 1));
}

const PF_EXITING = 0x4;

/** Fields of /proc/PID/stat: state (field 3), flags (9), num_threads (20); undefined without /proc. */
function procStat(pid: number): { state: string; flags: number; threads: number } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { state: fields[0], flags: Number(fields[6]), threads: Number(fields[17]) };
}

/** Makes a directory's entries (created, renamed files) durable. */
export function syncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Replaces `dir/name` with `contents` atomically (write a temp file, fsync, rename, fsync dir). */
export function replaceFile(dir: string, name: string, contents: string): void {
  const tmp = join(dir, `${name}.tmp`);
  writeFileSync(tmp, contents);
  const fd = openSync(tmp, 'r+');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, join(dir, name));
  syncDir(dir);
}
