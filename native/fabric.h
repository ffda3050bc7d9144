// Fabric: one UCP context + worker per instance, driven by a dedicated progress thread.
//
// Threading contract:
//  - Every UCX call on the worker happens on the progress thread (the worker runs in
//    UCS_THREAD_MODE_SINGLE). The JS thread talks to it only through two mutex-protected
//    queues: commands/operations in, events out.
//  - Control calls (MapRegion, Connect, ImportRkey, ...) run on the progress thread while
//    the caller waits, with a deadline. Data operations (Submit) are fire-and-forget; each
//    finishes with one event.
//  - The progress thread spins for `spin_us` after its last piece of work, then arms the
//    worker and sleeps on epoll over the worker's event fd and our own wake-up eventfd.
//    It plays the part of the RNIC: a peer's emulated READ/WRITE completes while the JS
//    thread is busy, and shared-memory READ/WRITE never needs it at all.
//  - Notify() is called from the progress thread when the event queue goes from empty to
//    non-empty; the owner drains with DrainEvents() on its own thread.
//
// Invariants:
//  - A region is unmapped only when it is closing and no operation on it is pending.
//  - Every submitted operation yields exactly one kEvOpDone event, whatever happens,
//    including fabric close (status kClosed).
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codes.h"
#include "direct_files.h"

namespace nova {

// An operation descriptor as JS writes it (little-endian, 48 bytes). See doc/format/wire.md.
struct OpDesc {
  uint8_t kind;
  uint8_t pad[3];
  uint32_t op_id;
  uint32_t ep;
  uint32_t region;      // local region (read/write); unused for send
  uint64_t local_off;   // offset in region; for send: offset in the message bytes
  uint64_t length;
  uint32_t rkey;        // imported remote key id (read/write)
  uint32_t imm;         // immediate (writeImm) or message type (send)
  uint64_t remote_off;  // offset inside the remote region
};
static_assert(sizeof(OpDesc) == 48, "OpDesc is a wire format");

// An event record as JS reads it (32 bytes). For kEvMessage, see DrainEvents.
struct Event {
  uint32_t kind;
  uint32_t op_id;
  int32_t status;
  uint32_t ep;
  uint64_t value;
  uint32_t arg;
  uint32_t pad;
};
static_assert(sizeof(Event) == 32, "Event is a wire format");

// A received message payload, handed to JS with ownership (free() when done).
struct Payload {
  uint8_t* data;
  size_t length;
};

struct RegionInfo {
  uint32_t id = 0;
  void* address = nullptr;
  size_t length = 0;
  std::string packed_rkey;
};

struct FabricOptions {
  uint32_t spin_us = 200;
  uint32_t control_timeout_ms = 5000;
};

struct FabricStats {
  uint64_t ops_posted = 0;
  uint64_t batches = 0;        // Submit calls from JS
  uint64_t events = 0;
  uint64_t notifications = 0;  // calls to Notify (one per batch of events)
  uint64_t wakeups = 0;
  uint64_t malformed_frames = 0;
  uint64_t unknown_endpoint_frames = 0;
  uint64_t file_writes = 0;  // direct file writes done (successful or not)
};

class Fabric {
 public:
  using Notify = std::function<void()>;

  // Returns nullptr and sets *error on failure.
  static std::unique_ptr<Fabric> Create(const FabricOptions& options, Notify notify,
                                        std::string* error);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  const std::string& address() const { return address_; }

  // Control calls: synchronous, run on the progress thread.
  Status MapRegion(size_t length, RegionInfo* out);
  Status Connect(const std::string& peer_address, uint32_t op_id, uint32_t* ep_id);
  Status ImportRkey(uint32_t ep_id, const std::string& packed, uint64_t remote_address,
                    uint64_t remote_length, uint32_t* rkey_id);
  Status DropRkey(uint32_t rkey_id);
  // Finishes with kEvOpDone(op_id) once nothing is pending on the region and it is unmapped.
  Status CloseRegion(uint32_t region_id, uint32_t op_id);
  Status CloseEndpoint(uint32_t ep_id);

