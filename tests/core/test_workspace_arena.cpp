// WorkspaceArena: best fit, coalescing, the high-water mark, the same offsets for the same
// sequence in planning and running arenas, overflow, misuse; WorkspacePlan's totals and JSON.

#include <gtest/gtest.h>

#include <cstdint>
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

TEST(WorkspaceArena, SameSequenceGetsTheSameOffsetsAndFitsItsPlanExactly) {
  WorkspaceArena plan(Device::cpu());
  const std::vector<size_t> planned = replay(plan, 7);
  ASSERT_GT(plan.high_water(), 0u);
  CountingAllocator upstream;
  {
    WorkspaceArena run(upstream, plan.high_water());
    EXPECT_FALSE(run.planning());
    EXPECT_EQ(upstream.allocations, 1);
    EXPECT_EQ(upstream.outstanding, plan.high_water());
    EXPECT_EQ(replay(run, 7), planned);
    EXPECT_EQ(run.high_water(), plan.high_water());
    EXPECT_EQ(run.stats().reserved_bytes, plan.high_water());
  }
  // The block goes back in one piece when the arena goes.
  EXPECT_EQ(upstream.frees, 1);
  EXPECT_EQ(upstream.outstanding, 0u);
}

TEST(WorkspaceArena, RunningArenaThrowsWhenARequestDoesNotFit) {
  CountingAllocator upstream;
  WorkspaceArena arena(upstream, 4 * A);
  void* a = arena.allocate(3 * A);
  try {
    arena.allocate(2 * A);
    ADD_FAILURE() << "a request past the capacity succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("past the arena's 1024"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("planned"), std::string::npos) << e.what();
  }
  EXPECT_EQ(arena.stats().num_ooms, 1u);
  // The failed request left nothing behind: the last block still fits.
  void* b = arena.allocate(A);
  EXPECT_EQ(arena.offset_of(b), 3 * A);
  arena.deallocate(a, 3 * A);
  arena.deallocate(b, A);
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
  CountingAllocator upstream;
  WorkspaceArena arena(upstream, 8 * A);
  {
    Tensor t = Tensor::empty({10, 10}, DType::F32, arena);
    t.data<float>()[99] = 1.5f;  // a running arena's memory is real
    EXPECT_EQ(arena.in_use(), 2 * A);
    EXPECT_EQ(t.to_float_vector()[99], 1.5f);
  }
  EXPECT_EQ(arena.in_use(), 0u);
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
