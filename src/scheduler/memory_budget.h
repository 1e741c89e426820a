// The device memory a step may take now: under the runtime's limit and within the device's free
// memory (another process may hold some), beyond what the allocator already holds for weights,
// graphs and its cache. Steps run one at a time and give their arenas back when done, so between
// steps this is the whole budget for workspaces.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "backends/runtime.h"

namespace voxd::scheduler {

// Why a batch of one cannot run within the memory budget.
struct StepRefusal {
  // True when the request's own piece of work is too large for any budget this server has (the
  // client should send less, HTTP 413); false when the server has too little memory for the
  // step (HTTP 503, retry later).
  bool request_too_large = false;
  std::string code;     // a stable machine-readable reason, e.g. "sentence_too_long"
  std::string message;  // what happened and what to do, for the client
};

class MemoryBudget {
 public:
  // Frees device memory held only to make steps faster (recorded graphs, which are recorded
  // again when memory allows) when that would leave `needed` bytes available; returns the bytes
  // it gave back (0: it freed nothing).
  using Reclaim = std::function<uint64_t(uint64_t needed)>;

  explicit MemoryBudget(DeviceRuntime& runtime, Reclaim reclaim = {})
      : runtime_(runtime), reclaim_(std::move(reclaim)) {}

  // Bytes the allocator can still hand to a step now, counting its free cache.
  uint64_t available() const;
  // available() if the device's memory held outside this server were what it was once it had
  // warmed up (DeviceRuntime::outside_growth), growth under 1 % of the device aside (the server
  // itself takes some outside its allocator later: kernels loaded on first use, graph
  // executables): a step that fits this and not available() is short of memory another process
  // took, not too large for the server.
  uint64_t available_but_for_outside() const;
  // What a step of `footprint` bytes that does not fit now is answered: `kinds_answer`, unless
  // that blames the request (413) and the step fits available_but_for_outside(): then 503
  // insufficient_memory (retry later), logged as memory another process took.
  StepRefusal refusal(StepRefusal kinds_answer, uint64_t footprint) const;
  // Whether a step of `footprint` bytes fits now; gives cached segments back first when only
  // that makes it fit.
  bool fits(uint64_t footprint);
  // Bytes a step takes from the allocator for an arena of `workspace` bytes and `carried` bytes
  // outside it, rounded up as the caching allocator reserves them.
  static uint64_t footprint(uint64_t workspace, uint64_t carried = 0);
  // The last resort before a step of `footprint` bytes is refused for memory: gives back what is
  // held only for speed (the Reclaim given at construction) when that would make it fit;
  // whether it gave anything back. Only between uses of what it frees: never while a step reads
  // a recorded graph's memory.
  bool reclaim(uint64_t footprint);

 private:
  // What the allocator holds: its wholly free cache, and the room left under the limit
  // (UINT64_MAX without one).
  struct Held {
    uint64_t releasable = 0;
    uint64_t under_limit = 0;
  };
  Held held() const;
  // available() with what the allocator holds `h` and `outside_returned` more bytes free on the
  // device.
  uint64_t room(const Held& h, uint64_t outside_returned) const;
  // DeviceRuntime::outside_growth(), or 0 under 1 % of the device.
  uint64_t outside_taken() const;

  DeviceRuntime& runtime_;
  Reclaim reclaim_;
};

}  // namespace voxd::scheduler
