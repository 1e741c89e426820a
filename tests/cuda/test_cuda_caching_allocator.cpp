// The caching allocator on real device memory (CudaMemorySource): splitting and coalescing,
// stats against cudaMemGetInfo, a hard limit below the card that fails with the allocator's
// message before cudaMalloc ever fails, a driver out-of-memory caught as the same clean error,
// release_cached handing memory back to the device, max_split_size; NVML readings against CUDA's;
// and DeviceRuntime running a voice on cuda with weights and activations on the device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_memory_source.h"
#include "backends/nvml/nvml_reader.h"
#include "backends/runtime.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/ops.h"
#include "cuda_test_util.h"
#include "families/fastspeech2/voice.h"

namespace voxd {
namespace {

using testing::relative_l2;
using testing::source_dir;

constexpr uint64_t MiB = uint64_t{1} << 20;
constexpr uint64_t GiB = uint64_t{1} << 30;

char* at(void* p, uint64_t offset) {
  return static_cast<char*>(p) + offset;
}

uint64_t device_free() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  return free_bytes;
}

// Fills `bytes` at `ptr` with `value` and reads the first and last byte back.
void expect_usable(void* ptr, uint64_t bytes, unsigned char value) {
  ASSERT_EQ(cudaMemset(ptr, value, bytes), cudaSuccess);
  unsigned char ends[2] = {0, 0};
  ASSERT_EQ(cudaMemcpy(&ends[0], ptr, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&ends[1], at(ptr, bytes - 1), 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(ends[0], value);
  EXPECT_EQ(ends[1], value);
}

TEST(CudaCachingAllocator, SplitsASegmentAndCoalescesItBack) {
  CudaMemorySource source(0);
  CachingAllocator alloc(source);
  void* whole = alloc.allocate(16 * MiB);
  alloc.deallocate(whole, 16 * MiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(alloc.allocate(4 * MiB));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(blocks[i], at(whole, i * 4 * MiB));
    expect_usable(blocks[i], 4 * MiB, static_cast<unsigned char>(i + 1));
  }
  // Writing each block left its neighbours alone.
  unsigned char first = 0;
  ASSERT_EQ(cudaMemcpy(&first, blocks[0], 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(first, 1);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.num_segment_reserves, 1u);
  EXPECT_EQ(s.blocks, 4u);
  EXPECT_EQ(s.inactive_split_bytes, 4 * MiB);
  for (int i : {2, 0, 1}) alloc.deallocate(blocks[i], 4 * MiB);
  s = alloc.stats();
  EXPECT_EQ(s.blocks, 1u);
  EXPECT_EQ(s.largest_free_block_bytes, 16 * MiB);
  EXPECT_EQ(s.inactive_split_bytes, 0u);

  // Small requests share one 2 MiB segment.
  void* a = alloc.allocate(1000);
  void* b = alloc.allocate(512);
  EXPECT_EQ(b, at(a, 1024));
  EXPECT_EQ(alloc.stats().reserved_bytes, 18 * MiB);
  alloc.deallocate(a, 1000);
  alloc.deallocate(b, 512);
  EXPECT_EQ(source.failed_reserves(), 0u);
}

TEST(CudaCachingAllocator, StatsAddUpAndMatchTheDevice) {
  CudaMemorySource source(0);
  const uint64_t free_before = device_free();
  CachingAllocator alloc(source);
  void* small = alloc.allocate(100);
  void* large = alloc.allocate(3 * MiB);
  void* larger = alloc.allocate(64 * MiB + 1);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.requested_bytes, 100 + 3 * MiB + 64 * MiB + 1);
  // 512 B; 3 MiB (its 4 MiB segment's 1 MiB rest is not split off, so all 4 MiB count); 64 MiB
  // + 512 B from a 66 MiB segment whose rest is split off.
  EXPECT_EQ(s.allocated_bytes, 512 + 4 * MiB + 64 * MiB + 512);
  EXPECT_EQ(s.reserved_bytes, 2 * MiB + 4 * MiB + 66 * MiB);
  EXPECT_EQ(s.segments, 3u);
  EXPECT_EQ(s.active_allocs, 3u);
  EXPECT_EQ(s.active_bytes, s.allocated_bytes);
  // The driver lost at least what the allocator reserved, and not much more.
  const uint64_t taken = free_before - device_free();
  EXPECT_GE(taken, s.reserved_bytes);
  EXPECT_LE(taken, s.reserved_bytes + 64 * MiB);

  alloc.deallocate(larger, 64 * MiB + 1);
  alloc.deallocate(small, 100);
  s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 4 * MiB);
  EXPECT_EQ(s.peak_allocated_bytes, 512 + 4 * MiB + 64 * MiB + 512);
  EXPECT_EQ(s.total_allocated_bytes, s.peak_allocated_bytes);
  EXPECT_EQ(s.num_allocs, 3u);
  EXPECT_EQ(s.num_frees, 2u);
  EXPECT_EQ(s.reserved_bytes, 72 * MiB);  // freed blocks stay cached
  alloc.deallocate(large, 3 * MiB);
}

TEST(CudaCachingAllocator, AHardLimitFailsCleanlyBeforeTheDriverDoes) {
  CudaMemorySource source(0);
  ASSERT_GT(source.memory_info().free_bytes, 2 * GiB);
  CachingAllocator alloc(source, {.limit = GiB});
  void* kept = alloc.allocate(512 * MiB);
  try {
    alloc.allocate(768 * MiB);
    ADD_FAILURE() << "allocated past the 1 GiB limit";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("out of memory: requested 768.00 MiB, limit 1.00 GiB, reserved "
                            "512.00 MiB",
                            0),
              0u)
        << message;
    EXPECT_NE(message.find("would cross the limit"), std::string::npos) << message;
    EXPECT_NE(message.find("raise the memory limit"), std::string::npos) << message;
  }
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.num_alloc_retries, 1u);
  EXPECT_LE(s.peak_reserved_bytes, GiB);
  EXPECT_EQ(source.failed_reserves(), 0u);  // cudaMalloc was never asked past the limit
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  // The device and the allocator still work.
  expect_usable(kept, 512 * MiB, 7);
  void* more = alloc.allocate(256 * MiB);
  expect_usable(more, 256 * MiB, 9);
  alloc.deallocate(more, 256 * MiB);
  alloc.deallocate(kept, 512 * MiB);
}

