// The op table (tests/backends/op_cases.h) on the CUDA backend in F32, F16 and BF16, each case
// against the reference backend (CudaOps.<Op>/<DTYPE>), and what only the CUDA backend has:
// its half-precision rounding policy, conversions to known bit patterns on the device, device
// checks through the ops layer, cuFFT's work areas in planning passes, the depthwise kernel's
// speed, its count of the host's waits on the device and of its ops' host time, BiasGemm's
// algorithms shared by row buckets, and its device allocator. The op table's device memory comes
// from a NaN-poisoning allocator, so an element a kernel never writes fails the comparison.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/cuda/bias_gemm.h"
#include "backends/cuda/cuda_memory_source.h"
#include "backends/cuda/wgmma_conv.h"
#include "backends/reference/reference_backend.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/workspace_arena.h"
#include "cuda_test_util.h"
#include "op_cases.h"

namespace voxd {
namespace {

using testing::cuda_backend;
using testing::PoisonDeviceAllocator;
using testing::random_tensor;

const bool kRegistered = [] {
  testing::register_op_table({"CudaOps",
                              []() -> Backend& { return cuda_backend(); },
                              []() -> Allocator& {
                                static PoisonDeviceAllocator poison;
                                return poison;
                              },
                              {DType::F32, DType::F16, DType::BF16},
                              true});
  return true;
}();

class CudaBackendTest : public ::testing::Test {
 protected:
  PoisonDeviceAllocator poison_;
  Context ctx_{cuda_backend(), poison_};
};

TEST_F(CudaBackendTest, CopyConvertsDtypesAndStrides) {
  testing::check_dtype_conversions(ctx_);
  // Floats to ints: NaN -> 0, saturating, truncating toward zero, as convert_elements does.
  const Tensor specials = Tensor::from_vector(
      {4}, std::vector<float>{std::numeric_limits<float>::quiet_NaN(), 3e9f, -3e9f, -2.75f});
  const Tensor dev_specials = ops::to_device(ctx_, specials, DType::F32);
  EXPECT_EQ(ops::to_host(ctx_, ops::to_device(ctx_, dev_specials, DType::I32), DType::I32)
                .to_int_vector(),
            (std::vector<int64_t>{0, 2147483647, -2147483648LL, -2}));
  EXPECT_EQ(ops::to_host(ctx_, ops::to_device(ctx_, dev_specials, DType::I64), DType::I64)
                .to_int_vector(),
            (std::vector<int64_t>{0, 3000000000LL, -3000000000LL, -2}));
  const Tensor ints = Tensor::from_vector({2, 3}, std::vector<int64_t>{1, -2, 3, 4, 5, 6});
  const Tensor i64 = ops::to_device(ctx_, ints, DType::I64);
  const Tensor i32 = ops::to_device(ctx_, i64.transpose(0, 1), DType::I32);
  EXPECT_EQ(ops::to_host(ctx_, i32, DType::I64).to_int_vector(),
            (std::vector<int64_t>{1, 4, -2, 5, 3, 6}));
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    const Tensor z = ops::zeros(ctx_, {3, 3}, t);
    EXPECT_EQ(ops::to_host(ctx_, z, DType::I64).to_int_vector(), std::vector<int64_t>(9, 0));
  }
  Tensor filled = ops::empty(ctx_, {5}, DType::BF16);
  cuda_backend().fill(filled, -1.5f);
  EXPECT_EQ(ops::to_host(ctx_, filled).to_float_vector(), std::vector<float>(5, -1.5f));
}

// transformers' LlamaRMSNorm in half precision rounds the normalised value to the input's dtype
// before multiplying by the weight: out = round(w · round(x · rsqrt(mean(x²) + eps))). The host
// computes both orders from the device's own rounded input; the device must give that one, and
// the values are picked so that rounding once instead differs in many elements.
TEST_F(CudaBackendTest, RmsNormRoundsBeforeTheWeight) {
  for (DType dtype : {DType::F16, DType::BF16}) {
    const Tensor x = random_tensor({4, 256}, 31, -3.0f, 3.0f).to_host_contiguous(dtype);
    const Tensor w = random_tensor({256}, 32, -4.0f, 4.0f).to_host_contiguous(dtype);
    const std::vector<float> xs = x.to_float_vector();
    const std::vector<float> ws = w.to_float_vector();
    const auto round = [&](float v) {
      return Tensor::from_vector({1}, std::vector<float>{v})
          .to_host_contiguous(dtype)
          .to_float_vector()[0];
    };
    std::vector<float> twice(xs.size());
    std::vector<float> once(xs.size());
    for (size_t r = 0; r < 4; ++r) {
      double squares = 0;
      for (size_t i = 0; i < 256; ++i)
        squares += static_cast<double>(xs[r * 256 + i]) * xs[r * 256 + i];
      const double inv = 1.0 / std::sqrt(squares / 256.0 + 1e-6);
      for (size_t i = 0; i < 256; ++i) {
        const double n = xs[r * 256 + i] * inv;
        twice[r * 256 + i] = round(ws[i] * round(static_cast<float>(n)));
        once[r * 256 + i] = round(static_cast<float>(ws[i] * n));
      }
    }
    const std::vector<float> got =
        ops::to_host(ctx_, ops::rms_norm(ctx_, ops::to_device(ctx_, x, dtype),
                                         ops::to_device(ctx_, w, dtype), 1e-6f))
            .to_float_vector();
    size_t same_as_twice = 0;
    size_t once_differs = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      same_as_twice += got[i] == twice[i];
      once_differs += once[i] != twice[i];
    }
    std::printf(
        "rms_norm %s: %zu of %zu elements as transformers rounds, rounding once would "
        "change %zu\n",
        std::string(dtype_name(dtype)).c_str(), same_as_twice, got.size(), once_differs);
    // The device's rsqrt and the host's 1/sqrt may put a value on the other side of a rounding
    // boundary now and then; the order of the roundings decides many more.
    EXPECT_GE(same_as_twice, got.size() * 99 / 100) << dtype_name(dtype);
    EXPECT_GE(once_differs, got.size() / 20) << dtype_name(dtype);
  }
}

