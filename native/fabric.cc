// Fabric implementation. See fabric.h for the threading contract and doc/format/wire.md
// for the frames exchanged between workers.
#include "fabric.h"

#include <pthread.h>
#include <cerrno>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstring>

namespace nova {
namespace {

// Active-message id used for every Nova frame.
constexpr unsigned kAmId = 7;
constexpr uint32_t kFrameMagic = 0x4E4F5641;  // "NOVA"
constexpr uint16_t kFrameVersion = 1;

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
thread_local Fabric* tls_fabric = nullptr;

// Endpoint ids travel through UCX's void* user data.
inline void* IdPtr(uint32_t id) { return reinterpret_cast<void*>(static_cast<uintptr_t>(id)); }
inline uint32_t PtrId(void* p) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p)); }

}  // namespace

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

std::unique_ptr<Fabric> Fabric::Create(const FabricOptions& options, Notify notify,
                                       std::string* error) {
  std::unique_ptr<Fabric> f(new Fabric(options, std::move(notify)));
  if (!f->Init(error)) return nullptr;
  return f;
}

Fabric::Fabric(const FabricOptions& options, Notify notify)
    : options_(options), notify_(std::move(notify)) {}

Fabric::~Fabric() { Close(); }

bool Fabric::Init(std::string* error) {
  // UCX_* defaults are set by src/common/addon.ts before this library loads.
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    *error = std::string("ucp_config_read: ") + ucs_status_string(st);
    return false;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = "nova";
  st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (st != UCS_OK) {
    *error = std::string("ucp_init: ") + ucs_status_string(st);
    return false;
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(context_, &wp, &worker_);
  if (st != UCS_OK) {
    *error = std::string("ucp_worker_create: ") + ucs_status_string(st);
    ucp_cleanup(context_);
    context_ = nullptr;
    return false;
  }
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  st = ucp_worker_get_address(worker_, &addr, &addr_len);
  if (st == UCS_OK) {
    address_.assign(reinterpret_cast<const char*>(addr), addr_len);
    ucp_worker_release_address(worker_, addr);
    st = ucp_worker_get_efd(worker_, &worker_fd_);
  }
  if (st == UCS_OK) {
    ucp_am_handler_param_t ap{};
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    ap.id = kAmId;
    ap.cb = &Fabric::OnAm;
    ap.arg = this;
    ap.flags = UCP_AM_FLAG_WHOLE_MSG;
    st = ucp_worker_set_am_recv_handler(worker_, &ap);
  }
  if (st != UCS_OK) {
    *error = std::string("worker set-up: ") + ucs_status_string(st);
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
    worker_ = nullptr;
    context_ = nullptr;
    return false;
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = worker_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, worker_fd_, &ev);
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "nova-fabric");  // so `top -H` and perf tell it apart
    Loop();
  });
  return true;
}

// ---------------------------------------------------------------------------------------
// JS-thread side

void Fabric::Wake() {
  if (sleeping_.load()) {
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof one);
    (void)n;
  }
}

Status Fabric::RunControl(std::function<Status()> fn) {
  if (closed_.load() || stop_.load()) return kClosed;
  auto control = std::make_shared<Control>();
  control->fn = std::move(fn);
  std::unique_lock<std::mutex> lock(inbox_mu_);
  controls_.push_back(control);
  lock.unlock();
  Wake();
  lock.lock();
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.control_timeout_ms);
  while (!control->done) {
    if (control_cv_.wait_until(lock, deadline) == std::cv_status::timeout && !control->done) {
      if (!control->running) {
        control->abandoned = true;  // the thread will skip it; its captures may be gone
        return kTimeout;
      }
      // Running on the progress thread: it finishes in bounded time; wait for it.
      deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    }
  }
  return control->result;
}

Status Fabric::MapRegion(size_t length, RegionInfo* out) {
  if (length == 0) return kBadArgument;
  return RunControl([this, length, out]() -> Status {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = length;
    mp.flags = UCP_MEM_MAP_ALLOCATE;  // only such memory is truly one-sided over shm
    ucp_mem_h memh = nullptr;
    if (ucp_mem_map(context_, &mp, &memh) != UCS_OK) return kTransport;
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    void* packed = nullptr;
    size_t packed_len = 0;
    if (ucp_mem_query(memh, &attr) != UCS_OK ||
        ucp_rkey_pack(context_, memh, &packed, &packed_len) != UCS_OK) {
      ucp_mem_unmap(context_, memh);
      return kTransport;
    }
    auto region = std::make_unique<Region>();
    region->id = next_id_++;
    region->memh = memh;
    region->address = static_cast<uint8_t*>(attr.address);
    region->length = length;  // the caller's length: UCX may round the mapping up
    out->id = region->id;
    out->address = attr.address;
    out->length = length;
    out->packed_rkey.assign(static_cast<const char*>(packed), packed_len);
    ucp_rkey_buffer_release(packed);
    regions_[region->id] = std::move(region);
    return kOk;
  });
}

Status Fabric::Connect(const std::string& peer_address, uint32_t op_id, uint32_t* ep_id) {
  if (peer_address.empty()) return kBadArgument;
  return RunControl([this, &peer_address, op_id, ep_id]() -> Status {
    std::string error;
    Endpoint* ep = CreateEndpoint(peer_address.data(), peer_address.size(), &error);
    if (ep == nullptr) return kPeerLost;  // well-formed (JS checked its seal) but unreachable
    std::string hello(4 + address_.size(), '\0');
    memcpy(&hello[0], &ep->id, 4);
    memcpy(&hello[4], address_.data(), address_.size());
    // Outbound only once HELLO is on its way: a failure here is reported by this call's
    // status alone, never also by a kEvConnected event.
    ep->outbound = true;
    ep->connect_op = op_id;
    if (!SendControl(ep, kFrameHello, 0, ep->id, hello.data(), hello.size())) {
      ep->outbound = false;
      ep->connect_op = 0;
      DestroyEndpoint(ep);
      return kPeerLost;
    }
    *ep_id = ep->id;
    return kOk;
  });
}

