// CachingAllocator over host memory: splitting, coalescing, best fit, max_split_size, the limit,
// a failing source, exact stats, release_cached, a randomised stress test, threads and tensors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/memory_source.h"
#include "core/tensor.h"

namespace voxd {
namespace {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;

// Host memory that records what it was asked for and can be told to fail the next reserves.
class RecordingSource final : public MemorySource {
 public:
  explicit RecordingSource(size_t capacity = SIZE_MAX) : host_(capacity) {}

  void* reserve(size_t bytes) override {
    ++reserves;
    largest_reserve = std::max<uint64_t>(largest_reserve, bytes);
    if (fail_next > 0) {
      --fail_next;
      return nullptr;
    }
    void* p = host_.reserve(bytes);
    if (p != nullptr) peak_outstanding = std::max<uint64_t>(peak_outstanding, outstanding());
    return p;
  }
  void release(void* p, size_t bytes) override {
    ++releases;
    host_.release(p, bytes);
  }
  Device device() const override { return Device::cpu(); }
  SourceMemory memory() const override { return host_.memory(); }
  bool commits_on_reserve() const override { return host_.commits_on_reserve(); }
  uint64_t outstanding() const { return host_.outstanding(); }

  int reserves = 0;
  int releases = 0;
  int fail_next = 0;
  uint64_t largest_reserve = 0;
  uint64_t peak_outstanding = 0;

 private:
  HostMemorySource host_;
};

char* at(void* p, uint64_t offset) {
  return static_cast<char*>(p) + offset;
}

TEST(CachingAllocator, SplittingOneSmallSegmentServesSeveralRequests) {
  RecordingSource source;
  CachingAllocator alloc(source);
  void* a = alloc.allocate(1000);
  void* b = alloc.allocate(512);
  void* c = alloc.allocate(1);
  void* d = alloc.allocate(4096);
  EXPECT_EQ(source.reserves, 1);
  EXPECT_EQ(b, at(a, 1024));
  EXPECT_EQ(c, at(b, 512));
  EXPECT_EQ(d, at(c, 512));
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 1024u + 512 + 512 + 4096);
  EXPECT_EQ(s.requested_bytes, 1000u + 512 + 1 + 4096);
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.blocks, 5u);
  EXPECT_EQ(s.inactive_split_bytes, 2 * MiB - s.allocated_bytes);
  EXPECT_EQ(s.inactive_split_blocks, 1u);
  for (void* p : {a, b, c, d}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 512, 0u);
  alloc.deallocate(a, 1000);
  alloc.deallocate(b, 512);
  alloc.deallocate(c, 1);
  alloc.deallocate(d, 4096);
}

TEST(CachingAllocator, ZeroBytesGetAMinimumBlock) {
  RecordingSource source;
  CachingAllocator alloc(source);
  void* p = alloc.allocate(0);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(alloc.stats().allocated_bytes, 512u);
  EXPECT_EQ(alloc.stats().requested_bytes, 0u);
  alloc.deallocate(p, 0);
}

// Carves a 16 MiB segment into three live 4 MiB blocks and a free 4 MiB tail.
struct ThreeBlocks {
  void* p[3];
};
ThreeBlocks carve_16_mib(CachingAllocator& alloc) {
  void* whole = alloc.allocate(16 * MiB);
  alloc.deallocate(whole, 16 * MiB);
  ThreeBlocks t{};
  for (void*& p : t.p) p = alloc.allocate(4 * MiB);
  EXPECT_EQ(t.p[0], whole);
  return t;
}