TEST_F(CudaBackendTest, TheOpsLayerRejectsTensorsOnTheWrongDeviceOrDtype) {
  const Tensor host = random_tensor({2, 3}, 1);
  try {
    ops::relu(ctx_, host);
    ADD_FAILURE() << "relu accepted a host tensor";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "relu: x [2, 3] is on cpu but the backend 'cuda:0' runs on cuda:0");
  }
  try {
    ops::bucketize(ctx_, ops::to_device(ctx_, host, DType::F16),
                   ops::to_device(ctx_, host.select(0, 0), DType::F16));
    ADD_FAILURE() << "bucketize accepted F16";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "bucketize: x and boundaries must be F32");
  }
  const Tensor spec = ops::to_device(ctx_, random_tensor({1, 5, 3}, 2), DType::BF16);
  EXPECT_THROW(ops::istft(ctx_, spec, spec, Tensor::from_vector({8}, std::vector<float>(8, 1)), 2),
               Error);
  // A context whose allocator holds host memory for a device backend.
  Context mismatched(cuda_backend(), host_allocator());
  try {
    ops::relu(mismatched, ops::to_device(ctx_, host));
    ADD_FAILURE() << "relu ran with host memory for its output";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "relu: the context's allocator holds cpu memory, but the backend 'cuda:0' runs on "
              "cuda:0; outputs and kernel scratch must be cuda:0 memory");
  }
}

