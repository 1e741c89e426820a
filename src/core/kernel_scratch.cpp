#include "core/kernel_scratch.h"

#include <utility>

namespace voxd {

ScratchBuffer::ScratchBuffer(Allocator& allocator, size_t bytes)
    : allocator_(&allocator),
      bytes_(bytes),
      data_(bytes > 0 ? allocator.allocate(bytes) : nullptr) {}

ScratchBuffer::~ScratchBuffer() {
  if (data_ != nullptr) allocator_->deallocate(data_, bytes_);
}

ScratchBuffer::ScratchBuffer(ScratchBuffer&& other) noexcept
    : allocator_(other.allocator_),
      bytes_(std::exchange(other.bytes_, 0)),
      data_(std::exchange(other.data_, nullptr)) {}

}  // namespace voxd