TEST(CachingAllocator, FreedNeighboursCoalesceInAnyOrder) {
  std::vector<int> order = {0, 1, 2};
  do {
    RecordingSource source;
    CachingAllocator alloc(source);
    const ThreeBlocks t = carve_16_mib(alloc);
    EXPECT_EQ(alloc.stats().blocks, 4u);
    EXPECT_EQ(alloc.stats().inactive_split_bytes, 4 * MiB);
    for (int i : order) alloc.deallocate(t.p[i], 4 * MiB);
    AllocatorStats s = alloc.stats();
    EXPECT_EQ(s.blocks, 1u);
    EXPECT_EQ(s.inactive_split_bytes, 0u);
    EXPECT_EQ(s.inactive_split_blocks, 0u);
    EXPECT_EQ(s.largest_free_block_bytes, 16 * MiB);
    // The whole segment serves the next large request without a new reserve.
    void* again = alloc.allocate(16 * MiB);
    EXPECT_EQ(again, t.p[0]);
    EXPECT_EQ(source.reserves, 1);
    alloc.deallocate(again, 16 * MiB);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(CachingAllocator, SmallBlocksCoalesceBackIntoTheirSegment) {
  RecordingSource source;
  CachingAllocator alloc(source);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(alloc.allocate(100 * KiB));
  for (int i : {3, 0, 7, 5, 1, 6, 2, 4}) alloc.deallocate(blocks[i], 100 * KiB);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.blocks, 1u);
  EXPECT_EQ(s.largest_free_block_bytes, 2 * MiB);
  EXPECT_EQ(s.inactive_split_bytes, 0u);
  EXPECT_EQ(source.reserves, 1);
}

TEST(CachingAllocator, BestFitTakesTheSmallestFreeBlockThatFits) {
  RecordingSource source;
  CachingAllocator alloc(source);
  void* whole = alloc.allocate(16 * MiB);
  alloc.deallocate(whole, 16 * MiB);
  // 4 | sep 2 | 3 | sep 2 | 5 (MiB); freeing 4, 3 and 5 leaves three separated free blocks.
  void* a = alloc.allocate(4 * MiB);
  void* sep1 = alloc.allocate(2 * MiB);
  void* b = alloc.allocate(3 * MiB);
  void* sep2 = alloc.allocate(2 * MiB);
  void* c = alloc.allocate(5 * MiB);
  EXPECT_EQ(c, at(whole, 11 * MiB));
  EXPECT_EQ(alloc.stats().blocks, 5u);
  alloc.deallocate(a, 4 * MiB);
  alloc.deallocate(b, 3 * MiB);
  alloc.deallocate(c, 5 * MiB);

  const uint64_t before = alloc.stats().allocated_bytes;
  void* x = alloc.allocate(2 * MiB + 512 * KiB);
  EXPECT_EQ(x, b);
  // The 512 KiB left over is not more than 1 MiB, so the whole 3 MiB block is handed out.
  EXPECT_EQ(alloc.stats().allocated_bytes - before, 3 * MiB);
  void* y = alloc.allocate(3 * MiB + 512 * KiB);
  EXPECT_EQ(y, a);
  void* z = alloc.allocate(1 * MiB + 512);
  EXPECT_EQ(z, c);  // split: 5 MiB - (1 MiB + 512) leaves more than 1 MiB
  EXPECT_EQ(alloc.stats().blocks, 6u);
  EXPECT_EQ(source.reserves, 1);
  const std::vector<std::pair<void*, uint64_t>> live = {{sep1, 2 * MiB},
                                                        {sep2, 2 * MiB},
                                                        {x, 2 * MiB + 512 * KiB},
                                                        {y, 3 * MiB + 512 * KiB},
                                                        {z, MiB + 512}};
  for (const auto& [p, n] : live) alloc.deallocate(p, n);
  EXPECT_EQ(alloc.stats().blocks, 1u);
}

TEST(CachingAllocator, MaxSplitSizeKeepsOversizedBlocksWhole) {
  RecordingSource source;
  CachingAllocator alloc(source, {.max_split_size = 8 * MiB});
  void* big = alloc.allocate(10 * MiB);
  alloc.deallocate(big, 10 * MiB);
  EXPECT_EQ(alloc.stats().reserved_bytes, 10 * MiB);

  // A request below max_split_size never takes an oversized block: a new segment instead.
  void* small = alloc.allocate(4 * MiB);
  EXPECT_NE(small, big);
  EXPECT_EQ(source.reserves, 2);

  // A request of max_split_size or more takes it whole, without splitting it.
  const uint64_t blocks = alloc.stats().blocks;
  void* nine = alloc.allocate(9 * MiB);
  EXPECT_EQ(nine, big);
  EXPECT_EQ(alloc.stats().blocks, blocks);
  EXPECT_EQ(alloc.stats().allocated_bytes, 4 * MiB + 10 * MiB);
  alloc.deallocate(nine, 9 * MiB);
  alloc.deallocate(small, 4 * MiB);

  // ... but not when it would waste kOversizeSlack (20 MiB) or more.
  void* huge = alloc.allocate(40 * MiB);
  alloc.deallocate(huge, 40 * MiB);
  void* twelve = alloc.allocate(12 * MiB);
  EXPECT_NE(twelve, huge);
  EXPECT_EQ(alloc.stats().segments, 4u);
  alloc.deallocate(twelve, 12 * MiB);

  // A segment for a request below max_split_size stays below it: 7.5 MiB is not rounded to 8.
  CachingAllocator capped(source, {.max_split_size = 8 * MiB});
  void* p = capped.allocate(7 * MiB + 512 * KiB);
  EXPECT_EQ(capped.stats().reserved_bytes, 7 * MiB + 512 * KiB);
  capped.deallocate(p, 7 * MiB + 512 * KiB);
  void* q = capped.allocate(2 * MiB);  // and it can still be split for smaller requests
  EXPECT_EQ(q, p);
  EXPECT_EQ(capped.stats().blocks, 2u);
  capped.deallocate(q, 2 * MiB);

  EXPECT_THROW((void)CachingAllocator(source, {.max_split_size = 2 * MiB}), Error);
}

TEST(CachingAllocator, LimitIsNeverCrossedAndOomSaysWhy) {
  RecordingSource source;
  CachingAllocator alloc(source, {.limit = 8 * MiB});
  void* six = alloc.allocate(6 * MiB);
  try {
    alloc.allocate(4 * MiB);
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory: requested 4.00 MiB, limit 8.00 MiB, reserved 6.00 MiB, "
                     "allocated 6.00 MiB"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("raise the memory limit"), std::string::npos) << m;
  }
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.num_alloc_retries, 1u);
  EXPECT_EQ(s.reserved_bytes, 6 * MiB);
  EXPECT_EQ(source.reserves, 1);  // the source was never asked for the 4 MiB

  // Cached but too small: the 6 MiB segment is released to make room, and that counts a retry.
  alloc.deallocate(six, 6 * MiB);
  void* seven = alloc.allocate(7 * MiB);
  s = alloc.stats();
  EXPECT_EQ(s.num_alloc_retries, 2u);
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.reserved_bytes, 8 * MiB);
  EXPECT_EQ(s.num_segment_releases, 1u);
  EXPECT_EQ(source.releases, 1);
  EXPECT_LE(source.peak_outstanding, 8 * MiB);
  EXPECT_LE(source.largest_reserve, 8 * MiB);

  // A request larger than the limit itself fails without asking the source.
  EXPECT_THROW(alloc.allocate(9 * MiB), Error);
  EXPECT_EQ(source.reserves, 2);
  alloc.deallocate(seven, 7 * MiB);
  EXPECT_EQ(alloc.release_cached(), 8 * MiB);
  EXPECT_EQ(source.outstanding(), 0u);
}

