/**
 * Files shared by every component's directory: atomic replacement, directory sync, and the
 * LOCK that keeps two processes out of one directory.
 */
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, unlinkSync, writeFileSync, writeSync, existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { NovaError } from './errors.js';

/** Directories this process holds locks on (a pid alone cannot tell a restarted process
 * that reuses a dead one's pid, as PID 1 in a container does, from the holder itself). */
const heldHere = new Set<string>();

/**
 * Takes `dir/LOCK` for this open: two engines on one directory would each rewrite the
 * MANIFEST and delete the other's files. The file holds the owner's pid; a lock whose
 * process is gone (kill -9) is taken over. Returns the release function.
 *
 * Known limit: two processes that both find the same stale lock at the same instant may both
 * take it over (read, unlink and create are separate steps); an OS lock (flock) would close
 * that window, and Node has none.
 */
export function lockDir(dir: string): () => void {
  const path = join(dir, 'LOCK');
  const key = resolve(dir);
  if (heldHere.has(key)) throw new NovaError('BUSY', `${dir} is in use by this process (an engine already open on it): close that engine first`);
  for (let attempt = 0; ; attempt++) {
    try {
      const fd = openSync(path, 'wx');
      try {
        writeSync(fd, `${process.pid}\n`);
      } finally {
        closeSync(fd);
      }
      heldHere.add(key);
      let held = true;
      return () => {
        if (!held) return;
        held = false;
        heldHere.delete(key);
        if (existsSync(path)) unlinkSync(path);
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 3) throw err;
    }
    let text = '';
    try {
      text = readFileSync(path, 'utf8').trim();
    } catch {
      continue; // released meanwhile
    }
    const pid = Number(text);
    // Our own pid in a lock we do not hold: a previous process with this pid wrote it.
    if (/^\d+$/.test(text) && pid !== process.pid && processAlive(pid)) {
      throw new NovaError('BUSY', `${dir} is in use by process ${pid}: close that engine first (if that process is not a Nova engine, delete ${path})`);
    }
    unlinkSync(path); // its owner is gone, or it is not a lock we wrote
  }
}

/**
 * Whether `pid` is a running process. A zombie (killed, not yet reaped: its parent exited
 * and, in a container, PID 1 may never reap it) answers kill(0) but holds nothing.
 */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return true; // no /proc: trust kill(0)
  }
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
