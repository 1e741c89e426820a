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
