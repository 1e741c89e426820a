// Planning for the CUDA backend on a machine without a GPU (runs everywhere, no gpu label): a
// PlanOnly CudaBackend opens no device, plans the en-demo voice from weights loaded without
// memory, counts cuBLAS's workspace, and refuses to run kernels.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/implicit_gemm_conv.h"
#include "core/error.h"
#include "core/workspace_arena.h"
#include "core/workspace_plan.h"
#include "families/fastspeech2/voice.h"
#include "families/fastspeech2/workspace_steps.h"
#include "families/sambert/steps.h"
#include "families/sambert/voice.h"

namespace voxd {
namespace {

const std::string kDemoVoice = std::string(VOXD_SOURCE_DIR) + "/voices/en-demo";

TEST(CudaPlanning, PlansTheDemoVoiceWithoutADevice) {
  CudaBackend backend(1, CudaBackend::PlanOnly{});
  EXPECT_TRUE(backend.plan_only());
  EXPECT_EQ(backend.device(), Device::cuda(1));
  WorkspaceArena weights(backend.device());
  Context load = Context::for_planning(backend, weights);
  const auto voice = Voice::load(load, kDemoVoice, DType::F16);
  EXPECT_GT(weights.in_use(), 1000000u);

  const WorkspacePlan plan = plan_voice(backend, *voice, weights.in_use(),
                                        AcousticShape{4, 50, 400}, VocoderShape{4, 400});
  EXPECT_EQ(plan.device, "cuda:1");
  EXPECT_EQ(plan.dtype, "F16");
  ASSERT_EQ(plan.stages.size(), 3u);
  // Every step runs gemms, so each holds cuBLAS's workspace at some point.
  for (const StagePlan& stage : plan.stages) {
    EXPECT_GT(stage.workspace_bytes, CudaBackend::kCublasWorkspaceBytes) << stage.name;
  }
  EXPECT_EQ(plan.stages[1].carried_bytes, 4u * 50u * 128u * 2u);
  // More frames need more memory; the same shape the same.
  EXPECT_GT(plan_vocoder(backend, voice->vocoder(), 4, 800).bytes(),
            plan.stages[2].workspace_bytes);
  EXPECT_EQ(plan_vocoder(backend, voice->vocoder(), 4, 400).bytes(),
            plan.stages[2].workspace_bytes);
  // F32 weights and activations take more than F16.
  WorkspaceArena f32_weights(backend.device());
  Context f32_load = Context::for_planning(backend, f32_weights);
  const auto f32 = Voice::load(f32_load, kDemoVoice, DType::F32, Voice::Parts::VocoderOnly);
  EXPECT_GT(plan_vocoder(backend, f32->vocoder(), 4, 400).bytes(), plan.stages[2].workspace_bytes);
}

// HiFiGAN's conv_pre arranges its weight when the voice loads (ConvFusion::arranged_weight), so
// the fused conv1d takes no scratch to arrange it on every call: the plan is smaller by exactly
// the arrangement (over a sequence long enough that the implicit GEMM takes it either way, on a
// machine with a GPU too). An arrangement of another size is refused, naming its maker.
TEST(CudaPlanning, AConv1dWithItsWeightArrangedTakesNoScratchToArrangeIt) {
  CudaBackend backend(0, CudaBackend::PlanOnly{});
  const Shape weight_shape = {512, 80, 7};
  const auto bytes = [&](bool given) {
    return plan_workspace(
               backend,
               [&](Context& ctx) {
                 const Tensor x = ops::empty(ctx, {1, 80, 40000}, DType::F16);
                 const Tensor weight = ops::empty(ctx, weight_shape, DType::F16);
                 const Tensor bias = ops::empty(ctx, {512}, DType::F16);
                 const Tensor arranged = ops::arrange_conv1d_weight(ctx, weight);
                 ASSERT_TRUE(arranged.defined());
                 ASSERT_TRUE(backend.fuses_conv1d(x, weight, DType::F16, {1, 3, 1, 1}, false));
                 ConvFusion fusion;
                 fusion.arranged_weight = given ? &arranged : nullptr;
                 (void)ops::conv1d(ctx, x, weight, bias, Conv1dParams{1, 3, 1, 1}, fusion);
               })
        .bytes();
  };
  const uint64_t arrangement =
      static_cast<uint64_t>(cuda::implicit_gemm_arranged_weight_elements(512, 80, 7)) * 2;
  EXPECT_EQ(arrangement, 80u / 16u * 7u * 512u * 16u * 2u);
  EXPECT_EQ(bytes(false) - bytes(true), arrangement);

  WorkspaceArena arena(backend.device());
  Context plan = Context::for_planning(backend, arena);
  const Tensor x = ops::empty(plan, {1, 80, 45}, DType::F16);
  const Tensor weight = ops::empty(plan, weight_shape, DType::F16);
  const Tensor other = ops::arrange_conv1d_weight(plan, ops::empty(plan, {256, 80, 7}, DType::F16));
  ConvFusion fusion;
  fusion.arranged_weight = &other;
  try {
    (void)ops::conv1d(plan, x, weight, Tensor(), Conv1dParams{1, 3, 1, 1}, fusion);
    ADD_FAILURE() << "an arrangement of another weight was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ops::arrange_conv1d_weight"), std::string::npos)
        << e.what();
  }
}