TEST(CachingAllocator, ExplicitReleaseCachedThenRetrySucceeds) {
  RecordingSource source;
  CachingAllocator alloc(source, {.limit = 4 * MiB});
  void* small = alloc.allocate(64 * KiB);  // a 2 MiB small segment
  void* large = alloc.allocate(2 * MiB);   // a 2 MiB large segment: the limit is reached
  EXPECT_THROW(alloc.allocate(100 * KiB + 2 * MiB), Error);
  alloc.deallocate(large, 2 * MiB);
  alloc.deallocate(small, 64 * KiB);
  EXPECT_EQ(alloc.release_cached(), 4 * MiB);
  void* p = alloc.allocate(3 * MiB);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, 4 * MiB);
  EXPECT_EQ(s.num_alloc_retries, 1u);  // only the failed attempt retried
  EXPECT_EQ(s.num_ooms, 1u);
  alloc.deallocate(p, 3 * MiB);
}

TEST(CachingAllocator, SourceOutOfMemoryIsHandledLikeTheLimit) {
  RecordingSource source(4 * MiB);
  CachingAllocator alloc(source);
  void* three = alloc.allocate(3 * MiB);  // a 4 MiB segment, handed out whole
  EXPECT_EQ(alloc.stats().allocated_bytes, 4 * MiB);
  try {
    alloc.allocate(1 * MiB + 512 * KiB);
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory: requested 1.50 MiB, limit none, reserved 4.00 MiB, "
                     "allocated 4.00 MiB"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("cpu memory source"), std::string::npos) << m;
  }
  EXPECT_EQ(alloc.stats().num_ooms, 1u);
  EXPECT_EQ(alloc.stats().num_alloc_retries, 1u);

  alloc.deallocate(three, 3 * MiB);
  EXPECT_LE(source.largest_reserve, 4 * MiB);
}