TEST(CudaCachingAllocator, ADriverOutOfMemoryBecomesTheSameCleanError) {
  CudaMemorySource source(0);
  CachingAllocator alloc(source);
  try {
    alloc.allocate(uint64_t{1} << 50);  // 1 PiB, more than any device has
    ADD_FAILURE() << "a 1 PiB allocation succeeded";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("out of memory: requested 1.00 PiB, limit none", 0), 0u) << message;
    EXPECT_NE(message.find("is more than the cuda:0 memory source has free"), std::string::npos)
        << message;
  }
  EXPECT_EQ(source.failed_reserves(), 2u);  // the attempt and the retry
  EXPECT_EQ(alloc.stats().num_ooms, 1u);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void* p = alloc.allocate(MiB);
  expect_usable(p, MiB, 3);
  alloc.deallocate(p, MiB);
}

TEST(CudaCachingAllocator, ReleaseCachedHandsMemoryBackToTheDevice) {
  CudaMemorySource source(0);
  CachingAllocator alloc(source);
  void* p = alloc.allocate(GiB);
  alloc.deallocate(p, GiB);
  EXPECT_EQ(alloc.release_cached_idle(std::chrono::hours(1)), 0u);  // freed just now
  const uint64_t free_cached = device_free();
  EXPECT_EQ(alloc.release_cached(), GiB);
  const uint64_t free_released = device_free();
  EXPECT_GE(free_released, free_cached + GiB - 16 * MiB);
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
  EXPECT_EQ(alloc.stats().num_segment_releases, 1u);

  p = alloc.allocate(GiB);
  alloc.deallocate(p, GiB);
  EXPECT_EQ(alloc.release_cached_idle(std::chrono::seconds(0)), GiB);
  EXPECT_GE(device_free(), free_released - 16 * MiB);
}

TEST(CudaCachingAllocator, MaxSplitSizeKeepsBigBlocksWhole) {
  CudaMemorySource source(0);
  CachingAllocator alloc(source, {.max_split_size = 64 * MiB});
  void* big = alloc.allocate(100 * MiB);
  alloc.deallocate(big, 100 * MiB);
  // A request below max_split_size may not cut the 100 MiB block: it gets its own segment.
  void* medium = alloc.allocate(10 * MiB);
  EXPECT_NE(medium, big);
  EXPECT_EQ(alloc.stats().num_segment_reserves, 2u);
  alloc.deallocate(medium, 10 * MiB);
  // 90 MiB takes the 100 MiB block whole (10 MiB wasted is under the 20 MiB slack) ...
  void* near = alloc.allocate(90 * MiB);
  EXPECT_EQ(near, big);
  EXPECT_EQ(alloc.allocated_size(near), 100 * MiB);
  EXPECT_EQ(alloc.stats().num_segment_reserves, 2u);
  alloc.deallocate(near, 90 * MiB);
  // ... but 70 MiB would waste 30 MiB of it, so it gets a new segment.
  void* far = alloc.allocate(70 * MiB);
  EXPECT_NE(far, big);
  EXPECT_EQ(alloc.stats().num_segment_reserves, 3u);
  EXPECT_EQ(alloc.stats().inactive_split_bytes, 0u);
  expect_usable(far, 70 * MiB, 5);
  alloc.deallocate(far, 70 * MiB);
}

