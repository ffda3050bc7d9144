/**
 * Nova's public API. Everything not exported here is internal and may change.
 */
// The client of a Nova cluster: what applications use.
export { NovaClient, ClientBatch, coordinatorOf, type NovaClientOptions, type ScanOptions as ClientScanOptions } from './client/nova-client.js';
export { NovaError, RemoteError, type ErrorCode } from './common/errors.js';
export {
  Fabric, type FabricOptions, type ConnectOptions, type MessageHandler, type ImmediateHandler, type FabricStats,
} from './transport/fabric.js';
export { Endpoint } from './transport/endpoint.js';
export { MemoryRegion, RemoteRegion } from './transport/regions.js';
export { RemoteKey } from './transport/remote-key.js';
export { Rpc, RPC_REQUEST, RPC_RESPONSE, type RpcHandler, type CallOptions } from './transport/rpc.js';

// The embedded engine for one range (what each LTC runs per range; usable on its own).
export { Engine, type EngineStats } from './ltc/engine.js';
export { EngineIterator } from './ltc/engine-iterator.js';
export type { EngineOptions, ReadOptions, ScanOptions, Snapshot, WriteOptions } from './ltc/engine-options.js';
export type { EngineEnv } from './ltc/engine-env.js';
export { localEnv } from './ltc/local-store.js';
export { WriteBatch, DEFAULT_LIMITS, type Limits } from './log/write-batch.js';
