// WorkspaceArena: best fit while planning, coalescing, the high-water mark; layouts placed with
// the whole sequence known (within best fit's size, at least the live bytes, no overlap of blocks
// live together); running arenas giving the planned offsets, and falling back to best fit
// around the live blocks when the requests leave the layout; overflow, misuse; WorkspacePlan's
// totals and JSON.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/workspace_arena.h"
#include "core/workspace_plan.h"

namespace voxd {
namespace {

constexpr size_t A = WorkspaceArena::kAlignment;

// Host allocator that counts what the arena takes from it.
class CountingAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    ++allocations;
    outstanding += bytes;
    return host_allocator().allocate(bytes);
  }
  void deallocate(void* ptr, size_t bytes) override {
    ++frees;
    outstanding -= bytes;
    host_allocator().deallocate(ptr, bytes);
  }
  Device device() const override { return Device::cpu(); }
  AllocatorStats stats() const override { return {}; }

  int allocations = 0;
  int frees = 0;
  size_t outstanding = 0;
};

TEST(WorkspaceArena, PlacesBlocksInFreeRangesAndRoundsToTheAlignment) {
  WorkspaceArena arena(Device::cpu());
  void* a = arena.allocate(1000);  // [0, 1024)
  void* b = arena.allocate(1);     // [1024, 1280)
  void* c = arena.allocate(0);     // [1280, 1536): 0 bytes take a block too
  EXPECT_EQ(arena.offset_of(a), 0u);
  EXPECT_EQ(arena.offset_of(b), 4 * A);
  EXPECT_EQ(arena.offset_of(c), 5 * A);
  EXPECT_EQ(arena.in_use(), 6 * A);
  arena.deallocate(a, 1000);
  // The free range that fits: 300 bytes (2 blocks) go to offset 0; 600 bytes (3 blocks)
  // do not fit the 2 blocks left there and go to the end; 1 byte fills the hole.
  void* d = arena.allocate(300);
  void* e = arena.allocate(600);
  void* f = arena.allocate(1);
  EXPECT_EQ(arena.offset_of(d), 0u);
  EXPECT_EQ(arena.offset_of(e), 6 * A);
  EXPECT_EQ(arena.offset_of(f), 2 * A);
  EXPECT_EQ(arena.high_water(), 9 * A);
  for (auto [p, n] : {std::pair{b, 1}, {c, 0}, {d, 300}, {e, 600}, {f, 1}}) {
    arena.deallocate(p, static_cast<size_t>(n));
  }
  EXPECT_EQ(arena.in_use(), 0u);
}

TEST(WorkspaceArena, PutsABlockInTheSmallestRangeThatFits) {
  WorkspaceArena arena(Device::cpu());
  void* large = arena.allocate(4 * A);  // [0, 4A)
  void* keep1 = arena.allocate(A);      // [4A, 5A)
  void* small = arena.allocate(A);      // [5A, 6A)
  void* keep2 = arena.allocate(A);      // [6A, 7A)
  arena.deallocate(large, 4 * A);
  arena.deallocate(small, A);
  // One block goes to the 1-block hole, not the lower 4-block one, which then holds 4 blocks.
  void* one = arena.allocate(A);
  void* four = arena.allocate(4 * A);
  EXPECT_EQ(arena.offset_of(one), 5 * A);
  EXPECT_EQ(arena.offset_of(four), 0u);
  EXPECT_EQ(arena.high_water(), 7 * A);
  for (auto [p, n] : {std::pair{keep1, A}, {keep2, A}, {one, A}, {four, 4 * A}}) {
    arena.deallocate(p, n);
  }
  EXPECT_EQ(arena.in_use(), 0u);
}

TEST(WorkspaceArena, CoalescesFreedNeighboursInAnyOrder) {
  WorkspaceArena arena(Device::cpu());
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(arena.allocate(A));
  void* tail = arena.allocate(A);
  // Free the middle two in reverse order: they merge into one 2-block range that a 2-block
  // request fits, where it would not fit either block alone.
  arena.deallocate(blocks[2], A);
  arena.deallocate(blocks[1], A);
  void* pair = arena.allocate(2 * A);
  EXPECT_EQ(arena.offset_of(pair), A);
  EXPECT_EQ(arena.stats().blocks, 4u);  // blocks 0, pair, 3, tail; no free range left
  // Freeing everything gives back one empty arena: the next block starts at 0 again, while the
  // high-water mark remembers how far the blocks reached.
  for (void* p : {blocks[0], blocks[3], tail}) arena.deallocate(p, A);
  arena.deallocate(pair, 2 * A);
  EXPECT_EQ(arena.stats().blocks, 0u);
  void* all = arena.allocate(5 * A);
  EXPECT_EQ(arena.offset_of(all), 0u);
  EXPECT_EQ(arena.high_water(), 5 * A);
  arena.deallocate(all, 5 * A);
}