// The new ops in a planning pass take the same blocks in the same order as a run, so a run
// over an arena laid out from the plan follows it exactly; cuFFT's work area included (the plan
// is made on the device and reports its size). A PlanOnly backend, with no device to ask,
// counts at least as much for istft.
TEST_F(CudaBackendTest, TheNewOpsPlanWhatTheyRun) {
  const Tensor x = random_tensor({2, 3, 4, 8}, 20);
  const Tensor rows = random_tensor({2, 1, 4, 8}, 22);
  const Tensor window = Tensor::from_vector({1024}, std::vector<float>(1024, 1.0f));
  const Tensor spec = random_tensor({3, 513, 1500}, 23);
  const auto step = [&](Context& c) {
    const Tensor xd = ops::to_device(c, x, DType::BF16);
    Tensor cache = ops::zeros(c, {2, 6, 4, 8}, DType::BF16);
    ops::write_rows(c, cache, ops::to_device(c, rows, DType::BF16), {2, 5});
    const Tensor r = ops::rope(c, xd, {0, 4}, 1e4f);
    const Tensor n = ops::rms_norm(
        c, r, ops::to_device(c, x.select(0, 0).select(0, 0).select(0, 0), DType::BF16), 1e-6f);
    const Tensor a = ops::attention(c, ops::gelu(c, n), cache, cache,
                                    AttentionParams{0.5f, {3, 6}, false, {}, {}, {}});
    const Tensor conv =
        ops::conv1d(c, ops::to_device(c, random_tensor({2, 16, 50}, 24), DType::BF16),
                    ops::to_device(c, random_tensor({16, 1, 7}, 25), DType::BF16), Tensor(),
                    Conv1dParams{1, 3, 1, 16});
    const Tensor spec_d = ops::to_device(c, spec);
    const Tensor audio = ops::istft(c, spec_d, spec_d, window, 256);
    return ops::to_host(c, audio).numel() + ops::to_host(c, a).numel() +
           ops::to_host(c, conv).numel();
  };
  WorkspaceArena planning(cuda_backend().device());
  Context plan = Context::for_planning(cuda_backend(), planning);
  const int64_t planned = step(plan);
  CudaDeviceAllocator device(0);
  {
    WorkspaceArena running(device, planning.layout());
    Context run(cuda_backend(), running);
    EXPECT_EQ(step(run), planned);
    EXPECT_FALSE(running.diverged());
    EXPECT_EQ(running.stats().peak_allocated_bytes, planning.stats().peak_allocated_bytes);
  }
  CudaBackend plan_only(0, CudaBackend::PlanOnly{});
  WorkspaceArena estimated(plan_only.device());
  Context estimate = Context::for_planning(plan_only, estimated);
  EXPECT_EQ(step(estimate), planned);
  std::printf("istft plan: %.2f MiB with cuFFT's work area, %.2f MiB on a PlanOnly backend\n",
              static_cast<double>(planning.stats().peak_allocated_bytes) / 1048576.0,
              static_cast<double>(estimated.stats().peak_allocated_bytes) / 1048576.0);
  EXPECT_GE(estimated.stats().peak_allocated_bytes, planning.stats().peak_allocated_bytes);
}

// A served stream's short chunks keep HiFiGAN V1's resblock pairs on the implicit GEMM, over
// channels and over rows, however few their steps (two sequences of 5: far below a 128-step tile,
// the dilated convolution's reach and what fills the device), and its first upsampler on rows
// over one frame: nothing sends them to im2col + cuBLAS, whose host calls took 3-4 ms in a short
// step (bench/NOTES.md). A single convolution that short goes to cuBLAS unless its weight comes
// arranged (HiFiGAN's conv_pre).
TEST_F(CudaBackendTest, ShortChunksKeepV1sPairsAndFirstUpsamplerOnTheImplicitGemm) {
  if (std::getenv("VOXD_CUDA_CONV") != nullptr) GTEST_SKIP() << "the default path only";
  CudaBackend& backend = cuda_backend();
  for (const DType dtype : {DType::F16, DType::BF16}) {
    const std::string what(dtype_name(dtype));
    const Tensor x = Tensor::empty({2, 128, 5}, dtype);
    const Tensor rows = Tensor::empty({2, 5, 128}, dtype);
    const Tensor dilated = Tensor::empty({128, 128, 11}, dtype);
    const Tensor plain = Tensor::empty({128, 128, 11}, dtype);
    const Tensor bias = Tensor::empty({128}, dtype);
    const Conv1dPair pair{.first_weight = &dilated,
                          .first_bias = &bias,
                          .first = {.stride = 1, .padding = 25, .dilation = 5},
                          .second_weight = &plain,
                          .second_bias = &bias,
                          .second = {.stride = 1, .padding = 5, .dilation = 1},
                          .slope = 0.1f};
    EXPECT_TRUE(backend.fuses_conv1d_pair(x, pair, dtype)) << what;
    EXPECT_TRUE(backend.fuses_conv1d_pair_rows(rows, pair, dtype)) << what;
    EXPECT_FALSE(backend.fuses_conv1d(x, dilated, dtype, pair.first, false)) << what;
    EXPECT_TRUE(backend.fuses_conv1d(x, dilated, dtype, pair.first, true)) << what;

    const Tensor mel_rate_rows = Tensor::empty({2, 1, 512}, dtype);
    const Tensor upsampler = Tensor::empty({512, 256, 16}, dtype);
    EXPECT_TRUE(
        backend.runs_conv_transpose1d_rows(mel_rate_rows, upsampler, ConvTranspose1dParams{8, 4}))
        << what;
  }
}

