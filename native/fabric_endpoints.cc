// The Fabric's endpoints: making, readying, failing and closing them; frames and their delivery.
// See fabric.h for the threading contract and fabric_internal.h for how the Fabric's files divide
// it.
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
// wake-up of its event loop, which on a busy host is most of an append's cost
// (doc/decisions/direct-file-writes.md).
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

}  // namespace nova