TEST(CachingAllocator, SourceThatFailsOnceCostsOneRetry) {
  RecordingSource source;
  CachingAllocator alloc(source);
  source.fail_next = 1;
  void* p = alloc.allocate(MiB);
  EXPECT_EQ(source.reserves, 2);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.num_alloc_retries, 1u);
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_EQ(s.segments, 1u);
  alloc.deallocate(p, MiB);
}

TEST(CachingAllocator, StatsAreExactAtEveryStep) {
  RecordingSource source;
  CachingAllocator alloc(source);
  void* a = alloc.allocate(1000);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 1024u);
  EXPECT_EQ(s.active_bytes, 1024u);
  EXPECT_EQ(s.requested_bytes, 1000u);
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.inactive_split_bytes, 2 * MiB - 1024);
  EXPECT_EQ(s.inactive_split_blocks, 1u);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.blocks, 2u);
  EXPECT_EQ(s.active_allocs, 1u);
  EXPECT_EQ(s.num_allocs, 1u);
  EXPECT_EQ(s.num_frees, 0u);
  EXPECT_EQ(s.total_allocated_bytes, 1024u);
  EXPECT_EQ(s.total_requested_bytes, 1000u);
  EXPECT_EQ(s.total_reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.num_segment_reserves, 1u);
  EXPECT_EQ(s.largest_free_block_bytes, 2 * MiB - 1024);

  void* b = alloc.allocate(3000);
  s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 4096u);
  EXPECT_EQ(s.requested_bytes, 4000u);
  EXPECT_EQ(s.inactive_split_bytes, 2 * MiB - 4096);
  EXPECT_EQ(s.inactive_split_blocks, 1u);
  EXPECT_EQ(s.blocks, 3u);
  EXPECT_EQ(s.active_allocs, 2u);

  alloc.deallocate(a, 1000);
  s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 3072u);
  EXPECT_EQ(s.active_bytes, 3072u);
  EXPECT_EQ(s.requested_bytes, 3000u);
  EXPECT_EQ(s.inactive_split_bytes, 2 * MiB - 3072);  // the freed 1 KiB and the tail
  EXPECT_EQ(s.inactive_split_blocks, 2u);
  EXPECT_EQ(s.blocks, 3u);
  EXPECT_EQ(s.active_allocs, 1u);
  EXPECT_EQ(s.num_frees, 1u);
  EXPECT_EQ(s.peak_allocated_bytes, 4096u);
  EXPECT_EQ(s.peak_requested_bytes, 4000u);
  EXPECT_EQ(s.peak_active_allocs, 2u);

  alloc.deallocate(b, 3000);
  s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.requested_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.inactive_split_bytes, 0u);  // one whole free segment is releasable
  EXPECT_EQ(s.inactive_split_blocks, 0u);
  EXPECT_EQ(s.blocks, 1u);
  EXPECT_EQ(s.largest_free_block_bytes, 2 * MiB);
  EXPECT_EQ(s.peak_inactive_split_bytes, 2 * MiB - 1024);
  EXPECT_EQ(s.peak_inactive_split_blocks, 2u);
  EXPECT_EQ(s.total_allocated_bytes, 4096u);

  EXPECT_EQ(alloc.release_cached(), 2 * MiB);
  s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.segments, 0u);
  EXPECT_EQ(s.blocks, 0u);
  EXPECT_EQ(s.num_segment_releases, 1u);
  EXPECT_EQ(s.largest_free_block_bytes, 0u);
  EXPECT_EQ(s.peak_reserved_bytes, 2 * MiB);
  EXPECT_EQ(s.peak_segments, 1u);
  EXPECT_EQ(s.total_reserved_bytes, 2 * MiB);
  EXPECT_EQ(source.outstanding(), 0u);

  alloc.reset_peak();
  s = alloc.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 0u);
  EXPECT_EQ(s.peak_reserved_bytes, 0u);
  EXPECT_EQ(s.peak_requested_bytes, 0u);
  EXPECT_EQ(s.peak_active_bytes, 0u);
  EXPECT_EQ(s.peak_inactive_split_bytes, 0u);
  EXPECT_EQ(s.peak_inactive_split_blocks, 0u);
  EXPECT_EQ(s.peak_active_allocs, 0u);
  EXPECT_EQ(s.peak_segments, 0u);
  EXPECT_EQ(s.num_allocs, 2u);  // lifetime counters stay
  EXPECT_EQ(s.num_frees, 2u);
}

