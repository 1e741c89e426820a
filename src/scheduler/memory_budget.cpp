#include "scheduler/memory_budget.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/caching_allocator.h"
#include "core/memory_summary.h"
#include "server/logging.h"

namespace voxd::scheduler {
namespace {

uint64_t reserved_size(uint64_t bytes) {
  if (bytes == 0) return 0;
  const uint64_t rounding = CachingAllocator::kLargeRounding;
  return (bytes + rounding - 1) / rounding * rounding;
}

}  // namespace

uint64_t MemoryBudget::available() const {
  return room(held(), 0);
}

uint64_t MemoryBudget::available_but_for_outside() const {
  return room(held(), outside_taken());
}

uint64_t MemoryBudget::outside_taken() const {
  const uint64_t growth = runtime_.outside_growth();
  return growth > runtime_.breakdown().total / 100 ? growth : 0;
}

StepRefusal MemoryBudget::refusal(StepRefusal kinds_answer, uint64_t footprint) const {
  if (!kinds_answer.request_too_large) return kinds_answer;
  const uint64_t taken = outside_taken();
  const Held h = held();
  const uint64_t available = room(h, 0);
  if (taken == 0 || footprint > room(h, taken)) return kinds_answer;
  server::log_event(spdlog::level::warn, "step short of memory held outside the server",
                    {{"code", kinds_answer.code},
                     {"footprint_bytes", footprint},
                     {"available_bytes", available},
                     {"outside_growth_bytes", taken}});
  return {.request_too_large = false,
          .code = "insufficient_memory",
          .message = "a step of this request needs " + format_bytes(footprint) +
                     " of device memory and " + format_bytes(available) +
                     " is free now: memory held outside this server (another process on its "
                     "device) grew by " +
                     format_bytes(taken) + " since it started; retry later"};
}

MemoryBudget::Held MemoryBudget::held() const {
  const AllocatorStats stats = runtime_.allocator().stats();
  // Cached bytes in segments wholly free, which the allocator gives back before it reserves
  // more; free blocks in segments still in use (inactive split) serve only what fits them.
  const uint64_t held = stats.allocated_bytes + stats.inactive_split_bytes;
  const uint64_t limit = runtime_.limit_bytes();
  return {.releasable = stats.reserved_bytes > held ? stats.reserved_bytes - held : 0,
          .under_limit = limit == CachingAllocatorOptions::kNone ? UINT64_MAX
                         : limit > held                          ? limit - held
                                                                 : 0};
}

uint64_t MemoryBudget::room(const Held& h, uint64_t outside_returned) const {
  return std::min(h.under_limit, runtime_.breakdown().free + h.releasable + outside_returned);
}

bool MemoryBudget::fits(uint64_t footprint) {
  if (footprint == 0) return true;
  // What the allocator's free cache holds needs no reading of the device (a driver call).
  const Held h = held();
  if (footprint > std::min(h.under_limit, h.releasable) && footprint > room(h, 0)) return false;
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