TEST(WorkspaceArena, HighWaterIsTheFurthestEndNotTheLiveBytes) {
  WorkspaceArena arena(Device::cpu());
  void* a = arena.allocate(4 * A);
  void* b = arena.allocate(A);
  arena.deallocate(a, 4 * A);
  // 5 blocks reached, 1 live; a request of 5 blocks does not fit the 4-block hole and ends at 6.
  EXPECT_EQ(arena.high_water(), 5 * A);
  EXPECT_EQ(arena.in_use(), A);
  void* c = arena.allocate(5 * A);
  EXPECT_EQ(arena.offset_of(c), 5 * A);
  EXPECT_EQ(arena.high_water(), 10 * A);
  const AllocatorStats s = arena.stats();
  EXPECT_EQ(s.allocated_bytes, 6 * A);
  EXPECT_EQ(s.peak_allocated_bytes, 6 * A);
  EXPECT_EQ(s.reserved_bytes, 10 * A);  // what a running arena would reserve
  EXPECT_EQ(s.num_allocs, 3u);
  EXPECT_EQ(s.num_frees, 1u);
  arena.deallocate(b, A);
  arena.deallocate(c, 5 * A);
}

// A seeded sequence of requests and frees, replayed against `arena`; returns every block's offset.
std::vector<size_t> replay(WorkspaceArena& arena, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::pair<void*, size_t>> live;
  std::vector<size_t> offsets;
  for (int step = 0; step < 2000; ++step) {
    if (!live.empty() && rng() % 5 < 2) {
      const size_t i = rng() % live.size();
      arena.deallocate(live[i].first, live[i].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    const size_t bytes = rng() % 3 == 0 ? rng() % 70000 : rng() % 2000;
    void* p = arena.allocate(bytes);
    offsets.push_back(arena.offset_of(p));
    live.emplace_back(p, bytes);
  }
  for (const auto& [p, bytes] : live) arena.deallocate(p, bytes);
  return offsets;
}

std::vector<size_t> offsets_of(const ArenaLayout& layout) {
  std::vector<size_t> offsets;
  for (size_t i = 0; i < layout.blocks(); ++i) offsets.push_back(layout.offset(i));
  return offsets;
}

TEST(WorkspaceArena, RunningArenaGivesEveryRequestItsPlannedOffsetAndFitsThePlanExactly) {
  WorkspaceArena plan(Device::cpu());
  const std::vector<size_t> best_fit = replay(plan, 7);
  const ArenaLayout layout = plan.layout();
  ASSERT_EQ(layout.blocks(), best_fit.size());
  EXPECT_LE(layout.bytes(), plan.high_water());
  EXPECT_GE(layout.bytes(), plan.stats().peak_allocated_bytes);
  EXPECT_NE(offsets_of(layout), best_fit);  // placed anew, not as best fit placed them
  CountingAllocator upstream;
  {
    WorkspaceArena run(upstream, layout);
    EXPECT_FALSE(run.planning());
    EXPECT_EQ(run.capacity(), layout.bytes());
    EXPECT_EQ(upstream.allocations, 1);
    EXPECT_EQ(upstream.outstanding, layout.bytes());
    EXPECT_EQ(replay(run, 7), offsets_of(layout));
    EXPECT_FALSE(run.diverged());
    EXPECT_EQ(run.high_water(), layout.bytes());
    EXPECT_EQ(run.stats().reserved_bytes, layout.bytes());
    EXPECT_EQ(run.layout().offset(5), layout.offset(5));
  }
  // The block goes back in one piece when the arena goes.
  EXPECT_EQ(upstream.frees, 1);
  EXPECT_EQ(upstream.outstanding, 0u);
}

// Best fit, placing blocks as they come, leaves a hole that a later large block cannot use;
// placed with the whole sequence known, the blocks need no more than the most bytes live at once.
TEST(WorkspaceArena, LayoutReachesTheLiveBytesWhereBestFitFragments) {
  WorkspaceArena plan(Device::cpu());
  void* a = plan.allocate(A);  // best fit: [0, A)
  void* b = plan.allocate(A);  // [A, 2A)
  plan.deallocate(a, A);
  void* c = plan.allocate(2 * A);  // the A-block hole is too small: [2A, 4A)
  plan.deallocate(b, A);
  void* d = plan.allocate(3 * A);  // the 2A-block hole too: [4A, 7A)
  plan.deallocate(c, 2 * A);
  plan.deallocate(d, 3 * A);
  EXPECT_EQ(plan.high_water(), 7 * A);
  EXPECT_EQ(plan.stats().peak_allocated_bytes, 5 * A);  // c and d

  // Largest first: d at 0, c above it; a (never live with c or d) at 0; b, live with a and c,
  // between them.
  const ArenaLayout layout = plan.layout();
  EXPECT_EQ(layout.bytes(), 5 * A);
  EXPECT_EQ(offsets_of(layout), (std::vector<size_t>{0, A, 3 * A, 0}));
  for (size_t i = 0; i < layout.blocks(); ++i) {
    EXPECT_EQ(layout.block_size(i), (std::vector<size_t>{A, A, 2 * A, 3 * A})[i]) << i;
  }

  CountingAllocator upstream;
  WorkspaceArena run(upstream, layout);
  std::vector<size_t> got;
  void* ra = run.allocate(A);
  void* rb = run.allocate(A);
  got.push_back(run.offset_of(ra));
  got.push_back(run.offset_of(rb));
  run.deallocate(ra, A);
  void* rc = run.allocate(2 * A);
  got.push_back(run.offset_of(rc));
  run.deallocate(rb, A);
  void* rd = run.allocate(3 * A);
  got.push_back(run.offset_of(rd));
  EXPECT_EQ(got, offsets_of(layout));
  EXPECT_EQ(run.high_water(), 5 * A);
  EXPECT_FALSE(run.diverged());
  const AllocatorStats stats = run.stats();
  EXPECT_EQ(stats.blocks, 2u);  // c and d, no free range between them
  EXPECT_EQ(stats.largest_free_block_bytes, 0u);
  run.deallocate(rc, 2 * A);
  run.deallocate(rd, 3 * A);
}

// A random sequence: block sizes from a few classes (many equal), lifetimes of all lengths; the
// requests with the step at which each was freed (SIZE_MAX: never).
struct Trace {
  std::vector<size_t> bytes;
  std::vector<size_t> allocated;
  std::vector<size_t> freed;
};

Trace record(WorkspaceArena& arena, uint32_t seed, int steps) {
  std::mt19937 rng(seed);
  const size_t classes[] = {1, 300, 4000, 20000, 65536, 200000, 1 << 20};
  Trace trace;
  std::vector<std::pair<void*, size_t>> live;  // pointer, request
  for (int step = 0; step < steps; ++step) {
    if (!live.empty() && rng() % 100 < 45) {
      const size_t i = rng() % live.size();
      const size_t request = live[i].second;
      arena.deallocate(live[i].first, trace.bytes[request]);
      trace.freed[request] = static_cast<size_t>(step);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    const size_t bytes = rng() % 4 == 0 ? rng() % 300000 : classes[rng() % std::size(classes)];
    live.emplace_back(arena.allocate(bytes), trace.bytes.size());
    trace.bytes.push_back(bytes);
    trace.allocated.push_back(static_cast<size_t>(step));
    trace.freed.push_back(SIZE_MAX);
  }
  for (const auto& [p, request] : live) arena.deallocate(p, trace.bytes[request]);
  return trace;
}

TEST(WorkspaceArena, LayoutsOfRandomSequencesNeverOverlapLiveBlocksAndNeverLoseToBestFit) {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    WorkspaceArena plan(Device::cpu());
    const Trace trace = record(plan, seed, 200 + 60 * static_cast<int>(seed));
    const ArenaLayout layout = plan.layout();
    ASSERT_EQ(layout.blocks(), trace.bytes.size()) << seed;
    EXPECT_GE(layout.bytes(), plan.stats().peak_allocated_bytes) << seed;
    EXPECT_LE(layout.bytes(), plan.high_water()) << seed;
    for (size_t i = 0; i < layout.blocks(); ++i) {
      ASSERT_EQ(layout.block_size(i), (std::max<size_t>(trace.bytes[i], 1) + A - 1) / A * A);
      ASSERT_EQ(layout.offset(i) % A, 0u);
      ASSERT_LE(layout.offset(i) + layout.block_size(i), layout.bytes());
      for (size_t j = 0; j < i; ++j) {
        // Block j is allocated first; it is live with block i unless freed before i comes.
        if (trace.freed[j] < trace.allocated[i]) continue;
        const bool apart = layout.offset(i) + layout.block_size(i) <= layout.offset(j) ||
                           layout.offset(j) + layout.block_size(j) <= layout.offset(i);
        ASSERT_TRUE(apart) << "seed " << seed << ": blocks " << j << " and " << i;
      }
    }
  }
}

// Layouts are made once per shape, before the step runs: thousands of blocks take milliseconds
// (the placement is O(n^2); the bound leaves room for sanitizer builds).
TEST(WorkspaceArena, LayoutOfThousandsOfBlocksIsQuick) {
  WorkspaceArena plan(Device::cpu());
  (void)record(plan, 99, 10000);
  const auto start = std::chrono::steady_clock::now();
  const ArenaLayout layout = plan.layout();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(layout.blocks(), 5000u);
  EXPECT_LT(ms, 5000.0);
  std::printf("layout of %zu blocks: %.1f ms, %.2f MiB (best fit %.2f MiB, live peak %.2f MiB)\n",
              layout.blocks(), ms, static_cast<double>(layout.bytes()) / 1048576.0,
              static_cast<double>(plan.high_water()) / 1048576.0,
              static_cast<double>(plan.stats().peak_allocated_bytes) / 1048576.0);
}

// A layout can be made while blocks are live: they are live with every block after them.
TEST(WorkspaceArena, BlocksStillLiveKeepTheirRangeToTheEnd) {
  WorkspaceArena plan(Device::cpu());
  void* kept = plan.allocate(A);
  void* gone = plan.allocate(2 * A);
  plan.deallocate(gone, 2 * A);
  void* late = plan.allocate(2 * A);
  const ArenaLayout layout = plan.layout();
  EXPECT_EQ(layout.bytes(), 3 * A);
  EXPECT_EQ(offsets_of(layout), (std::vector<size_t>{2 * A, 0, 0}));
  plan.deallocate(kept, A);
  plan.deallocate(late, 2 * A);
  EXPECT_EQ(WorkspaceArena(Device::cpu()).layout().bytes(), 0u);
}

// Equal sizes are also placed longest-lived first, where that is smaller than in order of first
// use: here first use leaves the last 2A block no gap (8A), longest-lived first reaches the live
// bytes (7A).
TEST(WorkspaceArena, LayoutAlsoPlacesEqualSizesLongestLivedFirst) {
  WorkspaceArena plan(Device::cpu());
  void* a = plan.allocate(3 * A);
  void* b = plan.allocate(3 * A);
  plan.deallocate(a, 3 * A);
  void* c = plan.allocate(2 * A);
  void* d = plan.allocate(2 * A);
  plan.deallocate(b, 3 * A);
  plan.deallocate(d, 2 * A);
  plan.deallocate(c, 2 * A);
  EXPECT_EQ(plan.high_water(), 8 * A);
  EXPECT_EQ(plan.stats().peak_allocated_bytes, 7 * A);  // b, c and d
  const ArenaLayout layout = plan.layout();
  EXPECT_EQ(layout.bytes(), 7 * A);
  // b (live longer than a) at 0, a above it; c (live longer than d) where a was, d above c.
  EXPECT_EQ(offsets_of(layout), (std::vector<size_t>{3 * A, 0, 3 * A, 5 * A}));
}

// When greedy by size loses to best fit, the layout is best fit's placement.
TEST(WorkspaceArena, LayoutIsBestFitsPlacementWhereThatIsSmaller) {
  WorkspaceArena plan(Device::cpu());
  void* a = plan.allocate(5 * A);  // best fit: [0, 5A)
  void* b = plan.allocate(4 * A);  // [5A, 9A)
  plan.deallocate(a, 5 * A);
  void* c = plan.allocate(4 * A);  // [0, 4A)
  plan.deallocate(b, 4 * A);
  void* d = plan.allocate(5 * A);  // [4A, 9A)
  plan.deallocate(c, 4 * A);
  plan.deallocate(d, 5 * A);
  // Greedy by size, in either order, puts a and d at 0 and b at 5A, leaving c, live with b and
  // d, only [9A, 13A).
  const ArenaLayout layout = plan.layout();
  EXPECT_EQ(plan.high_water(), 9 * A);
  EXPECT_EQ(layout.bytes(), 9 * A);
  EXPECT_EQ(offsets_of(layout), (std::vector<size_t>{0, 5 * A, 0, 4 * A}));
}

// A running arena whose requests leave the layout places them by best fit among the ranges free
// at that moment, blocks placed by the layout and still live included.
TEST(WorkspaceArena, ARequestOfAnotherSizeFallsBackToBestFitAroundTheLiveBlocks) {
  WorkspaceArena plan(Device::cpu());
  void* big = plan.allocate(4 * A);
  void* small = plan.allocate(2 * A);
  plan.deallocate(small, 2 * A);
  plan.deallocate(big, 4 * A);
  const ArenaLayout layout = plan.layout();
  ASSERT_EQ(offsets_of(layout), (std::vector<size_t>{0, 4 * A}));

  CountingAllocator upstream;
  WorkspaceArena run(upstream, layout);
  void* b = run.allocate(4 * A);
  EXPECT_EQ(run.offset_of(b), 0u);
  EXPECT_FALSE(run.diverged());
  void* one = run.allocate(A);  // planned: 2A
  EXPECT_TRUE(run.diverged());
  EXPECT_EQ(run.offset_of(one), 4 * A);  // not 0: the planned block there is live
  // Once off the layout, every request is placed by best fit, even one the layout would match.
  run.deallocate(b, 4 * A);
  void* two = run.allocate(2 * A);
  EXPECT_EQ(run.offset_of(two), 0u);
  void* three = run.allocate(2 * A);  // the hole between `two` and `one`
  EXPECT_EQ(run.offset_of(three), 2 * A);
  void* four = run.allocate(A);  // after `one`, the last range free
  EXPECT_EQ(run.offset_of(four), 5 * A);
  EXPECT_THROW(run.allocate(1), Error);
  for (auto [p, n] : {std::pair{one, A}, {two, 2 * A}, {three, 2 * A}, {four, A}}) {
    run.deallocate(p, n);
  }
}

TEST(WorkspaceArena, MoreRequestsThanPlannedFallBackAndThrowWhenNothingFits) {
  WorkspaceArena plan(Device::cpu());
  void* a = plan.allocate(3 * A);
  void* b = plan.allocate(A);
  plan.deallocate(a, 3 * A);
  plan.deallocate(b, A);
  CountingAllocator upstream;
  WorkspaceArena run(upstream, plan.layout());
  ASSERT_EQ(run.capacity(), 4 * A);
  void* ra = run.allocate(3 * A);
  void* rb = run.allocate(A);
  EXPECT_FALSE(run.diverged());
  run.deallocate(rb, A);
  // A third request: the range the second block had is free again.
  void* extra = run.allocate(A);
  EXPECT_TRUE(run.diverged());
  EXPECT_EQ(run.offset_of(extra), 3 * A);
  try {
    run.allocate(A);
    ADD_FAILURE() << "a request past the capacity succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("past the arena's 1024"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("planned"), std::string::npos) << e.what();
  }
  EXPECT_EQ(run.stats().num_ooms, 1u);
  // The failed request left nothing behind: freeing makes room again.
  run.deallocate(ra, 3 * A);
  void* again = run.allocate(2 * A);
  EXPECT_EQ(run.offset_of(again), 0u);
  run.deallocate(again, 2 * A);
  run.deallocate(extra, A);
}

// Blocks whose lifetimes were apart in the plan share a range; a block freed later than planned
// still holds it, so the next request leaves the layout instead of overlapping it.
TEST(WorkspaceArena, ABlockFreedLaterThanPlannedIsNotOverlapped) {
  WorkspaceArena plan(Device::cpu());
  void* x = plan.allocate(4 * A);
  plan.deallocate(x, 4 * A);
  void* a = plan.allocate(2 * A);
  plan.deallocate(a, 2 * A);
  void* b = plan.allocate(2 * A);
  plan.deallocate(b, 2 * A);
  const ArenaLayout layout = plan.layout();
  ASSERT_EQ(offsets_of(layout), (std::vector<size_t>{0, 0, 0}));
  ASSERT_EQ(layout.bytes(), 4 * A);

  CountingAllocator upstream;
  WorkspaceArena run(upstream, layout);
  void* rx = run.allocate(4 * A);
  run.deallocate(rx, 4 * A);
  void* ra = run.allocate(2 * A);
  void* rb = run.allocate(2 * A);  // `a` is still live
  EXPECT_TRUE(run.diverged());
  EXPECT_EQ(run.offset_of(ra), 0u);
  EXPECT_EQ(run.offset_of(rb), 2 * A);
  run.deallocate(ra, 2 * A);
  run.deallocate(rb, 2 * A);
}

// Any sequence other than the planned one: no two live blocks ever overlap, and what does not fit
// throws.
TEST(WorkspaceArena, ADivergingRunNeverHandsOutOverlappingMemory) {
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    WorkspaceArena plan(Device::cpu());
    (void)record(plan, seed, 400);
    CountingAllocator upstream;
    WorkspaceArena run(upstream, plan.layout());
    std::mt19937 rng(seed + 100);
    std::map<size_t, size_t> live;  // offset -> size
    std::vector<std::pair<void*, size_t>> blocks;
    int failed = 0;
    for (int step = 0; step < 400; ++step) {
      if (!blocks.empty() && rng() % 100 < 45) {
        const size_t i = rng() % blocks.size();
        live.erase(run.offset_of(blocks[i].first));
        run.deallocate(blocks[i].first, blocks[i].second);
        blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      const size_t bytes = rng() % 200000;
      void* p = nullptr;
      try {
        p = run.allocate(bytes);
      } catch (const Error&) {
        ++failed;
        continue;
      }
      const size_t offset = run.offset_of(p);
      const size_t size = (std::max<size_t>(bytes, 1) + A - 1) / A * A;
      ASSERT_LE(offset + size, run.capacity());
      const auto next = live.lower_bound(offset);
      if (next != live.end()) {
        ASSERT_LE(offset + size, next->first) << seed << " " << step;
      }
      if (next != live.begin()) {
        ASSERT_LE(std::prev(next)->first + std::prev(next)->second, offset) << seed << " " << step;
      }
      live.emplace(offset, size);
      blocks.emplace_back(p, bytes);
    }
    EXPECT_TRUE(run.diverged()) << seed;
    EXPECT_EQ(run.stats().num_ooms, static_cast<uint64_t>(failed)) << seed;
    for (const auto& [p, bytes] : blocks) run.deallocate(p, bytes);
  }
}

TEST(WorkspaceArena, RejectsForeignPointersAndWrongSizes) {
  WorkspaceArena arena(Device::cuda(0));
  EXPECT_EQ(arena.device(), Device::cuda(0));
  void* a = arena.allocate(100);
  int local = 0;
  EXPECT_THROW(arena.deallocate(&local, 4), Error);
  EXPECT_THROW(arena.deallocate(a, 300), Error);
  arena.deallocate(a, 100);
  EXPECT_THROW(arena.deallocate(a, 100), Error);  // twice
}

TEST(WorkspaceArena, TensorsLiveInTheArena) {
  WorkspaceArena plan(Device::cpu());
  { const Tensor t = Tensor::empty({10, 10}, DType::F32, plan); }
  CountingAllocator upstream;
  WorkspaceArena arena(upstream, plan.layout());
  {
    Tensor t = Tensor::empty({10, 10}, DType::F32, arena);
    t.data<float>()[99] = 1.5f;  // a running arena's memory is real
    EXPECT_EQ(arena.in_use(), 2 * A);
    EXPECT_EQ(t.to_float_vector()[99], 1.5f);
  }
  EXPECT_EQ(arena.in_use(), 0u);
  EXPECT_FALSE(arena.diverged());
}

TEST(WorkspacePlan, TotalIsWeightsPlusTheLargestStepAndJsonSaysSo) {
  WorkspacePlan plan;
  plan.device = "cuda:0";
  plan.dtype = "F16";
  plan.weights_bytes = 1000;
  plan.stages = {{"acoustic encoder", "batch 2 x 10 phonemes", 300, 50},
                 {"acoustic decoder", "batch 2 x 10 phonemes -> 80 frames", 600, 50},
                 {"vocoder", "2 chunks x 80 frames", 640, 0}};
  EXPECT_EQ(plan.stages[1].peak_bytes(), 650u);
  EXPECT_EQ(plan.total_bytes(), 1650u);
  const nlohmann::json j = to_json(plan);
  EXPECT_EQ(j.at("total_bytes"), 1650);
  EXPECT_EQ(j.at("weights_bytes"), 1000);
  EXPECT_EQ(j.at("device"), "cuda:0");
  ASSERT_EQ(j.at("stages").size(), 3u);
  EXPECT_EQ(j.at("stages")[1].at("peak_bytes"), 650);
  EXPECT_EQ(j.at("stages")[0].at("carried_bytes"), 50);
  EXPECT_EQ(j.at("stages")[2].at("shape"), "2 chunks x 80 frames");
  EXPECT_EQ(WorkspacePlan{}.total_bytes(), 0u);
}

}  // namespace
}  // namespace voxd