TEST(CachingAllocator, ReleaseCachedReturnsOnlyWhollyFreeSegments) {
  RecordingSource source;
  CachingAllocator alloc(source);
  void* small = alloc.allocate(4 * KiB);       // small segment, partly used
  void* free_whole = alloc.allocate(6 * MiB);  // large segment, wholly free below
  void* whole = alloc.allocate(8 * MiB);
  alloc.deallocate(whole, 8 * MiB);
  void* part = alloc.allocate(2 * MiB);  // the 8 MiB segment split: 2 live + 6 free
  EXPECT_EQ(part, whole);
  alloc.deallocate(free_whole, 6 * MiB);
  EXPECT_EQ(alloc.stats().reserved_bytes, 16 * MiB);

  EXPECT_EQ(alloc.release_cached(), 6 * MiB);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, 10 * MiB);
  EXPECT_EQ(s.segments, 2u);
  EXPECT_EQ(source.outstanding(), 10 * MiB);
  EXPECT_EQ(s.inactive_split_bytes, 6 * MiB + 2 * MiB - 4 * KiB);
  EXPECT_EQ(alloc.release_cached(), 0u);

  alloc.deallocate(part, 2 * MiB);
  alloc.deallocate(small, 4 * KiB);
  EXPECT_EQ(alloc.release_cached(), 10 * MiB);
  EXPECT_EQ(source.outstanding(), 0u);
}

TEST(CachingAllocator, BadDeallocationsAreRefused) {
  RecordingSource source;
  CachingAllocator alloc(source);
  void* p = alloc.allocate(100);
  int not_ours = 0;
  EXPECT_THROW(alloc.deallocate(&not_ours, 4), Error);
  EXPECT_THROW(alloc.deallocate(p, 200), Error);
  alloc.deallocate(p, 100);
  EXPECT_THROW(alloc.deallocate(p, 100), Error);  // twice
  EXPECT_EQ(alloc.stats().num_frees, 1u);
}

TEST(CachingAllocator, DestructorReturnsEverySegment) {
  RecordingSource source;
  {
    CachingAllocator alloc(source);
    alloc.deallocate(alloc.allocate(5 * MiB), 5 * MiB);  // a 6 MiB segment
    alloc.allocate(100);                                 // still live when the allocator goes
    alloc.allocate(3 * MiB);                             // split from the cached 6 MiB
    EXPECT_EQ(source.outstanding(), 6 * MiB + 2 * MiB);
  }
  EXPECT_EQ(source.outstanding(), 0u);
  EXPECT_EQ(source.releases, 2);
}