  // Direct file writes (doc/format/wire.md, "Direct file writes"): a FILE_WRITE message on
  // endpoint `ep_id` naming `handle` is written to `fd` by the progress thread and answered
  // from there, never reaching JS. The fd must stay open until UnregisterFile returns.
  // A FILE_WRITE's bytes are in [start, +length) of local region `region`, where the peer
  // WROTE them before it sent the message.
  using FileWindow = DirectFiles::Window;
  Status RegisterFile(uint32_t handle, int fd, uint64_t limit, uint32_t ep_id,
                      const FileWindow& window);
  // Forgets `handle`; *end = the end of the furthest write it took.
  Status UnregisterFile(uint32_t handle, uint64_t* end);
  Status FileEnd(uint32_t handle, uint64_t* end);

  // Data path: queue operations; `messages` holds the payload bytes of kOpSend descriptors.
  void Submit(const OpDesc* ops, size_t count, const uint8_t* messages, size_t messages_len);

  // Moves up to `max` events out. A message payload of at most kArenaMessageMax bytes is
  // copied into `arena` (event: op_id 1, value = offset, pad = length); a larger one moves
  // into `large` with its ownership (op_id 0, value = index, pad = length). Sets *more
  // when events remain (out or arena full).
  static constexpr size_t kArenaMessageMax = 16 * 1024;

  // Waits up to `wait_us` for events to be drainable; true if there are some. Lets the JS
  // thread take fast completions (shared memory) at once instead of sleeping until notified.
  bool AwaitEvents(uint32_t wait_us);
  size_t DrainEvents(Event* out, size_t max, uint8_t* arena, size_t arena_len,
                     std::vector<Payload>* large, bool* more);

  // Stops the thread, fails everything pending with kClosed, releases UCX resources.
  void Close();
  bool closed() const { return closed_.load(); }
  FabricStats stats();

 private:
  // What a finished operation gives back: its id for JS, and the references it held.
  struct OpRef {
    uint32_t op_id = 0;
    uint32_t region = 0;  // local region whose pending count it holds, or 0
    uint32_t rkey = 0;    // remote key whose pending count it holds, or 0
    uint32_t ep = 0;
  };
  struct Region;
  struct Endpoint;
  struct RemoteKey;
  struct WriteGroup;
  struct SendCtx;
  struct RecvCtx;
  struct Queued {
    Event event;
    Payload payload;  // message events only
  };

  Fabric(const FabricOptions& options, Notify notify);
  bool Init(std::string* error);
  void Loop();
  void Wake();
  Status RunControl(std::function<Status()> fn);

