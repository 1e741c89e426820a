// Temporary memory of one kernel call (im2col columns, attention scores, staged uploads). Kernels
// take it through a KernelScratch from the context's allocator instead of keeping an allocator of
// their own, so it lands in the step's workspace arena and a planning pass counts it.
#pragma once

#include <cstddef>

#include "core/allocator.h"
#include "core/device.h"

namespace voxd {

// Memory from an allocator for the rest of a kernel call; given back when it goes.
class ScratchBuffer {
 public:
  // `bytes` from `allocator` (no memory for 0 bytes).
  ScratchBuffer(Allocator& allocator, size_t bytes);
  ~ScratchBuffer();
  ScratchBuffer(ScratchBuffer&& other) noexcept;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(ScratchBuffer&&) = delete;

  // The memory; null for 0 bytes, and never to be dereferenced in a planning pass.
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  Allocator* allocator_;
  size_t bytes_;
  void* data_;
};

// What a kernel that needs temporary memory receives: where that memory comes from, and whether
// the call only plans.
class KernelScratch {
 public:
  KernelScratch(Allocator& allocator, bool planning)
      : allocator_(&allocator), planning_(planning) {}

  // `bytes` on device() for the rest of the kernel call.
  ScratchBuffer take(size_t bytes) const { return ScratchBuffer(*allocator_, bytes); }
  // Where take() allocates.
  Device device() const { return allocator_->device(); }
  // True in a planning pass: the kernel takes exactly the scratch it would take to run, in the
  // same order, then returns without reading or writing any element or touching the device.
  bool planning() const { return planning_; }

 private:
  Allocator* allocator_;
  bool planning_;
};

}  // namespace voxd
