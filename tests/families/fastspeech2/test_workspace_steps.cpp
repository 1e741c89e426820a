// Workspace planning of the voice's steps on the host backends: each step run in an arena of its
// planned size reaches exactly the plan and gives the same results as an unplanned run; plans by
// shape equal plans of real inputs of that shape; planning runs no kernel and reads no element;
// weights load without memory for planning; plan_voice's stages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/memory_source.h"
#include "core/safetensors.h"
#include "core/workspace_arena.h"
#include "families/fastspeech2/voice.h"
#include "families/fastspeech2/workspace_steps.h"

namespace voxd {
namespace {

const std::string kRoot = std::string(VOXD_SOURCE_DIR);
const std::string kDemoVoice = kRoot + "/voices/en-demo";
const std::string kTinyVoice = kRoot + "/tests/fixtures/voices/tiny-arpabet";

// The host heap with the peak of the bytes live at once, to compare plans with what an
// unplanned run holds.
class PeakAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    live_ += bytes;
    peak_ = std::max(peak_, live_);
    return host_allocator().allocate(bytes);
  }
  void deallocate(void* ptr, size_t bytes) override {
    live_ -= bytes;
    host_allocator().deallocate(ptr, bytes);
  }
  Device device() const override { return Device::cpu(); }
  AllocatorStats stats() const override { return {}; }
  uint64_t peak() const { return peak_; }

 private:
  uint64_t live_ = 0;
  uint64_t peak_ = 0;
};

// Seeded mel-like values [chunks, 80, frames].
Tensor test_mel(int64_t chunks, int64_t frames) {
  std::vector<float> values(static_cast<size_t>(chunks * 80 * frames));
  for (size_t i = 0; i < values.size(); ++i) values[i] = -4.0f + static_cast<float>(i % 97) / 20.0f;
  return Tensor::from_vector({chunks, 80, frames}, values);
}

// Compares a plan with an unplanned run's peak: never below it (the arena holds every live
// block), and at most 5 % above it (the layout, placed with the whole step known, wastes little).
void expect_close_to_unplanned(uint64_t plan, uint64_t unplanned, const std::string& what) {
  EXPECT_GE(plan, unplanned) << what;
  EXPECT_LE(static_cast<double>(plan), 1.05 * static_cast<double>(unplanned)) << what;
  std::printf("%s: plan %llu bytes, unplanned peak %llu bytes (%.2f %%)\n", what.c_str(),
              static_cast<unsigned long long>(plan), static_cast<unsigned long long>(unplanned),
              100.0 * (static_cast<double>(plan) / static_cast<double>(unplanned) - 1.0));
}

class VocoderStep : public ::testing::TestWithParam<std::string> {};