// A live allocation in the stress tests: its block's range and a byte pattern written into it.
struct Live {
  char* ptr;
  size_t bytes;
  uint64_t block;  // the allocated_bytes it added
  unsigned char tag;
};

// Writes `tag` into the whole block when small, else into 8 bytes every 512 and at the end.
void write_pattern(const Live& l) {
  if (l.bytes <= 64 * KiB) {
    std::memset(l.ptr, l.tag, l.bytes);
    return;
  }
  for (size_t off = 0; off + 8 <= l.bytes; off += 512) std::memset(l.ptr + off, l.tag, 8);
  std::memset(l.ptr + l.bytes - 8, l.tag, 8);
}

bool pattern_intact(const Live& l) {
  const auto intact = [&l](size_t off, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (static_cast<unsigned char>(l.ptr[off + i]) != l.tag) return false;
    }
    return true;
  };
  if (l.bytes <= 64 * KiB) return intact(0, l.bytes);
  for (size_t off = 0; off + 8 <= l.bytes; off += 512) {
    if (!intact(off, 8)) return false;
  }
  return intact(l.bytes - 8, 8);
}

size_t random_size(std::mt19937_64& rng) {
  // Mostly small tensors, some large ones, a few exact multiples of the block size.
  const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
  if (kind < 6) return std::uniform_int_distribution<size_t>(1, 64 * KiB)(rng);
  if (kind < 8) return std::uniform_int_distribution<size_t>(64 * KiB, 3 * MiB)(rng);
  if (kind < 9) return std::uniform_int_distribution<size_t>(3 * MiB, 12 * MiB)(rng);
  return 512 * std::uniform_int_distribution<size_t>(1, 4096)(rng);
}

// Thousands of random allocations and frees, checking the invariants after each; `end` gets the
// stats before the final release_cached().
void stress(const CachingAllocatorOptions& options, uint64_t seed, AllocatorStats& end) {
  RecordingSource source;
  CachingAllocator alloc(source, options);
  std::mt19937_64 rng(seed);
  std::vector<Live> live;
  std::map<char*, size_t> ranges;  // live block ranges by start, to catch overlaps directly
  uint64_t ooms = 0;
  unsigned char next_tag = 1;

  const auto check = [&](int step) {
    const AllocatorStats s = alloc.stats();
    uint64_t blocks = 0, requested = 0;
    for (const Live& l : live) {
      blocks += l.block;
      requested += l.bytes;
    }
    ASSERT_LE(s.allocated_bytes, s.reserved_bytes) << "step " << step;
    ASSERT_LE(s.reserved_bytes, options.limit) << "step " << step;
    ASSERT_EQ(s.allocated_bytes, blocks) << "step " << step;
    ASSERT_EQ(s.active_bytes, blocks) << "step " << step;
    ASSERT_EQ(s.requested_bytes, requested) << "step " << step;
    ASSERT_EQ(s.active_allocs, live.size()) << "step " << step;
    ASSERT_EQ(s.num_allocs - s.num_frees, live.size()) << "step " << step;
    ASSERT_EQ(s.reserved_bytes, source.outstanding()) << "step " << step;
    ASSERT_EQ(s.segments, s.num_segment_reserves - s.num_segment_releases) << "step " << step;
    ASSERT_LE(s.inactive_split_bytes, s.reserved_bytes - s.allocated_bytes) << "step " << step;
    ASSERT_LE(s.largest_free_block_bytes, s.reserved_bytes - s.allocated_bytes);
    ASSERT_EQ(s.num_ooms, ooms) << "step " << step;
    ASSERT_LE(source.peak_outstanding, options.limit);
  };

  for (int step = 0; step < 4000; ++step) {
    const bool do_alloc =
        live.empty() || (live.size() < 300 && std::bernoulli_distribution(0.55)(rng));
    if (do_alloc) {
      const size_t bytes = random_size(rng);
      const uint64_t before = alloc.stats().allocated_bytes;
      char* p = nullptr;
      try {
        p = static_cast<char*>(alloc.allocate(bytes));
      } catch (const Error& e) {
        ASSERT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
        ++ooms;
        ASSERT_NO_FATAL_FAILURE(check(step));
        continue;
      }
      ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % 512, 0u);
      const uint64_t block = alloc.stats().allocated_bytes - before;
      const uint64_t rounded = std::max<uint64_t>(512, (bytes + 511) / 512 * 512);
      ASSERT_GE(block, rounded);
      if (rounded <= MiB) {
        ASSERT_EQ(block, rounded);
      } else if (rounded < options.max_split_size) {
        ASSERT_LE(block - rounded, MiB);
      } else {
        ASSERT_LT(block - rounded, CachingAllocator::kOversizeSlack);
      }
      const auto after = ranges.lower_bound(p);
      ASSERT_TRUE(after == ranges.end() || p + block <= after->first) << "overlaps the next block";
      if (after != ranges.begin()) {
        const auto before_it = std::prev(after);
        ASSERT_LE(before_it->first + before_it->second, p) << "overlaps the previous block";
      }
      ranges.emplace(p, block);
      live.push_back({p, bytes, block, next_tag});
      next_tag = static_cast<unsigned char>(next_tag % 255 + 1);
      write_pattern(live.back());
    } else {
      const size_t i = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
      const Live l = live[i];
      ASSERT_TRUE(pattern_intact(l)) << "block " << static_cast<void*>(l.ptr) << " was overwritten";
      live[i] = live.back();
      live.pop_back();
      ranges.erase(l.ptr);
      alloc.deallocate(l.ptr, l.bytes);
    }
    if (step % 500 == 499) alloc.release_cached();
    ASSERT_NO_FATAL_FAILURE(check(step));
  }
  for (const Live& l : live) {
    ASSERT_TRUE(pattern_intact(l));
    alloc.deallocate(l.ptr, l.bytes);
  }
  live.clear();
  ASSERT_NO_FATAL_FAILURE(check(-1));
  const AllocatorStats s = end = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.inactive_split_bytes, 0u);  // every segment coalesced back to one free block
  EXPECT_EQ(s.blocks, s.segments);
  alloc.release_cached();
  EXPECT_EQ(source.outstanding(), 0u);
  EXPECT_GT(s.num_segment_reserves, 1u);
}