Status Fabric::ImportRkey(uint32_t ep_id, const std::string& packed, uint64_t remote_address,
                          uint64_t remote_length, uint32_t* rkey_id) {
  return RunControl([=, &packed]() -> Status {
    auto it = endpoints_.find(ep_id);
    if (it == endpoints_.end()) return kBadArgument;
    Endpoint* ep = it->second.get();
    if (ep->state == Endpoint::kFailed) return kPeerLost;
    if (ep->state != Endpoint::kReady) return kClosed;
    ucp_rkey_h rkey = nullptr;
    if (packed.empty()) return kBadRemoteKey;
    if (ucp_ep_rkey_unpack(ep->ep, packed.data(), &rkey) != UCS_OK) return kBadRemoteKey;
    auto key = std::make_unique<RemoteKey>();
    key->ep = ep_id;
    key->rkey = rkey;
    key->address = remote_address;
    key->length = remote_length;
    uint32_t id = next_id_++;
    ep->rkeys.push_back(id);
    rkeys_[id] = std::move(key);
    *rkey_id = id;
    return kOk;
  });
}

Status Fabric::DropRkey(uint32_t rkey_id) {
  return RunControl([=]() -> Status {
    auto it = rkeys_.find(rkey_id);
    if (it == rkeys_.end() || it->second->dropped) return kBadArgument;
    it->second->dropped = true;  // CheckRemote refuses it from now on
    if (it->second->pending == 0) DestroyRkey(rkey_id);
    return kOk;
  });
}

Status Fabric::CloseRegion(uint32_t region_id, uint32_t op_id) {
  return RunControl([=]() -> Status {
    auto it = regions_.find(region_id);
    if (it == regions_.end() || it->second->closing) return kBadArgument;
    it->second->closing = true;
    it->second->close_op = op_id;
    MaybeUnmap(it->second.get());  // now, or when the last pending operation finishes
    return kOk;
  });
}

Status Fabric::CloseEndpoint(uint32_t ep_id) {
  return RunControl([=]() -> Status {
    auto it = endpoints_.find(ep_id);
    if (it == endpoints_.end()) return kBadArgument;
    SayBye(it->second.get());
    return kOk;
  });
}

void Fabric::Submit(const OpDesc* ops, size_t count, const uint8_t* messages,
                    size_t messages_len) {
  Batch batch;
  batch.ops.assign(ops, ops + count);
  if (messages_len > 0) batch.messages.assign(messages, messages + messages_len);
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (!stop_.load()) {
      batches_.push_back(std::move(batch));
      batch.ops.clear();
    }
  }
  if (!batch.ops.empty()) {
    // Closed: every operation still yields its one event.
    std::lock_guard<std::mutex> lock(outbox_mu_);
    for (const OpDesc& op : batch.ops) {
      Event e{kEvOpDone, op.op_id, kClosed, op.ep, 0, 0, 0};
      outbox_.push_back({e, {nullptr, 0}});
    }
    return;
  }
  Wake();
}

bool Fabric::AwaitEvents(uint32_t wait_us) {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(wait_us);
  while (!has_events_.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
  return true;
}

size_t Fabric::DrainEvents(Event* out, size_t max, uint8_t* arena, size_t arena_len,
                           std::vector<Payload>* large, bool* more) {
  std::lock_guard<std::mutex> lock(outbox_mu_);
  size_t n = 0;
  size_t used = 0;
  while (n < max && !outbox_.empty()) {
    Queued& q = outbox_.front();
    Event e = q.event;
    if (e.kind == kEvMessage) {
      size_t len = q.payload.length;
      e.pad = static_cast<uint32_t>(len);
      if (len > kArenaMessageMax) {
        e.op_id = 0;  // handed over whole, zero-copy
        e.value = large->size();
        large->push_back(q.payload);
      } else if (len <= arena_len - used) {
        e.op_id = 1;  // copied into the arena
        e.value = used;
        if (len > 0) memcpy(arena + used, q.payload.data, len);
        used += len;
        free(q.payload.data);
      } else {
        break;  // arena full: the rest next call
      }
    }
    out[n++] = e;
    outbox_.pop_front();
  }
  *more = !outbox_.empty();
  if (!*more) has_events_.store(false, std::memory_order_relaxed);
  if (!*more) notified_ = false;
  return n;
}

FabricStats Fabric::stats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void Fabric::Close() {
  if (closed_.exchange(true)) return;
  stop_.store(true);
  if (thread_.joinable()) {
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof one);
    (void)n;
    thread_.join();
  }
  if (context_ != nullptr) ucp_cleanup(context_);
  context_ = nullptr;
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  epoll_fd_ = wake_fd_ = -1;
}

// ---------------------------------------------------------------------------------------
// Progress thread

void Fabric::Loop() {
  tls_fabric = this;
  using Clock = std::chrono::steady_clock;
  const auto spin = std::chrono::microseconds(options_.spin_us);
  auto last_work = Clock::now();
  while (!stop_.load(std::memory_order_relaxed)) {
    bool work = DrainInbox();
    unsigned progressed = ucp_worker_progress(worker_);
    ReapEndpoints();
    Publish();
    if (work || progressed > 0) {
      last_work = Clock::now();
      continue;
    }
    if (Clock::now() - last_work < spin) {
      std::this_thread::yield();  // 2 cores, 4+ busy threads: let a runnable JS thread in
      continue;
    }
    // About to sleep. Announce it before the final look at the inbox, so a producer that
    // queues after that look sees `sleeping_` and writes the eventfd.
    sleeping_.store(true);
    bool pending;
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      pending = !batches_.empty() || !controls_.empty();
    }
    if (!pending && !stop_.load() && ucp_worker_arm(worker_) == UCS_OK) {
      epoll_event events[2];
      int n = epoll_wait(epoll_fd_, events, 2, 100);
      for (int i = 0; i < n; ++i) {
        if (events[i].data.fd == wake_fd_) {
          uint64_t v;
          ssize_t r = read(wake_fd_, &v, sizeof v);
          (void)r;
        }
      }
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_.wakeups++;
    }
    sleeping_.store(false);
    last_work = Clock::now();
  }
  Shutdown();
  tls_fabric = nullptr;
}