TEST(CudaNvml, ReadingsAgreeWithCuda) {
  const NvmlReader nvml;
  ASSERT_TRUE(nvml.available()) << nvml.reason();
  CudaMemorySource source(0);
  const CudaMemoryInfo cuda = source.memory_info();
  const DeviceReading before = nvml.read_pci_bus_id(source.pci_bus_id());
  ASSERT_TRUE(before.available) << before.reason;
  EXPECT_EQ(before.source, "NVML");
  EXPECT_FALSE(before.name.empty());
  EXPECT_FALSE(before.driver_version.empty());
  // The two totals may differ by what the driver keeps for itself: allow 5 %.
  const double ratio = static_cast<double>(before.total_bytes) / cuda.total_bytes;
  EXPECT_NEAR(ratio, 1.0, 0.05) << before.total_bytes << " vs " << cuda.total_bytes;
  EXPECT_LE(before.used_bytes, before.total_bytes);
  if (before.gpu_utilization.has_value()) {  // not reported on MIG instances
    EXPECT_LE(*before.gpu_utilization, 100u);
    EXPECT_LE(*before.memory_utilization, 100u);
  }
  EXPECT_EQ(nvml.read(0).total_bytes, before.total_bytes);  // one GPU: index 0 is the same

  CachingAllocator alloc(source);
  void* p = alloc.allocate(GiB);
  const DeviceReading after = nvml.read_pci_bus_id(source.pci_bus_id());
  EXPECT_GE(after.used_bytes, before.used_bytes + GiB - 64 * MiB);
  alloc.deallocate(p, GiB);
}

const std::string kVoice = "/tests/fixtures/voices/tiny-arpabet";

// The tiny voice's acoustic model and vocoder on `runtime`, with fixed durations so devices agree
// on the frames; returns the audio on the host.
Tensor speak(DeviceRuntime& runtime, const Voice& voice) {
  Context& ctx = runtime.context();
  const std::vector<int64_t> ids = {12, 40, 7, 51, 23, 60, 11};
  const AcousticOutput acoustic = voice.acoustic().forward(
      ctx, {ids}, {}, SynthesisControls{}, nullptr, {std::vector<int64_t>(ids.size(), 3)});
  EXPECT_EQ(acoustic.mel.device(), runtime.device());
  const Tensor mel = ops::contiguous(ctx, acoustic.mel.transpose(1, 2));
  const Tensor audio = voice.vocoder().forward(ctx, mel);
  EXPECT_EQ(audio.device(), runtime.device());
  return ops::to_host(ctx, audio);
}

TEST(CudaRuntime, RunsAVoiceWithWeightsAndActivationsOnTheDevice) {
  DeviceRuntime host(RuntimeOptions{.backend = "reference"});
  const auto host_voice = Voice::load(host.weights_context(), source_dir() + kVoice);
  const Tensor want = speak(host, *host_voice);

  DeviceRuntime cuda(
      RuntimeOptions{.backend = "cuda", .memory_limit = MemoryAmount::parse("0.5", "--limit")});
  EXPECT_EQ(cuda.device(), Device::cuda(0));
  EXPECT_EQ(cuda.allocator().device(), Device::cuda(0));
  const auto voice = Voice::load(cuda.weights_context(), source_dir() + kVoice);
  const uint64_t weights = cuda.weights_bytes();
  EXPECT_GT(weights, 0u);
  const Tensor audio = speak(cuda, *voice);
  EXPECT_LE(relative_l2(audio, want), 1e-3);

  const AllocatorStats s = cuda.allocator().stats();
  EXPECT_GT(s.peak_allocated_bytes, weights);  // activations went through the device allocator
  EXPECT_EQ(s.allocated_bytes, weights);       // and were all freed again
  const MemoryBreakdown b = cuda.breakdown();
  EXPECT_EQ(b.weights, weights);
  EXPECT_EQ(b.workspace, 0u);
  EXPECT_EQ(b.cached, s.reserved_bytes - s.allocated_bytes);
  EXPECT_EQ(cuda.limit_bytes(), b.total / 2);
  EXPECT_LE(b.free, b.total);

  const std::string text = cuda.memory_summary();
  EXPECT_NE(text.find("voxd memory summary, device cuda:0"), std::string::npos) << text;
  EXPECT_NE(text.find("| Device (NVML)         | "), std::string::npos) << text;
  EXPECT_NE(text.find("| Weights               |"), std::string::npos) << text;
  const nlohmann::json j = cuda.memory_summary_json();
  EXPECT_EQ(j.at("breakdown").at("weights"), weights);
  EXPECT_TRUE(j.at("device_reading").at("available").get<bool>()) << j.dump();
}

}  // namespace
}  // namespace voxd
