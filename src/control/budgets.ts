/**
 * The memory each component of a cluster is given by its knobs (knobs.ts), so reports can set
 * a process's peak resident memory against it. A budget counts what the component sizes by its
 * knobs; the runtime under it (Node, its code, a heap of small objects: tens of MiB) comes on
 * top and shows as the gap between an idle process's RSS and zero.
 */
import type { Settings } from '../cluster/config.js';
import { DEFAULT_PEERS, DEFAULT_WINDOW_BYTES } from '../stoc/stoc-server.js';
import type { ComponentRole } from './cluster-control.js';

/** Bytes component `role` may hold by the cluster's settings; undefined for an LTC without a budget (tables held whole). */
export function memoryBudget(role: ComponentRole, s: Settings): number | undefined {
  switch (role) {
    case 'ltc':
      return s.ltcMemoryBytes > 0 ? s.ltcMemoryBytes : undefined;
    case 'stoc':
      return s.stocMemoryBytes + DEFAULT_PEERS * DEFAULT_WINDOW_BYTES /* the file buffer, as nova up starts a StoC */ + (s.logMode === 'memory' || s.logMode === 'memory+disk' ? s.stocLogMemoryBytes : 0);
    case 'coordinator':
      return s.coordinatorMemoryBytes;
    case 'cache':
      return s.cacheMemoryBytes;
  }
}
