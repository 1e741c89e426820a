#include "core/kv_pages.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/ops.h"

namespace voxd {

PagedKvCache PagedKvCache::make(Context& ctx, int64_t layers, int64_t pages, int64_t page_size,
                                int64_t heads, int64_t head_dim, DType dtype) {
  if (pages < 1 || page_size < 1) {
    throw Error("kv pages: a paged cache needs at least one page of at least one position, got " +
                std::to_string(pages) + " of " + std::to_string(page_size));
  }
  PagedKvCache cache;
  cache.page_size = page_size;
  cache.pages = pages;
  const Shape shape = {pages, page_size, heads, head_dim};
  for (int64_t layer = 0; layer < layers; ++layer) {
    cache.keys.push_back(ops::zeros(ctx, shape, dtype));
    cache.values.push_back(ops::zeros(ctx, shape, dtype));
  }
  return cache;
}

uint64_t PagedKvCache::page_bytes_of(int64_t layers, int64_t page_size, int64_t width,
                                     DType dtype) {
  return static_cast<uint64_t>(2 * layers * page_size * width) * dtype_size(dtype);
}

uint64_t PagedKvCache::page_bytes() const {
  uint64_t bytes = 0;
  for (size_t layer = 0; layer < keys.size(); ++layer) {
    bytes += keys[layer].nbytes() + values[layer].nbytes();
  }
  return bytes / static_cast<uint64_t>(pages);
}

KvPagePool::KvPagePool(int64_t pages, int64_t page_size) : page_size_(page_size) {
  if (pages < 1 || page_size < 1) {
    throw Error("kv pages: a pool needs at least one page of at least one position, got " +
                std::to_string(pages) + " pages of " + std::to_string(page_size));
  }
  in_use_.assign(static_cast<size_t>(pages), false);
  free_.reserve(static_cast<size_t>(pages));
  // Page 0 on top: a fresh pool hands out pages in order.
  for (int64_t page = pages - 1; page >= 0; --page) free_.push_back(page);
}

int64_t KvPagePool::pages_for(int64_t positions) const {
  return (positions + page_size_ - 1) / page_size_;
}

bool KvPagePool::grow(std::vector<int64_t>& held, int64_t positions) {
  const int64_t more = pages_for(positions) - static_cast<int64_t>(held.size());
  if (more <= 0) return true;
  if (more > free_pages()) return false;
  for (int64_t i = 0; i < more; ++i) {
    const int64_t page = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(page)] = true;
    held.push_back(page);
  }
  return true;
}

void KvPagePool::release(std::vector<int64_t>& held) {
  for (int64_t page : held) {
    if (page < 0 || page >= pages() || !in_use_[static_cast<size_t>(page)]) {
      throw Error("kv pages: page " + std::to_string(page) + " is not in use in this pool of " +
                  std::to_string(pages()) + " pages (given back twice?)");
    }
    in_use_[static_cast<size_t>(page)] = false;
    free_.push_back(page);
  }
  held.clear();
}

Tensor page_table(const std::vector<const std::vector<int64_t>*>& lists, int64_t width) {
  std::vector<int64_t> entries(lists.size() * static_cast<size_t>(width), -1);
  for (size_t b = 0; b < lists.size(); ++b) {
    const std::vector<int64_t>& pages = *lists[b];
    if (static_cast<int64_t>(pages.size()) > width) {
      throw Error("kv pages: a stream holds " + std::to_string(pages.size()) +
                  " pages, more than the table's " + std::to_string(width));
    }
    std::copy(pages.begin(), pages.end(), entries.begin() + static_cast<std::ptrdiff_t>(b) * width);
  }
  return Tensor::from_vector({static_cast<int64_t>(lists.size()), width}, entries);
}

}  // namespace voxd
