// The one buffer a model step's memory (activations and kernel scratch) is placed in, after
// ggml's measure allocator. A planning arena has no memory: it hands out fake addresses and
// records how far its blocks reach (the high-water mark). A running arena serves the same
// requests from one block of that size, taken from an upstream allocator when it is made and
// given back in one piece when it goes. Blocks are placed by best fit (the smallest free range
// that holds them, else the end) and coalesce when freed, and placement depends only on the sequence of requests, so a step run with the
// inputs it was planned for fits its plan exactly. One thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>

#include "core/allocator.h"
#include "core/device.h"

namespace voxd {

class WorkspaceArena final : public Allocator {
 public:
  // Blocks start at multiples of this (cudaMalloc's and cuBLAS workspace alignment) and take a
  // multiple of it; a request for 0 bytes takes one.
  static constexpr size_t kAlignment = 256;

  // A planning arena for tensors on `device`: unbounded, and its addresses must never be
  // dereferenced.
  explicit WorkspaceArena(Device device);
  // A running arena: one block of `capacity` bytes from `upstream`, which must outlive the arena
  // and return memory aligned to kAlignment for device use.
  WorkspaceArena(Allocator& upstream, size_t capacity);
  // Gives the block back. Every tensor from the arena must be gone by then; the process aborts
  // otherwise, since their memory would be freed under them.
  ~WorkspaceArena() override;
  WorkspaceArena(const WorkspaceArena&) = delete;
  WorkspaceArena& operator=(const WorkspaceArena&) = delete;

  // The smallest free range that fits (the lowest of equals), else the end of the used range. A running arena throws
  // voxd::Error when the block would end past its capacity: the step asked for other memory than
  // it did when it was planned.
  void* allocate(size_t bytes) override;
  // Frees the block and merges it with its free neighbours; throws voxd::Error for a pointer the
  // arena does not hold or a size other than the one allocated.
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return device_; }
  // allocated = bytes in live blocks; reserved = the capacity (running) or the high-water mark
  // (planning: what a run would reserve).
  AllocatorStats stats() const override;

  bool planning() const { return upstream_ == nullptr; }
  // The running arena's block size; 0 when planning.
  size_t capacity() const { return capacity_; }
  // The furthest end of any block so far: the capacity a running arena needs for the same
  // sequence of requests.
  size_t high_water() const { return high_water_; }
  // Bytes in live blocks (each rounded up to kAlignment).
  size_t in_use() const { return in_use_; }
  // Where `ptr`, a live block of this arena, starts in the buffer.
  size_t offset_of(const void* ptr) const;

 private:
  static size_t block_size(size_t bytes);
  size_t take_offset(size_t size, size_t bytes);

  Device device_;
  Allocator* upstream_ = nullptr;
  size_t capacity_ = 0;
  char* base_;
  // Free ranges below top_ (offset -> size), never adjacent to each other or to top_.
  std::map<size_t, size_t> free_;
  // Live blocks (offset -> size).
  std::unordered_map<size_t, size_t> live_;
  // End of the used range: every offset from here on is free.
  size_t top_ = 0;
  size_t high_water_ = 0;
  size_t in_use_ = 0;
  AllocatorStats stats_;
};

}  // namespace voxd
