#include "core/workspace_arena.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>

#include "core/error.h"

namespace voxd {
namespace {

// Where a planning arena's fake addresses start: far from anything mapped, aligned, and never
// dereferenced.
constexpr uintptr_t kFakeBase = uintptr_t{1} << 44;

}  // namespace

WorkspaceArena::WorkspaceArena(Device device)
    : device_(device), base_(reinterpret_cast<char*>(kFakeBase)) {}

WorkspaceArena::WorkspaceArena(Allocator& upstream, size_t capacity)
    : device_(upstream.device()),
      upstream_(&upstream),
      capacity_(capacity),
      base_(capacity > 0 ? static_cast<char*>(upstream.allocate(capacity)) : nullptr) {
  stats_.reserved_bytes = capacity;
  stats_.peak_reserved_bytes = capacity;
  stats_.total_reserved_bytes = capacity;
}

WorkspaceArena::~WorkspaceArena() {
  if (!live_.empty()) {
    std::fprintf(stderr,
                 "voxd: workspace arena destroyed with %zu live block(s) (%zu bytes): tensors "
                 "from a step's arena must not outlive the step\n",
                 live_.size(), in_use_);
    std::abort();
  }
  if (upstream_ != nullptr && base_ != nullptr) upstream_->deallocate(base_, capacity_);
}

size_t WorkspaceArena::block_size(size_t bytes) {
  return (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
}

size_t WorkspaceArena::take_offset(size_t size, size_t bytes) {
  // Best fit: the smallest free range that holds the block (the lowest of equals), so a small
  // block does not split a large hole a later large block could have used.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= size && (best == free_.end() || it->second < best->second)) best = it;
  }
  if (best != free_.end()) {
    const size_t offset = best->first;
    const size_t rest = best->second - size;
    free_.erase(best);
    if (rest > 0) free_.emplace(offset + size, rest);
    return offset;
  }
  if (!planning() && top_ + size > capacity_) {
    ++stats_.num_ooms;
    throw Error("workspace arena: a request of " + std::to_string(bytes) + " bytes would end at " +
                std::to_string(top_ + size) + " bytes, past the arena's " +
                std::to_string(capacity_) +
                "; the step asked for other memory than when it was planned (plan it with the "
                "same backend, dtype and input shapes it runs with)");
  }
  const size_t offset = top_;
  top_ += size;
  high_water_ = std::max(high_water_, top_);
  return offset;
}

void* WorkspaceArena::allocate(size_t bytes) {
  const size_t size = block_size(bytes);
  const size_t offset = take_offset(size, bytes);
  live_.emplace(offset, size);
  in_use_ += size;
  stats_.allocated_bytes = in_use_;
  stats_.active_bytes = in_use_;
  stats_.peak_allocated_bytes = std::max<uint64_t>(stats_.peak_allocated_bytes, in_use_);
  stats_.peak_active_bytes = stats_.peak_allocated_bytes;
  stats_.requested_bytes += bytes;
  stats_.peak_requested_bytes = std::max(stats_.peak_requested_bytes, stats_.requested_bytes);
  stats_.total_allocated_bytes += size;
  stats_.total_requested_bytes += bytes;
  ++stats_.num_allocs;
  stats_.active_allocs = live_.size();
  stats_.peak_active_allocs = std::max<uint64_t>(stats_.peak_active_allocs, live_.size());
  return base_ + offset;
}

void WorkspaceArena::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const size_t offset = offset_of(ptr);
  const auto it = live_.find(offset);
  const size_t size = block_size(bytes);
  if (it->second != size) {
    throw Error("workspace arena: block at offset " + std::to_string(offset) + " holds " +
                std::to_string(it->second) + " bytes, freed as " + std::to_string(bytes));
  }
  live_.erase(it);
  in_use_ -= size;
  stats_.allocated_bytes = in_use_;
  stats_.active_bytes = in_use_;
  stats_.requested_bytes -= std::min<uint64_t>(stats_.requested_bytes, bytes);
  ++stats_.num_frees;
  stats_.active_allocs = live_.size();

  size_t start = offset;
  size_t end = offset + size;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == end) {
    end += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    const auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      free_.erase(prev);
    }
  }
  if (end == top_) {
    top_ = start;
  } else {
    free_.emplace(start, end - start);
  }
}

size_t WorkspaceArena::offset_of(const void* ptr) const {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  const auto base = reinterpret_cast<uintptr_t>(base_);
  const size_t offset = address - base;
  if (address < base || live_.find(offset) == live_.end()) {
    throw Error("workspace arena: pointer " + std::to_string(address) +
                " is not a live block of this arena");
  }
  return offset;
}

AllocatorStats WorkspaceArena::stats() const {
  AllocatorStats s = stats_;
  if (planning()) {
    s.reserved_bytes = high_water_;
    s.peak_reserved_bytes = high_water_;
    s.total_reserved_bytes = high_water_;
  }
  s.blocks = live_.size() + free_.size();
  size_t largest = planning() ? 0 : capacity_ - top_;
  for (const auto& [offset, size] : free_) largest = std::max(largest, size);
  s.largest_free_block_bytes = largest;
  return s;
}

}  // namespace voxd
