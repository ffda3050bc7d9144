/**
 * The native layer's own checks, below the JS ones: descriptors that JS would never
 * build still fail with a fixed status code, one event each, and never crash.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENT_BYTES, EventKind, OP_DESC_BYTES, OpKind, Status } from '../../src/transport/codes.js';
import { loadAddon, type NativeFabric } from '../../src/common/addon.js';
import { useTls } from '../helpers/peer-process.js';

interface Event { kind: number; opId: number; status: number; ep: number }

class Raw {
  readonly native: NativeFabric;
  private readonly events: Event[] = [];
  private waiters: Array<() => void> = [];
  constructor() {
    this.native = new (loadAddon().NativeFabric)({ spinUs: 50 }, () => this.drain());
  }
  drain(): void {
    const out = Buffer.alloc(64 * EVENT_BYTES);
    const large: Buffer[] = [];
    const n = this.native.drain(out, Buffer.alloc(1 << 16), large) >>> 1;
    for (let i = 0; i < n; i++) {
      const at = i * EVENT_BYTES;
      this.events.push({ kind: out.readUInt32LE(at), opId: out.readUInt32LE(at + 4), status: out.readInt32LE(at + 8), ep: out.readUInt32LE(at + 12) });
    }
    for (const w of this.waiters.splice(0)) w();
  }
  async next(match: (e: Event) => boolean): Promise<Event> {
    for (;;) {
      const i = this.events.findIndex(match);
      if (i >= 0) return this.events.splice(i, 1)[0];
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error('no event within 5 s')), 5000);
        this.waiters.push(() => { clearTimeout(t); resolve(); });
      });
    }
  }
  submit(ops: Array<Partial<Record<'kind' | 'opId' | 'ep' | 'region' | 'localOffset' | 'length' | 'rkey' | 'imm' | 'remoteOffset', number>>>): void {
    const b = Buffer.alloc(ops.length * OP_DESC_BYTES);
    ops.forEach((o, i) => {
      const at = i * OP_DESC_BYTES;
      b.writeUInt8(o.kind ?? 0, at);
      b.writeUInt32LE(o.opId ?? 0, at + 4);
      b.writeUInt32LE(o.ep ?? 0, at + 8);
      b.writeUInt32LE(o.region ?? 0, at + 12);
      b.writeBigUInt64LE(BigInt(o.localOffset ?? 0), at + 16);
      b.writeBigUInt64LE(BigInt(o.length ?? 0), at + 24);
      b.writeUInt32LE(o.rkey ?? 0, at + 32);
      b.writeUInt32LE(o.imm ?? 0, at + 36);
      b.writeBigUInt64LE(BigInt(o.remoteOffset ?? 0), at + 40);
    });
    this.native.submit(b, ops.length, Buffer.alloc(0), 0);
  }
}

describe('native boundary', () => {
  let a: Raw;
  let b: Raw;
  let ep = 0;
  let region = 0;
  let rkey = 0;

  beforeAll(async () => {
    useTls('sm');
    a = new Raw();
    b = new Raw();
    a.native.connect(b.native.address(), 1);
    const connected = await a.next((e) => e.kind === EventKind.Connected);
    expect(connected.status).toBe(Status.Ok);
    ep = connected.ep;
    region = a.native.mapRegion(4096).id;
    const remote = b.native.mapRegion(4096);
    rkey = a.native.importRkey(ep, remote.rkey, remote.address, 4096);
  });

  afterAll(() => {
    a?.native.close();
    b?.native.close();
  });

  it('fails each bad descriptor with its fixed status, one event per operation', async () => {
    a.submit([
      { kind: OpKind.Read, opId: 10, ep, region, rkey, length: 4097 },                 // local out of bounds
      { kind: OpKind.Read, opId: 11, ep, region, rkey, remoteOffset: 4090, length: 7 }, // remote out of bounds
      { kind: OpKind.Write, opId: 12, ep, region, rkey: 999_999, length: 8 },          // unknown remote key
      { kind: OpKind.Read, opId: 13, ep, region: 999_999, rkey, length: 8 },           // unknown region
      { kind: OpKind.Read, opId: 14, ep: 999_999, region, rkey, length: 8 },           // unknown endpoint
      { kind: 99, opId: 15, ep, region, rkey, length: 8 },                             // unknown operation
      { kind: OpKind.Send, opId: 16, ep, localOffset: 0, length: 10 },                 // message bytes missing
      { kind: OpKind.Read, opId: 17, ep, region, rkey, localOffset: 2 ** 63, length: 1 }, // offset overflow
      { kind: OpKind.Read, opId: 18, ep, region, rkey, length: 4096 },                 // fine
    ]);
    const expected: Record<number, number> = {
      10: Status.OutOfBounds, 11: Status.OutOfBounds, 12: Status.BadRemoteKey, 13: Status.Closed,
      14: Status.Closed, 15: Status.BadArgument, 16: Status.BadArgument, 17: Status.OutOfBounds, 18: Status.Ok,
    };
    for (const [opId, status] of Object.entries(expected)) {
      const e = await a.next((x) => x.kind === EventKind.OpDone && x.opId === Number(opId));
      expect({ opId: Number(opId), status: e.status }).toEqual({ opId: Number(opId), status });
    }
  });

  it('refuses bad control arguments with errors, not crashes', () => {
    // (A garbled rkey never reaches UCX: RemoteKey.parse checks its checksum first.)
    expect(() => a.native.importRkey(ep, Buffer.alloc(0), 0n, 8)).toThrow(/status 3/);
    expect(() => a.native.importRkey(999_999, Buffer.alloc(8), 0n, 8)).toThrow(/status/);
    expect(() => a.native.mapRegion(0)).toThrow(RangeError);
    expect(() => a.native.closeRegion(999_999, 5)).toThrow(/status/);
    expect(() => a.native.submit(Buffer.alloc(10), 5, Buffer.alloc(0), 0)).toThrow(RangeError);
    expect(() => (a.native.connect as (x: unknown, y: unknown) => number)('not a buffer', 1)).toThrow(TypeError);
  });
});
