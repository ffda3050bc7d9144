import { describe, expect, it } from 'vitest';
import { RpcRemoteError, errorResponse, failureResponse, okResponse, responseError, responseId, responseOk } from '../../src/common/rpc-envelope.js';

/** What a call settles with: `ok value`, `CODE message (detail)`, or `not a response`. */
function settle(m: unknown[], at = 0): string {
  if (responseId(m, at) === undefined) return 'not a response';
  if (responseOk(m, at)) return `ok ${JSON.stringify(m[at + 2])}`;
  const e = responseError(m, at, 'call');
  return `${e.code} ${e.message} (${JSON.stringify(e.detail)})`;
}

describe('the RPC envelope', () => {
  it.each<[string, unknown[], string]>([
    ['ok', okResponse(7, 'v'), 'ok "v"'],
    ['error with detail', errorResponse(7, 'STALE_CONFIG', 'old', 12), 'STALE_CONFIG call: old (12)'],
    ['error without detail', [7, 1, 'BUSY', 'full'], 'BUSY call: full (null)'],
    ['error without a code', [7, 1, 3], 'REMOTE call: malformed error response (null)'],
    ['no id', ['x', 0, 1], 'not a response'],
    ['an unknown status', [7, 2, 1], 'not a response'],
    ['the retired fabric shape (status inverted)', [7, 1, ['CODE', 'msg']], 'REMOTE call: malformed error response (null)'],
  ])('reads %s', (_, m, want) => {
    expect(settle(m)).toBe(want);
  });

  it('puts the fabric RPC\'s version first, and reads after it', () => {
    expect(okResponse(1, null, 2)).toEqual([2, 1, 0, null]);
    expect(errorResponse(1, 'BUSY', 'full', null, 2)).toEqual([2, 1, 1, 'BUSY', 'full', null]);
    expect(responseId(okResponse(9, 'r', 2), 1)).toBe(9);
    expect(settle(okResponse(9, 'r', 2), 1)).toBe('ok "r"');
  });

  it('turns what was thrown into a response and back into an error', () => {
    const thrown = Object.assign(new Error('no such range'), { code: 'STALE_CONFIG', detail: 5 });
    const e = responseError(failureResponse(3, thrown), 0, 'host:1 get');
    expect(e).toBeInstanceOf(RpcRemoteError);
    expect([e.code, e.message, e.detail]).toEqual(['STALE_CONFIG', 'host:1 get: no such range', 5]);
    expect(settle(failureResponse(4, 'plain'))).toBe('REMOTE call: plain (null)');
  });
});
