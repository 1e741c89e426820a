// Device memory for one CUDA device straight from cudaMalloc/cudaFree, with PyTorch-style stats.
// The simplest correct source of device tensors; a caching allocator with the same interface
// replaces it later. Thread-safe.
#pragma once

#include <mutex>

#include "core/allocator.h"

namespace voxd {

class CudaDeviceAllocator final : public Allocator {
 public:
  // Allocates on device `index` (the CUDA ordinal).
  explicit CudaDeviceAllocator(int index);

  // cudaMalloc of `bytes` (1 for 0); throws voxd::Error with the request and the device's free
  // memory when it fails (counted in num_ooms).
  void* allocate(size_t bytes) override;
  // cudaFree; `bytes` must be what allocate() was given.
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cuda(index_); }
  AllocatorStats stats() const override;

 private:
  int index_;
  mutable std::mutex mutex_;
  AllocatorStats stats_;
};

}  // namespace voxd
