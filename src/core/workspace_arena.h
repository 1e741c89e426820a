// The one buffer a model step's memory (activations and kernel scratch) is placed in, after
// ggml's measure allocator. A planning arena has no memory: it hands out fake addresses and
// records the step's whole sequence of requests (each block's size and lifetime), from which it
// makes an ArenaLayout, placing every block once all are known. A running arena takes one block
// of the layout's size from an upstream allocator when it is made, gives the i-th request the
// layout's i-th offset, and gives the block back in one piece when it goes. Placement depends only
// on the sequence of requests and frees, so a step run with the inputs it was planned for fits
// its plan exactly. One thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"

namespace voxd {

// Where a running arena puts each block of a step: the i-th request at offset(i), in an arena of
// bytes(). Made by a planning arena from the whole sequence of requests (WorkspaceArena::layout),
// it carries a step's plan to the arena the step runs in. Immutable; copies share the placements.
class ArenaLayout {
 public:
  // No blocks, 0 bytes.
  ArenaLayout() = default;

  // The arena size the placements need: the furthest end of any block.
  uint64_t bytes() const { return bytes_; }
  // The number of requests placed.
  size_t blocks() const { return placements_ ? placements_->size() : 0; }
  // The i-th request's block size (rounded to WorkspaceArena::kAlignment); i < blocks().
  size_t block_size(size_t i) const { return (*placements_)[i].size; }
  // Where the i-th request's block starts; i < blocks().
  size_t offset(size_t i) const { return (*placements_)[i].offset; }

 private:
  friend class WorkspaceArena;
  struct Placement {
    size_t size;
    size_t offset;
  };
  ArenaLayout(std::vector<Placement> placements, uint64_t bytes);

  std::shared_ptr<const std::vector<Placement>> placements_;
  uint64_t bytes_ = 0;
};

class WorkspaceArena final : public Allocator {
 public:
  // Blocks start at multiples of this (cudaMalloc's and cuBLAS workspace alignment) and take a
  // multiple of it; a request for 0 bytes takes one.
  static constexpr size_t kAlignment = 256;

  // A planning arena for tensors on `device`: unbounded, and its addresses must never be
  // dereferenced.
  explicit WorkspaceArena(Device device);
  // A running arena: one block of layout.bytes() from `upstream`, which must outlive the arena
  // and return memory aligned to kAlignment for device use.
  WorkspaceArena(Allocator& upstream, ArenaLayout layout);
  // Gives the block back. Every tensor from the arena must be gone by then; the process aborts
  // otherwise, since their memory would be freed under them.
  ~WorkspaceArena() override;
  WorkspaceArena(const WorkspaceArena&) = delete;
  WorkspaceArena& operator=(const WorkspaceArena&) = delete;

  // Planning: best fit (the smallest free range that holds the block, the lowest of equals,
  // else the end of the used range). Running: the layout's offset for this request while the
  // requests follow the layout; from the first one that does not (another size, more requests
  // than planned, or a planned range still taken), best fit among the ranges actually free, and
  // voxd::Error when the block would end past the capacity: the step asked for other memory than
  // it did when it was planned.
  void* allocate(size_t bytes) override;
  // Frees the block; throws voxd::Error for a pointer the arena does not hold or a size other
  // than the one allocated.
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return device_; }
  // allocated = bytes in live blocks; reserved = the capacity (running) or the high-water mark
  // (planning: what a run placing blocks by best fit would reserve, at least layout().bytes()).
  AllocatorStats stats() const override;

  bool planning() const { return upstream_ == nullptr; }
  // The running arena's block size; 0 when planning.
  size_t capacity() const { return capacity_; }
  // The furthest end of any block so far. Running: layout().bytes() once the step it was planned
  // for is done. Planning: where best fit, placing blocks as they come, would need the arena to
  // end; layout() needs at most that.
  size_t high_water() const { return high_water_; }
  // Bytes in live blocks (each rounded up to kAlignment).
  size_t in_use() const { return in_use_; }
  // Where `ptr`, a live block of this arena, starts in the buffer.
  size_t offset_of(const void* ptr) const;
  // Running: whether a request has left the layout, so that blocks are placed by best fit.
  bool diverged() const { return diverged_; }

  // Planning: the placement of every request so far, made with all of them known: blocks by
  // size, largest first, each at the lowest offset clear of every block placed before it whose
  // lifetime overlaps its own (TFLite's greedy-by-size planner), equal sizes taken once in order
  // of first use and once longest-lived first; the smaller of the two, or best fit's placement
  // when that is smaller still. Blocks still live count as live to the end. O(n^2) in the n
  // requests. Running: the layout the arena follows.
  ArenaLayout layout() const;

 private:
  // A planning arena's record of one request.
  struct Request {
    size_t size;
    size_t offset;  // where best fit put it
    uint64_t allocated;
    uint64_t freed;  // kStillLive until freed
  };
  struct LiveBlock {
    size_t size;
    size_t request;  // its index in the sequence of requests
  };
  static constexpr uint64_t kStillLive = UINT64_MAX;

  static size_t block_size(size_t bytes);
  // The offset the layout gives the next request of `size`, when the requests still follow it
  // and that range is free; nullopt otherwise.
  std::optional<size_t> planned_offset(size_t size) const;
  size_t best_fit(size_t size, size_t bytes);
  // Greedy placement of the requests in `order` (indices into requests_), as layout() describes.
  ArenaLayout place_in_order(const std::vector<size_t>& order) const;

  Device device_;
  Allocator* upstream_ = nullptr;
  size_t capacity_ = 0;
  char* base_;
  ArenaLayout layout_;
  bool diverged_ = false;
  // Live blocks by offset; the ranges between them are free.
  std::map<size_t, LiveBlock> live_;
  // Every request so far, in order (planning only).
  std::vector<Request> requests_;
  // Allocations and frees so far: the clock of the requests' lifetimes.
  uint64_t events_ = 0;
  size_t high_water_ = 0;
  size_t in_use_ = 0;
  AllocatorStats stats_;
};

}  // namespace voxd
