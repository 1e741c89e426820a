// Workspace plans against the GPU (label gpu). For several batch shapes and dtypes, each step of
// the en-demo voice is planned, then run on the CUDA backend in an arena of the planned size from
// a measuring device allocator. The device memory the step used must be within 5 % of the plan,
// measured two ways: the allocator's peak, and the device's used bytes (cudaMemGetInfo's total −
// free) sampled after every kernel, which also sees memory taken outside voxd's allocators
// (cuBLAS's own workspace, if it took one). Each shape runs once unmeasured first, so lazily
// loaded kernel images do not count. cudaMalloc rounds to 2 MiB pages, so the shapes have plans of
// 50 MiB and more (the vocoder step makes one device allocation, the acoustic steps two), where
// that rounding stays well under 5 %. Also: the PlanOnly backend plans the same bytes, and an
// unplanned run (every tensor its own cudaMalloc) peaks within 5 % of the plan.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/workspace_plan.h"
#include "families/fastspeech2/voice.h"
#include "families/fastspeech2/workspace_steps.h"

namespace voxd {
namespace {

std::string source_dir() {
  const char* env = std::getenv("VOXD_SOURCE_DIR");
  return env != nullptr ? env : VOXD_SOURCE_DIR;
}

CudaBackend& cuda() {
  static CudaBackend backend(0);
  return backend;
}

// Bytes in use on device 0: total − free.
uint64_t device_used() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  const cudaError_t status = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (status != cudaSuccess)
    throw Error(std::string("cudaMemGetInfo: ") + cudaGetErrorString(status));
  return total_bytes - free_bytes;
}

// The CUDA backend with the device's used bytes sampled after every kernel while measuring
// (synchronising first, so memory a kernel's library calls took is there to see).
class SamplingBackend final : public Backend {
 public:
  explicit SamplingBackend(CudaBackend& inner) : inner_(inner) {}

  // Starts a measurement; the peak starts at the bytes used now.
  void start() {
    inner_.synchronize();
    baseline_ = device_used();
    peak_ = baseline_;
    measuring_ = true;
  }
  // Ends it; returns the largest rise over the start seen after any kernel.
  uint64_t stop() {
    sample();
    measuring_ = false;
    return peak_ - baseline_;
  }

  std::string name() const override { return inner_.name(); }
  Device device() const override { return inner_.device(); }
  // The first interface's ops, and gather_rows, which FastSpeech2 takes its buckets with.
  bool supports(OpKind op, DType dtype) const override {
    return op == OpKind::GatherRows ? inner_.supports(op, dtype) : Backend::supports(op, dtype);
  }
  void synchronize() override { inner_.synchronize(); }
  void copy(const Tensor& src, Tensor& dst, const KernelScratch& s) override {
    inner_.copy(src, dst, s);
    sample(s);
  }
  void fill(Tensor& dst, float value) override {
    inner_.fill(dst, value);
    sample();
  }
  void unary(const Tensor& x, Tensor& out, UnaryOp op, float alpha) override {
    inner_.unary(x, out, op, alpha);
    sample();
  }
  void binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryOp op) override {
    inner_.binary(a, b, out, op);
    sample();
  }
  void linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out,
              const KernelScratch& s) override {
    inner_.linear(x, w, b, out, s);
    sample(s);
  }
  void conv1d(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out, const Conv1dParams& p,
              const KernelScratch& s) override {
    inner_.conv1d(x, w, b, out, p, s);
    sample(s);
  }
  bool runs_conv1d_rows(const Tensor& x, const Tensor& w, const Conv1dParams& p) const override {
    return inner_.runs_conv1d_rows(x, w, p);
  }
  void conv1d_rows(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out,
                   const Conv1dParams& p, const Tensor* arranged, bool relu,
                   const KernelScratch& s) override {
    inner_.conv1d_rows(x, w, b, out, p, arranged, relu, s);
    sample(s);
  }
  int64_t arranged_conv1d_rows_elements(const Tensor& w, const Conv1dParams& p) const override {
    return inner_.arranged_conv1d_rows_elements(w, p);
  }
  void arrange_conv1d_rows_weight(const Tensor& w, const Conv1dParams& p, Tensor& arranged,
                                  const KernelScratch& s) override {
    inner_.arrange_conv1d_rows_weight(w, p, arranged, s);
    sample(s);
  }
  void conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out,
                        const ConvTranspose1dParams& p, const KernelScratch& s) override {
    inner_.conv_transpose1d(x, w, b, out, p, s);
    sample(s);
  }
  void layer_norm(const Tensor& x, const Tensor& g, const Tensor& b, float eps,
                  Tensor& out) override {
    inner_.layer_norm(x, g, b, eps, out);
    sample();
  }
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out,
                 const KernelScratch& s) override {
    inner_.embedding(ids, table, out, s);
    sample(s);
  }
  void gather_rows(const Tensor& table, const Tensor& rows, Tensor& out,
                   const KernelScratch& s) override {
    inner_.gather_rows(table, rows, out, s);
    sample(s);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const AttentionParams& p, const KernelScratch& s) override {
    inner_.attention(q, k, v, out, p, s);
    sample(s);
  }
  void zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths,
                           const KernelScratch& s) override {
    inner_.zero_beyond_lengths(x, lengths, s);
    sample(s);
  }
  void length_regulate(const Tensor& x, const std::vector<std::vector<int64_t>>& d, Tensor& out,
                       const KernelScratch& s) override {
    inner_.length_regulate(x, d, out, s);
    sample(s);
  }
  void bucketize(const Tensor& x, const Tensor& b, Tensor& out) override {
    inner_.bucketize(x, b, out);
    sample();
  }

 private:
  void sample(const KernelScratch& s) {
    if (!s.planning()) sample();
  }
  void sample() {
    if (!measuring_) return;
    inner_.synchronize();
    peak_ = std::max(peak_, device_used());
  }

  CudaBackend& inner_;
  bool measuring_ = false;
  uint64_t baseline_ = 0;
  uint64_t peak_ = 0;
};

