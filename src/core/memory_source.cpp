#include "core/memory_source.h"

#include <cstdlib>

namespace voxd {

void* HostMemorySource::reserve(size_t bytes) {
  if (bytes == 0 || bytes > SIZE_MAX - kAlignment) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > capacity_ - outstanding_) return nullptr;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  if (ptr != nullptr) outstanding_ += bytes;
  return ptr;
}

void HostMemorySource::release(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  outstanding_ -= bytes;
}

size_t HostMemorySource::outstanding() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return outstanding_;
}

}  // namespace voxd
