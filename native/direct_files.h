// A StoC's direct file writes (doc/format/wire.md, "Direct file writes"): the one service the
// transport runs on a component's behalf, apart from the transport itself.
//
// Contract with the transport (fabric.cc):
// - It hands over each FILE_WRITE message: the endpoint it came on, its payload, and a way to
//   see a local region's bytes (`WindowOf`), where the peer WROTE the bytes before sending.
// - It gets back the RPC answer to send to that endpoint, as msgpack in the shape
//   src/transport/rpc.ts reads (`[2, id, 0, end]` or `[2, id, 1, code, message]`), or nothing
//   when the request is too short to name its id (the caller's deadline then fails it).
// - Handles are registered, looked up and forgotten on the transport's progress thread only:
//   not thread-safe, no locks. The fd of a handle must stay open until Unregister returns.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "codes.h"

namespace nova {

// The bytes of a local region as a FILE_WRITE may read them.
struct WindowBytes {
  const uint8_t* address = nullptr;  // nullptr: no such region, or it is closing
  uint64_t length = 0;
};

class DirectFiles {
 public:
  using WindowOf = std::function<WindowBytes(uint32_t region)>;

  // The bytes of a handle's writes are in [start, +length) of local region `region`.
  struct Window {
    uint32_t region = 0;
    uint64_t start = 0;
    uint64_t length = 0;
  };

  // Opens `handle` for writes arriving on endpoint `ep` to `fd`, below `limit`. The caller has
  // checked the region and the endpoint.
  Status Register(uint32_t handle, int fd, uint64_t limit, uint32_t ep, const Window& window);
  // Forgets `handle`; *end = the end of the furthest write it took.
  Status Unregister(uint32_t handle, uint64_t* end);
  Status End(uint32_t handle, uint64_t* end) const;
  bool Has(uint32_t handle) const { return files_.count(handle) != 0; }

  // Writes what one FILE_WRITE message names; the answer to send back (empty: none).
  std::vector<uint8_t> Write(uint32_t ep, const uint8_t* payload, size_t length, const WindowOf& window_of);

 private:
  struct File {
    int fd;
    uint64_t limit;
    uint32_t ep;
    uint64_t end = 0;
    Window window;
  };
  std::unordered_map<uint32_t, File> files_;
};

}  // namespace nova