TEST_P(VocoderStep, RunsInItsPlannedArenaWithTheUnplannedResult) {
  const auto backend = make_backend(GetParam(), 2);
  Context load(*backend, host_allocator());
  const auto voice = Voice::load(load, kDemoVoice, DType::F32, Voice::Parts::VocoderOnly);
  const HifiGan& model = voice->vocoder();
  for (const auto& [chunks, frames] : {std::pair<int64_t, int64_t>{1, 7}, {3, 24}}) {
    const std::string what =
        GetParam() + " vocoder " + std::to_string(chunks) + " x " + std::to_string(frames);
    const Tensor mel = test_mel(chunks, frames);
    PeakAllocator plain;
    Context ctx(*backend, plain);
    const Tensor want = ops::to_host(ctx, model.forward(ctx, ops::to_device(ctx, mel)));

    StepMemory memory;
    const Tensor audio = run_vocoder_step(*backend, host_allocator(), model, mel, &memory);
    EXPECT_EQ(memory.high_water_bytes, memory.planned_bytes) << what;
    EXPECT_EQ(memory.planned_bytes, plan_vocoder(*backend, model, chunks, frames).bytes()) << what;
    ASSERT_EQ(audio.shape(), want.shape()) << what;
    EXPECT_EQ(audio.to_float_vector(), want.to_float_vector()) << what;
    expect_close_to_unplanned(memory.planned_bytes, plain.peak(), what);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, VocoderStep, ::testing::Values("cpu", "reference"));

TEST(AcousticSteps, RunInTheirPlannedArenasWithTheUnplannedResult) {
  const auto backend = make_backend("cpu", 2);
  Context load(*backend, host_allocator());
  const auto voice = Voice::load(load, kDemoVoice);
  const FastSpeech2& model = voice->acoustic();
  const std::vector<std::vector<int64_t>> ids = {{12, 40, 7, 51, 9, 33, 20, 8, 14, 60, 3},
                                                 {5, 6, 7, 8, 9}};
  const SynthesisControls controls{};
  PeakAllocator plain;
  Context ctx(*backend, plain);
  const AcousticOutput want = model.forward(ctx, ids, {}, controls);

  std::vector<StepMemory> memory;
  const AcousticOutput out =
      run_acoustic_steps(*backend, host_allocator(), model, ids, {}, controls, {}, &memory);
  ASSERT_EQ(memory.size(), 2u);
  for (const StepMemory& step : memory) EXPECT_EQ(step.high_water_bytes, step.planned_bytes);
  EXPECT_EQ(out.durations, want.durations);
  EXPECT_EQ(out.mel_lengths, want.mel_lengths);
  EXPECT_TRUE(out.mel.device().is_cpu());
  EXPECT_EQ(out.mel.to_float_vector(), want.mel.to_float_vector());

  // The plan by shape (batch, longest sequence, longest mel) is the plan of these inputs.
  const int64_t frames = *std::max_element(want.mel_lengths.begin(), want.mel_lengths.end());
  ASSERT_GT(frames, 0);
  const AcousticPlan plan = plan_acoustic(*backend, model, 2, 11, frames);
  EXPECT_EQ(plan.encoder.bytes(), memory[0].planned_bytes);
  EXPECT_EQ(plan.decoder.bytes(), memory[1].planned_bytes);
  const uint64_t hidden = 2 * 11 * model.config().encoder_hidden * sizeof(float);
  EXPECT_EQ(plan.hidden_bytes, (hidden + 255) / 256 * 256);
  expect_close_to_unplanned(
      std::max(plan.encoder.bytes(), plan.decoder.bytes() + plan.hidden_bytes), plain.peak(),
      "cpu acoustic model");
}

// The steps as a scheduler runs them: planned by shape, the encoder (plan_acoustic_encoder)
// before the durations are known and the decoder (plan_acoustic_decoder) after, each run in an
// arena of its plan, the decoder on one sequence of the encoder's batch. Sequences of equal
// length need no padding, so each one's mel is its mel alone.
TEST(AcousticSteps, PlannedByShapeTheyRunInThoseArenasWithTheSameResult) {
  const auto backend = make_backend("cpu", 1);
  Context load(*backend, host_allocator());
  const auto voice = Voice::load(load, kDemoVoice);
  const FastSpeech2& model = voice->acoustic();
  const std::vector<std::vector<int64_t>> ids = {{12, 40, 7, 51, 9, 33}, {5, 6, 7, 8, 9, 10}};
  const SynthesisControls controls{};
  const auto phonemes = static_cast<int64_t>(ids[0].size());
  const AcousticEncoderPlan encoder = plan_acoustic_encoder(*backend, model, 2, phonemes);

  HostMemorySource source;
  CachingAllocator upstream(source);
  {
    StepMemory memory;
    const AcousticEncoding encoding = run_acoustic_encoder_step(*backend, upstream, model, ids, {},
                                                                controls, encoder.encoder, &memory);
    EXPECT_EQ(memory.high_water_bytes, memory.planned_bytes);
    EXPECT_GE(upstream.stats().allocated_bytes, encoder.hidden_bytes);
    for (size_t i = 0; i < ids.size(); ++i) {
      const AcousticOutput want =
          run_acoustic_steps(*backend, host_allocator(), model, {ids[i]}, {}, controls);
      const int64_t frames = encoding.mel_lengths[i];
      ASSERT_EQ(want.mel_lengths, std::vector<int64_t>{frames});
      const ArenaLayout decoder = plan_acoustic_decoder(*backend, model, 1, phonemes, frames);
      const AcousticOutput out = run_acoustic_decoder_step(
          *backend, upstream, model, select_sequences(encoding, i, 1), controls, decoder, &memory);
      EXPECT_EQ(memory.high_water_bytes, memory.planned_bytes);
      EXPECT_EQ(out.mel_lengths, want.mel_lengths);
      const std::vector<float> got = out.mel.to_float_vector();
      const std::vector<float> expected = want.mel.to_float_vector();
      ASSERT_EQ(got.size(), expected.size());
      for (size_t v = 0; v < got.size(); ++v) ASSERT_NEAR(got[v], expected[v], 1e-4f) << v;
    }
    EXPECT_THROW(select_sequences(encoding, 1, 2), Error);
  }
  EXPECT_EQ(upstream.stats().allocated_bytes, 0u);
}

// Frame-level pitch and energy, several speakers and forced durations take the same path.
TEST(AcousticSteps, FrameLevelFixtureWithSpeakersAndForcedDurations) {
  const auto backend = make_backend("reference");
  Context load(*backend, host_allocator());
  const std::string dir = kRoot + "/tests/fixtures/fastspeech2/batch/";
  std::ifstream config_file(dir + "config.json");
  const FastSpeech2 model =
      FastSpeech2::load(load, FastSpeech2Config::from_json(nlohmann::json::parse(config_file), dir),
                        *SafetensorsFile::open(dir + "acoustic.safetensors"));
  ASSERT_EQ(model.config().energy_feature_level, FeatureLevel::Frame);
  const std::vector<std::vector<int64_t>> ids = {{3, 4, 5, 6}, {7, 8}};
  const std::vector<std::vector<int64_t>> forced = {{1, 0, 3, 2}, {4, 4}};
  const AcousticOutput want = model.forward(load, ids, {1, 0}, {}, nullptr, forced);
  std::vector<StepMemory> memory;
  const AcousticOutput out =
      run_acoustic_steps(*backend, host_allocator(), model, ids, {1, 0}, {}, forced, &memory);
  for (const StepMemory& step : memory) EXPECT_EQ(step.high_water_bytes, step.planned_bytes);
  EXPECT_EQ(out.mel_lengths, (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(out.mel.to_float_vector(), want.mel.to_float_vector());
  EXPECT_EQ(plan_acoustic(*backend, model, 2, 4, 8).decoder.bytes(), memory[1].planned_bytes);
}

TEST(WorkspaceSteps, AStepThatOutgrowsItsArenaThrows) {
  const auto backend = make_backend("cpu", 2);
  Context load(*backend, host_allocator());
  const auto voice = Voice::load(load, kTinyVoice, DType::F32, Voice::Parts::VocoderOnly);
  const auto step_on = [&](int64_t frames) {
    return [&, mel = test_mel(1, frames)](Context& ctx) {
      (void)ops::to_host(ctx, voice->vocoder().forward(ctx, ops::to_device(ctx, mel)));
    };
  };
  const ArenaLayout plan = plan_vocoder(*backend, voice->vocoder(), 1, 5);
  EXPECT_EQ(run_in_workspace(*backend, host_allocator(), plan, step_on(5)), plan.bytes());
  // A longer mel asks for larger blocks than planned, and more memory than the arena has.
  try {
    run_in_workspace(*backend, host_allocator(), plan, step_on(6));
    ADD_FAILURE() << "a step ran in an arena planned for a smaller one";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("planned"), std::string::npos) << e.what();
  }
  // A shorter one leaves the layout too, and fits by best fit in what is free.
  EXPECT_LE(run_in_workspace(*backend, host_allocator(), plan, step_on(2)), plan.bytes());
}

// A backend for planning passes only: the kernels that take scratch take `scratch_bytes` and must
// be planning; any other kernel call, or a scratch kernel asked to run, is a failure.
class PlanningOnlyBackend final : public Backend {
 public:
  explicit PlanningOnlyBackend(size_t scratch_bytes) : scratch_bytes_(scratch_bytes) {}
  std::string name() const override { return "planning-only"; }
  Device device() const override { return Device::cpu(); }
  // The first interface's ops, and gather_rows, which FastSpeech2 takes its buckets with.
  bool supports(OpKind op, DType dtype) const override {
    return op == OpKind::GatherRows ? dtype == DType::F32 : Backend::supports(op, dtype);
  }
  void copy(const Tensor&, Tensor&, const KernelScratch& s) override { take(s); }
  void fill(Tensor&, float) override { refuse("fill"); }
  void unary(const Tensor&, Tensor&, UnaryOp, float) override { refuse("unary"); }
  void binary(const Tensor&, const Tensor&, Tensor&, BinaryOp) override { refuse("binary"); }
  void linear(const Tensor&, const Tensor&, const Tensor&, Tensor&,
              const KernelScratch& s) override {
    take(s);
  }
  void conv1d(const Tensor&, const Tensor&, const Tensor&, Tensor&, const Conv1dParams&,
              const KernelScratch& s) override {
    take(s);
  }
  void conv_transpose1d(const Tensor&, const Tensor&, const Tensor&, Tensor&,
                        const ConvTranspose1dParams&, const KernelScratch& s) override {
    take(s);
  }
  void layer_norm(const Tensor&, const Tensor&, const Tensor&, float, Tensor&) override {
    refuse("layer_norm");
  }
  void embedding(const Tensor&, const Tensor&, Tensor&, const KernelScratch& s) override {
    take(s);
  }
  void gather_rows(const Tensor&, const Tensor&, Tensor&, const KernelScratch& s) override {
    take(s);
  }
  void attention(const Tensor&, const Tensor&, const Tensor&, Tensor&, const AttentionParams&,
                 const KernelScratch& s) override {
    take(s);
  }
  void zero_beyond_lengths(Tensor&, const std::vector<int64_t>&, const KernelScratch& s) override {
    take(s);
  }
  void length_regulate(const Tensor&, const std::vector<std::vector<int64_t>>&, Tensor&,
                       const KernelScratch& s) override {
    take(s);
  }
  void bucketize(const Tensor&, const Tensor&, Tensor&) override { refuse("bucketize"); }

  int scratch_calls = 0;

 private:
  void take(const KernelScratch& s) {
    ++scratch_calls;
    EXPECT_TRUE(s.planning());
    const ScratchBuffer buffer = s.take(scratch_bytes_);
    EXPECT_EQ(buffer.data() != nullptr, scratch_bytes_ > 0);
  }
  static void refuse(const char* kernel) { ADD_FAILURE() << kernel << " ran in a planning pass"; }

  size_t scratch_bytes_;
};

TEST(WorkspaceSteps, PlanningRunsNoKernelAndCountsKernelScratch) {
  const auto reference = make_backend("reference");
  Context load(*reference, host_allocator());
  const auto voice = Voice::load(load, kTinyVoice);
  PlanningOnlyBackend none(0);
  {
    // A copy to the host in a planning pass yields zeros (nothing is read from the fake memory).
    WorkspaceArena arena(none.device());
    Context plan = Context::for_planning(none, arena);
    const Tensor host = ops::to_host(plan, ops::empty(plan, {2, 3}));
    EXPECT_EQ(host.to_float_vector(), std::vector<float>(6, 0.0f));
  }
  const AcousticPlan acoustic = plan_acoustic(none, voice->acoustic(), 2, 5, 30);
  const uint64_t vocoder = plan_vocoder(none, voice->vocoder(), 2, 30).bytes();
  EXPECT_GT(none.scratch_calls, 50);
  EXPECT_GT(acoustic.encoder.bytes(), 0u);
  EXPECT_GT(acoustic.decoder.bytes(), acoustic.encoder.bytes());
  // Scratch far larger than any tensor here sets the peak, on top of the tensors live then.
  constexpr size_t kLarge = size_t{64} << 20;
  PlanningOnlyBackend large(kLarge);
  EXPECT_GT(plan_vocoder(large, voice->vocoder(), 2, 30).bytes(), vocoder + kLarge / 2);
  EXPECT_GT(plan_vocoder(large, voice->vocoder(), 2, 30).bytes(), kLarge);
  EXPECT_GT(plan_acoustic(large, voice->acoustic(), 2, 5, 30).decoder.bytes(), kLarge);
}

TEST(WorkspaceSteps, PlanVoiceFromWeightsLoadedWithoutMemory) {
  const auto backend = make_backend("cpu", 2);
  // What the weights take when really loaded.
  PeakAllocator real;
  uint64_t real_bytes = 0;
  {
    Context ctx(*backend, real);
    const auto voice = Voice::load(ctx, kTinyVoice);
    real_bytes = real.peak();
  }
  // Loaded in a planning context: no memory, the same bytes up to the arena's rounding.
  WorkspaceArena weights(backend->device());
  Context load = Context::for_planning(*backend, weights);
  const auto voice = Voice::load(load, kTinyVoice);
  EXPECT_GE(weights.in_use(), real_bytes);
  EXPECT_LE(weights.in_use(), real_bytes + 256 * 200);

  const WorkspacePlan plan = plan_voice(*backend, *voice, weights.in_use(),
                                        AcousticShape{3, 20, 150}, VocoderShape{3, 150});
  ASSERT_EQ(plan.stages.size(), 3u);
  EXPECT_EQ(plan.device, "cpu");
  EXPECT_EQ(plan.stages[0].name, "acoustic encoder");
  EXPECT_EQ(plan.stages[0].shape, "batch 3 x 20 phonemes");
  EXPECT_EQ(plan.stages[1].shape, "batch 3 x 20 phonemes -> 150 frames");
  EXPECT_EQ(plan.stages[2].shape, "3 chunks x 150 frames");
  const AcousticPlan acoustic = plan_acoustic(*backend, voice->acoustic(), 3, 20, 150);
  EXPECT_EQ(plan.stages[0].workspace_bytes, acoustic.encoder.bytes());
  EXPECT_EQ(plan.stages[1].carried_bytes, acoustic.hidden_bytes);
  EXPECT_EQ(plan.stages[2].workspace_bytes,
            plan_vocoder(*backend, voice->vocoder(), 3, 150).bytes());
  uint64_t largest = 0;
  for (const StagePlan& stage : plan.stages) largest = std::max(largest, stage.peak_bytes());
  EXPECT_EQ(plan.total_bytes(), weights.in_use() + largest);

  const auto vocoder_only = Voice::load(load, kTinyVoice, DType::F32, Voice::Parts::VocoderOnly);
  EXPECT_THROW(plan_voice(*backend, *vocoder_only, 0, AcousticShape{}, std::nullopt), InputError);
  EXPECT_THROW(plan_acoustic(*backend, voice->acoustic(), 0, 5, 5), InputError);
  EXPECT_THROW(plan_vocoder(*backend, voice->vocoder(), 1, 0), InputError);
}

}  // namespace
}  // namespace voxd
