/**
 * The engine's local-directory environment (localEnv): its tables, logs and MANIFEST as files
 * of one directory.
 *
 * Local layout: `<n>.log` (a memtable's log), `<n>.sst` (a table), `MANIFEST-<n>` (version
 * edits, log-framed), `CURRENT` (the name of the live MANIFEST, replaced atomically).
 */
import { closeSync, existsSync, readdirSync, fdatasyncSync, fsyncSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync, ftruncateSync, fstatSync } from 'node:fs';
import { replaceFile, syncDir } from '../common/files.js';
import { join } from 'node:path';
import { NovaError } from '../common/errors.js';
import { LogFramer } from '../log/log-format.js';
import type { Fragment } from '../log/version-edit.js';
import type { LogStore, LogWriter, ManifestStore } from '../logc/log-store.js';
import type { BlockStore, EngineEnv } from './engine-env.js';

export function tableName(file: number): string {
  return `${String(file).padStart(6, '0')}.sst`;
}

export function logName(file: number): string {
  return `${String(file).padStart(6, '0')}.log`;
}

export function manifestName(file: number): string {
  return `MANIFEST-${String(file).padStart(6, '0')}`;
}

export class LocalBlockStore implements BlockStore {
  constructor(private readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  async writeTable(file: number, bytes: Buffer): Promise<Fragment[]> {
    const path = join(this.dir, tableName(file));
    const fd = openSync(path, 'w');
    try {
      writeAll(fd, bytes);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    syncDir(this.dir);
    return [{ stoc: 0, offset: 0, size: bytes.length }];
  }

  async readTable(file: number): Promise<Buffer> {
    return readFileSync(join(this.dir, tableName(file)));
  }

  async deleteTable(file: number): Promise<void> {
    const path = join(this.dir, tableName(file));
    if (existsSync(path)) unlinkSync(path);
  }

  async listTables(): Promise<number[]> {
    return numbered(this.dir, /^(\d+)\.sst$/);
  }
}

/**
 * The MANIFEST as `MANIFEST-<n>` in a local directory, named by `CURRENT` (replaced
 * atomically), as LevelDB keeps it.
 */
export class LocalManifestStore implements ManifestStore {
  constructor(private readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  async readCurrent(): Promise<{ name: string; bytes: Buffer } | undefined> {
    const current = join(this.dir, 'CURRENT');
    if (!existsSync(current)) return undefined;
    const name = readFileSync(current, 'utf8').trim();
    const path = join(this.dir, name);
    if (!/^MANIFEST-\d+$/.test(name) || !existsSync(path)) {
      throw new NovaError('CORRUPTION', `${current}: names "${name}", which is not a MANIFEST in ${this.dir}`);
    }
    return { name: path, bytes: readFileSync(path) };
  }

  async create(file: number): Promise<LogWriter> {
    const writer = new LocalLogWriter(join(this.dir, manifestName(file)), 0);
    syncDir(this.dir);
    return writer;
  }

  /** Deletes CURRENT and every MANIFEST (once the MANIFEST lives elsewhere). */
  removeAll(): void {
    for (const name of readdirSync(this.dir)) {
      if (/^MANIFEST-\d+$|^CURRENT(\.tmp)?$/.test(name)) unlinkSync(join(this.dir, name));
    }
    syncDir(this.dir);
  }

  /** Points CURRENT at `file`; deletes other MANIFESTs and a CURRENT.tmp a crash left. */
  async install(file: number): Promise<void> {
    replaceFile(this.dir, 'CURRENT', `${manifestName(file)}\n`);
    for (const name of readdirSync(this.dir)) {
      const m = /^MANIFEST-(\d+)$|^CURRENT\.tmp$/.exec(name);
      if (m && Number(m[1]) !== file) unlinkSync(join(this.dir, name));
    }
  }
}

/** Memtable logs as `<n>.log` files in a local directory. */
export class LocalLogStore implements LogStore {
  readonly makeAhead = true;

  constructor(private readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  /** Syncs the new file's directory entry: a MANIFEST names a log only once it exists (recovery insists). */
  async create(file: number): Promise<LogWriter> {
    const writer = new LocalLogWriter(this.describe(file), 0);
    syncDir(this.dir);
    return writer;
  }

  async read(file: number): Promise<Buffer | undefined> {
    const path = this.describe(file);
    return existsSync(path) ? readFileSync(path) : undefined;
  }

  async remove(file: number): Promise<void> {
    const path = this.describe(file);
    if (existsSync(path)) unlinkSync(path);
  }

  async list(): Promise<number[]> {
    return numbered(this.dir, /^(\d+)\.log$/);
  }

  describe(file: number): string {
    return join(this.dir, logName(file));
  }
}

/** File numbers of the names in `dir` that `pattern` matches (its first group). */
function numbered(dir: string, pattern: RegExp): number[] {
  const out: number[] = [];
  for (const name of readdirSync(dir)) {
    const m = pattern.exec(name);
    if (m) out.push(Number(m[1]));
  }
  return out;
}

/** A log file in a local directory, framed by LogFramer. Appends are sequential. */
export class LocalLogWriter implements LogWriter {
  private readonly fd: number;
  private readonly framer: LogFramer;

  /** Opens `path` for appending; `truncateTo` cuts a torn tail first. */
  constructor(readonly path: string, truncateTo?: number) {
    this.fd = openSync(path, existsSync(path) ? 'r+' : 'w+');
    if (truncateTo !== undefined) ftruncateSync(this.fd, truncateTo);
    const size = fstatSync(this.fd).size;
    this.framer = new LogFramer(size);
    this.position = size;
  }

  private position: number;

  async append(records: readonly Buffer[], sync: boolean): Promise<void> {
    for (const record of records) {
      const bytes = this.framer.frame(record);
      let done = 0;
      while (done < bytes.length) done += writeSync(this.fd, bytes, done, bytes.length - done, this.position + done);
      this.position += bytes.length;
    }
    if (sync) fdatasyncSync(this.fd);
  }

  async close(): Promise<void> {
    closeSync(this.fd);
  }
}

function writeAll(fd: number, bytes: Buffer): void {
  let done = 0;
  while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done);
}

/** The local-directory environment. */
export function localEnv(dir: string): EngineEnv {
  return { store: new LocalBlockStore(dir), logs: new LocalLogStore(dir), manifests: new LocalManifestStore(dir) };
}