bool Fabric::DrainInbox() {
  std::vector<Batch> batches;
  std::vector<std::shared_ptr<Control>> controls;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (batches_.empty() && controls_.empty()) return false;
    batches.swap(batches_);
    controls.swap(controls_);
    for (auto& c : controls) {
      if (!c->abandoned) c->running = true;
    }
  }
  uint64_t posted = 0;
  for (Batch& b : batches) {
    std::unordered_map<uint32_t, WriteGroup*> groups;
    for (size_t i = 0; i < b.ops.size(); ++i) {
      const OpDesc* next = i + 1 < b.ops.size() ? &b.ops[i + 1] : nullptr;
      if (Execute(b.ops[i], next, b.messages.data(), b.messages.size(), &groups)) ++i;
    }
    for (auto& g : groups) FlushGroup(g.second);
    posted += b.ops.size();
  }
  if (!batches.empty()) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.ops_posted += posted;
    stats_.batches += batches.size();
  }
  // Controls after batches: a control's caller blocks until it runs, so every batch queued
  // now was submitted before it (e.g. reads on a region, then that region's close).
  for (auto& c : controls) {
    if (c->abandoned) continue;
    Status result = c->fn();
    std::lock_guard<std::mutex> lock(inbox_mu_);
    c->result = result;
    c->done = true;
  }
  if (!controls.empty()) control_cv_.notify_all();
  return true;
}

Status Fabric::CheckLocal(const OpDesc& op, Region** region) {
  auto it = regions_.find(op.region);
  if (it == regions_.end()) return kClosed;  // ids are never reused: it was closed
  Region* r = it->second.get();
  if (r->closing) return kClosed;
  if (op.local_off > r->length || op.length > r->length - op.local_off) return kOutOfBounds;
  *region = r;
  return kOk;
}

Status Fabric::CheckRemote(const OpDesc& op, Endpoint* ep, RemoteKey** rkey) {
  auto it = rkeys_.find(op.rkey);
  if (it == rkeys_.end() || it->second->ep != ep->id || it->second->dropped) return kBadRemoteKey;
  RemoteKey* k = it->second.get();
  if (op.remote_off > k->length || op.length > k->length - op.remote_off) return kOutOfBounds;
  *rkey = k;
  return kOk;
}

// Returns true if it took `next` too (the send of a kOpWriteSend pair).
bool Fabric::Execute(const OpDesc& op, const OpDesc* next, const uint8_t* messages,
                     size_t messages_len, std::unordered_map<uint32_t, WriteGroup*>* groups) {
  const bool pair = op.kind == kOpWriteSend;
  const OpDesc* send = nullptr;
  if (pair && next != nullptr && next->kind == kOpSend && next->pad[0] == kPairedSend) send = next;
  // A pair without its send, or not on one endpoint, fails whole; so does a paired send alone.
  if ((pair && (send == nullptr || send->ep != op.ep || op.op_id != 0)) ||
      (op.kind == kOpSend && op.pad[0] != 0)) {
    Finish(OpRef{op.op_id, 0, 0, op.ep}, kBadArgument);
    if (send != nullptr) Finish(OpRef{send->op_id, 0, 0, send->ep}, kBadArgument);
    return send != nullptr;
  }
  const uint32_t reporter = pair ? send->op_id : op.op_id;
  auto it = endpoints_.find(op.ep);
  if (it == endpoints_.end()) {
    Finish(OpRef{reporter, 0, 0, op.ep}, lost_endpoints_.count(op.ep) ? kPeerLost : kClosed);
    return pair;
  }
  Endpoint* ep = it->second.get();
  if (ep->state != Endpoint::kReady) {
    Finish(OpRef{reporter, 0, 0, op.ep}, ep->state == Endpoint::kFailed ? kPeerLost : kClosed);
    return pair;
  }
  switch (op.kind) {
    case kOpRead: PostRead(op, ep); break;
    case kOpWrite: PostWrite(op, ep, groups); break;
    case kOpWriteImm: PostWriteImm(op, ep); break;
    case kOpSend: PostSend(op, ep, messages, messages_len); break;
    case kOpFlush: PostFlush(op, ep); break;
    case kOpWriteSend: PostWriteSend(op, *send, ep, messages, messages_len); break;
    default: Finish(OpRef{op.op_id, 0, 0, op.ep}, kBadArgument);
  }
  return pair;
}

void Fabric::PostRead(const OpDesc& op, Endpoint* ep) {
  Region* region = nullptr;
  RemoteKey* rkey = nullptr;
  Status s = CheckLocal(op, &region);
  if (s == kOk) s = CheckRemote(op, ep, &rkey);
  if (s != kOk) return Finish(OpRef{op.op_id, 0, 0, ep->id}, s);
  region->pending++;
  rkey->pending++;
  OpRef ref{op.op_id, region->id, op.rkey, ep->id};
  uint32_t slot = TakeSlot(ref);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_MEMH;
  p.cb.send = &Fabric::OnReadDone;
  p.user_data = IdPtr(slot);
  p.memh = region->memh;
  ucs_status_ptr_t r = ucp_get_nbx(ep->ep, region->address + op.local_off, op.length,
                                   rkey->address + op.remote_off, rkey->rkey, &p);
  if (Track(r)) return;  // OnReadDone finishes it
  op_free_.push_back(slot);
  Finish(ref, r == nullptr ? kOk : OpStatus(UCS_PTR_STATUS(r), ep->id));
}