// Hopper's wgmma convolution runs exactly on compute capability 9.0, and there it takes HiFiGAN
// V1's resblock convolutions at batch (so that under VOXD_CUDA_CONV=wgmma, which gpu-check.py
// runs, the op table's long F16/BF16 cases of 64 or more output channels go through it), but not
// 32 output channels, or too few tiles to fill the device.
TEST_F(CudaBackendTest, WgmmaConvolutionRunsOnHopperForHiFiGanShapes) {
  int device = 0;
  int major = 0;
  int minor = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), cudaSuccess);
  EXPECT_EQ(cuda::wgmma_conv_available(), major == 9 && minor == 0);
  cuda::ImplicitGemmConv stage2;
  stage2.batch = 32;
  stage2.in_channels = 128;
  stage2.out_channels = 128;
  stage2.in_steps = stage2.out_steps = 46080;
  stage2.kernel = 11;
  stage2.dilation = 5;
  stage2.padding = 25;
  EXPECT_TRUE(cuda::wgmma_conv_fits(stage2, 128, 132));
  cuda::ImplicitGemmConv stage1 = stage2;
  stage1.in_channels = stage1.out_channels = 256;
  stage1.in_steps = stage1.out_steps = 5760;
  stage1.kernel = 3;
  EXPECT_TRUE(cuda::wgmma_conv_fits(stage1, 256, 132));
  cuda::ImplicitGemmConv stage4 = stage2;
  stage4.in_channels = stage4.out_channels = 32;
  EXPECT_FALSE(cuda::wgmma_conv_fits(stage4, 32, 132));
  cuda::ImplicitGemmConv one_chunk = stage2;
  one_chunk.batch = 1;
  one_chunk.in_steps = one_chunk.out_steps = 4096;
  EXPECT_FALSE(cuda::wgmma_conv_fits(one_chunk, 128, 132));
  stage2.dtype = DType::F32;
  EXPECT_FALSE(cuda::wgmma_conv_fits(stage2, 128, 132));
}

// The host's waits on the stream are counted: a copy to the host of a result that takes the
// device a while (20 gemms of 2048³, milliseconds, queued in microseconds once cuBLAS has met the
// shape and the caching allocator holds the memory: a cudaFree would wait uncounted) adds most of
// the wall time around it, and no more.
TEST(CudaDeviceWait, CountsTheWaitsForTheStream) {
  CudaMemorySource source(0);
  CachingAllocator allocator(source);
  Context ctx(cuda_backend(), allocator);
  const Tensor a = ops::to_device(ctx, random_tensor({2048, 2048}, 51, -0.02f, 0.02f), DType::F32);
  const auto products = [&] {
    Tensor product = a;
    for (int i = 0; i < 20; ++i) product = ops::linear(ctx, product, a, Tensor());
    return ops::to_host(ctx, product);
  };
  (void)products();
  const double before = cuda_backend().device_wait_seconds();
  const auto start = std::chrono::steady_clock::now();
  const Tensor host = products();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double waited = cuda_backend().device_wait_seconds() - before;
  EXPECT_EQ(host.numel(), 2048 * 2048);
  EXPECT_GE(waited, 0.5 * wall);
  EXPECT_LE(waited, wall);
}

