/**
 * One engine in its own process, driven by `nova bench` over IPC (session.ts). Stores that
 * link their own copies of the same C libraries cannot share a process: RocksDB 6 and 9
 * together crashed in ZSTD (their symbols collide). A process each also keeps one engine's
 * threads, memory and garbage collector out of another's figures.
 *
 * Requests: open, load, run, close, each answered once by id; progress lines in between.
 */
import { engineByName, type ClusterBenchOptions } from './engines.js';
import { load, run, type RunSpec, type Target } from './runner.js';
import { KeySpace } from './verifier.js';

export type WorkerRequest =
  | { id: number; op: 'open'; engine: string; dir: string; sync: boolean; records: number; valueSize: number; verify: boolean; cluster?: ClusterBenchOptions }
  | { id: number; op: 'load' }
  | { id: number; op: 'adopt' }
  | { id: number; op: 'run'; spec: RunSpec }
  | { id: number; op: 'report' }
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
      const store = await engineByName(m.engine).open(m.dir, { sync: m.sync, records: m.records, cluster: m.cluster });
      target = { engine: m.engine, dir: m.dir, store, sync: m.sync, keys: new KeySpace(m.records), records: m.records };
      settings = { valueSize: m.valueSize, verify: m.verify };
      return undefined;
    }
    case 'load': return load(opened(), settings!.valueSize, settings!.verify, opened().store.loadBatch ?? 1000, progress);
    // Another client process loaded the records: this one only learns they are there.
    case 'adopt': return opened().keys.loaded(opened().records);
    case 'run': return run(opened(), m.spec, progress);
    case 'report': return (await opened().store.report?.()) ?? '';
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
