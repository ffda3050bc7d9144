// The Fabric's progress thread: its loop and the operations it posts. See fabric.h for the
// threading contract and fabric_internal.h for how the Fabric's files divide it.
#include "fabric_internal.h"

#include <pthread.h>
#include <poll.h>
#include <cerrno>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstring>

namespace nova {

// ---------------------------------------------------------------------------------------
// Progress thread

/** Busy arms in a row before the progress thread naps, and the nap. */
constexpr unsigned kBusyArmsBeforeNap = 64;
constexpr int kBusyNapMs = 1;

void Fabric::Loop() {
  tls_fabric = this;
  using Clock = std::chrono::steady_clock;
  const auto spin = std::chrono::microseconds(options_.spin_us);
  auto last_work = Clock::now();
  // Arms refused as busy in a row with nothing progressed (see below).
  unsigned busy_arms = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    bool work = DrainInbox();
    unsigned progressed = ucp_worker_progress(worker_);
    ReapEndpoints();
    Publish();
    if (work || progressed > 0) {
      last_work = Clock::now();
      busy_arms = 0;
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
    ucs_status_t armed = pending || stop_.load() ? UCS_ERR_BUSY : ucp_worker_arm(worker_);
    if (armed == UCS_OK) {
      busy_arms = 0;
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
    } else if (!pending && !stop_.load() && ++busy_arms > kBusyArmsBeforeNap) {
      // The worker keeps saying events are pending while progress finds none: a transport to a
      // peer that died can keep its fd signalled. A short nap, woken by our own eventfd for new
      // work, instead of a loop that takes a core from every process that knew the peer.
      pollfd wake{wake_fd_, POLLIN, 0};
      if (poll(&wake, 1, kBusyNapMs) > 0) {
        uint64_t v;
        ssize_t r = read(wake_fd_, &v, sizeof v);
        (void)r;
      }
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

}  // namespace nova
