/**
 * One engine in its own process, driven by `nova bench` over IPC (session.ts). Stores that
 * link their own copies of the same C libraries cannot share a process: RocksDB 6 and 9
 * together crashed in ZSTD (their symbols collide). A process each also keeps one engine's
 * threads, memory and garbage collector out of another's figures.
 *
 * Requests: open, load, run, close, each answered once by id; progress lines in between.
 */
import { engineByName } from './engines.js';
import { load, run, type RunSpec, type Target } from './runner.js';
import { KeySpace } from './verifier.js';

export type WorkerRequest =
  | { id: number; op: 'open'; engine: string; dir: string; sync: boolean; records: number; valueSize: number; verify: boolean }
  | { id: number; op: 'load' }
  | { id: number; op: 'run'; spec: RunSpec }
  | { id: number; op: 'close' };

/** A request before it has an id. */
export type WorkerCall = WorkerRequest extends infer R ? (R extends WorkerRequest ? Omit<R, 'id'> : never) : never;

export type WorkerReply =
  | { id: number; ok: true; result: unknown }
  | { id: number; ok: false; error: string }
  | { op: 'progress'; line: string; final: boolean };

let target: Target | undefined;
let settings: { valueSize: number; verify: boolean } | undefined;

const send = (m: WorkerReply): void => { process.send!(m); };
const progress = (line: string, final: boolean): void => send({ op: 'progress', line, final });

async function handle(m: WorkerRequest): Promise<unknown> {
  switch (m.op) {
    case 'open': {
      const store = await engineByName(m.engine).open(m.dir, { sync: m.sync });
      target = { engine: m.engine, dir: m.dir, store, sync: m.sync, keys: new KeySpace(m.records), records: m.records };
      settings = { valueSize: m.valueSize, verify: m.verify };
      return undefined;
    }
    case 'load': return load(opened(), settings!.valueSize, settings!.verify, 1000, progress);
    case 'run': return run(opened(), m.spec, progress);
    case 'close': {
      await target?.store.close();
      target = undefined;
      setImmediate(() => process.disconnect());
      return undefined;
    }
  }
}

function opened(): Target {
  if (!target) throw new Error('engine worker: not open');
  return target;
}

process.on('message', (m: WorkerRequest) => {
  handle(m).then(
    (result) => send({ id: m.id, ok: true, result }),
    (err: unknown) => send({ id: m.id, ok: false, error: (err as Error)?.stack ?? String(err) }),
  );
});
