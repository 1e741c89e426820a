// The interface every memory source implements (host heap, arenas, the CUDA caching allocator),
// so tensors and models never depend on where their bytes come from.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace voxd {

// Counters in PyTorch's vocabulary (torch.cuda.memory_stats): bytes "allocated" are in use by
// tensors, bytes "reserved" are held from the system by the allocator.
struct AllocatorStats {
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t num_allocs = 0;
  uint64_t num_frees = 0;
  uint64_t num_ooms = 0;
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
