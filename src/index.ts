/**
 * Nova's public API. Everything not exported here is internal and may change.
 */
export { NovaError, RemoteError, type ErrorCode } from './common/errors.js';
export {
  Fabric, MemoryRegion, Endpoint, RemoteRegion,
  type FabricOptions, type ConnectOptions, type MessageHandler, type ImmediateHandler, type FabricStats,
} from './transport/fabric.js';
export { RemoteKey } from './transport/remote-key.js';
export { Rpc, RPC_REQUEST, RPC_RESPONSE, type RpcHandler, type CallOptions } from './transport/rpc.js';