// Expects `measured` within 5 % of `planned`, and prints both.
void expect_within_5_percent(uint64_t measured, uint64_t planned, const std::string& what) {
  const double ratio = static_cast<double>(measured) / static_cast<double>(planned);
  std::printf("%s: planned %.2f MiB, measured %.2f MiB (%+.2f %%)\n", what.c_str(),
              static_cast<double>(planned) / 1048576.0, static_cast<double>(measured) / 1048576.0,
              100.0 * (ratio - 1.0));
  EXPECT_GE(ratio, 0.95) << what << ": measured " << measured << " bytes, planned " << planned;
  EXPECT_LE(ratio, 1.05) << what << ": measured " << measured << " bytes, planned " << planned;
}

// Largest |a − b| over two host tensors of one shape.
float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  const std::vector<float> x = a.to_float_vector();
  const std::vector<float> y = b.to_float_vector();
  float worst = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

// Seeded mel-like values [chunks, 80, frames] on the host.
Tensor test_mel(int64_t chunks, int64_t frames) {
  std::vector<float> values(static_cast<size_t>(chunks * 80 * frames));
  for (size_t i = 0; i < values.size(); ++i) values[i] = -4.0f + static_cast<float>(i % 97) / 20.0f;
  return Tensor::from_vector({chunks, 80, frames}, values);
}

// The en-demo voice on the GPU, once per dtype, with the device memory it lives in.
struct DemoVoices {
  CudaDeviceAllocator allocator{0};
  std::unique_ptr<Voice> voices[3];
};

std::unique_ptr<DemoVoices>& demo_voices() {
  static std::unique_ptr<DemoVoices> loaded;
  return loaded;
}

// Frees the voices when the tests end, while the CUDA runtime is still up (a static destructor
// would run after its teardown, and compute-sanitizer would report every weight as leaked).
class FreeDemoVoices : public ::testing::Environment {
 public:
  void TearDown() override { demo_voices().reset(); }
};
[[maybe_unused]] ::testing::Environment* const free_demo_voices =
    ::testing::AddGlobalTestEnvironment(new FreeDemoVoices);

const Voice& demo_voice(DType dtype) {
  std::unique_ptr<DemoVoices>& loaded = demo_voices();
  if (!loaded) loaded = std::make_unique<DemoVoices>();
  std::unique_ptr<Voice>& voice = loaded->voices[dtype == DType::F32   ? 0
                                                 : dtype == DType::F16 ? 1
                                                                       : 2];
  if (!voice) {
    Context ctx(cuda(), loaded->allocator);
    voice = Voice::load(ctx, source_dir() + "/voices/en-demo", dtype);
  }
  return *voice;
}

