// Direct file writes; the contract is in direct_files.h.
#include "direct_files.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace nova {
namespace {

// A request names bytes instead of carrying them: `length` bytes at `window_offset` of the
// window the handle was registered with, which the sender WROTE there before sending this
// (a kOpWriteSend). So no large message crosses the fabric: on shared memory a large one
// moves in 8 KiB fragments, each of which may wake the receiver.
struct FileWriteRequest {
  uint8_t version;
  uint8_t pad[3];
  uint32_t request_id;
  uint32_t handle;
  uint32_t length;
  uint64_t offset;
  uint64_t window_offset;
};
static_assert(sizeof(FileWriteRequest) == 32, "FileWriteRequest is a wire format");
constexpr uint8_t kFileWriteVersion = 2;  // 1, bytes inside the message, is retired

void PutBE32(std::vector<uint8_t>* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<uint8_t>(v >> shift));
}

void PutStr8(std::vector<uint8_t>* out, const std::string& s) {
  size_t n = std::min<size_t>(s.size(), 255);
  out->push_back(0xd9);
  out->push_back(static_cast<uint8_t>(n));
  out->insert(out->end(), s.begin(), s.begin() + n);
}

// msgpack [2, id, 0, end] (end as a float64: exact to 2^53, and read as a JS number), or
// [2, id, 1, code, message]: the RPC envelope after the RPC version (src/common/rpc-envelope.ts).
constexpr uint8_t kRpcVersion = 2;

std::vector<uint8_t> RpcAnswer(uint32_t id, const char* code, const std::string& message,
                               uint64_t end) {
  std::vector<uint8_t> out{static_cast<uint8_t>(code == nullptr ? 0x94 : 0x95), kRpcVersion, 0xce};
  PutBE32(&out, id);
  if (code == nullptr) {
    out.push_back(0x00);
    out.push_back(0xcb);
    double d = static_cast<double>(end);
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    PutBE32(&out, static_cast<uint32_t>(bits >> 32));
    PutBE32(&out, static_cast<uint32_t>(bits));
  } else {
    out.push_back(0x01);
    PutStr8(&out, code);
    PutStr8(&out, message);
  }
  return out;
}

}  // namespace

Status DirectFiles::Register(uint32_t handle, int fd, uint64_t limit, uint32_t ep, const Window& window) {
  if (fd < 0 || files_.count(handle) != 0) return kBadArgument;
  files_.emplace(handle, File{fd, limit, ep, 0, window});
  return kOk;
}

Status DirectFiles::Unregister(uint32_t handle, uint64_t* end) {
  auto it = files_.find(handle);
  if (it == files_.end()) return kBadArgument;
  *end = it->second.end;
  files_.erase(it);
  return kOk;
}

Status DirectFiles::End(uint32_t handle, uint64_t* end) const {
  auto it = files_.find(handle);
  if (it == files_.end()) return kBadArgument;
  *end = it->second.end;
  return kOk;
}

std::vector<uint8_t> DirectFiles::Write(uint32_t ep, const uint8_t* payload, size_t length,
                                        const WindowOf& window_of) {
  FileWriteRequest r;
  if (length < 8) return {};
  memset(&r, 0, sizeof r);
  memcpy(&r, payload, std::min(length, sizeof r));
  const char* code = "BAD_ARGUMENT";
  std::string message;
  uint64_t end = 0;
  auto it = files_.find(r.handle);
  WindowBytes window = it == files_.end() ? WindowBytes{} : window_of(it->second.window.region);
  if (r.version != kFileWriteVersion) {
    message = "direct file write of version " + std::to_string(r.version) + ", want 2";
  } else if (length != sizeof r) {
    message = "direct file write request of " + std::to_string(length) + " bytes, want " +
              std::to_string(sizeof r);
  } else if (it == files_.end() || it->second.ep != ep) {
    message = "direct file handle " + std::to_string(r.handle) + " is not open on this connection";
  } else if (window.address == nullptr) {
    message = "direct file handle " + std::to_string(r.handle) + ": its window is closed";
  } else if (r.window_offset > it->second.window.length ||
             r.length > it->second.window.length - r.window_offset) {
    code = "OUT_OF_BOUNDS";
    message = "direct file write from window [" + std::to_string(r.window_offset) + ", +" +
              std::to_string(r.length) + ") is outside its " +
              std::to_string(it->second.window.length) + "-byte window";
  } else if (r.offset > it->second.limit || r.length > it->second.limit - r.offset) {
    code = "OUT_OF_BOUNDS";
    message = "direct file write [" + std::to_string(r.offset) + ", +" + std::to_string(r.length) +
              ") is past the file limit";
  } else {
    code = nullptr;
    File& f = it->second;
    const uint8_t* bytes = window.address + f.window.start + r.window_offset;
    uint64_t done = 0;
    while (done < r.length) {
      ssize_t n = pwrite(f.fd, bytes + done, r.length - done, static_cast<off_t>(r.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        code = "REMOTE";
        message = std::string("direct file write failed: ") + (n < 0 ? strerror(errno) : "no progress");
        break;
      }
      done += static_cast<uint64_t>(n);
    }
    if (code == nullptr) f.end = std::max(f.end, r.offset + r.length);
    end = f.end;
  }
  return RpcAnswer(r.request_id, code, message, end);
}

}  // namespace nova
