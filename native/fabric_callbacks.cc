// The Fabric's UCX callbacks (progress thread, inside ucp_worker_progress). See fabric.h for the
// threading contract and fabric_internal.h for how the Fabric's files divide it.
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
