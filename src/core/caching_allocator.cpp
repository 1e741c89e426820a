#include "core/caching_allocator.h"

#include <algorithm>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/memory_summary.h"

namespace voxd {
namespace {

// Larger requests cannot be rounded without overflow; no source could serve them anyway.
constexpr uint64_t kMaxRequest = uint64_t{1} << 62;

uint64_t round_up(uint64_t bytes, uint64_t multiple) {
  return (bytes + multiple - 1) / multiple * multiple;
}

std::string limit_string(uint64_t limit) {
  return limit == CachingAllocatorOptions::kNone ? std::string("none") : format_bytes(limit);
}

}  // namespace

// One contiguous piece of a segment; the blocks of a segment form a list in address order.
struct CachingAllocator::Block {
  char* ptr;
  size_t size;
  bool small;  // which pool, and which kind of segment, it belongs to
  bool allocated = false;
  size_t requested = 0;  // the caller's byte count while allocated
  Block* prev = nullptr;
  Block* next = nullptr;
  // When a free block that is a whole segment was last freed (for release_cached_idle).
  std::chrono::steady_clock::time_point free_since{};

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

bool CachingAllocator::BySizeThenAddress::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return std::less<const char*>()(a->ptr, b->ptr);
}

CachingAllocator::CachingAllocator(MemorySource& source, CachingAllocatorOptions options)
    : source_(source), options_(options) {
  if (options_.max_split_size <= kSmallSegment) {
    throw Error("CachingAllocator: max_split_size " + format_bytes(options_.max_split_size) +
                " must be above the " + format_bytes(kSmallSegment) +
                " small-segment size; leave it unset to split blocks of any size");
  }
  stats_.limit_bytes = options_.limit;
  stats_.max_split_size = options_.max_split_size;
}

CachingAllocator::~CachingAllocator() {
  for (Block* head : segment_heads_) {
    void* base = head->ptr;
    size_t bytes = 0;
    for (Block* b = head; b != nullptr;) {
      Block* next = b->next;
      bytes += b->size;
      delete b;
      b = next;
    }
    source_.release(base, bytes);
  }
}

void* CachingAllocator::allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t size =
      bytes > kMaxRequest ? bytes : std::max(kMinBlockSize, round_up(bytes, kMinBlockSize));
  const bool small = size <= kSmallSize;
  Block* block = take_free_block(small ? small_pool_ : large_pool_, size);
  if (block == nullptr) block = new_segment(size, small, bytes);
  if (should_split(block, size)) split(block, size);

  block->allocated = true;
  block->requested = bytes;
  live_.emplace(block->ptr, block);
  stats_.allocated_bytes += block->size;
  stats_.active_bytes += block->size;
  stats_.requested_bytes += bytes;
  stats_.total_allocated_bytes += block->size;
  stats_.total_requested_bytes += bytes;
  ++stats_.active_allocs;
  ++stats_.num_allocs;
  update_peaks();
  return block->ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(ptr);
  if (it == live_.end()) {
    throw Error(
        "CachingAllocator::deallocate: the pointer was not allocated here or was already "
        "freed (a tensor released through the wrong allocator?)");
  }
  Block* block = it->second;
  if (bytes != block->requested) {
    throw Error("CachingAllocator::deallocate: " + std::to_string(bytes) +
                " bytes given back for an allocation of " + std::to_string(block->requested) +
                " bytes; pass the size given to allocate()");
  }
  live_.erase(it);
  block->allocated = false;
  stats_.allocated_bytes -= block->size;
  stats_.active_bytes -= block->size;
  stats_.requested_bytes -= block->requested;
  block->requested = 0;
  --stats_.active_allocs;
  ++stats_.num_frees;

