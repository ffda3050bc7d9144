// What the files of the Fabric share and nothing else may use: the frame header between
// workers (doc/format/wire.md, "Frames between workers"), the progress thread's Fabric, and the
// structures behind the ids the Fabric hands out. fabric.cc: lifecycle and the JS thread's side
// (control calls, submitting operations, taking events); fabric_progress.cc: the progress loop
// and the operations; fabric_endpoints.cc: endpoints, frames and their delivery;
// fabric_callbacks.cc: UCX's callbacks.
#pragma once

#include "fabric.h"

namespace nova {

// Active-message id used for every Nova frame.
inline constexpr unsigned kAmId = 7;
inline constexpr uint32_t kFrameMagic = 0x4E4F5641;  // "NOVA"
inline constexpr uint16_t kFrameVersion = 1;

// Frame kinds (never renumber).
enum FrameKind : uint16_t {
  kFrameHello = 1,     // dst = 0, arg = sender's endpoint id, data = sender's worker address
  kFrameHelloAck = 2,  // dst = initiator's endpoint id, arg = acceptor's endpoint id
  kFrameMessage = 3,   // dst = receiver's endpoint id, arg = message type, data = payload
  kFrameImm = 4,       // dst = receiver's endpoint id, arg = immediate
  kFrameBye = 5,       // dst = receiver's endpoint id: the sender closed its endpoint
};

struct FrameHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint32_t dst;
  uint32_t arg;
  uint32_t seq;  // per endpoint and direction, for MESSAGE, IMM and BYE; 0 otherwise
};
static_assert(sizeof(FrameHeader) == 20, "FrameHeader is a wire format");

// Each Fabric has its own progress thread; UCX invokes callbacks only from inside
// ucp_worker_progress on that thread, so the owning Fabric is found here.
extern thread_local Fabric* tls_fabric;

// Endpoint ids travel through UCX's void* user data.
inline void* IdPtr(uint32_t id) { return reinterpret_cast<void*>(static_cast<uintptr_t>(id)); }
inline uint32_t PtrId(void* p) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p)); }

struct Fabric::Region {
  uint32_t id;
  ucp_mem_h memh;
  uint8_t* address;
  size_t length;
  uint32_t pending = 0;  // operations posted with this region as local buffer
  bool closing = false;
  uint32_t close_op = 0;
};

struct Fabric::Endpoint {
  enum State { kConnecting, kReady, kFailed, kClosed };
  uint32_t id;
  uint32_t remote_id = 0;
  ucp_ep_h ep = nullptr;
  State state = kConnecting;
  bool outbound = false;
  uint32_t connect_op = 0;
  bool flushed = false;
  bool acked = false;
  std::vector<uint32_t> rkeys;
  std::vector<Queued> early;  // frames that arrived before the endpoint was ready
  // Ordering: UCX may deliver a rendezvous (large) message after a later eager one, so
  // sequenced frames carry a number and wait here until the ones before them arrive.
  uint32_t send_seq = 0;
  uint32_t recv_seq = 0;
  std::unordered_map<uint32_t, Queued> reorder;
};

struct Fabric::RemoteKey {
  uint32_t ep;
  ucp_rkey_h rkey;
  uint64_t address;
  uint64_t length;
  uint32_t pending = 0;   // operations posted with it; UCX reads the key until they finish
  bool dropped = false;   // refused for new operations; destroyed when pending reaches 0
};

struct Fabric::SendCtx {
  FrameHeader header;
  std::unique_ptr<uint8_t[]> data;
  OpRef ref;  // op_id 0 for internal frames; region and rkey set for a writeWithImm
};

// WRITEs posted to one endpoint in one batch; they finish together when the endpoint flush
// that follows them finishes, so a resolved write is visible at the target. With `then`,
// the group holds a single write (writeWithImm, or kOpWriteSend) whose frame is sent after
// the flush; that frame's op id reports the pair.
struct Fabric::WriteGroup {
  uint32_t ep;
  std::vector<OpRef> ops;
  int pending = 0;
  ucs_status_t status = UCS_OK;
  std::unique_ptr<SendCtx> then;
  size_t then_length = 0;
};


struct Fabric::RecvCtx {
  FrameHeader header;
  uint8_t* data;
};

}  // namespace nova
