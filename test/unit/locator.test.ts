/**
 * Where the coordinator is (cluster/locator.ts): with several addresses, a standby's NOT_LEADER
 * sends the next call to the leader it names, and an address that fails gives way to the next
 * given one, even after a leader's own address (which may be unreachable from here).
 */
import { describe, expect, it } from 'vitest';
import { NovaError } from '../../src/common/errors.js';
import { CoordinatorLocator } from '../../src/cluster/locator.js';

const notLeader = (at: string | null): NovaError => Object.assign(new NovaError('NOT_LEADER', 'stands by'), { detail: at });

describe('CoordinatorLocator', () => {
  it('follows a named leader, and otherwise walks the given addresses in turn', () => {
    const l = new CoordinatorLocator('a:1, b:2,c:3');
    expect(l.address).toBe('a:1');
    expect(l.failed(notLeader('x:9'))).toBe(true);
    expect(l.address).toBe('x:9');
    expect(l.failed(new NovaError('PEER_LOST', 'refused'))).toBe(true);
    expect(l.address).toBe('b:2');
    expect(l.failed(notLeader(null))).toBe(true);
    expect(l.address).toBe('c:3');
    expect(l.failed(new NovaError('PEER_LOST', 'refused'))).toBe(true);
    expect(l.address).toBe('a:1');
    l.close();
  });

  it('one address has nowhere else to go; none is refused', () => {
    const l = new CoordinatorLocator('a:1');
    expect(l.failed(new NovaError('PEER_LOST', 'refused'))).toBe(false);
    expect(l.address).toBe('a:1');
    l.close();
    expect(() => new CoordinatorLocator(' , ')).toThrow(/no coordinator address/);
  });
});