void Fabric::PostWrite(const OpDesc& op, Endpoint* ep,
                       std::unordered_map<uint32_t, WriteGroup*>* groups) {
  Region* region = nullptr;
  RemoteKey* rkey = nullptr;
  Status s = CheckLocal(op, &region);
  if (s == kOk) s = CheckRemote(op, ep, &rkey);
  if (s != kOk) return Finish(OpRef{op.op_id, 0, 0, ep->id}, s);
  WriteGroup*& group = (*groups)[ep->id];
  if (group == nullptr) {
    group = new WriteGroup();
    group->ep = ep->id;
  }
  region->pending++;
  rkey->pending++;
  group->ops.push_back(OpRef{op.op_id, region->id, op.rkey, ep->id});
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_MEMH;
  p.cb.send = &Fabric::OnWriteDone;
  p.user_data = group;
  p.memh = region->memh;
  ucs_status_ptr_t r = ucp_put_nbx(ep->ep, region->address + op.local_off, op.length,
                                   rkey->address + op.remote_off, rkey->rkey, &p);
  if (Track(r)) {
    group->pending++;
  } else if (UCS_PTR_IS_ERR(r)) {
    group->status = UCS_PTR_STATUS(r);
  }
}

// Posts `write` alone in a group whose `then` frame is sent once the write is complete at
// the peer (FinishGroup); write.op_id reports the pair.
void Fabric::PostWriteThen(const OpDesc& write, Endpoint* ep, SendCtx* then, size_t length) {
  std::unordered_map<uint32_t, WriteGroup*> single;
  then->ref.op_id = write.op_id;
  PostWrite(write, ep, &single);
  if (single.empty()) {  // refused; already finished
    delete then;
    return;
  }
  WriteGroup* group = single.begin()->second;
  group->then.reset(then);
  group->then_length = length;
  FlushGroup(group);
}

void Fabric::PostWriteImm(const OpDesc& op, Endpoint* ep) {
  auto then = new SendCtx();
  then->header = {kFrameMagic, kFrameVersion, kFrameImm, ep->remote_id, op.imm, 0};
  PostWriteThen(op, ep, then, 0);
}

void Fabric::PostWriteSend(const OpDesc& write, const OpDesc& send, Endpoint* ep,
                           const uint8_t* messages, size_t messages_len) {
  if (send.local_off > messages_len || send.length > messages_len - send.local_off) {
    return Finish(OpRef{send.op_id, 0, 0, ep->id}, kBadArgument);
  }
  auto then = new SendCtx();
  then->header = {kFrameMagic, kFrameVersion, kFrameMessage, ep->remote_id, send.imm, 0};
  if (send.length > 0) {
    then->data.reset(new uint8_t[send.length]);
    memcpy(then->data.get(), messages + send.local_off, send.length);
  }
  OpDesc w = write;
  w.op_id = send.op_id;
  PostWriteThen(w, ep, then, send.length);
}

void Fabric::FlushGroup(WriteGroup* group) {
  auto it = endpoints_.find(group->ep);
  if (it == endpoints_.end() || it->second->state != Endpoint::kReady) {
    if (group->status == UCS_OK) group->status = UCS_ERR_CANCELED;
  } else if (group->status == UCS_OK) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &Fabric::OnWriteDone;
    p.user_data = group;
    ucs_status_ptr_t r = ucp_ep_flush_nbx(it->second->ep, &p);
    if (Track(r)) {
      group->pending++;
      return;
    }
    if (UCS_PTR_IS_ERR(r)) group->status = UCS_PTR_STATUS(r);
  }
  // No flush in flight: finish now, or let the outstanding puts' callbacks finish it.
  if (group->pending == 0) FinishGroup(group);
}

void Fabric::GroupStep(WriteGroup* group, ucs_status_t status) {
  if (status != UCS_OK && group->status == UCS_OK) group->status = status;
  if (--group->pending == 0) FinishGroup(group);
}

void Fabric::FinishGroup(WriteGroup* group) {
  auto it = endpoints_.find(group->ep);
  Endpoint* ep = it == endpoints_.end() ? nullptr : it->second.get();
  Status s = group->status == UCS_OK ? kOk : OpStatus(group->status, group->ep);
  if (group->then != nullptr) {
    // The frame carries the write's references; the op finishes when the frame is sent.
    const OpRef& w = group->ops[0];
    OpRef ref{group->then->ref.op_id, w.region, w.rkey, w.ep};
    if (s == kOk && ep != nullptr && ep->state == Endpoint::kReady) {
      SendCtx* ctx = group->then.release();
      ctx->header.seq = ep->send_seq++;  // numbered when sent: frames stay in posting order
      ctx->ref = ref;
      PostFrame(ep, ctx, group->then_length);
    } else {
      Finish(ref, s == kOk ? OpStatus(UCS_ERR_CANCELED, group->ep) : s);
    }
    delete group;
    return;
  }
  for (const OpRef& ref : group->ops) Finish(ref, s);
  delete group;
}

void Fabric::PostSend(const OpDesc& op, Endpoint* ep, const uint8_t* messages,
                      size_t messages_len) {
  if (op.local_off > messages_len || op.length > messages_len - op.local_off) {
    return Finish(OpRef{op.op_id, 0, 0, ep->id}, kBadArgument);
  }
  auto ctx = new SendCtx();
  ctx->header = {kFrameMagic, kFrameVersion, kFrameMessage, ep->remote_id, op.imm, ep->send_seq++};
  ctx->ref = OpRef{op.op_id, 0, 0, ep->id};
  if (op.length > 0) {
    ctx->data.reset(new uint8_t[op.length]);
    memcpy(ctx->data.get(), messages + op.local_off, op.length);
  }
  PostFrame(ep, ctx, op.length);
}