// HiFiGAN V1's 32- and 64-channel resblock pairs over rows, their weights arranged when the voice
// loads, run on chip: the plan holds no time-major input for the second convolution, only the
// copy of x that unaligned rows would need, so it is smaller than the same pair's with weights
// arranged per call by exactly that input and the arrangement. A second halo past 64 steps runs
// as two convolutions, as before.
TEST(CudaPlanning, PairsOnChipTakeNoIntermediate) {
  CudaBackend backend(0, CudaBackend::PlanOnly{});
  const int64_t batch = 3;
  const int64_t steps = 1000;
  const auto bytes = [&](int64_t channels, int64_t k2, int64_t d2, bool arranged_at_load) {
    return plan_workspace(
               backend,
               [&](Context& ctx) {
                 const Tensor rows = ops::empty(ctx, {batch, steps, channels}, DType::F16);
                 const Tensor w1 = ops::empty(ctx, {channels, channels, 11}, DType::F16);
                 const Tensor w2 = ops::empty(ctx, {channels, channels, k2}, DType::F16);
                 const Tensor bias = ops::empty(ctx, {channels}, DType::F16);
                 const Tensor a1 = ops::arrange_conv1d_weight(ctx, w1);
                 const Tensor a2 = ops::arrange_conv1d_weight(ctx, w2);
                 Conv1dPair pair{.first_weight = &w1,
                                 .first_bias = &bias,
                                 .first = {1, 25, 5, 1},
                                 .second_weight = &w2,
                                 .second_bias = &bias,
                                 .second = {1, d2 * (k2 - 1) / 2, d2, 1},
                                 .slope = 0.1f,
                                 .residual = &rows};
                 if (arranged_at_load) {
                   pair.first_arranged = &a1;
                   pair.second_arranged = &a2;
                 }
                 ASSERT_TRUE(backend.fuses_conv1d_pair_rows(rows, pair, DType::F16));
                 (void)ops::conv1d_pair_rows(ctx, rows, pair);
               })
        .bytes();
  };
  // Scratch as the arena hands it out, in blocks of WorkspaceArena::kAlignment.
  const auto block = [](int64_t elements) {
    const auto bytes = static_cast<uint64_t>(elements) * 2;
    return (bytes + WorkspaceArena::kAlignment - 1) / WorkspaceArena::kAlignment *
           WorkspaceArena::kAlignment;
  };
  for (const int64_t channels : {32, 64}) {
    ASSERT_TRUE(cuda::implicit_gemm_pair_on_chip(channels, channels, channels, 11, 5, 11, 1));
    const uint64_t intermediate =
        block(cuda::implicit_gemm_transposed_input_elements(batch, channels, steps, 11, 1));
    const uint64_t arrangement =
        block(cuda::implicit_gemm_arranged_weight_elements(channels, channels, 11));
    EXPECT_EQ(bytes(channels, 11, 1, false) - bytes(channels, 11, 1, true),
              intermediate + arrangement)
        << channels;
  }
  // Every pair of V1's 32- and 64-channel stages: kernels 3, 7, 11, the first dilated 1, 3, 5.
  for (const int64_t channels : {32, 64}) {
    for (const int64_t kernel : {3, 7, 11}) {
      for (const int64_t dilation : {1, 3, 5}) {
        EXPECT_TRUE(cuda::implicit_gemm_pair_on_chip(channels, channels, channels, kernel, dilation,
                                                     kernel, 1))
            << channels << " " << kernel << " " << dilation;
      }
    }
  }
  EXPECT_FALSE(cuda::implicit_gemm_pair_on_chip(32, 32, 32, 11, 5, 33, 3));
  EXPECT_FALSE(cuda::implicit_gemm_pair_on_chip(32, 32, 32, 65, 1, 3, 1));
  EXPECT_FALSE(cuda::implicit_gemm_pair_on_chip(128, 128, 128, 11, 5, 11, 1));
  EXPECT_FALSE(cuda::implicit_gemm_pair_on_chip(32, 64, 32, 11, 5, 11, 1));
  EXPECT_EQ(bytes(32, 33, 3, false) - bytes(32, 33, 3, true),
            block(cuda::implicit_gemm_arranged_weight_elements(32, 32, 33)));
}

