/**
 * The coordinator (DESIGN.md §7): holds the configuration in an embedded store (one JSON
 * file in its directory, replaced atomically and fsync'd), lets components register and
 * heartbeat, and serves the configuration to clients and components over TCP.
 *
 * The configuration changes (and its id grows) when a component registers with an address
 * it did not have: a restarted StoC has a new fabric address, a restarted LTC may have a new
 * port. Liveness is not configuration: it is reported by `status`, from heartbeats.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { NovaError } from '../common/errors.js';
import { lockDir, replaceFile } from '../common/files.js';
import { TcpRpcServer } from '../net/tcp-rpc-server.js';
import {
  configFromJson, configToJson, makeRanges, type ClusterConfig, type Member, type Role, type Settings,
} from '../cluster/config.js';
import { HEARTBEAT_MS } from '../cluster/membership.js';
import { newSettings, refuseConflicts } from '../cluster/knobs.js';

/** A member missing this many heartbeats in a row is reported down. */
const MISSED_BEATS = 6;
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

export interface CoordinatorOptions {
  dir: string;
  host?: string;
  port?: number;
  /** For a new cluster: LTCs the ranges are spread over, split keys, settings. */
  ltcs?: number;
  splits?: Buffer[];
  settings?: Partial<Settings>;
  onLog?: (line: string) => void;
}

export interface MemberStatus extends Member {
  alive: boolean;
  /** LTC: the ranges it has open and serves. */
  serving: number[];
  lastSeenMs: number;
}

export interface ClusterStatus {
  /** The coordinator's own process. */
  pid: number;
  config: ClusterConfig;
  members: MemberStatus[];
}

interface Seen {
  at: number;
  serving: number[];
}

export class Coordinator {
  private config: ClusterConfig;
  private readonly seen = new Map<string, Seen>();
  private server!: TcpRpcServer;
  private readonly unlock: () => void;

  private constructor(private readonly o: CoordinatorOptions) {
    mkdirSync(o.dir, { recursive: true });
    this.unlock = lockDir(o.dir);
    try {
      this.config = this.load();
    } catch (err) {
      this.unlock();
      throw err;
    }
  }

  static async start(o: CoordinatorOptions): Promise<Coordinator> {
    const c = new Coordinator(o);
    try {
      c.server = await TcpRpcServer.listen({
        host: o.host, port: o.port, name: 'coordinator', onLog: o.onLog,
        handlers: {
          register: (a) => c.register(a),
          heartbeat: (a) => c.heartbeat(a),
          config: () => c.config,
          status: () => c.status(),
        },
      });
    } catch (err) {
      c.unlock();
      throw err;
    }
    replaceFile(o.dir, 'address', `${o.host ?? '127.0.0.1'}:${c.server.port}\n`);
    return c;
  }

  get address(): string {
    return `${this.o.host ?? '127.0.0.1'}:${this.server.port}`;
  }

  current(): ClusterConfig {
    return this.config;
  }

  status(): ClusterStatus {
    const now = Date.now();
    return {
      pid: process.pid,
      config: this.config,
      members: this.config.members.map((m) => {
        const s = this.seen.get(memberKey(m.role, m.id));
        return { ...m, alive: !!s && now - s.at < MISSED_BEATS * HEARTBEAT_MS, serving: s?.serving ?? [], lastSeenMs: s ? now - s.at : -1 };
      }),
    };
  }

  async close(): Promise<void> {
    await this.server.close();
    this.unlock();
  }

  private load(): ClusterConfig {
    const stored = readConfigFile(this.o.dir);
    if (stored) {
      refuseConflicts(stored, this.o.settings ?? {}, this.o.splits, join(this.o.dir, CONFIG_FILE));
      return stored;
    }
    const c: ClusterConfig = {
      id: 1,
      ranges: makeRanges(this.o.splits ?? [], this.o.ltcs ?? 1),
      members: [],
      settings: newSettings(this.o.settings ?? {}),
    };
    this.save(c);
    return c;
  }

  private save(c: ClusterConfig): void {
    replaceFile(this.o.dir, CONFIG_FILE, JSON.stringify(configToJson(c), null, 1) + '\n');
  }

  private register(args: unknown[]): ClusterConfig {
    const [role, id, address, pid, host] = args;
    if ((role !== 'ltc' && role !== 'stoc') || !isId(id) || typeof address !== 'string' || typeof pid !== 'number') {
      throw new NovaError('BAD_ARGUMENT', 'register takes [role ("ltc" | "stoc"), id (a positive integer), address, pid, host]');
    }
    const member: Member = { role, id, address, pid, host: typeof host === 'string' ? host : '' };
    const old = this.config.members.find((m) => m.role === role && m.id === id);
    if (!old || old.address !== address || old.pid !== pid) {
      const members = this.config.members.filter((m) => m !== old).concat(member)
        .sort((a, b) => a.role.localeCompare(b.role) || a.id - b.id);
      const next = { ...this.config, id: this.config.id + 1, members };
      this.save(next); // durable before anyone is told about it
      this.config = next;
      this.o.onLog?.(`${role} ${id} registered at ${address} (pid ${pid}); config ${next.id}`);
    }
    this.seen.set(memberKey(role, id), { at: Date.now(), serving: [] });
    return this.config;
  }

  private heartbeat(args: unknown[]): number {
    const [role, id, serving] = args;
    if ((role !== 'ltc' && role !== 'stoc') || !isId(id)) throw new NovaError('BAD_ARGUMENT', 'heartbeat takes [role, id, serving]');
    if (!this.config.members.some((m) => m.role === role && m.id === id)) {
      throw new NovaError('STALE_CONFIG', `${role} ${id} is not registered: register first`);
    }
    this.seen.set(memberKey(role, id), { at: Date.now(), serving: Array.isArray(serving) ? serving.filter(isId) : [] });
    return this.config.id;
  }
}

function memberKey(role: Role, id: number): string {
  return `${role}/${id}`;
}

function isId(x: unknown): x is number {
  return typeof x === 'number' && Number.isSafeInteger(x) && x > 0;
}