// Sends a frame whose header (and data, if any) `ctx` owns; OnSendDone finishes it.
// Returns false if UCX refused it at once (already finished with that status).
bool Fabric::PostFrame(Endpoint* ep, SendCtx* ctx, size_t length) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &Fabric::OnSendDone;
  p.user_data = ctx;
  ucs_status_ptr_t r = ucp_am_send_nbx(ep->ep, kAmId, &ctx->header, sizeof ctx->header,
                                       ctx->data.get(), length, &p);
  if (Track(r)) return true;
  ucs_status_t st = r == nullptr ? UCS_OK : UCS_PTR_STATUS(r);
  outstanding_++;  // OnSendDone counts one down
  OnSendDone(nullptr, st, ctx);
  return st == UCS_OK;
}

void Fabric::PostFlush(const OpDesc& op, Endpoint* ep) {
  auto group = new WriteGroup();
  group->ep = ep->id;
  group->ops.push_back(OpRef{op.op_id, 0, 0, ep->id});
  FlushGroup(group);
}

bool Fabric::SendControl(Endpoint* ep, uint16_t kind, uint32_t dst, uint32_t arg,
                         const void* data, size_t length) {
  auto ctx = new SendCtx();
  ctx->header = {kFrameMagic, kFrameVersion, kind, dst, arg, 0};
  if (length > 0) {
    ctx->data.reset(new uint8_t[length]);
    memcpy(ctx->data.get(), data, length);
  }
  if (!PostFrame(ep, ctx, length)) return false;
  // Wire-up is complete once a flush after the first frame finishes (DESIGN.md §2).
  return FlushEndpoint(ep, &Fabric::OnEpFlushed);
}

// Posts an endpoint flush whose callback gets the endpoint id. False if UCX refused it.
bool Fabric::FlushEndpoint(Endpoint* ep, ucp_send_nbx_callback_t cb) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = cb;
  p.user_data = IdPtr(ep->id);
  ucs_status_ptr_t r = ucp_ep_flush_nbx(ep->ep, &p);
  if (Track(r)) return true;
  if (UCS_PTR_IS_ERR(r)) return false;
  outstanding_++;  // the callback counts one down
  cb(nullptr, UCS_OK, p.user_data);
  return true;
}

void Fabric::Finish(const OpRef& ref, Status status) {
  if (status != kOk && stop_.load()) status = kClosed;
  if (ref.op_id != 0) Emit(Event{kEvOpDone, ref.op_id, status, ref.ep, 0, 0, 0});
  if (ref.region != 0) Release(ref.region);
  if (ref.rkey != 0) ReleaseRkey(ref.rkey);
}

// The status of an operation that UCX finished with `st` on endpoint `ep_id`: an endpoint
// that failed says PEER_LOST, one we closed (or a closing fabric) says CLOSED.
Status Fabric::OpStatus(ucs_status_t st, uint32_t ep_id) const {
  if (st == UCS_OK) return kOk;
  if (stop_.load()) return kClosed;
  if (lost_endpoints_.count(ep_id)) return kPeerLost;
  auto it = endpoints_.find(ep_id);
  if (it == endpoints_.end() || it->second->state == Endpoint::kClosed) return kClosed;
  return MapStatus(st, it->second.get());
}

uint32_t Fabric::TakeSlot(const OpRef& ref) {
  if (op_free_.empty()) {
    op_slots_.push_back(ref);
    return static_cast<uint32_t>(op_slots_.size() - 1);
  }
  uint32_t slot = op_free_.back();
  op_free_.pop_back();
  op_slots_[slot] = ref;
  return slot;
}

bool Fabric::Track(ucs_status_ptr_t r) {
  if (r == nullptr || UCS_PTR_IS_ERR(r)) return false;
  outstanding_++;
  return true;
}

void Fabric::ReleaseRkey(uint32_t rkey_id) {
  auto it = rkeys_.find(rkey_id);
  if (it == rkeys_.end()) return;
  RemoteKey* k = it->second.get();
  if (k->pending > 0) k->pending--;
  if (k->dropped && k->pending == 0) DestroyRkey(rkey_id);
}

void Fabric::DestroyRkey(uint32_t rkey_id) {
  auto it = rkeys_.find(rkey_id);
  if (it == rkeys_.end()) return;
  auto ep = endpoints_.find(it->second->ep);
  if (ep != endpoints_.end()) {
    auto& v = ep->second->rkeys;
    v.erase(std::remove(v.begin(), v.end(), rkey_id), v.end());
  }
  ucp_rkey_destroy(it->second->rkey);
  rkeys_.erase(it);
}

// Drops the reference an operation held on its region.
void Fabric::Release(uint32_t region_id) {
  auto it = regions_.find(region_id);
  if (it == regions_.end()) return;
  if (it->second->pending > 0) it->second->pending--;
  MaybeUnmap(it->second.get());
}

// A closing region is unmapped once no operation uses it; its close call then finishes.
void Fabric::MaybeUnmap(Region* r) {
  if (!r->closing || r->pending > 0) return;
  uint32_t op = r->close_op;
  ucp_mem_unmap(context_, r->memh);
  regions_.erase(r->id);
  Emit(Event{kEvOpDone, op, kOk, 0, 0, 0, 0});
}

void Fabric::Emit(const Event& event, Payload payload) {
  local_events_.push_back({event, payload});
}

void Fabric::Publish() {
  if (local_events_.empty()) return;
  bool notify = false;
  size_t n = local_events_.size();
  {
    std::lock_guard<std::mutex> lock(outbox_mu_);
    for (auto& q : local_events_) outbox_.push_back(q);
    has_events_.store(true, std::memory_order_release);
    if (!notified_) notified_ = notify = true;
  }
  local_events_.clear();
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.events += n;
    if (notify) stats_.notifications++;
  }
  if (notify && notify_) notify_();
}

