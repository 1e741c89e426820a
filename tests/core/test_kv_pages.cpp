// KvPagePool: pages handed out as streams grow and given back when they end, never twice, never
// more than the pool has; page tables built from the streams' lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/kv_pages.h"

namespace voxd {
namespace {

TEST(KvPagePool, GrowsAStreamAPageAtATime) {
  KvPagePool pool(4, 16);
  EXPECT_EQ(pool.pages_for(0), 0);
  EXPECT_EQ(pool.pages_for(1), 1);
  EXPECT_EQ(pool.pages_for(16), 1);
  EXPECT_EQ(pool.pages_for(17), 2);
  std::vector<int64_t> stream;
  ASSERT_TRUE(pool.grow(stream, 10));
  EXPECT_EQ(stream, (std::vector<int64_t>{0}));
  ASSERT_TRUE(pool.grow(stream, 16));  // still one page
  EXPECT_EQ(stream.size(), 1u);
  ASSERT_TRUE(pool.grow(stream, 17));
  EXPECT_EQ(stream, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(pool.used_pages(), 2);
  EXPECT_EQ(pool.free_pages(), 2);
}

TEST(KvPagePool, RefusesWhatItLacksAndChangesNothing) {
  KvPagePool pool(3, 8);
  std::vector<int64_t> a;
  std::vector<int64_t> b;
  ASSERT_TRUE(pool.grow(a, 16));
  EXPECT_FALSE(pool.grow(b, 9));  // two pages wanted, one free
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.free_pages(), 1);
  ASSERT_TRUE(pool.grow(b, 8));
  EXPECT_EQ(pool.free_pages(), 0);
  EXPECT_FALSE(pool.grow(a, 17));
  EXPECT_EQ(a.size(), 2u);
}

TEST(KvPagePool, ReleaseReturnsThePagesOnceOnly) {
  KvPagePool pool(4, 4);
  std::vector<int64_t> a;
  ASSERT_TRUE(pool.grow(a, 12));
  std::vector<int64_t> copy = a;
  pool.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pool.free_pages(), 4);
  EXPECT_THROW(pool.release(copy), Error);
  std::vector<int64_t> foreign = {7};
  EXPECT_THROW(pool.release(foreign), Error);
  EXPECT_THROW(KvPagePool(0, 4), Error);
  EXPECT_THROW(KvPagePool(4, 0), Error);
}

// Random streams growing and ending: no page is ever held by two streams, and the pool ends
// where it started.
TEST(KvPagePool, RandomStreamsNeverShareAPage) {
  KvPagePool pool(64, 16);
  std::mt19937 rng(7);
  std::vector<std::vector<int64_t>> streams(10);
  std::vector<int64_t> lengths(10, 0);
  for (int step = 0; step < 5000; ++step) {
    const size_t s = rng() % streams.size();
    if (rng() % 8 == 0) {
      pool.release(streams[s]);
      lengths[s] = 0;
    } else {
      const int64_t wanted = lengths[s] + 1 + static_cast<int64_t>(rng() % 40);
      if (pool.grow(streams[s], wanted)) lengths[s] = wanted;
    }
    std::set<int64_t> seen;
    int64_t held = 0;
    for (const auto& pages : streams) {
      for (int64_t page : pages) EXPECT_TRUE(seen.insert(page).second) << "page " << page;
      held += static_cast<int64_t>(pages.size());
    }
    ASSERT_EQ(held, pool.used_pages());
  }
  for (auto& pages : streams) pool.release(pages);
  EXPECT_EQ(pool.free_pages(), 64);
}

TEST(KvPageTable, PadsEachStreamWithNoPage) {
  const std::vector<int64_t> a = {3, 1};
  const std::vector<int64_t> b = {};
  const std::vector<int64_t> c = {0, 2, 4};
  const Tensor table = page_table({&a, &b, &c}, 3);
  EXPECT_EQ(table.shape(), (Shape{3, 3}));
  EXPECT_EQ(table.to_int_vector(), (std::vector<int64_t>{3, 1, -1, -1, -1, -1, 0, 2, 4}));
  EXPECT_THROW(page_table({&c}, 2), Error);
}

}  // namespace
}  // namespace voxd
