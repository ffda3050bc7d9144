/**
 * Offloaded compactions on a StoC (DESIGN.md §4 "Compaction", §6; paper §4.4.4).
 *
 * An LTC sends a job (`stoc.compact`, stoc-protocol.ts): its input tables, each a list of
 * fragments on StoCs; the merge rule (smallest live snapshot, the key spans of deeper levels);
 * the output size; and the table numbers it reserved for the outputs. The StoC reads the
 * inputs (its own fragments from its disk, the others from their StoCs over the fabric), runs
 * the engine's merge (src/compaction/merge.ts) on a worker thread so its main loop keeps serving block
 * I/O, and writes each output as soon as it is cut: ρ data fragments and a metadata fragment
 * (src/compaction/fragments.ts) on the StoCs the LTC's placement policy chose for that output,
 * each synced before the answer. The answer is the outputs' metadata; the LTC installs them in
 * its MANIFEST and deletes the inputs.
 *
 * Invariants:
 *  - An output never replaces a file: a name that exists fails the job (the LTC reserved the
 *    numbers in its MANIFEST first, so this means a bug or a foreign file).
 *  - A job that fails, or whose LTC is lost before the answer, removes the outputs it wrote:
 *    no MANIFEST will name them. (If this StoC dies mid-job, they stay until the LTC's next
 *    open lists unreferenced tables and deletes them.)
 */
import type { BufferPool } from '../common/buffer-pool.js';
import { NovaError, isErrorCode, type ErrorCode } from '../common/errors.js';
import { leftovers, mergeTables, outputBytes, type MergedTable, type MergeJob } from '../compaction/merge.js';
import { cutTable, readFragments, shapeStocs, tableShape, writeFragments } from '../compaction/fragments.js';
import { mergeOnWorker, mergeWorkerAvailable } from '../compaction/worker-pool.js';
import type { Fragment } from '../log/version-edit.js';
import type { StocClient } from './stoc-client.js';
import { Method, checkUint, fields, tableFileName } from './stoc-protocol.js';

/** What a job needs from the StoC it runs on. */
export interface ExecutorEnv {
  id: number;
  /** The whole of local file `name`, `size` bytes of it (CORRUPTION if missing or shorter). */
  /** Reads the first `into.length` bytes of local file `name` into `into`. */
  readLocal(name: string, into: Buffer): Promise<void>;
  /** The size of local file `name`, or undefined if it does not exist. */
  sizeLocal(name: string): Promise<number | undefined>;
  /** Writes `bytes` as the whole of the new local file `name`, synced. */
  createLocal(name: string, bytes: Buffer): Promise<void>;
  removeLocal(name: string): Promise<void>;
  /** A connection to the StoC at `address` (kept and shared between jobs). */
  peer(address: Uint8Array): Promise<StocClient>;
  log(line: string): void;
  /**
   * Memory for inputs and outputs, reused from job to job (buffer-pool.ts): a job takes its
   * inputs' buffers and spares for its outputs from it, and gives each back once done with it.
   */
  memory: BufferPool;
}

export interface CompactInput {
  file: number;
  fragments: Fragment[];
}

export interface CompactArgs {
  range: number;
  inputs: CompactInput[];
  /** StoCs the job may touch: holders of inputs, and where output fragments go after this one. */
  stocs: Array<[number, Uint8Array]>;
  smallestSnapshot: number;
  deeper: Array<[Uint8Array, Uint8Array]>;
  targetBytes: number;
  firstFile: number;
  maxFiles: number;
  scatter: number;
  /** Copies of each output fragment (fragments.ts cutTable); absent: one. */
  copies?: number;
  /** Outputs keep their data fragments once with a parity fragment, the metadata in `copies` copies; absent: no parity. */
  parity?: boolean;
  /**
   * Where output n's fragments go, for n < placements.length: per copy, ρ StoCs for its data
   * and one more for its metadata when there is one more, chosen by the LTC's placement policy.
   * Outputs past the list (or every output, without one: an LTC that predates the field) go
   * to this StoC first, then the next StoCs of `stocs`.
   */
  placements?: number[][];
  /** User keys no output spans (MergeJob.cuts). */
  cuts?: Uint8Array[];
}

export interface CompactOutput {
  file: number;
  size: number;
  entries: number;
  smallest: Uint8Array;
  largest: Uint8Array;
  fragments: Fragment[];
}

/** Most copies of a fragment a job may ask for. */
const MAX_COPIES = 16;

/** Largest job accepted: inputs are held in memory while they merge. */
const MAX_INPUT_BYTES = 4 * 2 ** 30;

