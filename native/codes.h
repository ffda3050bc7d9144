// Fixed numeric codes shared by the native transport and src/transport/codes.ts.
// These values cross the N-API boundary and appear in completion records: NEVER renumber;
// retire a value by leaving it reserved.
#pragma once
#include <cstdint>

namespace nova {

// Outcome of an operation.
enum Status : int32_t {
  kOk = 0,
  kPeerLost = 1,      // the endpoint's peer died or the connection broke
  kOutOfBounds = 2,   // local or remote range outside its region
  kBadRemoteKey = 3,  // remote key unknown, garbled, or not for this endpoint
  kClosed = 4,        // fabric, endpoint or region closed
  kBadArgument = 5,   // malformed request from JS (unknown op, unknown id)
  kTransport = 6,     // any other UCX failure
  kTimeout = 7,       // a control call did not finish within its deadline
};

// Message types the transport itself answers (JS's RPC uses 1 and 2; below 16 is reserved).
enum MessageType : uint32_t {
  kMsgRpcResponse = 2,  // msgpack [1, id, ok, result], as src/transport/rpc.ts reads it
  kMsgFileWrite = 3,    // a direct file write (Fabric::RegisterFile); answered as an RPC
};

// Kind of an operation submitted from JS (descriptor byte 0).
enum OpKind : uint8_t {
  kOpRead = 1,
  kOpWrite = 2,
  kOpWriteImm = 3,
  kOpSend = 4,
  kOpFlush = 5,
  // A WRITE whose completion at the peer sends a message: the descriptor after it, a kOpSend
  // on the same endpoint marked kPairedSend, is posted only once the write is complete
  // there, and not at all if it fails. The write's own op id is 0; the send's reports both.
  kOpWriteSend = 6,
};

// Descriptor byte 1 (pad[0]) of the send of a kOpWriteSend pair; a send so marked alone is
// refused, so a pair cut in two can never send a message naming bytes that did not land.
constexpr uint8_t kPairedSend = 1;

// Kind of an event delivered to JS (event record word 0).
enum EventKind : uint32_t {
  kEvOpDone = 1,     // opId finished with status
  kEvConnected = 2,  // connect opId finished; ep is ready (or status says why not)
  kEvAccepted = 3,   // a peer connected to us; ep is ready
  kEvPeerLost = 4,   // ep failed; its pending operations fail with kPeerLost
  kEvMessage = 5,    // message on ep; arg = type; payload: see Fabric::DrainEvents
  kEvImm = 6,        // writeWithImm notification on ep; arg = immediate
};

}  // namespace nova
