// The device memory a step may take now: under the runtime's limit (or, without one, the device's
// free memory) beyond what the allocator already holds for weights, graphs and its cache. Steps
// run one at a time and give their arenas back when done, so between steps this is the whole
// budget for workspaces.
#pragma once

#include <cstdint>

#include "backends/runtime.h"

namespace voxd::scheduler {

class MemoryBudget {
 public:
  explicit MemoryBudget(DeviceRuntime& runtime) : runtime_(runtime) {}

  // Bytes the allocator can still hand to a step now, counting its free cache.
  uint64_t available() const;
  // Whether a step of `footprint` bytes fits now; gives cached segments back first when only
  // that makes it fit.
  bool fits(uint64_t footprint);
  // Bytes a step takes from the allocator for an arena of `workspace` bytes and `carried` bytes
  // outside it, rounded up as the caching allocator reserves them.
  static uint64_t footprint(uint64_t workspace, uint64_t carried = 0);

 private:
  DeviceRuntime& runtime_;
};

}  // namespace voxd::scheduler