/** Validates a `stoc.compact` request; BAD_ARGUMENT names the first bad field. */
export function parseCompactArgs(args: unknown): CompactArgs {
  const a = fields(Method.compact, args);
  const list = (what: string, v: unknown, max: number): unknown[] => {
    if (!Array.isArray(v) || v.length > max) throw new NovaError('BAD_ARGUMENT', `${Method.compact}: ${what} must be a list of at most ${max}`);
    return v;
  };
  const bytes = (what: string, v: unknown): Uint8Array => {
    if (!(v instanceof Uint8Array)) throw new NovaError('BAD_ARGUMENT', `${Method.compact}: ${what} must be bytes`);
    return v;
  };
  const stocs = list('stocs', a.stocs, 4096).map((s) => {
    const pair = list('a stocs entry', s, 2);
    return [checkUint('StoC id', pair[0], 0xffffffff), bytes('a StoC address', pair[1])] as [number, Uint8Array];
  });
  let total = 0;
  const inputs = list('inputs', a.inputs, 100_000).map((x) => {
    const i = fields(`${Method.compact} input`, x);
    const fragments = list('fragments', i.fragments, 4096).map((y) => {
      const f = fields(`${Method.compact} fragment`, y);
      const fragment: Fragment = { stoc: checkUint('fragment StoC', f.stoc, 0xffffffff), offset: checkUint('fragment offset', f.offset), size: checkUint('fragment size', f.size) };
      if (f.crc !== undefined) fragment.crc = checkUint('fragment checksum', f.crc, 0xffffffff);
      if (f.parity !== undefined && typeof f.parity !== 'boolean') throw new NovaError('BAD_ARGUMENT', `${Method.compact}: a fragment's parity flag must be a boolean`);
      if (f.parity === true) fragment.parity = true;
      total += fragment.size;
      return fragment;
    });
    return { file: checkUint('input file', i.file), fragments };
  });
  if (inputs.length === 0) throw new NovaError('BAD_ARGUMENT', `${Method.compact}: no inputs`);
  if (total > MAX_INPUT_BYTES) throw new NovaError('BAD_ARGUMENT', `${Method.compact}: inputs of ${total} bytes exceed ${MAX_INPUT_BYTES}`);
  const scatter = checkUint('scatter', a.scatter, 4096);
  if (scatter < 1) throw new NovaError('BAD_ARGUMENT', `${Method.compact}: scatter must be at least 1`);
  const targetBytes = checkUint('targetBytes', a.targetBytes, 2 ** 32);
  if (targetBytes < 1024) throw new NovaError('BAD_ARGUMENT', `${Method.compact}: targetBytes must be at least 1024`);
  const maxFiles = checkUint('maxFiles', a.maxFiles, 1_000_000);
  const copies = a.copies === undefined ? 1 : checkUint('copies', a.copies, MAX_COPIES);
  if (copies < 1) throw new NovaError('BAD_ARGUMENT', `${Method.compact}: copies must be at least 1`);
  if (a.parity !== undefined && typeof a.parity !== 'boolean') throw new NovaError('BAD_ARGUMENT', `${Method.compact}: parity must be a boolean`);
  const parity = a.parity === true;
  const known = new Set(stocs.map(([id]) => id));
  const sizes = parity ? [scatter + copies + 1] : [scatter * copies, (scatter + 1) * copies];
  const placements = a.placements === undefined ? undefined : list('placements', a.placements, maxFiles).map((p) => {
    const ids = list('a placement', p, Math.max(...sizes)).map((id) => checkUint('a placement\'s StoC', id, 0xffffffff));
    if (!sizes.includes(ids.length) || new Set(ids).size !== ids.length || ids.some((id) => !known.has(id))) {
      throw new NovaError('BAD_ARGUMENT', `${Method.compact}: a placement must name ${sizes.join(' or ')} distinct StoCs of the job's stocs (${copies} cop${copies === 1 ? 'y' : 'ies'}${parity ? ', with parity' : ''}), not [${ids.join(', ')}]`);
    }
    return ids;
  });
  const cuts = a.cuts === undefined ? undefined : list('cuts', a.cuts, 100_000).map((c) => bytes('a cut', c));
  for (let i = 1; i < (cuts?.length ?? 0); i++) {
    if (Buffer.compare(cuts![i - 1], cuts![i]) >= 0) throw new NovaError('BAD_ARGUMENT', `${Method.compact}: cuts must ascend`);
  }
  return {
    range: checkUint('range', a.range, 0xffffffff),
    inputs,
    stocs,
    smallestSnapshot: checkUint('smallestSnapshot', a.smallestSnapshot),
    deeper: list('deeper', a.deeper, 1_000_000).map((d) => {
      const pair = list('a deeper entry', d, 2);
      return [bytes('a deeper key', pair[0]), bytes('a deeper key', pair[1])] as [Uint8Array, Uint8Array];
    }),
    targetBytes,
    firstFile: checkUint('firstFile', a.firstFile),
    maxFiles,
    scatter,
    copies,
    parity,
    placements,
    cuts,
  };
}