// A step is planned with every sentence at its padded length and runs with the real ones: the
// lengths of non-causal attention (a mask) must not change its scratch, or the run leaves the
// plan (a Sambert encoder batch of two Chinese sentences overflowed its arena on the H200). F32
// takes the gemm path (scores in scratch); F16 the flash kernel, which takes no scratch at all.
TEST(CudaPlanning, MaskingLengthsLeaveTheAttentionsScratchAsPlanned) {
  CudaBackend backend(0, CudaBackend::PlanOnly{});
  const Shape shape = {2, 96, 2, 32};
  const auto layout = [&](DType dtype, std::vector<int64_t> key_lengths, bool causal) {
    return plan_workspace(backend, [&](Context& ctx) {
      const Tensor q = ops::empty(ctx, shape, dtype);
      const Tensor k = ops::empty(ctx, shape, dtype);
      AttentionParams params;
      params.scale = 0.125f;
      params.key_lengths = std::move(key_lengths);
      params.causal = causal;
      (void)ops::attention(ctx, q, k, k, params);
    });
  };
  for (const DType dtype : {DType::F32, DType::F16}) {
    const ArenaLayout padded = layout(dtype, {96, 96}, false);
    for (const std::vector<int64_t>& lengths :
         std::vector<std::vector<int64_t>>{{5, 17}, {96, 1}, {}}) {
      const ArenaLayout real = layout(dtype, lengths, false);
      ASSERT_EQ(real.blocks(), padded.blocks());
      for (size_t i = 0; i < real.blocks(); ++i) {
        EXPECT_EQ(real.block_size(i), padded.block_size(i));
      }
      EXPECT_EQ(real.bytes(), padded.bytes());
    }
  }
  EXPECT_GT(layout(DType::F32, {96, 96}, false).bytes(), CudaBackend::kCublasWorkspaceBytes);
  // A causal cache's unfilled rows are still left out: fewer keys, less scratch.
  EXPECT_LT(layout(DType::F32, {8, 8}, true).bytes(), layout(DType::F32, {96, 96}, true).bytes());
  // The flash kernel's arena is q, k and the output.
  const uint64_t tensor_bytes = static_cast<uint64_t>(shape_numel(shape)) * dtype_size(DType::F16);
  EXPECT_EQ(layout(DType::F16, {96, 96}, false).bytes(), 3 * tensor_bytes);
  EXPECT_EQ(layout(DType::F16, {8, 8}, true).bytes(), 3 * tensor_bytes);
}

