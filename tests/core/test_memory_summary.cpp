// memory_summary(): the PyTorch-style table for a known sequence of operations, the breakdown
// section, and the JSON form round-tripping.

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/memory_source.h"
#include "core/memory_summary.h"

namespace voxd {
namespace {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;
constexpr uint64_t GiB = 1024 * MiB;

// 1000 B and 4 MiB allocated, the 1000 B freed, then a 16 MiB request over the 8 MiB limit that
// empties the cache (the small segment) and fails.
AllocatorStats known_sequence() {
  HostMemorySource source;
  CachingAllocator alloc(source, {.limit = 8 * MiB});
  void* a = alloc.allocate(1000);
  void* b = alloc.allocate(4 * MiB);
  alloc.deallocate(a, 1000);
  EXPECT_THROW(alloc.allocate(16 * MiB), Error);
  const AllocatorStats s = alloc.stats();
  alloc.deallocate(b, 4 * MiB);
  return s;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(MemorySummary, TableHasPyTorchRowsWithTheExpectedNumbers) {
  const std::string text = memory_summary(known_sequence(), Device::cuda(0));
  // Sizes print as PyTorch does: the largest unit that keeps 768 or more of it, rounded down.
  for (const char* line : {
           "|                    voxd memory summary, device cuda:0                     |",
           "|               OOMs: 1               |          alloc retries: 1           |",
           "|           limit: 8.00 MiB           |        max split size: none         |",
           "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |",
           // 4 MiB live; peak 4 MiB + 1 KiB; 1 KiB freed.
           "| Allocated memory      |   4096 KiB |   4097 KiB |   4097 KiB |   1024 B   |",
           "| Active memory         |   4096 KiB |   4097 KiB |   4097 KiB |   1024 B   |",
           "| Requested memory      |   4096 KiB |   4096 KiB |   4096 KiB |   1000 B   |",
           // a 2 MiB small segment and a 4 MiB large one; the small one released by the retry.
           "| GPU reserved memory   |   4096 KiB |   6144 KiB |   6144 KiB |   2048 KiB |",
           // the tail of the small segment while 1000 B lived in it.
           "| Non-releasable memory |      0 B   |   2047 KiB |        n/a |        n/a |",
           "| Allocations           |       1    |       2    |       2    |       1    |",
           "| Active allocs         |       1    |       2    |       2    |       1    |",
           "| GPU reserved segments |       1    |       2    |       2    |       1    |",
           "| Non-releasable allocs |       0    |       1    |        n/a |        n/a |",
       }) {
    EXPECT_TRUE(has_line(text, line)) << "missing: " << line << "\nin:\n" << text;
  }
  EXPECT_NE(text.find("Oversize allocations"), std::string::npos);  // named as not tracked
  EXPECT_NE(text.find("per-pool rows"), std::string::npos);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_EQ(line.size(), 77u) << line;
    EXPECT_EQ(line.front(), '|');
    EXPECT_EQ(line.back(), '|');
  }
}

TEST(MemorySummary, BreakdownShowsWeightsWorkspacesCacheAndFreeApart) {
  const MemoryBreakdown b{
      .weights = GiB, .workspace = 256 * MiB, .cached = 2 * MiB, .free = 2 * GiB, .total = 4 * GiB};
  const std::string text = memory_summary(AllocatorStats{}, Device::cuda(1), b);
  for (const char* line : {
           "|     Device memory     |   Bytes    | Share of total                       |",
           "| Weights               |   1024 MiB |  25.0 %                              |",
           "| Workspaces            | 262144 KiB |   6.2 %                              |",
           "| Allocator cache       |   2048 KiB |   0.0 %                              |",
           "| Free                  |   2048 MiB |  50.0 %                              |",
           "| Other                 | 784384 KiB |  18.7 %                              |",
           "| Total                 |   4096 MiB | 100.0 %                              |",
       }) {
    EXPECT_TRUE(has_line(text, line)) << "missing: " << line << "\nin:\n" << text;
  }
  const std::string unknown =
      memory_summary(AllocatorStats{}, Device::cpu(), MemoryBreakdown{.weights = 10 * MiB});
  EXPECT_NE(unknown.find("n/a (device total unknown)"), std::string::npos) << unknown;
  EXPECT_EQ(unknown.find("| Other"), std::string::npos);
  EXPECT_EQ(memory_summary(AllocatorStats{}, Device::cpu()).find("Device memory"),
            std::string::npos);
}

TEST(MemorySummary, AllocatorsWithoutTotalsShowNotTracked) {
  AllocatorStats host;  // what the plain host allocator fills in
  host.allocated_bytes = host.reserved_bytes = 3 * KiB;
  host.num_allocs = 2;
  host.num_frees = 1;
  const std::string text = memory_summary(host, Device::cpu());
  EXPECT_TRUE(has_line(
      text, "| Allocated memory      |   3072 B   |      0 B   |        n/a |        n/a |"))
      << text;
}

TEST(MemorySummary, JsonRoundTrips) {
  const AllocatorStats stats = known_sequence();
  const MemoryBreakdown breakdown{
      .weights = 1, .workspace = 2, .cached = 3, .free = 4, .total = 10};
  const nlohmann::json j = memory_summary_json(stats, Device::cuda(0), breakdown);
  const nlohmann::json parsed = nlohmann::json::parse(j.dump());
  EXPECT_EQ(parsed, j);
  EXPECT_EQ(parsed.at("device"), "cuda:0");
  EXPECT_EQ(parsed.at("stats").at("allocated_bytes"), 4 * MiB);
  EXPECT_EQ(parsed.at("stats").at("num_alloc_retries"), 1u);
  EXPECT_EQ(parsed.at("stats").at("max_split_size"), UINT64_MAX);
  EXPECT_EQ(parsed.at("stats").get<AllocatorStats>(), stats);
  EXPECT_EQ(parsed.at("breakdown").get<MemoryBreakdown>(), breakdown);
  EXPECT_FALSE(memory_summary_json(stats, Device::cpu()).contains("breakdown"));

  nlohmann::json missing = parsed.at("stats");
  missing.erase("peak_segments");
  try {
    (void)missing.get<AllocatorStats>();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"peak_segments\""), std::string::npos) << e.what();
  }
  nlohmann::json negative = parsed.at("breakdown");
  negative["free"] = -1;
  EXPECT_THROW((void)negative.get<MemoryBreakdown>(), Error);
}

TEST(MemorySummary, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3 * MiB), "3.00 MiB");
  EXPECT_EQ(format_bytes(5 * GiB / 4), "1.25 GiB");
}

}  // namespace
}  // namespace voxd
