// Segments of one CUDA device's memory straight from cudaMalloc/cudaFree, for a CachingAllocator:
// a failed cudaMalloc for lack of memory answers nullptr (and clears the CUDA error), so the
// allocator's retry and its out-of-memory message take over. Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/memory_source.h"

namespace voxd {

// A device's memory as the driver sees it (cudaMemGetInfo).
struct CudaMemoryInfo {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};

class CudaMemorySource final : public MemorySource {
 public:
  // Reserves on device `index` (the CUDA ordinal); throws voxd::InputError when there is no such
  // device.
  explicit CudaMemorySource(int index);
  CudaMemorySource(const CudaMemorySource&) = delete;
  CudaMemorySource& operator=(const CudaMemorySource&) = delete;

  // cudaMalloc of `bytes`; nullptr when the device is out of memory; throws voxd::Error for any
  // other CUDA failure (an earlier kernel's error, a lost device).
  void* reserve(size_t bytes) override;
  // cudaFree (which waits for work still using the memory); errors are not reported, as this
  // runs from destructors.
  void release(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cuda(index_); }
  // memory_info()'s figures.
  SourceMemory memory() const override {
    const CudaMemoryInfo info = memory_info();
    return {info.free_bytes, info.total_bytes};
  }
  bool commits_on_reserve() const override { return true; }

  // Free and total bytes of the device; throws voxd::Error when cudaMemGetInfo fails.
  CudaMemoryInfo memory_info() const;
  // The device's PCI bus id ("0000:3B:00.0"), which names it for NVML too.
  std::string pci_bus_id() const;
  // How often cudaMalloc answered out of memory: with a limit set below the device's free memory,
  // this stays 0 (the allocator refuses before the driver has to).
  uint64_t failed_reserves() const { return failed_reserves_.load(); }

 private:
  int index_;
  std::atomic<uint64_t> failed_reserves_{0};
};

}  // namespace voxd