/** Validates a `stoc.compact` answer (CORRUPTION if malformed). */
export function parseCompactReply(reply: unknown): CompactOutput[] {
  const bad = (why: string): never => { throw new NovaError('CORRUPTION', `${Method.compact} answer: ${why}`); };
  if (!Array.isArray(reply)) bad('not a list');
  return (reply as unknown[]).map((x) => {
    const o = x as Record<string, unknown> | null;
    if (typeof o !== 'object' || o === null || !Array.isArray(o.fragments)) return bad('an output is not a map with fragments');
    const uint = (v: unknown): number => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : bad(`${String(v)} is not a count`));
    if (!(o.smallest instanceof Uint8Array) || !(o.largest instanceof Uint8Array)) bad('an output\'s keys are not bytes');
    return {
      file: uint(o.file), size: uint(o.size), entries: uint(o.entries),
      smallest: o.smallest as Uint8Array, largest: o.largest as Uint8Array,
      fragments: (o.fragments as Array<Record<string, unknown>>).map((f): Fragment => {
        const fragment: Fragment = { stoc: uint(f?.stoc), offset: uint(f?.offset), size: uint(f?.size) };
        if (f?.crc !== undefined) fragment.crc = uint(f.crc) <= 0xffffffff ? uint(f.crc) : bad(`checksum ${String(f.crc)} is not 32 bits`);
        if (f?.parity !== undefined && typeof f.parity !== 'boolean') bad('a fragment\'s parity flag is not a boolean');
        if (f?.parity === true) fragment.parity = true;
        return fragment;
      }),
    };
  });
}

/**
 * Runs one job; resolves with its outputs. `lost()` says whether the requester went away
 * (checked after each output and at the end).
 */
export async function runCompaction(env: ExecutorEnv, job: CompactArgs, lost: () => boolean): Promise<CompactOutput[]> {
  const addresses = new Map(job.stocs);
  const written: Array<{ name: string; stoc: number }> = [];
  const outputs: CompactOutput[] = [];
  try {
    // Each input in an ArrayBuffer of its own (the pool's), so it moves to the merge worker
    // uncopied, and comes back once the merge is over.
    const tables = await Promise.all(job.inputs.map((input) => readInput(env, job.range, input, addresses)));
    const inputBytes = tables.reduce((n, t) => n + t.length, 0);
    const merge: MergeJob = {
      tables,
      names: job.inputs.map((i) => `StoC ${env.id}: compaction input ${tableFileName(job.range, i.file)}`),
      smallestSnapshot: job.smallestSnapshot,
      deeper: job.deeper.map(([smallest, largest]) => ({ smallest, largest })),
      targetBytes: job.targetBytes,
      cuts: job.cuts,
      // Outputs go into inputs the merge has read to their end, then into spares: about as
      // many as the inputs fill, of what the pool has ready (none made).
      consumeInputs: true,
      spares: env.memory.takeFree(outputBytes(job.targetBytes), Math.ceil(inputBytes / job.targetBytes) + 1),
    };
    const giveBack = (memory: ArrayBuffer[]): void => memory.forEach((ab) => env.memory.give(ab));
    const fallback = outputStocs(env.id, job);
    const onWorker = mergeWorkerAvailable();
    for await (const t of onWorker ? mergeOnWorker(merge, true, giveBack) : mergeTables(merge)) {
      if (lost()) throw new NovaError('CLOSED', 'the LTC that sent the job is gone');
      if (outputs.length >= job.maxFiles) {
        throw new NovaError('BAD_ARGUMENT', `compaction of range ${job.range}: more than the ${job.maxFiles} outputs reserved`);
      }
      const file = job.firstFile + outputs.length;
      const name = tableFileName(job.range, file);
      const placed = job.placements?.[outputs.length];
      const fragments = cutTable(t.bytes, placed ?? fallback.stocs, job.scatter, `StoC ${env.id}: compaction output ${name}`,
        placed ? job.copies ?? 1 : fallback.copies, placed ? job.parity === true : fallback.parity);
      await writeOutput(env, name, t.bytes, fragments, addresses, written);
      outputs.push({ ...describe(t), file, fragments });
      // Written: nothing holds the output's memory any more (describe copied its keys). An
      // output whose write failed is left to the garbage collector.
      if (t.bytes.byteOffset === 0) env.memory.give(t.bytes.buffer);
    }
    // In this thread the merge's leftovers are here (on the worker, it sent them to giveBack).
    if (!onWorker) giveBack(leftovers(merge));
    if (lost()) throw new NovaError('CLOSED', 'the LTC that sent the job is gone');
    return outputs;
  } catch (err) {
    await removeOutputs(env, written, addresses);
    throw err;
  }
}

