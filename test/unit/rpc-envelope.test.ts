import { describe, expect, it } from 'vitest';
import { RpcRemoteError, errorResponse, failureResponse, okResponse, readResponse, remoteError } from '../../src/common/rpc-envelope.js';

describe('the RPC envelope', () => {
  it.each<[string, unknown[], unknown]>([
    ['ok', okResponse(7, 'v'), { id: 7, ok: true, value: 'v' }],
    ['error with detail', errorResponse(7, 'STALE_CONFIG', 'old', 12), { id: 7, ok: false, code: 'STALE_CONFIG', message: 'old', detail: 12 }],
    ['error without detail', [7, 1, 'BUSY', 'full'], { id: 7, ok: false, code: 'BUSY', message: 'full', detail: null }],
    ['error without a code', [7, 1, 3], { id: 7, ok: false, code: 'REMOTE', message: 'malformed error response', detail: null }],
    ['no id', ['x', 0, 1], undefined],
    ['an unknown status', [7, 2, 1], undefined],
    ['the retired fabric shape (status inverted)', [7, 1, ['CODE', 'msg']], { id: 7, ok: false, code: 'REMOTE', message: 'malformed error response', detail: null }],
  ])('reads %s', (_, m, want) => {
    expect(readResponse(m)).toEqual(want);
  });

  it('reads after a prefix, and turns what was thrown into a response and back into an error', () => {
    expect(readResponse([2, ...okResponse(1, null)], 1)).toEqual({ id: 1, ok: true, value: null });
    const thrown = Object.assign(new Error('no such range'), { code: 'STALE_CONFIG', detail: 5 });
    const r = readResponse(failureResponse(3, thrown));
    expect(r).toMatchObject({ ok: false });
    const e = remoteError(r as Extract<typeof r, { ok: false }>, 'host:1 get');
    expect(e).toBeInstanceOf(RpcRemoteError);
    expect([e.code, e.message, e.detail]).toEqual(['STALE_CONFIG', 'host:1 get: no such range', 5]);
    expect(readResponse(failureResponse(4, 'plain'))).toMatchObject({ code: 'REMOTE', message: 'plain' });
  });
});
