// The interface every memory source implements (host heap, arenas, the CUDA caching allocator),
// so tensors and models never depend on where their bytes come from.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace voxd {

// Counters in PyTorch's vocabulary (torch.cuda.memory_stats): bytes "allocated" are in use by
// tensors, bytes "reserved" are held from the system by the allocator. The fields after num_ooms
// are filled by the CachingAllocator and stay zero elsewhere; docs/memory.md maps each field to
// PyTorch's name.
struct AllocatorStats {
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t num_allocs = 0;
  uint64_t num_frees = 0;
  uint64_t num_ooms = 0;

  // Bytes callers asked for, before rounding up to blocks.
  uint64_t requested_bytes = 0;
  uint64_t peak_requested_bytes = 0;
  // Bytes in blocks handed out and not yet given back. Equal to allocated_bytes in voxd, where a
  // free takes effect at once (PyTorch's differ by frees still waiting on other streams).
  uint64_t active_bytes = 0;
  uint64_t peak_active_bytes = 0;
  // Free blocks inside segments that are split: cached, but not releasable until their
  // neighbours are free too (fragmentation; PyTorch's "non-releasable memory").
  uint64_t inactive_split_bytes = 0;
  uint64_t peak_inactive_split_bytes = 0;
  // Lifetime sums ("Tot Alloc"); what was freed is the sum minus the current value.
  uint64_t total_allocated_bytes = 0;
  uint64_t total_requested_bytes = 0;
  uint64_t total_reserved_bytes = 0;
  // Live allocations (num_allocs - num_frees) and the most there ever were at once.
  uint64_t active_allocs = 0;
  uint64_t peak_active_allocs = 0;
  uint64_t inactive_split_blocks = 0;
  uint64_t peak_inactive_split_blocks = 0;
  // Segments are the big pieces reserved from the memory source (cudaMalloc on a GPU).
  uint64_t segments = 0;
  uint64_t peak_segments = 0;
  uint64_t num_segment_reserves = 0;
  uint64_t num_segment_releases = 0;
  // Times a segment could not be reserved, so the cache was emptied and the reserve tried again.
  uint64_t num_alloc_retries = 0;
  // Blocks (live and free) across all segments, and the largest free one.
  uint64_t blocks = 0;
  uint64_t largest_free_block_bytes = 0;
  // Configuration: the most the allocator may reserve and the size from which blocks are never
  // split; UINT64_MAX means none.
  uint64_t limit_bytes = UINT64_MAX;
  uint64_t max_split_size = UINT64_MAX;

  bool operator==(const AllocatorStats&) const = default;

  // For allocators that reserve each block as they hand it out (no cache between): a block of
  // `bytes` counted as allocated and reserved, with the peaks and the count of allocations.
  void count_block(uint64_t bytes) {
    allocated_bytes += bytes;
    reserved_bytes += bytes;
    peak_allocated_bytes = std::max(peak_allocated_bytes, allocated_bytes);
    peak_reserved_bytes = std::max(peak_reserved_bytes, reserved_bytes);
    ++num_allocs;
  }
  // Such a block given back.
  void count_block_freed(uint64_t bytes) {
    allocated_bytes -= bytes;
    reserved_bytes -= bytes;
    ++num_frees;
  }
};

class Allocator {
 public:
  virtual ~Allocator() = default;

  // Returns memory of at least `bytes`, aligned to 64 bytes, or throws voxd::Error when the
  // request cannot be met (with the request and the limit in the message).
  virtual void* allocate(size_t bytes) = 0;
  // Returns memory obtained from allocate() with the same `bytes`.
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
  virtual AllocatorStats stats() const = 0;
};

// Plain host heap with stats; the default for CPU tensors. Thread-safe.
Allocator& host_allocator();

}  // namespace voxd