Fabric::Endpoint* Fabric::CreateEndpoint(const void* address, size_t length, std::string* error) {
  auto ep = std::make_unique<Endpoint>();
  ep->id = next_id_++;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = static_cast<const ucp_address_t*>(address);
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &Fabric::OnEpError;
  params.err_handler.arg = IdPtr(ep->id);
  (void)length;
  ucs_status_t st = ucp_ep_create(worker_, &params, &ep->ep);
  if (st != UCS_OK) {
    *error = ucs_status_string(st);
    return nullptr;
  }
  Endpoint* raw = ep.get();
  endpoints_[raw->id] = std::move(ep);
  return raw;
}

void Fabric::EpFlushed(Endpoint* ep, ucs_status_t status) {
  if (status != UCS_OK) return FailEndpoint(ep, MapStatus(status, ep));
  ep->flushed = true;
  MaybeReady(ep);
}

void Fabric::MaybeReady(Endpoint* ep) {
  if (ep->state != Endpoint::kConnecting || !ep->flushed || (ep->outbound && !ep->acked)) return;
  ep->state = Endpoint::kReady;
  if (ep->outbound) {
    Emit(Event{kEvConnected, ep->connect_op, kOk, ep->id, 0, 0, 0});
  } else {
    Emit(Event{kEvAccepted, 0, kOk, ep->id, 0, 0, 0});
  }
  for (auto& q : ep->early) Deliver(ep, q);
  ep->early.clear();
}

void Fabric::FailEndpoint(Endpoint* ep, Status status) {
  if (ep->state == Endpoint::kFailed || ep->state == Endpoint::kClosed) return;
  bool was_connecting = ep->state == Endpoint::kConnecting;
  ep->state = Endpoint::kFailed;
  lost_endpoints_.insert(ep->id);
  for (auto& q : ep->early) free(q.payload.data);
  ep->early.clear();
  for (auto& q : ep->reorder) free(q.second.payload.data);
  ep->reorder.clear();
  if (was_connecting && ep->outbound) {
    Emit(Event{kEvConnected, ep->connect_op, status, ep->id, 0, 0, 0});
  } else if (!was_connecting) {
    Emit(Event{kEvPeerLost, 0, status, ep->id, 0, 0, 0});
  }
  doomed_endpoints_.push_back(ep->id);
}

// Closes a failed endpoint outside UCX callbacks: force-close cancels its requests, whose
// callbacks then report kPeerLost.
void Fabric::ReapEndpoints() {
  if (doomed_endpoints_.empty()) return;
  std::vector<uint32_t> doomed;
  doomed.swap(doomed_endpoints_);
  for (uint32_t id : doomed) {
    auto it = endpoints_.find(id);
    if (it != endpoints_.end()) DestroyEndpoint(it->second.get());
  }
}

// Tells the peer we are closing (UCX does not, for endpoints made from worker addresses):
// sends BYE, flushes (so BYE and everything before it reach the peer), then closes.
// Returns true if that is under way.
bool Fabric::SayBye(Endpoint* ep) {
  if (ep->state != Endpoint::kReady) {
    DestroyEndpoint(ep);
    return false;
  }
  ep->state = Endpoint::kClosed;
  auto ctx = new SendCtx();
  ctx->header = {kFrameMagic, kFrameVersion, kFrameBye, ep->remote_id, 0, ep->send_seq++};
  if (!PostFrame(ep, ctx, 0) || !FlushEndpoint(ep, &Fabric::OnByeFlushed)) {
    doomed_endpoints_.push_back(ep->id);
    return false;
  }
  return true;
}

// Force-closes an endpoint. It leaves the map first, so callbacks that UCX runs while
// purging its requests (possibly inside ucp_ep_close_nbx) find no endpoint to act on.
void Fabric::DestroyEndpoint(Endpoint* ep) {
  auto it = endpoints_.find(ep->id);
  if (it == endpoints_.end()) return;
  std::unique_ptr<Endpoint> owned = std::move(it->second);
  endpoints_.erase(it);
  for (uint32_t id : owned->rkeys) {
    auto k = rkeys_.find(id);
    if (k != rkeys_.end()) {
      ucp_rkey_destroy(k->second->rkey);
      rkeys_.erase(k);
    }
  }
  owned->rkeys.clear();
  for (auto& q : owned->early) free(q.payload.data);
  owned->early.clear();
  for (auto& q : owned->reorder) free(q.second.payload.data);
  owned->reorder.clear();
  if (owned->state == Endpoint::kConnecting && owned->outbound) {
    Emit(Event{kEvConnected, owned->connect_op, kClosed, owned->id, 0, 0, 0});
  }
  if (owned->state != Endpoint::kFailed) owned->state = Endpoint::kClosed;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  p.cb.send = &Fabric::OnEpClosed;
  Track(ucp_ep_close_nbx(owned->ep, &p));  // OnEpClosed frees the request
}

Status Fabric::MapStatus(ucs_status_t status, Endpoint* ep) const {
  (void)ep;
  if (status == UCS_OK) return kOk;
  if (stop_.load()) return kClosed;
  switch (status) {
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CANCELED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_IO_ERROR:
      return kPeerLost;
    default:
      return kTransport;
  }
}