// HiFiGAN's upsamplers between stages on time-major rows: the polyphase form's geometry, and a
// plan that holds the input, weights, output and the arranged phase weights, nothing more (no F32
// columns, no cuBLAS workspace), where the channel-major op and F32 (which the kernel does not
// take, so the op transposes around conv_transpose1d) hold more.
TEST(CudaPlanning, UpsamplersOnRowsTakeThePhaseWeightsAndNoColumns) {
  const auto geometry = [](int64_t stride, int64_t kernel, int64_t padding) {
    const auto p = cuda::polyphase_of(stride, kernel, padding, 1, 0, 1);
    return p ? std::pair{p->taps, p->window_padding} : std::pair<int64_t, int64_t>{-1, -1};
  };
  EXPECT_EQ(geometry(8, 16, 4), (std::pair<int64_t, int64_t>{3, 1}));  // HiFiGAN V1
  EXPECT_EQ(geometry(2, 4, 1), (std::pair<int64_t, int64_t>{3, 1}));
  EXPECT_EQ(geometry(3, 3, 0), (std::pair<int64_t, int64_t>{1, 0}));
  EXPECT_EQ(geometry(4, 12, 4), (std::pair<int64_t, int64_t>{3, 1}));
  EXPECT_EQ(geometry(3, 7, 1), (std::pair<int64_t, int64_t>{-1, -1}));  // output 7 − 2 ≠ 3 × input
  EXPECT_FALSE(cuda::polyphase_of(8, 16, 4, 2, 0, 1));
  EXPECT_FALSE(cuda::polyphase_of(8, 16, 4, 1, 1, 1));
  EXPECT_FALSE(cuda::polyphase_of(8, 16, 4, 1, 0, 2));

  CudaBackend backend(0, CudaBackend::PlanOnly{});
  const Shape rows = {4, 300, 256};
  const auto layout = [&](DType dtype, bool on_rows) {
    return plan_workspace(backend, [&](Context& ctx) {
      const Tensor x = ops::empty(ctx, rows, dtype);
      const Tensor weight = ops::empty(ctx, {256, 128, 16}, dtype);
      const Tensor bias = ops::empty(ctx, {128}, dtype);
      const ConvTranspose1dParams params{8, 4};
      (void)(on_rows ? ops::conv_transpose1d_rows(ctx, x, weight, bias, params)
                     : ops::conv_transpose1d(ctx, x.transpose(1, 2), weight, bias, params));
    });
  };
  const auto rounded = [](uint64_t bytes) {
    const uint64_t a = WorkspaceArena::kAlignment;
    return (bytes + a - 1) / a * a;
  };
  const uint64_t phase_weights = static_cast<uint64_t>(cuda::implicit_gemm_polyphase_elements(
                                     256, 128, *cuda::polyphase_of(8, 16, 4, 1, 0, 1))) *
                                 2;
  EXPECT_EQ(phase_weights, (256u / 16u * 3u * 8u * 128u * 16u + 8u * 128u) * 2u);
  const uint64_t expected = rounded(4u * 300u * 256u * 2u) + rounded(256u * 128u * 16u * 2u) +
                            rounded(128u * 2u) + rounded(4u * 2400u * 128u * 2u) +
                            rounded(phase_weights);
  EXPECT_EQ(layout(DType::F16, true).bytes(), expected);
  EXPECT_GT(layout(DType::F16, false).bytes(), expected + CudaBackend::kCublasWorkspaceBytes);
  EXPECT_GT(layout(DType::F32, true).bytes(), 2 * expected + CudaBackend::kCublasWorkspaceBytes);
}

// The same through a model: the Sambert encoder and prefill steps of the tiny Chinese fixture
// voice, planned as the server plans them (every utterance at the padded length) and run as they
// run (a batch of a short and a longer utterance), on the CUDA backend's planner: the same blocks.
TEST(CudaPlanning, TheSambertEncoderAndPrefillStepsPlanTheSameForAnyLengths) {
  CudaBackend backend(0, CudaBackend::PlanOnly{});
  WorkspaceArena weights(backend.device());
  Context load = Context::for_planning(backend, weights);
  const auto voice =
      sambert::Voice::load(load,
                           sambert::VoiceConfig::load(std::string(VOXD_SOURCE_DIR) +
                                                      "/tests/fixtures/voices/tiny-sambert-zh"),
                           DType::F16);
  constexpr int64_t kPadded = 32;
  const ArenaLayout planned = sambert::plan_encode(backend, voice->acoustic(), 2, kPadded);
  const auto utterance = [](size_t tokens) {
    SambertTokens made;
    made.linguistic.assign(tokens, {1, 1, 1, 1});
    made.emotion.assign(tokens, 0);
    made.speaker.assign(tokens, 0);
    return made;
  };
  const SambertTokens short_one = utterance(5), longer = utterance(17);
  const ArenaLayout ran = plan_workspace(backend, [&](Context& ctx) {
    (void)voice->acoustic().encode(ctx, {&short_one, &longer}, kPadded, /*masked=*/true);
  });
  ASSERT_EQ(ran.blocks(), planned.blocks());
  for (size_t i = 0; i < ran.blocks(); ++i) EXPECT_EQ(ran.block_size(i), planned.block_size(i));
  EXPECT_EQ(ran.bytes(), planned.bytes());

  // The decoder's prefill of a 9-step and a 25-step memory, padded to 32 steps.
  WorkspaceArena cache_arena(backend.device());
  Context cache_ctx = Context::for_planning(backend, cache_arena);
  PagedKvCache cache = voice->acoustic().make_cache(cache_ctx, 8, 16);
  const ArenaLayout planned_prefill =
      sambert::plan_prefill(backend, voice->acoustic(), cache, 2, kPadded);
  const SambertConfig& c = voice->acoustic().config();
  const auto memory = [&](int64_t steps) {
    SambertMemory made;
    made.text = Tensor::zeros({steps, c.outputs_per_step * c.projection_units}, DType::F32);
    made.speaker.assign(static_cast<size_t>(steps), 0);
    made.emotion.assign(static_cast<size_t>(steps), 0);
    return made;
  };
  const SambertMemory nine = memory(9), twenty_five = memory(25);
  const std::vector<int64_t> pages(2, -1);
  const ArenaLayout ran_prefill = plan_workspace(backend, [&](Context& ctx) {
    (void)voice->acoustic().prefill(ctx, cache, {&nine, &twenty_five}, {&pages, &pages}, kPadded);
  });
  ASSERT_EQ(ran_prefill.blocks(), planned_prefill.blocks());
  for (size_t i = 0; i < ran_prefill.blocks(); ++i) {
    EXPECT_EQ(ran_prefill.block_size(i), planned_prefill.block_size(i));
  }
}

