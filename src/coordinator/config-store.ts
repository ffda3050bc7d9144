/**
 * Where the coordinator keeps the configuration. The embedded store is one JSON file in the
 * coordinator's directory (one machine); the etcd store (etcd-store.ts) keeps it in etcd and
 * lets one of several coordinators lead.
 *
 * A store is led by one coordinator at a time: `lead` resolves once this one leads, and
 * every `save` after that is refused if another has led since (the file store's directory
 * lock makes that hold trivially). Saves land in the order they were made.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { NovaError } from '../common/errors.js';
import { replaceFile } from '../common/files.js';
import { configFromJson, configToJson, type ClusterConfig } from '../cluster/config.js';

export interface ConfigStore {
  /** Where the configuration lives, for messages. */
  readonly where: string;
  /** Resolves once this coordinator leads; until then `leader` names the one that does, if known. */
  lead(address: string): Promise<void>;
  leader(): string | undefined;
  /** Whether this coordinator, once it led, may still act (its hold on the lead is sure). */
  holds(): boolean;
  /** The stored configuration, or undefined for a new cluster. */
  load(): Promise<ClusterConfig | undefined>;
  /** Makes `c` durable; rejects if this coordinator no longer leads. */
  save(c: ClusterConfig): Promise<void>;
  /** Called once if leadership is lost for good (the process must stop serving). */
  onLost(f: (err: Error) => void): void;
  close(): Promise<void>;
}

/** The configuration in the coordinator's directory. */
const CONFIG_FILE = 'config.json';

/** The configuration a coordinator keeps in `dir`, if it has one; CORRUPTION naming the file if it does not read. */
export function readConfigFile(dir: string): ClusterConfig | undefined {
  const path = join(dir, CONFIG_FILE);
  if (!existsSync(path)) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new NovaError('CORRUPTION', `${path}: not valid JSON (${(err as Error).message}); restore it from a backup`);
  }
  return configFromJson(json, path);
}

/** The embedded store: `config.json` in `dir`, replaced atomically and fsync'd; the caller holds the directory's lock. */
export class FileConfigStore implements ConfigStore {
  constructor(private readonly dir: string) {}

  get where(): string {
    return join(this.dir, CONFIG_FILE);
  }

  lead(): Promise<void> {
    return Promise.resolve();
  }

  leader(): string | undefined {
    return undefined;
  }

  holds(): boolean {
    return true; // the directory's lock
  }

  load(): Promise<ClusterConfig | undefined> {
    return Promise.resolve(readConfigFile(this.dir));
  }

  /** Synchronous underneath: durable when it returns, and throws rather than rejects. */
  save(c: ClusterConfig): Promise<void> {
    replaceFile(this.dir, CONFIG_FILE, JSON.stringify(configToJson(c), null, 1) + '\n');
    return Promise.resolve();
  }

  onLost(): void {}

  close(): Promise<void> {
    return Promise.resolve();
  }
}
