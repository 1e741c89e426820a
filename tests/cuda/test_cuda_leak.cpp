// 10,000 calls of random shapes through the planned steps on the GPU (label gpu): the en-demo
// voice in f16 on a DeviceRuntime, each call a batch of 1–4 sentences of 5–80 symbols with
// forced durations of 1–6 frames, run as the server runs it (acoustic encoder and decoder steps,
// then the vocoder step, each in an arena of its planned size from the caching allocator).
// After every call the allocator's allocated bytes must be back at the weights (no leak), and its
// reserved bytes must stay within 5 % of the largest plan of the calls so far (no growth from
// caching one segment per arena size, no fragmentation). A plan is counted as the allocator
// reserves it: the weights' segments as loaded, plus the largest step's arena and carried bytes
// each rounded up to a whole large segment (MemoryBudget::footprint, what the server admits by) —
// for this small voice the 2 MiB rounding alone is more than 5 % of the plan's bytes. The largest
// plan is not the largest shape's: mid-length sequences take im2col columns (up to 64 MiB) where
// longer ones take the implicit GEMM, which needs none, so the plan of each call is what bounds it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "core/caching_allocator.h"
#include "core/tensor.h"
#include "core/workspace_plan.h"
#include "cuda_test_util.h"
#include "families/fastspeech2/voice.h"
#include "families/fastspeech2/workspace_steps.h"

namespace voxd {
namespace {

using testing::source_dir;

constexpr int kCalls = 10000;

// [B, T, C] host tensor → [B, C, T].
Tensor channels_first(const Tensor& mel) {
  const int64_t batch = mel.shape()[0];
  const int64_t frames = mel.shape()[1];
  const int64_t channels = mel.shape()[2];
  const std::vector<float> values = mel.to_float_vector();
  std::vector<float> out(values.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < frames; ++t) {
      for (int64_t c = 0; c < channels; ++c) {
        out[static_cast<size_t>((b * channels + c) * frames + t)] =
            values[static_cast<size_t>((b * frames + t) * channels + c)];
      }
    }
  }
  return Tensor::from_vector({batch, channels, frames}, out);
}

// Bytes the caching allocator reserves for a plan: `weights_reserved` (the segments holding the
// weights) plus the largest stage's arena and carried bytes, each in segments of its own.
uint64_t reserved_for(const WorkspacePlan& plan, uint64_t weights_reserved) {
  const auto segment = [](uint64_t bytes) {
    const uint64_t rounding = CachingAllocator::kLargeRounding;
    return (bytes + rounding - 1) / rounding * rounding;
  };
  uint64_t largest = 0;
  for (const StagePlan& stage : plan.stages) {
    largest = std::max(largest, segment(stage.workspace_bytes) + segment(stage.carried_bytes));
  }
  return weights_reserved + largest;
}

TEST(CudaLeak, TenThousandRandomCallsReturnToTheWeightsAndStayWithinThePlan) {
  DeviceRuntime runtime(RuntimeOptions{.backend = "cuda"});
  const auto voice =
      Voice::load(runtime.weights_context(), source_dir() + "/voices/en-demo", DType::F16);
  const FastSpeech2& acoustic = voice->acoustic();
  const HifiGan& vocoder = voice->vocoder();
  Backend& backend = runtime.backend();
  CachingAllocator& allocator = runtime.allocator();
  const uint64_t weights = runtime.weights_bytes();
  const uint64_t baseline = allocator.stats().allocated_bytes;
  const uint64_t weights_reserved = allocator.stats().reserved_bytes;
  ASSERT_GE(baseline, weights);

  constexpr int64_t kMaxBatch = 4;
  constexpr int64_t kMaxLength = 80;
  constexpr int64_t kMaxDuration = 6;
  const uint64_t largest_shape_plan =
      plan_voice(backend, *voice, weights,
                 AcousticShape{kMaxBatch, kMaxLength, kMaxLength * kMaxDuration},
                 VocoderShape{kMaxBatch, kMaxLength * kMaxDuration})
          .total_bytes();
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int64_t> batch_size(1, kMaxBatch);
  std::uniform_int_distribution<int64_t> length(5, kMaxLength);
  std::uniform_int_distribution<int64_t> duration(1, kMaxDuration);
  std::uniform_int_distribution<int64_t> symbol(1, acoustic.n_symbols() - 1);
  uint64_t largest_plan = 0;
  uint64_t largest_reserved = 0;
  uint64_t total_frames = 0;
  for (int call = 0; call < kCalls; ++call) {
    const int64_t batch = batch_size(rng);
    std::vector<std::vector<int64_t>> ids(static_cast<size_t>(batch));
    std::vector<std::vector<int64_t>> durations(static_cast<size_t>(batch));
    int64_t phonemes = 0;
    int64_t frames = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t n = length(rng);
      int64_t sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        ids[static_cast<size_t>(b)].push_back(symbol(rng));
        durations[static_cast<size_t>(b)].push_back(duration(rng));
        sum += durations[static_cast<size_t>(b)].back();
      }
      phonemes = std::max(phonemes, n);
      frames = std::max(frames, sum);
    }
    const WorkspacePlan plan =
        plan_voice(backend, *voice, weights, AcousticShape{batch, phonemes, frames},
                   VocoderShape{batch, frames});
    largest_plan = std::max(largest_plan, reserved_for(plan, weights_reserved));

    const AcousticOutput out =
        run_acoustic_steps(backend, allocator, acoustic, ids,
                           std::vector<int64_t>(static_cast<size_t>(batch), 0), {}, durations);
    ASSERT_EQ(out.mel.shape()[1], frames) << "call " << call;
    const Tensor audio = run_vocoder_step(backend, allocator, vocoder, channels_first(out.mel));
    ASSERT_EQ(audio.shape()[0], batch) << "call " << call;
    total_frames += static_cast<uint64_t>(frames);

    const AllocatorStats stats = allocator.stats();
    ASSERT_EQ(stats.allocated_bytes, baseline) << "call " << call << " leaked";
    largest_reserved = std::max(largest_reserved, stats.reserved_bytes);
    ASSERT_LE(static_cast<double>(stats.reserved_bytes), 1.05 * static_cast<double>(largest_plan))
        << "call " << call << ": reserved " << stats.reserved_bytes << " bytes in "
        << stats.segments << " segments, largest plan " << largest_plan << " (weights " << weights
        << " bytes in " << weights_reserved
        << " reserved; this call's stages: " << to_json(plan).dump() << ")";
  }
  std::printf(
      "%d calls, %llu mel frames: weights %.1f MiB in %.1f MiB of segments; largest call's plan "
      "%.1f MiB reserved (the largest shape's %.1f MiB in bytes), largest reserved %.1f MiB\n",
      kCalls, static_cast<unsigned long long>(total_frames),
      static_cast<double>(weights) / (1 << 20), static_cast<double>(weights_reserved) / (1 << 20),
      static_cast<double>(largest_plan) / (1 << 20),
      static_cast<double>(largest_shape_plan) / (1 << 20),
      static_cast<double>(largest_reserved) / (1 << 20));
}

}  // namespace
}  // namespace voxd