void Fabric::HandleFrame(const void* header, size_t header_length, const void* data,
                         size_t length, bool owned) {
  FrameHeader h;
  auto drop = [&]() {
    if (owned) free(const_cast<void*>(data));
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.malformed_frames++;
  };
  if (header_length != sizeof h) return drop();
  memcpy(&h, header, sizeof h);
  if (h.magic != kFrameMagic || h.version != kFrameVersion) return drop();
  if (h.kind == kFrameHello) {
    if (length <= 4) return drop();
    std::string error;
    Endpoint* ep = CreateEndpoint(static_cast<const uint8_t*>(data) + 4, length - 4, &error);
    if (owned) free(const_cast<void*>(data));
    if (ep == nullptr) return;
    ep->remote_id = h.arg;
    if (!SendControl(ep, kFrameHelloAck, h.arg, ep->id, nullptr, 0)) FailEndpoint(ep, kPeerLost);
    return;
  }
  auto it = endpoints_.find(h.dst);
  if (it == endpoints_.end() || it->second->state == Endpoint::kFailed) {
    if (owned) free(const_cast<void*>(data));
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.unknown_endpoint_frames++;
    return;
  }
  Endpoint* ep = it->second.get();
  switch (h.kind) {
    case kFrameHelloAck:
      if (owned) free(const_cast<void*>(data));
      ep->remote_id = h.arg;
      ep->acked = true;
      MaybeReady(ep);
      return;
    case kFrameBye:
    case kFrameMessage:
    case kFrameImm: {
      Payload payload{nullptr, 0};
      if (h.kind == kFrameMessage) {
        payload.length = length;
        if (owned) {
          payload.data = static_cast<uint8_t*>(const_cast<void*>(data));
        } else {
          payload.data = static_cast<uint8_t*>(malloc(length > 0 ? length : 1));
          if (payload.data == nullptr) return drop();
          if (length > 0) memcpy(payload.data, data, length);
        }
      } else if (owned) {
        free(const_cast<void*>(data));
      }
      // Event kind 0 stands for BYE until it is delivered in order.
      uint32_t kind = h.kind == kFrameMessage ? uint32_t{kEvMessage}
                      : h.kind == kFrameImm     ? uint32_t{kEvImm}
                                                : 0u;
      Sequence(ep, h.seq, Queued{Event{kind, 0, kOk, ep->id, 0, h.arg, 0}, payload});
      return;
    }
    default:
      return drop();
  }
}

// Delivers sequenced frames of `ep` in the order they were sent.
void Fabric::Sequence(Endpoint* ep, uint32_t seq, Queued frame) {
  if (seq != ep->recv_seq) {
    if (static_cast<int32_t>(seq - ep->recv_seq) < 0 || ep->reorder.count(seq)) {
      free(frame.payload.data);  // a duplicate: cannot happen on a reliable transport
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_.malformed_frames++;
      return;
    }
    ep->reorder.emplace(seq, frame);
    return;
  }
  for (;;) {
    ep->recv_seq++;
    if (frame.event.kind == 0) {
      FailEndpoint(ep, kPeerLost);  // the peer closed; nothing it sent is still missing
      return;
    }
    if (ep->state == Endpoint::kReady) {
      Deliver(ep, frame);
    } else {
      ep->early.push_back(frame);
    }
    auto next = ep->reorder.find(ep->recv_seq);
    if (next == ep->reorder.end()) return;
    frame = next->second;
    ep->reorder.erase(next);
  }
}

// A FILE_WRITE is done here rather than handed to JS: a StoC's log append then costs it no
// wake-up of its event loop, which on a busy host is most of an append's cost (bench/README.md).
void Fabric::Deliver(Endpoint* ep, const Queued& frame) {
  if (frame.event.kind == kEvMessage && frame.event.arg == kMsgFileWrite) {
    FileWrite(ep, frame.payload);
    free(frame.payload.data);
    return;
  }
  Emit(frame.event, frame.payload);
}

void Fabric::FileWrite(Endpoint* ep, const Payload& payload) {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.file_writes++;
  }
  std::vector<uint8_t> answer = files_.Write(ep->id, payload.data, payload.length, [this](uint32_t region) {
    auto r = regions_.find(region);
    if (r == regions_.end() || r->second->closing) return WindowBytes{};
    return WindowBytes{r->second->address, r->second->length};
  });
  if (answer.empty()) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.malformed_frames++;  // no request id to answer: the caller's deadline fails it
    return;
  }
  auto ctx = new SendCtx();
  ctx->header = {kFrameMagic, kFrameVersion, kFrameMessage, ep->remote_id, kMsgRpcResponse,
                 ep->send_seq++};
  ctx->data.reset(new uint8_t[answer.size()]);
  memcpy(ctx->data.get(), answer.data(), answer.size());
  PostFrame(ep, ctx, answer.size());
}

Status Fabric::RegisterFile(uint32_t handle, int fd, uint64_t limit, uint32_t ep_id,
                            const FileWindow& window) {
  return RunControl([=]() -> Status {
    if (fd < 0 || files_.Has(handle)) return kBadArgument;
    auto r = regions_.find(window.region);
    if (r == regions_.end() || r->second->closing) return kClosed;
    if (window.start > r->second->length || window.length > r->second->length - window.start) {
      return kOutOfBounds;
    }
    auto it = endpoints_.find(ep_id);
    if (it == endpoints_.end() || it->second->state == Endpoint::kFailed) return kPeerLost;
    return files_.Register(handle, fd, limit, ep_id, window);
  });
}

Status Fabric::UnregisterFile(uint32_t handle, uint64_t* end) {
  return RunControl([=]() -> Status { return files_.Unregister(handle, end); });
}

Status Fabric::FileEnd(uint32_t handle, uint64_t* end) {
  return RunControl([=]() -> Status { return files_.End(handle, end); });
}