TEST(CachingAllocatorStress, RandomAllocAndFreeKeepInvariants) {
  AllocatorStats end;
  stress({.limit = 96 * MiB}, 20261130, end);
  EXPECT_GT(end.num_segment_releases, 0u);
}

TEST(CachingAllocatorStress, RandomAllocAndFreeWithMaxSplitSize) {
  AllocatorStats end;
  stress({.limit = 96 * MiB, .max_split_size = 6 * MiB}, 4242, end);
  EXPECT_GT(end.num_segment_releases, 0u);
}

TEST(CachingAllocatorStress, RandomAllocAndFreeUnderATightLimit) {
  AllocatorStats end;
  stress({.limit = 24 * MiB}, 7, end);
  EXPECT_GT(end.num_ooms, 0u);
  EXPECT_GT(end.num_alloc_retries, end.num_ooms);  // some retries succeeded
}

TEST(CachingAllocator, ThreadsAllocatingAndFreeingKeepTotalsConsistent) {
  RecordingSource source;
  CachingAllocator alloc(source, {.limit = 256 * MiB});
  constexpr int kThreads = 4;
  constexpr int kSteps = 1500;
  std::vector<int> corrupted(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&alloc, &corrupted, t] {
      std::mt19937_64 rng(1000 + t);
      std::vector<Live> live;
      const auto tag = static_cast<unsigned char>(t + 1);
      for (int step = 0; step < kSteps; ++step) {
        if (live.size() < 32 && (live.empty() || std::bernoulli_distribution(0.5)(rng))) {
          const size_t bytes = std::min<size_t>(random_size(rng), 2 * MiB);
          Live l{static_cast<char*>(alloc.allocate(bytes)), bytes, 0, tag};
          write_pattern(l);
          live.push_back(l);
        } else {
          const size_t i = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
          if (!pattern_intact(live[i])) ++corrupted[t];
          alloc.deallocate(live[i].ptr, live[i].bytes);
          live[i] = live.back();
          live.pop_back();
        }
        if (step % 300 == 0) alloc.release_cached();
      }
      for (const Live& l : live) {
        if (!pattern_intact(l)) ++corrupted[t];
        alloc.deallocate(l.ptr, l.bytes);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(corrupted[t], 0) << "thread " << t;
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.requested_bytes, 0u);
  EXPECT_EQ(s.active_allocs, 0u);
  EXPECT_EQ(s.num_allocs, s.num_frees);
  EXPECT_GE(s.num_allocs, uint64_t{kThreads} * kSteps / 2);
  EXPECT_EQ(s.inactive_split_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, source.outstanding());
  alloc.release_cached();
  EXPECT_EQ(source.outstanding(), 0u);
}

TEST(CachingAllocator, TensorsAllocateThroughItAndGiveMemoryBack) {
  HostMemorySource source;
  CachingAllocator alloc(source);
  {
    Tensor t = Tensor::zeros({256, 256}, DType::F32, alloc);
    EXPECT_EQ(t.device(), Device::cpu());
    EXPECT_EQ(alloc.stats().allocated_bytes, 256u * KiB);
    EXPECT_EQ(alloc.stats().requested_bytes, 256u * KiB);
    const Tensor view = t.narrow(0, 0, 2);  // shares the storage
    t = Tensor();
    EXPECT_EQ(alloc.stats().allocated_bytes, 256u * KiB);
    EXPECT_EQ(view.to_float_vector(), std::vector<float>(512, 0.0f));
  }
  EXPECT_EQ(alloc.stats().allocated_bytes, 0u);
  {
    const Tensor a = Tensor::empty({1000}, DType::F16, alloc);
    const Tensor b =
        Tensor::from_vector({3}, std::vector<float>{1, 2, 3}).to_host_contiguous(DType::F32, alloc);
    EXPECT_EQ(b.to_float_vector(), (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(alloc.stats().active_allocs, 2u);
    EXPECT_EQ(alloc.stats().segments, 1u);
  }
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.num_frees, 3u);
  EXPECT_EQ(alloc.release_cached(), 2 * MiB);
  EXPECT_EQ(source.outstanding(), 0u);
}

TEST(CachingAllocator, ReleaseBeforeReserveKeepsReservedAtTheLargestWorkingSet) {
  // Growing one-at-a-time requests, as workspace arenas of growing shapes make: without the
  // option every size keeps its segment; with it only the live one and the new one are held.
  for (const bool release : {false, true}) {
    HostMemorySource source;
    CachingAllocator alloc(source, CachingAllocatorOptions{.release_before_reserve = release});
    void* small = alloc.allocate(4 * KiB);     // a small-pool block stays, like the weights
    void* first_mib = alloc.allocate(MiB);     // fills the first small segment up
    void* cached_small = alloc.allocate(MiB);  // a second small segment, then cached
    alloc.deallocate(cached_small, MiB);
    uint64_t largest = 0;
    for (const size_t size : {10 * MiB, 20 * MiB, 30 * MiB, 24 * MiB, 40 * MiB}) {
      void* p = alloc.allocate(size);
      largest = std::max<uint64_t>(largest, size);
      alloc.deallocate(p, size);
    }
    const AllocatorStats s = alloc.stats();
    EXPECT_EQ(s.allocated_bytes, 4 * KiB + MiB);
    if (release) {
      // The 30 MiB segment served the 24 MiB request; the 40 MiB one replaced it. The cached
      // small segment stays: only large ones are given back before a large reserve.
      EXPECT_EQ(s.reserved_bytes, 4 * MiB + largest) << "release " << release;
      EXPECT_EQ(s.num_segment_releases, 3u);
    } else {
      EXPECT_EQ(s.reserved_bytes, 4 * MiB + (10 + 20 + 30 + 40) * MiB) << "release " << release;
      EXPECT_EQ(s.num_segment_releases, 0u);
    }
    alloc.deallocate(first_mib, MiB);
    alloc.deallocate(small, 4 * KiB);
  }
}

}  // namespace
}  // namespace voxd