// profile_host_time counts each op's calls from start to return; an op inside another (here the
// ops a capture records) counts in that one; off, nothing is counted.
TEST(CudaHostProfile, CountsEachOutermostCall) {
  CudaMemorySource source(0);
  CachingAllocator allocator(source);
  Context ctx(cuda_backend(), allocator);
  const Tensor a = ops::to_device(ctx, random_tensor({256, 256}, 52, -0.05f, 0.05f), DType::F32);
  Tensor out = ops::empty(ctx, a.shape(), DType::F32);
  cuda_backend().profile_host_time(true);
  (void)cuda_backend().take_host_profile();
  Tensor product = a;
  for (int i = 0; i < 3; ++i) product = ops::linear(ctx, product, a, Tensor());
  const Tensor host = ops::to_host(ctx, product);
  const std::unique_ptr<CapturedWork> recorded =
      cuda_backend().capture([&] { cuda_backend().unary(a, out, UnaryOp::Scale, 2.0f); });
  const std::vector<Backend::OpHostTime> times = cuda_backend().take_host_profile();
  const auto find = [&](const std::string& op) -> const Backend::OpHostTime* {
    for (const Backend::OpHostTime& t : times) {
      if (t.op == op) return &t;
    }
    return nullptr;
  };
  const Backend::OpHostTime* linear = find("linear");
  ASSERT_NE(linear, nullptr);
  EXPECT_EQ(linear->calls, 3);
  EXPECT_GT(linear->seconds, 0.0);
  EXPECT_LE(linear->longest_seconds, linear->seconds);
  ASSERT_NE(find("capture"), nullptr);
  EXPECT_EQ(find("capture")->calls, 1);
  EXPECT_EQ(find("unary"), nullptr);
  for (size_t i = 1; i < times.size(); ++i) EXPECT_GE(times[i - 1].seconds, times[i].seconds);
  EXPECT_TRUE(cuda_backend().take_host_profile().empty());  // taking starts over

  cuda_backend().profile_host_time(false);
  (void)ops::linear(ctx, a, a, Tensor());
  recorded->replay();
  cuda_backend().synchronize();
  EXPECT_TRUE(cuda_backend().take_host_profile().empty());
  EXPECT_EQ(ops::to_host(ctx, out).to_float_vector()[7],
            2.0f * ops::to_host(ctx, a).to_float_vector()[7]);
}

// ConvNeXt's depthwise conv1d (K 7, padding 3, groups == channels) runs as one direct kernel:
// its time here (the kernel alone, on the stream), for the DVAE decoder's and Vocos's sizes in
// BF16, against the bytes it must move.
TEST_F(CudaBackendTest, DepthwiseConv1dSpeed) {
  CudaDeviceAllocator device(0);
  const std::vector<std::array<int64_t, 3>> shapes = {
      {1, 512, 2000}, {16, 512, 1000}, {8, 768, 8000}};
  for (const auto& [batch, channels, steps] : shapes) {
    Context ctx(cuda_backend(), device);
    const Tensor x = ops::to_device(ctx, random_tensor({batch, channels, steps}, 40), DType::BF16);
    const Tensor w = ops::to_device(ctx, random_tensor({channels, 1, 7}, 41), DType::BF16);
    const Tensor b = ops::to_device(ctx, random_tensor({channels}, 42), DType::BF16);
    const Conv1dParams p{1, 3, 1, channels};
    Tensor out = ops::empty(ctx, x.shape(), DType::BF16);
    const KernelScratch scratch = ctx.scratch();
    cuda_backend().conv1d(x, w, b, out, p, scratch);
    cuda_backend().synchronize();
    constexpr int kRuns = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRuns; ++i) cuda_backend().conv1d(x, w, b, out, p, scratch);
    cuda_backend().synchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kRuns;
    const double bytes = 2.0 * 2 * static_cast<double>(x.numel());  // read x, write out, BF16
    std::printf("depthwise conv1d BF16 [%ld, %ld, %ld] K7: %.1f us, %.0f GB/s\n",
                static_cast<long>(batch), static_cast<long>(channels), static_cast<long>(steps),
                seconds * 1e6, bytes / seconds / 1e9);
    // Through the ops layer: the same kernel, the same output (the op table checks its values).
    const Tensor expected = ops::conv1d(ctx, x, w, b, p);
    EXPECT_EQ(ops::to_host(ctx, expected).to_float_vector(),
              ops::to_host(ctx, out).to_float_vector());
  }
}

