// The device memory a step may take now: under the runtime's limit and within the device's free
// memory (another process may hold some), beyond what the allocator already holds for weights,
// graphs and its cache. Steps run one at a time and give their arenas back when done, so between
// steps this is the whole budget for workspaces.
#pragma once

#include <cstdint>
#include <functional>

#include "backends/runtime.h"

namespace voxd::scheduler {

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
  // available() if the device's memory held outside this server were what it was at its start
  // (DeviceRuntime::outside_growth): a step that fits this and not available() is short of
  // memory another process took, not too large for the server.
  uint64_t available_but_for_outside() const;
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
  // available() with `outside_returned` more bytes free on the device.
  uint64_t room(uint64_t outside_returned) const;

  DeviceRuntime& runtime_;
  Reclaim reclaim_;
};

}  // namespace voxd::scheduler
