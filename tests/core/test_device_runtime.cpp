// DeviceRuntime on the cpu backend: tensors from both contexts come from its caching allocator,
// both lanes are lane 0,
// weights show apart from workspaces in the breakdown and the summary, the limit and
// max_split_size are resolved and checked, cached memory can be released, and memory another
// process takes from the device is counted apart; the host's free memory from /proc/meminfo.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "backends/runtime.h"
#include "core/error.h"
#include "core/memory_source.h"
#include "core/ops.h"
#include "families/fastspeech2/voice.h"

namespace voxd {
namespace {

constexpr uint64_t MiB = 1024 * 1024;

const std::string kVoice = std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/voices/tiny-arpabet";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A memory source of a device the cpu backend is not.
class NoDeviceSource final : public MemorySource {
 public:
  void* reserve(size_t) override { return nullptr; }
  void release(void*, size_t) override {}
  Device device() const override { return Device::cuda(3); }
  SourceMemory memory() const override { return {}; }
  bool commits_on_reserve() const override { return false; }
};

// The InputError message DeviceRuntime(options) throws; fails the test when it throws nothing.
std::string input_error(const RuntimeOptions& options) {
  try {
    DeviceRuntime runtime(options);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "DeviceRuntime accepted the options";
  return "";
}

TEST(DeviceRuntime, BothContextsAllocateFromTheCachingAllocator) {
  DeviceRuntime runtime(RuntimeOptions{});
  EXPECT_EQ(runtime.device(), Device::cpu());
  EXPECT_EQ(runtime.backend().name(), "cpu");
  EXPECT_EQ(&runtime.context().allocator(), &runtime.allocator());
  EXPECT_EQ(&runtime.context().backend(), &runtime.backend());
  EXPECT_EQ(&runtime.weights_context().backend(), &runtime.backend());
  {
    const Tensor activation = ops::zeros(runtime.context(), {1000});
    const Tensor weight = ops::zeros(runtime.weights_context(), {MiB / 2});  // 2 MiB
    const AllocatorStats s = runtime.allocator().stats();
    EXPECT_EQ(s.num_allocs, 2u);
    EXPECT_EQ(s.allocated_bytes, 4096u + 2 * MiB);
    EXPECT_EQ(runtime.weights_bytes(), 2 * MiB);
    const MemoryBreakdown b = runtime.breakdown();
    EXPECT_EQ(b.weights, 2 * MiB);
    EXPECT_EQ(b.workspace, 4096u);
    EXPECT_EQ(b.cached, s.reserved_bytes - s.allocated_bytes);
    EXPECT_GT(b.total, 0u);  // physical memory
    EXPECT_LE(b.free, b.total);
  }
  EXPECT_EQ(runtime.weights_bytes(), 0u);
  EXPECT_EQ(runtime.allocator().stats().num_frees, 2u);
  EXPECT_FALSE(runtime.device_reading().has_value());  // no NVML on the host
}

TEST(DeviceRuntime, AHostBackendsLanesAreAllLaneZero) {
  DeviceRuntime runtime(RuntimeOptions{});
  EXPECT_EQ(runtime.lanes(), 1u);
  for (size_t lane = 0; lane < DeviceRuntime::kLanes; ++lane) {
    EXPECT_EQ(&runtime.backend(lane), &runtime.backend());
    EXPECT_EQ(&runtime.context(lane), &runtime.context());
    EXPECT_EQ(&runtime.persistent_context(lane), &runtime.persistent_context());
  }
  EXPECT_THROW(runtime.backend(DeviceRuntime::kLanes), Error);
}

TEST(DeviceRuntime, RunsAVoiceAndShowsWeightsApartFromWorkspaces) {
  DeviceRuntime runtime(RuntimeOptions{.backend = "cpu", .threads = 1});
  const auto voice = Voice::load(runtime.weights_context(), kVoice);
  const uint64_t weights = runtime.weights_bytes();
  EXPECT_GT(weights, 0u);
  EXPECT_EQ(runtime.allocator().stats().allocated_bytes, weights);
  {
    const Tensor mel = ops::zeros(runtime.context(), {1, 80, 12});
    const Tensor audio = voice->vocoder().forward(runtime.context(), mel);
    EXPECT_EQ(audio.shape(), (Shape{1, 12 * 256}));
    EXPECT_EQ(runtime.breakdown().workspace, runtime.allocator().stats().allocated_bytes - weights);
    EXPECT_GT(runtime.breakdown().workspace, 0u);
  }
  const AllocatorStats s = runtime.allocator().stats();
  EXPECT_GT(s.peak_allocated_bytes, weights);  // activations came from the same allocator
  EXPECT_EQ(runtime.breakdown().workspace, 0u);
  EXPECT_EQ(runtime.weights_bytes(), weights);

  const std::string text = runtime.memory_summary();
  for (const char* row :
       {"voxd memory summary, device cpu", "| Allocated memory      |", "| GPU reserved memory   |",
        "| Weights               |", "| Workspaces            |      0 B   |",
        "| Allocator cache       |", "| Free                  |", "| Total                 |"}) {
    EXPECT_TRUE(contains(text, row)) << row << " missing in\n" << text;
  }
  EXPECT_FALSE(contains(text, "NVML")) << text;
  const nlohmann::json j = runtime.memory_summary_json();
  EXPECT_EQ(j.at("device"), "cpu");
  EXPECT_EQ(j.at("breakdown").at("weights"), weights);
  EXPECT_EQ(j.at("stats").at("peak_allocated_bytes"), s.peak_allocated_bytes);
  EXPECT_FALSE(j.contains("device_reading"));
}

// Persistent buffers (recorded graphs' arenas) count at the size of the block they take: a
// request that reuses a cached block less than 1 MiB larger gets the whole block, unsplit, and
// the difference must not look like workspace left behind (the leak watchdog's arithmetic).
TEST(DeviceRuntime, PersistentBuffersCountAtTheirBlocksSize) {
  DeviceRuntime runtime(RuntimeOptions{});
  { const Tensor scratch = ops::empty(runtime.context(), {static_cast<int64_t>(MiB)}); }  // 4 MiB
  const uint64_t weights = runtime.weights_bytes();
  {
    const Tensor kept = ops::empty(runtime.persistent_context(), {800 * 1024});  // 3.125 MiB
    EXPECT_EQ(runtime.persistent_bytes(), 4 * MiB);  // the cached 4 MiB block, unsplit
    const MemoryBreakdown b = runtime.breakdown();
    EXPECT_EQ(b.workspace, runtime.persistent_bytes());
    EXPECT_EQ(runtime.allocator().stats().allocated_bytes, weights + runtime.persistent_bytes());
  }
  EXPECT_EQ(runtime.persistent_bytes(), 0u);
  EXPECT_EQ(runtime.breakdown().workspace, 0u);
}

TEST(DeviceRuntime, TheLimitHoldsAndFailsCleanly) {
  DeviceRuntime runtime(RuntimeOptions{.memory_limit = MemoryAmount::bytes(8 * MiB)});
  EXPECT_EQ(runtime.limit_bytes(), 8 * MiB);
  EXPECT_EQ(runtime.allocator().stats().limit_bytes, 8 * MiB);
  const Tensor kept = ops::empty(runtime.context(), {static_cast<int64_t>(MiB)});  // 4 MiB
  try {
    ops::empty(runtime.context(), {static_cast<int64_t>(2 * MiB)});  // 8 MiB more
    ADD_FAILURE() << "allocated past the limit";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("out of memory: requested 8.00 MiB, limit 8.00 MiB", 0),
              0u)
        << e.what();
  }
  const AllocatorStats s = runtime.allocator().stats();
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_LE(s.peak_reserved_bytes, 8 * MiB);
  EXPECT_TRUE(contains(runtime.memory_summary(), "OOMs: 1")) << runtime.memory_summary();
}

TEST(DeviceRuntime, ResolvesAFractionAgainstTheDevice) {
  DeviceRuntime runtime(RuntimeOptions{.memory_limit = MemoryAmount::parse("0.5", "--limit"),
                                       .max_split_size = MemoryAmount::parse("64MiB", "--split")});
  const uint64_t total = runtime.breakdown().total;
  EXPECT_EQ(runtime.limit_bytes(), total / 2);
  EXPECT_EQ(runtime.max_split_size(), 64 * MiB);
  EXPECT_EQ(runtime.allocator().stats().max_split_size, 64 * MiB);
}

TEST(DeviceRuntime, RejectsBadOptionsWithTheOptionsName) {
  const std::string too_big = input_error(
      RuntimeOptions{.memory_limit = MemoryAmount::parse("1000TiB", "--gpu-memory-limit")});
  EXPECT_EQ(too_big.rfind("--gpu-memory-limit: 1000.00 TiB is more than cpu has", 0), 0u)
      << too_big;
  const std::string split = input_error(
      RuntimeOptions{.max_split_size = MemoryAmount::parse("2MiB", "--max-split-size")});
  EXPECT_EQ(split.rfind("--max-split-size: 2.00 MiB must be above 2.00 MiB", 0), 0u) << split;
  EXPECT_TRUE(contains(input_error(RuntimeOptions{.backend = "tpu"}), "unknown backend 'tpu'"));
}

TEST(DeviceRuntime, ReleasesCachedMemory) {
  DeviceRuntime runtime(RuntimeOptions{});
  const Tensor weight = ops::empty(runtime.weights_context(), {static_cast<int64_t>(MiB)});
  { const Tensor activation = ops::empty(runtime.context(), {static_cast<int64_t>(2 * MiB)}); }
  EXPECT_EQ(runtime.breakdown().cached, 8 * MiB);
  EXPECT_EQ(runtime.release_cached_idle(std::chrono::hours(1)), 0u);
  EXPECT_EQ(runtime.release_cached(), 8 * MiB);
  EXPECT_EQ(runtime.breakdown().cached, 0u);
  EXPECT_EQ(runtime.allocator().stats().reserved_bytes, 4 * MiB);  // the weight's segment stays
}

// A device of 64 MiB (a HostMemorySource of that capacity) from which the test takes memory as
// another process would: the breakdown's free memory falls, and outside_growth() counts what was
// taken outside the allocator since the runtime was made or last marked, not what its own
// allocator reserved.
TEST(DeviceRuntime, CountsMemoryAnotherProcessTakesFromItsDevice) {
  const auto device = std::make_shared<HostMemorySource>(64 * MiB);
  DeviceRuntime runtime(RuntimeOptions{.source = device});
  EXPECT_EQ(runtime.breakdown().total, 64 * MiB);
  EXPECT_EQ(runtime.breakdown().free, 64 * MiB);
  const Tensor activation = ops::empty(runtime.context(), {static_cast<int64_t>(2 * MiB)});
  EXPECT_EQ(runtime.breakdown().free, 56 * MiB);  // the allocator's 8 MiB segment
  EXPECT_EQ(runtime.outside_growth(), 0u);
  void* elsewhere = device->reserve(20 * MiB);
  ASSERT_NE(elsewhere, nullptr);
  EXPECT_EQ(runtime.breakdown().free, 36 * MiB);
  EXPECT_EQ(runtime.outside_growth(), 20 * MiB);
  runtime.mark_outside();
  EXPECT_EQ(runtime.outside_growth(), 0u);
  device->release(elsewhere, 20 * MiB);
  EXPECT_EQ(runtime.outside_growth(), 0u);  // less than the baseline: nothing grew
}

TEST(DeviceRuntime, RefusesAMemorySourceOfAnotherDevice) {
  EXPECT_TRUE(contains(
      input_error(RuntimeOptions{.backend = "cpu", .source = std::make_shared<NoDeviceSource>()}),
      "the memory source given for cpu is of cuda:3"));
}

// The host's free memory is what it can give without swapping (MemAvailable, page cache
// included), read from /proc/meminfo's kB figures.
TEST(HostMemory, ReadsMemAvailableAndMemTotalFromMeminfo) {
  const std::string meminfo =
      "MemTotal:       24683756 kB\nMemFree:          612344 kB\n"
      "MemAvailable:   20013520 kB\nBuffers:           81236 kB\n";
  const std::optional<SourceMemory> memory = parse_meminfo(meminfo);
  ASSERT_TRUE(memory.has_value());
  EXPECT_EQ(memory->total, uint64_t{24683756} * 1024);
  EXPECT_EQ(memory->free, uint64_t{20013520} * 1024);
  EXPECT_FALSE(parse_meminfo("MemTotal:       24683756 kB\nMemFree: 612344 kB\n").has_value());
  EXPECT_FALSE(parse_meminfo("XMemAvailable: 5 kB\nMemTotal: 10 kB\n").has_value());
  EXPECT_FALSE(parse_meminfo("MemAvailable: many kB\nMemTotal: 10 kB\n").has_value());
  const SourceMemory host = HostMemorySource().memory();
  EXPECT_GT(host.total, 0u);
  EXPECT_LE(host.free, host.total);
}

}  // namespace
}  // namespace voxd