using VocoderCase = std::tuple<DType, int64_t, int64_t>;  // dtype, chunks, frames

class VocoderPlanOnGpu : public ::testing::TestWithParam<VocoderCase> {};

TEST_P(VocoderPlanOnGpu, MeasuredPeakIsWithin5PercentOfThePlan) {
  const auto [dtype, chunks, frames] = GetParam();
  const std::string what = "vocoder " + std::string(dtype_name(dtype)) + " " +
                           std::to_string(chunks) + " x " + std::to_string(frames);
  const HifiGan& model = demo_voice(dtype).vocoder();
  SamplingBackend backend(cuda());
  const uint64_t plan = plan_vocoder(backend, model, chunks, frames).bytes();
  CudaBackend plan_only(0, CudaBackend::PlanOnly{});
  EXPECT_EQ(plan_vocoder(plan_only, model, chunks, frames).bytes(), plan) << what;

  const Tensor mel = test_mel(chunks, frames);
  {
    CudaDeviceAllocator warm_up(0);
    run_vocoder_step(backend, warm_up, model, mel);
  }
  CudaDeviceAllocator upstream(0);
  StepMemory memory;
  backend.start();
  const Tensor audio = run_vocoder_step(backend, upstream, model, mel, &memory);
  const uint64_t device_delta = backend.stop();
  EXPECT_EQ(memory.planned_bytes, plan) << what;
  EXPECT_EQ(memory.high_water_bytes, plan) << what;
  EXPECT_EQ(audio.shape(), (Shape{chunks, model.config().output_length(frames)})) << what;
  expect_within_5_percent(upstream.stats().peak_allocated_bytes, plan, what + " allocator peak");
  expect_within_5_percent(device_delta, plan, what + " device used");

  // Unplanned: every tensor and scratch buffer its own cudaMalloc; the arena's placement may
  // waste a little over the bytes live at once, but not more than 5 %.
  CudaDeviceAllocator plain(0);
  {
    Context ctx(backend, plain);
    const Tensor unplanned = ops::to_host(ctx, model.forward(ctx, ops::to_device(ctx, mel, dtype)));
    EXPECT_LE(max_abs_diff(unplanned, audio), 1e-5f) << what;
  }
  expect_within_5_percent(plain.stats().peak_allocated_bytes, plan, what + " unplanned peak");
}

INSTANTIATE_TEST_SUITE_P(Shapes, VocoderPlanOnGpu,
                         ::testing::Values(VocoderCase{DType::F32, 1, 200},
                                           VocoderCase{DType::F32, 4, 400},
                                           VocoderCase{DType::F16, 1, 600},
                                           VocoderCase{DType::F16, 8, 300},
                                           VocoderCase{DType::BF16, 16, 100}),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "x" +
                                  std::to_string(std::get<2>(info.param));
                         });

using AcousticCase =
    std::tuple<DType, int64_t, int64_t, int64_t>;  // dtype, batch, phonemes, frames

class AcousticPlanOnGpu : public ::testing::TestWithParam<AcousticCase> {};

