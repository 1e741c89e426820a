// A caching allocator after PyTorch's CUDA one: it reserves big segments from a MemorySource,
// splits them into blocks for tensors and keeps freed blocks for reuse instead of giving them back.
// Use it where allocations come and go faster than the source can serve them, under a hard limit
// on the bytes it may reserve; docs/memory.md describes the policy and the stats.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/allocator.h"
#include "core/memory_source.h"

namespace voxd {

struct CachingAllocatorOptions {
  static constexpr uint64_t kNone = UINT64_MAX;

  // Reserved bytes never exceed this (PyTorch: set_per_process_memory_fraction).
  uint64_t limit = kNone;
  // Blocks of this size or more are never split, nor used for requests below it (PyTorch:
  // max_split_size_mb). Must be above kSmallSegment.
  uint64_t max_split_size = kNone;
  // Before reserving a new large segment, give back the wholly free cached large ones, so reserved
  // memory follows the largest working set instead of adding up every size ever cached (workspace
  // arenas of varying shapes would otherwise each keep a segment). PyTorch keeps them.
  bool release_before_reserve = false;
};

class CachingAllocator final : public Allocator {
 public:
  // Requests are rounded up to multiples of kMinBlockSize.
  static constexpr size_t kMinBlockSize = 512;
  // Requests up to kSmallSize are served from kSmallSegment-byte segments (the small pool).
  static constexpr size_t kSmallSize = size_t{1} << 20;
  static constexpr size_t kSmallSegment = size_t{2} << 20;
  // Larger requests get segments rounded up to multiples of kLargeRounding (the large pool).
  static constexpr size_t kLargeRounding = size_t{2} << 20;
  // A request of max_split_size or more may take a cached unsplittable block at most this much
  // larger than itself.
  static constexpr size_t kOversizeSlack = size_t{20} << 20;

  // `source` must outlive the allocator. Throws voxd::Error for a max_split_size too small.
  explicit CachingAllocator(MemorySource& source, CachingAllocatorOptions options = {});
  // Gives every segment back to the source; memory from allocate() must no longer be in use.
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Best-fit cached block, else a new segment; throws voxd::Error ("out of memory: ...") when
  // neither the limit nor the source allows one, even after release_cached().
  void* allocate(size_t bytes) override;
  // Caches the block and merges it with free neighbours; throws voxd::Error for a pointer this
  // allocator did not hand out or a `bytes` other than the one allocated.
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return source_.device(); }
  AllocatorStats stats() const override;

  // Gives wholly free segments back to the source (PyTorch: empty_cache); returns the bytes.
  uint64_t release_cached();
  // Gives back only the wholly free segments that have been free for at least `idle` at `now`;
  // returns the bytes. For a server to call now and then, so a burst's cache does not stay held.
  uint64_t release_cached_idle(
      std::chrono::steady_clock::duration idle,
      std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  // The bytes of the block handed out for `ptr` (what allocated_bytes counts for it); throws
  // voxd::Error for a pointer that is not live here.
  size_t allocated_size(const void* ptr) const;
  // Sets every peak to its current value (PyTorch: reset_peak_memory_stats).
  void reset_peak();

 private:
  struct Block;
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySizeThenAddress>;

  Pool& pool_of(const Block* block);
  Block* take_free_block(Pool& pool, size_t size);
  Block* new_segment(size_t size, bool small, size_t requested);
  void* reserve_within_limit(uint64_t bytes);
  bool should_split(const Block* block, size_t size) const;
  void split(Block* block, size_t size);
  void insert_free(Block* block);
  void erase_free(Block* block);
  // Releases the wholly free segments of both pools (only the large one when `large_only`) that
  // became free before `freed_before`.
  uint64_t release_cached_locked(std::chrono::steady_clock::time_point freed_before,
                                 bool large_only = false);
  void update_peaks();

  MemorySource& source_;
  const CachingAllocatorOptions options_;
  mutable std::mutex mutex_;
  Pool small_pool_;
  Pool large_pool_;
  std::unordered_map<const void*, Block*> live_;
  std::unordered_set<Block*> segment_heads_;
  AllocatorStats stats_;
};

}  // namespace voxd
