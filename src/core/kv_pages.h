// The pages of a paged KV cache: which are free and which a stream holds. A stream's pages are a
// list of page ids (its positions 0..S−1 in the first, S..2S−1 in the second, ...); it gets a
// page when its last is full and gives all back when it ends. Host bookkeeping used on the
// device thread; the pages' memory is the model's tensors (ops::paged_attention reads them
// through a page table built from the lists).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace voxd {

class Context;

// The keys and values of a model's attention layers in pages shared by many sequences: per
// layer, pages [N, S, H, D] that ops::write_pages fills and ops::paged_attention reads through a
// page table; which sequence holds which page is a KvPagePool's (below) and the caller's.
struct PagedKvCache {
  std::vector<Tensor> keys;
  std::vector<Tensor> values;
  int64_t page_size = 0;
  int64_t pages = 0;

  // `layers` layers of `pages` pages of `page_size` positions of [heads, head_dim] in `dtype`,
  // zeroed (attention reads rows past a sequence's length times zero, so they must be finite),
  // from ctx's allocator. Throws voxd::Error for fewer than one page of one position.
  static PagedKvCache make(Context& ctx, int64_t layers, int64_t pages, int64_t page_size,
                           int64_t heads, int64_t head_dim, DType dtype);
  // Device bytes of one page over every layer's keys and values.
  uint64_t page_bytes() const;
  // The same before a cache is made: `layers` layers of `page_size` positions of `width` (heads ·
  // head_dim) elements in `dtype`, keys and values.
  static uint64_t page_bytes_of(int64_t layers, int64_t page_size, int64_t width, DType dtype);
};

class KvPagePool {
 public:
  // `pages` pages (>= 1) of `page_size` positions (>= 1), all free.
  KvPagePool(int64_t pages, int64_t page_size);

  int64_t pages() const { return static_cast<int64_t>(in_use_.size()); }
  int64_t page_size() const { return page_size_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_pages() const { return pages() - free_pages(); }
  // Pages that `positions` positions (>= 0) take.
  int64_t pages_for(int64_t positions) const;

  // Grows `held` with free pages until it covers `positions` positions; returns false, leaving
  // `held` and the pool unchanged, when the pool has too few free pages.
  [[nodiscard]] bool grow(std::vector<int64_t>& held, int64_t positions);
  // Gives every page of `held` back and empties it. Throws voxd::Error for a page that is not
  // this pool's or is not in use (given back twice).
  void release(std::vector<int64_t>& held);

 private:
  int64_t page_size_;
  std::vector<int64_t> free_;  // a stack: the most recently freed page is reused first
  std::vector<bool> in_use_;
};

// The page table [lists.size(), width] (I64, host) of several streams' page lists, each row
// padded with −1 (no page). Throws voxd::Error when a list is longer than `width`.
Tensor page_table(const std::vector<const std::vector<int64_t>*>& lists, int64_t width);

}  // namespace voxd