  if (block->prev != nullptr && !block->prev->allocated) {
    Block* prev = block->prev;
    erase_free(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    --stats_.blocks;
    block = prev;
  }
  if (block->next != nullptr && !block->next->allocated) {
    Block* next = block->next;
    erase_free(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
    --stats_.blocks;
  }
  insert_free(block);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  AllocatorStats s = stats_;
  for (const Pool* pool : {&small_pool_, &large_pool_}) {
    if (!pool->empty()) {
      s.largest_free_block_bytes =
          std::max<uint64_t>(s.largest_free_block_bytes, (*pool->rbegin())->size);
    }
  }
  return s;
}

uint64_t CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  return release_cached_locked(std::chrono::steady_clock::time_point::max());
}

uint64_t CachingAllocator::release_cached_idle(std::chrono::steady_clock::duration idle,
                                               std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  return release_cached_locked(now - idle);
}

size_t CachingAllocator::allocated_size(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(ptr);
  if (it == live_.end()) {
    throw Error("CachingAllocator::allocated_size: the pointer is not a live allocation here");
  }
  return it->second->size;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
  stats_.peak_requested_bytes = stats_.requested_bytes;
  stats_.peak_active_bytes = stats_.active_bytes;
  stats_.peak_inactive_split_bytes = stats_.inactive_split_bytes;
  stats_.peak_active_allocs = stats_.active_allocs;
  stats_.peak_inactive_split_blocks = stats_.inactive_split_blocks;
  stats_.peak_segments = stats_.segments;
}

CachingAllocator::Pool& CachingAllocator::pool_of(const Block* block) {
  return block->small ? small_pool_ : large_pool_;
}

// Smallest cached block that fits, except that blocks of max_split_size or more serve only
// requests of that size too, and only when they waste less than kOversizeSlack.
CachingAllocator::Block* CachingAllocator::take_free_block(Pool& pool, size_t size) {
  Block key{nullptr, size, false};
  const auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* block = *it;
  const uint64_t max_split = options_.max_split_size;
  if (size < max_split && block->size >= max_split) return nullptr;
  if (size >= max_split && block->size - size >= kOversizeSlack) return nullptr;
  erase_free(block);
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t size, bool small, size_t requested) {
  // Large segments are rounded to kLargeRounding, but one for a request below max_split_size
  // stays below it too, or it could never be split or reused for such requests.
  uint64_t segment = size;
  if (small) {
    segment = kSmallSegment;
  } else if (size <= kMaxRequest) {
    segment = round_up(size, kLargeRounding);
    if (size < options_.max_split_size && segment >= options_.max_split_size) segment = size;
  }
  if (!small && options_.release_before_reserve) {
    release_cached_locked(std::chrono::steady_clock::time_point::max(), /*large_only=*/true);
  }
  void* ptr = reserve_within_limit(segment);
  if (ptr == nullptr) {
    ++stats_.num_alloc_retries;
    release_cached_locked(std::chrono::steady_clock::time_point::max());
    ptr = reserve_within_limit(segment);
  }
  if (ptr == nullptr) {
    ++stats_.num_ooms;
    const bool over_limit = segment > options_.limit - stats_.reserved_bytes;
    std::string message = "out of memory: requested " + format_bytes(requested) + ", limit " +
                          limit_string(options_.limit) + ", reserved " +
                          format_bytes(stats_.reserved_bytes) + ", allocated " +
                          format_bytes(stats_.allocated_bytes) + "; a new " +
                          format_bytes(segment) + " segment ";
    message += over_limit
                   ? "would cross the limit"
                   : "is more than the " + source_.device().to_string() + " memory source has free";
    message += " even after releasing cached segments (" +
               format_bytes(stats_.inactive_split_bytes) +
               " is cached in split segments and cannot be released). Free tensors or lower the "
               "batch size, " +
               (over_limit ? std::string("or raise the memory limit")
                           : std::string("or free memory held by other processes")) +
               "; if much is cached in split segments, set max_split_size to reduce "
               "fragmentation.";
    throw Error(message);
  }
  Block* block = new Block{static_cast<char*>(ptr), static_cast<size_t>(segment), small};
  segment_heads_.insert(block);
  stats_.reserved_bytes += segment;
  stats_.total_reserved_bytes += segment;
  ++stats_.segments;
  ++stats_.num_segment_reserves;
  ++stats_.blocks;
  return block;
}

// The source is never asked for bytes that would take the reserved total past the limit.
void* CachingAllocator::reserve_within_limit(uint64_t bytes) {
  if (bytes > options_.limit - stats_.reserved_bytes) return nullptr;
  return source_.reserve(bytes);
}

bool CachingAllocator::should_split(const Block* block, size_t size) const {
  if (block->size >= options_.max_split_size) return false;
  const size_t remaining = block->size - size;
  return block->small ? remaining >= kMinBlockSize : remaining > kSmallSize;
}

void CachingAllocator::split(Block* block, size_t size) {
  Block* rest = new Block{block->ptr + size, block->size - size, block->small};
  rest->prev = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->size = size;
  ++stats_.blocks;
  insert_free(rest);
}

// A free block's neighbours change only while it is out of its pool, so whether it counts as
// inactive split is decided here and undone in erase_free().
void CachingAllocator::insert_free(Block* block) {
  pool_of(block).insert(block);
  if (!block->is_split()) {
    block->free_since = std::chrono::steady_clock::now();
    return;
  }
  stats_.inactive_split_bytes += block->size;
  ++stats_.inactive_split_blocks;
  update_peaks();
}

void CachingAllocator::erase_free(Block* block) {
  pool_of(block).erase(block);
  if (block->is_split()) {
    stats_.inactive_split_bytes -= block->size;
    --stats_.inactive_split_blocks;
  }
}

uint64_t CachingAllocator::release_cached_locked(std::chrono::steady_clock::time_point freed_before,
                                                 bool large_only) {
  uint64_t released = 0;
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    if (large_only && pool == &small_pool_) continue;
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      if (block->is_split() || block->free_since > freed_before) {
        ++it;
        continue;
      }
      it = pool->erase(it);
      segment_heads_.erase(block);
      source_.release(block->ptr, block->size);
      released += block->size;
      stats_.reserved_bytes -= block->size;
      --stats_.segments;
      ++stats_.num_segment_releases;
      --stats_.blocks;
      delete block;
    }
  }
  return released;
}

void CachingAllocator::update_peaks() {
  AllocatorStats& s = stats_;
  s.peak_allocated_bytes = std::max(s.peak_allocated_bytes, s.allocated_bytes);
  s.peak_reserved_bytes = std::max(s.peak_reserved_bytes, s.reserved_bytes);
  s.peak_requested_bytes = std::max(s.peak_requested_bytes, s.requested_bytes);
  s.peak_active_bytes = std::max(s.peak_active_bytes, s.active_bytes);
  s.peak_inactive_split_bytes = std::max(s.peak_inactive_split_bytes, s.inactive_split_bytes);
  s.peak_active_allocs = std::max(s.peak_active_allocs, s.active_allocs);
  s.peak_inactive_split_blocks = std::max(s.peak_inactive_split_blocks, s.inactive_split_blocks);
  s.peak_segments = std::max(s.peak_segments, s.segments);
}

}  // namespace voxd
