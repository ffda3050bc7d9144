// The Fabric: its lifecycle and the JS thread's side. See fabric.h for the threading contract and
// fabric_internal.h for how the Fabric's files divide it.
#include "fabric_internal.h"

#include <pthread.h>
#include <cerrno>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstring>

namespace nova {

thread_local Fabric* tls_fabric = nullptr;

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

}  // namespace nova