function describe(t: MergedTable): Omit<CompactOutput, 'file' | 'fragments'> {
  // Copies of the keys: from the worker, each is a view of a slab of its own that may be far
  // larger than the key, and they outlive the job in the answer.
  return { size: t.bytes.length, entries: t.entries, smallest: Buffer.from(t.smallest), largest: Buffer.from(t.largest) };
}

/**
 * Where an output the job did not place goes: this StoC first, then the others of the job in
 * their order, in the shape (fragments.ts tableShape) their number allows.
 */
function outputStocs(self: number, job: CompactArgs): { stocs: number[]; copies: number; parity: boolean } {
  const all = [self, ...job.stocs.map(([id]) => id).filter((id) => id !== self)];
  if (all.length < job.scatter) {
    throw new NovaError('UNAVAILABLE', `compaction of range ${job.range}: scatter ${job.scatter} needs ${job.scatter} StoCs; the job names ${all.length}`);
  }
  const shape = tableShape(all.length, job.scatter, job.copies ?? 1, job.parity === true);
  return { stocs: all.slice(0, shapeStocs(shape)), copies: shape.copies, parity: shape.parity === true };
}

function readInput(env: ExecutorEnv, range: number, input: CompactInput, addresses: Map<number, Uint8Array>): Promise<Buffer> {
  const name = tableFileName(range, input.file);
  return readFragments(input.fragments, `StoC ${env.id}: compaction input ${name}`, async (f, into) => {
    try {
      if (f.stoc === env.id) return await env.readLocal(name, into);
      const address = addresses.get(f.stoc);
      if (!address) throw new NovaError('BAD_ARGUMENT', 'the job does not give its StoC\'s address');
      await (await env.peer(address)).read(name, 0, f.size, undefined, into);
    } catch (err) {
      throw withContext(err, `StoC ${env.id}: compaction input ${name}: fragment at table offset ${f.offset} on StoC ${f.stoc}`);
    }
  }, (size) => env.memory.take(size));
}

/** Writes one output's fragments durably; never replaces a file. */
function writeOutput(env: ExecutorEnv, name: string, bytes: Buffer, fragments: Fragment[],
  addresses: Map<number, Uint8Array>, written: Array<{ name: string; stoc: number }>): Promise<void> {
  return writeFragments(bytes, fragments, async (f, part) => {
    try {
      const peer = f.stoc === env.id ? undefined : await env.peer(addresses.get(f.stoc)!);
      if ((await (peer ? peer.size(name) : env.sizeLocal(name))) !== undefined) {
        throw new NovaError('BAD_ARGUMENT', 'the file exists already: outputs never replace a file');
      }
      written.push({ name, stoc: f.stoc });
      // Background: written after what writes wait for on that StoC, with a deadline for its size.
      if (peer) await peer.write(name, 0, part, true, { background: true });
      else await env.createLocal(name, part);
    } catch (err) {
      throw withContext(err, `StoC ${env.id}: compaction output ${name} on StoC ${f.stoc}`);
    }
  });
}

async function removeOutputs(env: ExecutorEnv, written: Array<{ name: string; stoc: number }>, addresses: Map<number, Uint8Array>): Promise<void> {
  await Promise.all(written.map(async ({ name, stoc }) => {
    try {
      if (stoc === env.id) await env.removeLocal(name);
      else await (await env.peer(addresses.get(stoc)!)).remove(name);
    } catch (err) {
      env.log(`StoC ${env.id}: could not remove ${name} on StoC ${stoc} after a failed compaction (the LTC's next open will): ${(err as Error).message}`);
    }
  }));
}

/** `err` with `context` before its message, keeping its code (UNAVAILABLE for non-Nova errors). */
function withContext(err: unknown, context: string): NovaError {
  const code: ErrorCode = err instanceof NovaError && isErrorCode(err.code) ? err.code : 'UNAVAILABLE';
  return new NovaError(code, `${context}: ${(err as Error)?.message ?? String(err)}`, { cause: err });
}