TEST_P(AcousticPlanOnGpu, MeasuredPeakIsWithin5PercentOfThePlan) {
  const auto [dtype, batch, phonemes, frames] = GetParam();
  const std::string what = "acoustic " + std::string(dtype_name(dtype)) + " " +
                           std::to_string(batch) + " x " + std::to_string(phonemes) + " -> " +
                           std::to_string(frames);
  const FastSpeech2& model = demo_voice(dtype).acoustic();
  SamplingBackend backend(cuda());
  const AcousticPlan plan = plan_acoustic(backend, model, batch, phonemes, frames);
  CudaBackend plan_only(0, CudaBackend::PlanOnly{});
  const AcousticPlan again = plan_acoustic(plan_only, model, batch, phonemes, frames);
  EXPECT_EQ(again.encoder.bytes(), plan.encoder.bytes()) << what;
  EXPECT_EQ(again.decoder.bytes(), plan.decoder.bytes()) << what;
  // The steps hold the hidden states besides their arenas: the encoder's arena and the states
  // moved out of it, then the states and the decoder's arena.
  const uint64_t predicted =
      std::max(plan.encoder.bytes(), plan.decoder.bytes()) + plan.hidden_bytes;

  // Sequences of 1..phonemes symbols (the first the longest), with forced durations so that the
  // longest mel has exactly `frames` frames.
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<int64_t>> durations;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = std::max<int64_t>(1, phonemes - b * phonemes / batch);
    std::vector<int64_t> seq(static_cast<size_t>(length));
    for (int64_t t = 0; t < length; ++t) seq[static_cast<size_t>(t)] = 1 + (b * 7 + t * 3) % 60;
    std::vector<int64_t> d(static_cast<size_t>(length), frames / phonemes);
    if (b == 0) {
      for (int64_t t = 0; t < frames % phonemes; ++t) ++d[static_cast<size_t>(t)];
    }
    ids.push_back(seq);
    durations.push_back(d);
  }
  {
    CudaDeviceAllocator warm_up(0);
    run_acoustic_steps(backend, warm_up, model, ids, {}, {}, durations);
  }
  CudaDeviceAllocator upstream(0);
  std::vector<StepMemory> memory;
  backend.start();
  const AcousticOutput out =
      run_acoustic_steps(backend, upstream, model, ids, {}, {}, durations, &memory);
  const uint64_t device_delta = backend.stop();
  ASSERT_EQ(memory.size(), 2u);
  EXPECT_EQ(memory[0].planned_bytes, plan.encoder.bytes()) << what;
  EXPECT_EQ(memory[1].planned_bytes, plan.decoder.bytes()) << what;
  for (const StepMemory& step : memory) EXPECT_EQ(step.high_water_bytes, step.planned_bytes);
  EXPECT_EQ(out.mel.shape(), (Shape{batch, frames, 80})) << what;
  expect_within_5_percent(upstream.stats().peak_allocated_bytes, predicted,
                          what + " allocator peak");
  expect_within_5_percent(device_delta, predicted, what + " device used");
}

INSTANTIATE_TEST_SUITE_P(Shapes, AcousticPlanOnGpu,
                         ::testing::Values(AcousticCase{DType::F32, 16, 100, 900},
                                           AcousticCase{DType::F32, 32, 120, 1000},
                                           AcousticCase{DType::F16, 32, 120, 1000},
                                           AcousticCase{DType::BF16, 32, 150, 1200}),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "x" +
                                  std::to_string(std::get<2>(info.param)) + "to" +
                                  std::to_string(std::get<3>(info.param));
                         });

// The planned runs without measurements, for compute-sanitizer (whose own allocations would skew
// the device's used bytes): both steps run in arenas of their planned sizes and give the
// unplanned results.
TEST(WorkspaceStepsOnGpu, RunInTheirPlannedArenasWithTheUnplannedResults) {
  const Voice& voice = demo_voice(DType::F16);
  CudaDeviceAllocator plain(0);
  Context ctx(cuda(), plain);
  const Tensor mel = test_mel(2, 64);
  const Tensor want =
      ops::to_host(ctx, voice.vocoder().forward(ctx, ops::to_device(ctx, mel, DType::F16)));
  StepMemory vocoder;
  const Tensor audio = run_vocoder_step(cuda(), plain, voice.vocoder(), mel, &vocoder);
  EXPECT_EQ(vocoder.high_water_bytes, vocoder.planned_bytes);
  EXPECT_LE(max_abs_diff(audio, want), 1e-5f);

  const std::vector<std::vector<int64_t>> ids = {{12, 40, 7, 51, 9, 33, 20, 8, 14, 60, 3, 5},
                                                 {5, 6, 7, 8, 9}};
  const AcousticOutput whole = voice.acoustic().forward(ctx, ids, {}, {});
  std::vector<StepMemory> steps;
  const AcousticOutput out =
      run_acoustic_steps(cuda(), plain, voice.acoustic(), ids, {}, {}, {}, &steps);
  ASSERT_EQ(steps.size(), 2u);
  for (const StepMemory& step : steps) EXPECT_EQ(step.high_water_bytes, step.planned_bytes);
  EXPECT_EQ(out.durations, whole.durations);
  EXPECT_LE(max_abs_diff(out.mel, ops::to_host(ctx, whole.mel)), 1e-3f);
}

}  // namespace
}  // namespace voxd
