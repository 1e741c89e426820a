// CachingAllocator's release of idle cached segments (release_cached_idle) and the block sizes it
// reports for live pointers (allocated_size), over host memory.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/memory_source.h"

namespace voxd {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

constexpr uint64_t MiB = 1024 * 1024;

TEST(CachingAllocatorRelease, IdleReleaseKeepsRecentlyFreedSegments) {
  HostMemorySource source;
  CachingAllocator alloc(source);
  void* old_block = alloc.allocate(4 * MiB);
  void* new_block = alloc.allocate(8 * MiB);
  alloc.deallocate(old_block, 4 * MiB);
  const Clock::time_point old_freed = Clock::now();
  EXPECT_EQ(alloc.release_cached_idle(seconds(10), old_freed + seconds(5)), 0u);
  EXPECT_EQ(alloc.stats().reserved_bytes, 12 * MiB);

  // Both segments are free now, but at old_freed + 25 ms + 10 s only the first has been free
  // for 10 s: the second was freed 50 ms after old_freed.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  alloc.deallocate(new_block, 8 * MiB);
  const Clock::time_point at = old_freed + std::chrono::milliseconds(25) + seconds(10);
  EXPECT_EQ(alloc.release_cached_idle(seconds(10), at), 4 * MiB);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, 8 * MiB);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.num_segment_releases, 1u);
  EXPECT_EQ(source.outstanding(), 8 * MiB);

  EXPECT_EQ(alloc.release_cached_idle(seconds(0)), 8 * MiB);
  s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.segments, 0u);
  EXPECT_EQ(source.outstanding(), 0u);
}

TEST(CachingAllocatorRelease, IdleReleaseNeverTakesSplitOrLiveSegments) {
  HostMemorySource source;
  CachingAllocator alloc(source);
  void* a = alloc.allocate(1000);  // a 2 MiB small segment, split
  void* b = alloc.allocate(8 * MiB);
  const Clock::time_point later = Clock::now() + std::chrono::hours(1);
  EXPECT_EQ(alloc.release_cached_idle(seconds(1), later), 0u);
  EXPECT_EQ(alloc.stats().reserved_bytes, 10 * MiB);
  alloc.deallocate(b, 8 * MiB);
  EXPECT_EQ(alloc.release_cached_idle(seconds(1), later), 8 * MiB);
  EXPECT_EQ(alloc.stats().reserved_bytes, 2 * MiB);
  alloc.deallocate(a, 1000);
}

TEST(CachingAllocatorRelease, FreeingASegmentAgainRestartsItsIdleTime) {
  HostMemorySource source;
  CachingAllocator alloc(source);
  void* p = alloc.allocate(4 * MiB);
  alloc.deallocate(p, 4 * MiB);
  const Clock::time_point first_free = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  p = alloc.allocate(4 * MiB);
  EXPECT_EQ(alloc.stats().num_segment_reserves, 1u);
  alloc.deallocate(p, 4 * MiB);
  // At first_free + 25 ms + 1 s, a segment last freed by first_free has been idle for 1 s; one
  // freed 50 ms later has not.
  const Clock::time_point at = first_free + std::chrono::milliseconds(25) + seconds(1);
  EXPECT_EQ(alloc.release_cached_idle(seconds(1), at), 0u);
  EXPECT_EQ(alloc.release_cached_idle(seconds(1), Clock::now() + seconds(1)), 4 * MiB);
}

TEST(CachingAllocatorRelease, AllocatedSizeIsTheBlockThatAllocatedBytesCounts) {
  HostMemorySource source;
  CachingAllocator alloc(source);
  void* small = alloc.allocate(1000);
  EXPECT_EQ(alloc.allocated_size(small), 1024u);
  // 3 MiB + 1 KiB takes a 4 MiB segment whose 1023 KiB rest is too small to split off.
  void* whole = alloc.allocate(3 * MiB + 1024);
  EXPECT_EQ(alloc.allocated_size(whole), 4 * MiB);
  EXPECT_EQ(alloc.stats().allocated_bytes, 1024 + 4 * MiB);
  alloc.deallocate(small, 1000);
  EXPECT_THROW(alloc.allocated_size(small), Error);
  int not_allocated = 0;
  EXPECT_THROW(alloc.allocated_size(&not_allocated), Error);
  alloc.deallocate(whole, 3 * MiB + 1024);
}

}  // namespace
}  // namespace voxd