TEST(CudaPlanning, APlanOnlyBackendRefusesToRun) {
  CudaBackend backend(0, CudaBackend::PlanOnly{});
  WorkspaceArena arena(backend.device());
  Context plan = Context::for_planning(backend, arena);
  const Tensor x = ops::empty(plan, {2, 8});
  const Tensor w = ops::empty(plan, {4, 8});
  EXPECT_NO_THROW(ops::linear(plan, x, w, Tensor()));
  Context run(backend, arena);
  try {
    ops::linear(run, x, w, Tensor());
    ADD_FAILURE() << "a PlanOnly backend ran a kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("planning only"), std::string::npos) << e.what();
  }
  EXPECT_THROW(backend.synchronize(), Error);
}

// Placed with the whole sequence known, the arena wastes little under the CUDA backend's scratch
// (cuBLAS's 32 MiB workspace comes and goes with every gemm) and BF16's mixed F32/BF16
// temporaries: the layout stays within 5 % of the most bytes live at once, for the shapes the GPU
// test measures, and never needs more than best fit placing the blocks as they come.
TEST(CudaPlanning, ArenaWastesLittleOverTheLiveBytes) {
  CudaBackend backend(0, CudaBackend::PlanOnly{});
  const auto expect_little_waste = [](const WorkspaceArena& arena, const std::string& what) {
    const ArenaLayout layout = arena.layout();
    const double live = static_cast<double>(arena.stats().peak_allocated_bytes);
    EXPECT_LE(static_cast<double>(layout.bytes()), 1.05 * live) << what;
    EXPECT_LE(layout.bytes(), arena.high_water()) << what;
    std::printf("%s: %zu blocks, layout %.2f MiB, best fit %.2f MiB, live peak %.2f MiB\n",
                what.c_str(), layout.blocks(), static_cast<double>(layout.bytes()) / 1048576.0,
                static_cast<double>(arena.high_water()) / 1048576.0, live / 1048576.0);
  };
  for (const DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    const std::string name(dtype_name(dtype));
    WorkspaceArena weights(backend.device());
    Context load = Context::for_planning(backend, weights);
    const auto voice = Voice::load(load, kDemoVoice, dtype);
    WorkspaceArena host(Device::cpu());
    for (const auto& [chunks, frames] :
         {std::pair<int64_t, int64_t>{1, 200}, {8, 300}, {16, 100}}) {
      const Tensor mel = Tensor::empty({chunks, 80, frames}, DType::F32, host);
      WorkspaceArena arena(backend.device());
      Context ctx = Context::for_planning(backend, arena);
      (void)ops::to_host(ctx, voice->vocoder().forward(ctx, ops::to_device(ctx, mel, dtype)));
      expect_little_waste(
          arena, name + " vocoder " + std::to_string(chunks) + " x " + std::to_string(frames));
    }
    const std::vector<std::vector<int64_t>> ids(16, std::vector<int64_t>(100, 3));
    const std::vector<std::vector<int64_t>> durations(16, std::vector<int64_t>(100, 9));
    WorkspaceArena arena(backend.device());
    Context ctx = Context::for_planning(backend, arena);
    (void)ops::to_host(ctx, voice->acoustic().forward(ctx, ids, {}, {}, nullptr, durations).mel);
    expect_little_waste(arena, name + " acoustic model 16 x 100 -> 900");
  }
}

}  // namespace
}  // namespace voxd