void Fabric::Shutdown() {
  std::vector<uint32_t> ids;
  for (auto& e : endpoints_) ids.push_back(e.first);
  for (uint32_t id : ids) {
    auto it = endpoints_.find(id);
    if (it != endpoints_.end()) SayBye(it->second.get());
  }
  // Give bye frames a moment to leave (bounded), then force-close what is left; its
  // cancelled requests run their callbacks during the last progress calls.
  using Clock = std::chrono::steady_clock;
  auto until = Clock::now() + std::chrono::milliseconds(200);
  while (!endpoints_.empty() && Clock::now() < until) {
    ucp_worker_progress(worker_);
    ReapEndpoints();
  }
  ids.clear();
  for (auto& e : endpoints_) ids.push_back(e.first);
  for (uint32_t id : ids) {
    auto it = endpoints_.find(id);
    if (it != endpoints_.end()) DestroyEndpoint(it->second.get());
  }
  // Every request UCX handed back must finish (cancelled ones too) before regions are
  // unmapped and the worker destroyed; bounded, in case UCX holds one back.
  until = Clock::now() + std::chrono::milliseconds(1000);
  while (outstanding_ > 0 && Clock::now() < until) {
    ucp_worker_progress(worker_);
    ReapEndpoints();
  }
  std::vector<Batch> batches;
  std::vector<std::shared_ptr<Control>> controls;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    batches.swap(batches_);
    controls.swap(controls_);
    for (auto& c : controls) {
      c->result = kClosed;
      c->done = true;
    }
  }
  control_cv_.notify_all();
  for (auto& b : batches) {
    for (auto& op : b.ops) Emit(Event{kEvOpDone, op.op_id, kClosed, op.ep, 0, 0, 0});
  }
  for (auto& r : regions_) ucp_mem_unmap(context_, r.second->memh);
  regions_.clear();
  Publish();
  ucp_worker_destroy(worker_);
  worker_ = nullptr;
}

// ---------------------------------------------------------------------------------------
// UCX callbacks: all run on the progress thread, inside ucp_worker_progress.

ucs_status_t Fabric::OnAm(void* arg, const void* header, size_t header_length, void* data,
                          size_t length, const ucp_am_recv_param_t* param) {
  Fabric* f = static_cast<Fabric*>(arg);
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    if (header_length != sizeof(FrameHeader)) {
      ucp_am_data_release(f->worker_, data);
      std::lock_guard<std::mutex> lock(f->stats_mu_);
      f->stats_.malformed_frames++;
      return UCS_OK;
    }
    uint8_t* buffer = static_cast<uint8_t*>(malloc(length > 0 ? length : 1));
    if (buffer == nullptr) {
      ucp_am_data_release(f->worker_, data);
      std::lock_guard<std::mutex> lock(f->stats_mu_);
      f->stats_.malformed_frames++;  // dropped: no memory to receive it
      return UCS_OK;
    }
    auto ctx = new RecvCtx();
    memcpy(&ctx->header, header, sizeof ctx->header);
    ctx->data = buffer;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = &Fabric::OnAmData;
    p.user_data = ctx;
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(f->worker_, data, ctx->data, length, &p);
    if (!f->Track(r)) {
      f->outstanding_++;  // OnAmData counts one down
      OnAmData(nullptr, r == nullptr ? UCS_OK : UCS_PTR_STATUS(r), length, ctx);
    }
    return UCS_OK;
  }
  f->HandleFrame(header, header_length, data, length, false);
  return UCS_OK;
}

void Fabric::OnAmData(void* request, ucs_status_t status, size_t length, void* user_data) {
  tls_fabric->outstanding_--;
  auto ctx = static_cast<RecvCtx*>(user_data);
  if (status == UCS_OK) {
    tls_fabric->HandleFrame(&ctx->header, sizeof ctx->header, ctx->data, length, true);
  } else {
    free(ctx->data);
  }
  delete ctx;
  if (request != nullptr) ucp_request_free(request);
}

void Fabric::OnEpError(void* arg, ucp_ep_h, ucs_status_t status) {
  Fabric* f = tls_fabric;
  auto it = f->endpoints_.find(PtrId(arg));
  if (it != f->endpoints_.end()) f->FailEndpoint(it->second.get(), f->MapStatus(status, nullptr));
}

void Fabric::OnReadDone(void* request, ucs_status_t status, void* user_data) {
  Fabric* f = tls_fabric;
  f->outstanding_--;
  uint32_t slot = PtrId(user_data);
  OpRef ref = f->op_slots_[slot];
  f->op_free_.push_back(slot);
  f->Finish(ref, f->OpStatus(status, ref.ep));
  ucp_request_free(request);
}

void Fabric::OnWriteDone(void* request, ucs_status_t status, void* user_data) {
  tls_fabric->outstanding_--;
  tls_fabric->GroupStep(static_cast<WriteGroup*>(user_data), status);
  ucp_request_free(request);
}

void Fabric::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  auto ctx = static_cast<SendCtx*>(user_data);
  Fabric* f = tls_fabric;
  f->outstanding_--;
  f->Finish(ctx->ref, f->OpStatus(status, ctx->ref.ep));
  delete ctx;
  if (request != nullptr) ucp_request_free(request);
}

void Fabric::OnEpFlushed(void* request, ucs_status_t status, void* user_data) {
  Fabric* f = tls_fabric;
  f->outstanding_--;
  auto it = f->endpoints_.find(PtrId(user_data));
  if (it != f->endpoints_.end()) f->EpFlushed(it->second.get(), status);
  if (request != nullptr) ucp_request_free(request);
}

void Fabric::OnByeFlushed(void* request, ucs_status_t, void* user_data) {
  Fabric* f = tls_fabric;
  f->outstanding_--;
  // Not from inside this callback: reaped after ucp_worker_progress returns.
  f->doomed_endpoints_.push_back(PtrId(user_data));
  if (request != nullptr) ucp_request_free(request);
}

void Fabric::OnEpClosed(void* request, ucs_status_t, void*) {
  tls_fabric->outstanding_--;
  if (request != nullptr) ucp_request_free(request);
}


}  // namespace nova
