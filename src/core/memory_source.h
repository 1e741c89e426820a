// Where an allocator's big segments come from: the host heap here, cudaMalloc in the CUDA
// backend. A source only hands out and takes back whole segments; splitting and caching them is
// the CachingAllocator's job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>

#include "core/device.h"

namespace voxd {

// Free and total memory of a source's device, as its driver or system reports it (0 where it
// does not say).
struct SourceMemory {
  uint64_t free = 0;
  uint64_t total = 0;
};

class MemorySource {
 public:
  virtual ~MemorySource() = default;

  // Returns `bytes` of fresh memory aligned to at least 512 bytes, or nullptr when the source is
  // out of memory.
  virtual void* reserve(size_t bytes) = 0;
  // Gives back memory obtained from reserve() with the same `bytes`.
  virtual void release(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
  // The device's free and total memory now, whoever holds the rest.
  virtual SourceMemory memory() const = 0;
  // Whether reserve() takes its memory from the device at once (cudaMalloc does), so that total
  // − free − reserved is what others hold; the host's heap commits pages only when first touched.
  virtual bool commits_on_reserve() const = 0;
};

// Host memory from aligned_alloc; with a capacity it simulates a small device, answering nullptr
// once more than `capacity` bytes would be out at once, and reporting capacity − outstanding free
// (what a test takes with reserve() beside an allocator is another process's). Thread-safe.
class HostMemorySource final : public MemorySource {
 public:
  static constexpr size_t kAlignment = 4096;

  explicit HostMemorySource(size_t capacity = SIZE_MAX) : capacity_(capacity) {}
  HostMemorySource(const HostMemorySource&) = delete;
  HostMemorySource& operator=(const HostMemorySource&) = delete;

  void* reserve(size_t bytes) override;
  void release(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cpu(); }
  // With a capacity: capacity − outstanding of capacity. Without: the system's physical memory,
  // and as free what it can give without swapping (MemAvailable, which counts the page cache it
  // can drop; the free pages alone where /proc/meminfo does not say).
  SourceMemory memory() const override;
  // With a capacity (the simulated device counts what is reserved); not without.
  bool commits_on_reserve() const override { return capacity_ != SIZE_MAX; }

  // Bytes reserved and not yet released.
  size_t outstanding() const;

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  size_t outstanding_ = 0;
};

// MemAvailable and MemTotal of a /proc/meminfo text, in bytes; nothing when either is missing.
std::optional<SourceMemory> parse_meminfo(std::string_view text);

}  // namespace voxd
