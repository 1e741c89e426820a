#include "core/allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>

#include "core/error.h"

namespace voxd {
namespace {

constexpr size_t kAlignment = 64;

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded);
    std::lock_guard<std::mutex> lock(mutex_);
    if (ptr == nullptr) {
      ++stats_.num_ooms;
      throw Error("host allocator: out of memory allocating " + std::to_string(bytes) + " bytes");
    }
    stats_.allocated_bytes += rounded;
    stats_.reserved_bytes += rounded;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    ++stats_.num_allocs;
    return ptr;
  }

  void deallocate(void* ptr, size_t bytes) override {
    if (ptr == nullptr) return;
    size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    std::free(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocated_bytes -= rounded;
    stats_.reserved_bytes -= rounded;
    ++stats_.num_frees;
  }

  Device device() const override { return Device::cpu(); }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  mutable std::mutex mutex_;
  AllocatorStats stats_;
};

}  // namespace

Allocator& host_allocator() {
  static HostAllocator allocator;
  return allocator;
}

}  // namespace voxd