TEST(CudaDeviceAllocator, CountsAndReportsOutOfMemory) {
  CudaDeviceAllocator allocator(0);
  {
    Context ctx(cuda_backend(), allocator);
    const Tensor t = ops::empty(ctx, {1000});
    const AllocatorStats s = allocator.stats();
    EXPECT_EQ(s.allocated_bytes, 4000u);
    EXPECT_EQ(s.reserved_bytes, 4000u);
    EXPECT_EQ(s.num_allocs, 1u);
  }
  EXPECT_EQ(allocator.stats().allocated_bytes, 0u);
  EXPECT_EQ(allocator.stats().peak_allocated_bytes, 4000u);
  EXPECT_EQ(allocator.stats().num_frees, 1u);
  try {
    allocator.allocate(size_t{1} << 50);
    ADD_FAILURE() << "a 1 PiB allocation succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1125899906842624 bytes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(allocator.stats().num_ooms, 1u);
  // The failed allocation leaves no error behind for the next kernel.
  Context ctx(cuda_backend(), allocator);
  const Tensor x = ops::to_device(ctx, random_tensor({4}, 2));
  EXPECT_EQ(ops::to_host(ctx, ops::relu(ctx, x)).numel(), 4);
  cuda_backend().synchronize();
}

// BiasGemm answers a new row count with the algorithm of its power-of-two bucket where that
// applies: rows 33 to 64 make one cuBLASLt heuristic query between them, 65 a second (a new
// bucket), and every row count's output is the host's sum within F16 rounding.
TEST(CudaBiasGemm, RowCountsOfOneBucketShareOneHeuristicQueryAndStayExact) {
  constexpr int64_t kIn = 256;
  constexpr int64_t kFeatures = 384;
  constexpr int64_t kMaxRows = 65;
  CudaDeviceAllocator allocator(0);
  Context ctx(cuda_backend(), allocator);
  const Tensor x = random_tensor({kMaxRows, kIn}, 41, -1.0f, 1.0f).to_host_contiguous(DType::F16);
  const Tensor w = random_tensor({kFeatures, kIn}, 42, -0.1f, 0.1f).to_host_contiguous(DType::F16);
  const Tensor bias = random_tensor({kFeatures}, 43, -1.0f, 1.0f).to_host_contiguous(DType::F16);
  const std::vector<float> xs = x.to_float_vector();
  const std::vector<float> ws = w.to_float_vector();
  const std::vector<float> bs = bias.to_float_vector();
  const Tensor x_device = ops::to_device(ctx, x, DType::F16);
  const Tensor w_device = ops::to_device(ctx, w, DType::F16);
  const Tensor bias_device = ops::to_device(ctx, bias, DType::F16);
  const Tensor out = ops::empty(ctx, {kMaxRows, kFeatures}, DType::F16);
  const Tensor workspace = ops::empty(ctx, {int64_t{1} << 20}, DType::F32);
  cuda_backend().synchronize();  // the uploads, on the backend's stream; the gemm runs on stream 0
  cuda::BiasGemm gemm;
  for (int64_t rows = 33; rows <= kMaxRows; ++rows) {
    ASSERT_TRUE(gemm.run(CUDA_R_16F, rows, kIn, kFeatures, x_device.raw_data(), w_device.raw_data(),
                         bias_device.raw_data(), out.raw_data(), workspace.raw_data(),
                         workspace.nbytes(), false, nullptr, "test"))
        << rows << " rows";
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(gemm.heuristic_queries(), rows <= 64 ? 1u : 2u) << rows << " rows";
    const std::vector<float> got = ops::to_host(ctx, out.narrow(0, 0, rows)).to_float_vector();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t f = 0; f < kFeatures; ++f) {
        double sum = bs[static_cast<size_t>(f)];
        for (int64_t i = 0; i < kIn; ++i) {
          sum += static_cast<double>(xs[static_cast<size_t>(r * kIn + i)]) *
                 ws[static_cast<size_t>(f * kIn + i)];
        }
        const float value = got[static_cast<size_t>(r * kFeatures + f)];
        ASSERT_NEAR(value, sum, 2e-3 + 2e-3 * std::abs(sum))
            << rows << " rows, row " << r << ", feature " << f;
      }
    }
  }
}

}  // namespace
}  // namespace voxd