  // Progress-thread side.
  bool DrainInbox();
  bool Execute(const OpDesc& op, const OpDesc* next, const uint8_t* messages,
               size_t messages_len, std::unordered_map<uint32_t, WriteGroup*>* groups);
  Status CheckLocal(const OpDesc& op, Region** region);
  Status CheckRemote(const OpDesc& op, Endpoint* ep, RemoteKey** rkey);
  void PostRead(const OpDesc& op, Endpoint* ep);
  void PostWrite(const OpDesc& op, Endpoint* ep,
                 std::unordered_map<uint32_t, WriteGroup*>* groups);
  void PostWriteImm(const OpDesc& op, Endpoint* ep);
  void PostWriteThen(const OpDesc& write, Endpoint* ep, SendCtx* then, size_t length);
  void PostWriteSend(const OpDesc& write, const OpDesc& send, Endpoint* ep,
                     const uint8_t* messages, size_t messages_len);
  void PostSend(const OpDesc& op, Endpoint* ep, const uint8_t* messages, size_t messages_len);
  void PostFlush(const OpDesc& op, Endpoint* ep);
  void FlushGroup(WriteGroup* group);
  void FinishGroup(WriteGroup* group);
  void GroupStep(WriteGroup* group, ucs_status_t status);
  void Finish(const OpRef& ref, Status status);
  Status OpStatus(ucs_status_t status, uint32_t ep_id) const;
  uint32_t TakeSlot(const OpRef& ref);
  bool Track(ucs_status_ptr_t request);
  void ReleaseRkey(uint32_t rkey_id);
  void DestroyRkey(uint32_t rkey_id);
  bool PostFrame(Endpoint* ep, SendCtx* ctx, size_t length);
  bool FlushEndpoint(Endpoint* ep, ucp_send_nbx_callback_t cb);
  void Release(uint32_t region_id);
  void MaybeUnmap(Region* region);
  void Emit(const Event& event, Payload payload = {nullptr, 0});
  void Publish();
  Endpoint* CreateEndpoint(const void* address, size_t length, std::string* error);
  void FailEndpoint(Endpoint* ep, Status status);
  void DestroyEndpoint(Endpoint* ep);
  bool SayBye(Endpoint* ep);
  void ReapEndpoints();
  bool SendControl(Endpoint* ep, uint16_t kind, uint32_t dst, uint32_t arg, const void* data,
                   size_t length);
  void EpFlushed(Endpoint* ep, ucs_status_t status);
  void MaybeReady(Endpoint* ep);
  void HandleFrame(const void* header, size_t header_length, const void* data, size_t length,
                   bool owned);
  void Sequence(Endpoint* ep, uint32_t seq, Queued frame);
  void Deliver(Endpoint* ep, const Queued& frame);
  void FileWrite(Endpoint* ep, const Payload& payload);
  void Shutdown();
  Status MapStatus(ucs_status_t status, Endpoint* ep) const;

  // UCX callbacks (static trampolines).
  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param);
  static void OnAmData(void* request, ucs_status_t status, size_t length, void* user_data);
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void OnReadDone(void* request, ucs_status_t status, void* user_data);
  static void OnWriteDone(void* request, ucs_status_t status, void* user_data);
  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnEpFlushed(void* request, ucs_status_t status, void* user_data);
  static void OnByeFlushed(void* request, ucs_status_t status, void* user_data);
  static void OnEpClosed(void* request, ucs_status_t status, void* user_data);

  FabricOptions options_;
  Notify notify_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int worker_fd_ = -1;
  int wake_fd_ = -1;
  int epoll_fd_ = -1;
  std::string address_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> closed_{false};
  std::atomic<bool> sleeping_{false};

  // JS -> progress thread.
  struct Batch {
    std::vector<OpDesc> ops;
    std::vector<uint8_t> messages;
  };
  struct Control {
    std::function<Status()> fn;
    Status result = kTimeout;
    bool done = false;
    bool running = false;    // taken by the progress thread
    bool abandoned = false;  // caller timed out before it ran; skip it
  };
  std::mutex inbox_mu_;
  std::condition_variable control_cv_;
  std::vector<Batch> batches_;
  std::vector<std::shared_ptr<Control>> controls_;

  // Progress thread -> JS.
  std::mutex outbox_mu_;
  std::deque<Queued> outbox_;
  bool notified_ = false;
  std::atomic<bool> has_events_{false};  // outbox non-empty; polled by AwaitEvents
  std::vector<Queued> local_events_;  // progress thread only; published once per loop turn

  // Progress-thread-owned state.
  uint32_t next_id_ = 1;
  std::unordered_map<uint32_t, std::unique_ptr<Region>> regions_;
  std::unordered_map<uint32_t, std::unique_ptr<Endpoint>> endpoints_;
  std::unordered_map<uint32_t, std::unique_ptr<RemoteKey>> rkeys_;
  std::vector<uint32_t> doomed_endpoints_;
  std::unordered_set<uint32_t> lost_endpoints_;  // failed ids: later ops fail kPeerLost
  std::vector<OpRef> op_slots_;  // in-flight READs, indexed by the slot in their user_data
  std::vector<uint32_t> op_free_;
  DirectFiles files_;  // on the progress thread only
  int64_t outstanding_ = 0;  // UCX requests handed back and not yet called back
  FabricStats stats_;
  std::mutex stats_mu_;
};

}  // namespace nova
