#include "scheduler/memory_budget.h"

#include <algorithm>

#include "core/caching_allocator.h"

namespace voxd::scheduler {
namespace {

uint64_t reserved_size(uint64_t bytes) {
  if (bytes == 0) return 0;
  const uint64_t rounding = CachingAllocator::kLargeRounding;
  return (bytes + rounding - 1) / rounding * rounding;
}

}  // namespace

uint64_t MemoryBudget::available() const {
  return room(0);
}

uint64_t MemoryBudget::available_but_for_outside() const {
  return room(runtime_.outside_growth());
}

uint64_t MemoryBudget::room(uint64_t outside_returned) const {
  const AllocatorStats stats = runtime_.allocator().stats();
  // Cached bytes in segments wholly free, which the allocator gives back before it reserves
  // more; free blocks in segments still in use (inactive split) serve only what fits them.
  const uint64_t held = stats.allocated_bytes + stats.inactive_split_bytes;
  const uint64_t releasable = stats.reserved_bytes > held ? stats.reserved_bytes - held : 0;
  const uint64_t on_device = runtime_.breakdown().free + releasable + outside_returned;
  if (runtime_.limit_bytes() == CachingAllocatorOptions::kNone) return on_device;
  return std::min(runtime_.limit_bytes() > held ? runtime_.limit_bytes() - held : 0, on_device);
}

bool MemoryBudget::fits(uint64_t footprint) {
  if (footprint == 0) return true;
  if (footprint > available()) return false;
  const uint64_t limit = runtime_.limit_bytes();
  if (limit != CachingAllocatorOptions::kNone &&
      runtime_.allocator().stats().reserved_bytes + footprint > limit) {
    runtime_.release_cached();
  }
  return true;
}

bool MemoryBudget::reclaim(uint64_t footprint) {
  return reclaim_ && reclaim_(footprint) > 0;
}

uint64_t MemoryBudget::footprint(uint64_t workspace, uint64_t carried) {
  return reserved_size(workspace) + reserved_size(carried);
}

}  // namespace voxd::scheduler
