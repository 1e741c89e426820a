// The op table (op_cases.h) on every host backend of the registry but the reference, each against
// the reference (CUDA runs it in tests/cuda/test_cuda_ops.cpp), and what the ops layer promises
// whatever the backend: in-place results, fusions equal to their steps, argument checks and their
// messages, refusals of unsupported ops, conversions to known bit patterns, planning passes that
// allocate what a run does.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/reference/reference_backend.h"
#include "backends/registry.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/workspace_arena.h"
#include "op_cases.h"

namespace voxd {
namespace {

using testing::expect_close;
using testing::PoisonAllocator;
using testing::random_tensor;

// The host backends the registry makes (two threads for cpu), one of each for the whole binary.
Backend& host_backend(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Backend>> backends;
  auto& backend = backends[name];
  if (!backend) backend = make_backend(name, 2);
  return *backend;
}

// "cpu" -> "CpuOps".
std::string suite_name(const std::string& backend) {
  return static_cast<char>(std::toupper(static_cast<unsigned char>(backend[0]))) +
         backend.substr(1) + "Ops";
}

// F32 only: the host backends compute in F32 (their F16 and BF16 tests would all say so).
const bool kRegistered = [] {
  for (const std::string& name : backend_names()) {
    if (name == "reference" || name.rfind("cuda", 0) == 0) continue;  // cuda: test_cuda_ops
    testing::register_op_table({suite_name(name),
                                [name]() -> Backend& { return host_backend(name); },
                                []() -> Allocator& {
                                  static PoisonAllocator poison;
                                  return poison;
                                },
                                {DType::F32},
                                false});
  }
  // Where the CPU has AVX-512, CpuOps takes the convolution's 512-bit tiles; the AVX2 ones get
  // a table of their own there (elsewhere CpuOps is that table).
  if (!__builtin_cpu_supports("avx512f")) return true;
  testing::register_op_table({"CpuAvx2Ops",
                              []() -> Backend& {
                                static CpuBackend avx2(2, false);
                                return avx2;
                              },
                              []() -> Allocator& {
                                static PoisonAllocator poison;
                                return poison;
                              },
                              {DType::F32},
                              false});
  return true;
}();

// The host backends, each with a context over NaN-poisoned memory.
class HostBackends : public ::testing::Test {
 protected:
  HostBackends() {
    for (const std::string& name : {std::string("reference"), std::string("cpu")}) {
      contexts_.emplace_back(host_backend(name), poison_);
    }
  }
  std::vector<Context>& contexts() { return contexts_; }
  Context& cpu() { return contexts_[1]; }

  PoisonAllocator poison_;
  std::vector<Context> contexts_;
};

// The voxd::Error message `run` throws; a failure when it throws none.
template <typename Run>
std::string error_message(Run run) {
  try {
    run();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no voxd::Error thrown";
  return "";
}

TEST_F(HostBackends, InPlaceUnaryOverwritesItsInput) {
  const Tensor x = random_tensor({4, 9, 33}, 11);
  for (Context& c : contexts()) {
    Tensor a = ops::to_device(c, x);
    Tensor& r = ops::relu_(c, a);
    EXPECT_EQ(r.raw_data(), a.raw_data());
    expect_close(a, ops::relu(c, x), 0, "relu_");
    Tensor b = ops::to_device(c, x);
    ops::leaky_relu_(c, b, 0.1f);
    expect_close(b, ops::leaky_relu(c, x, 0.1f), 0, "leaky_relu_");
  }
}

// A paged cache holds the same keys as a contiguous one: paged_attention over pages scattered
// out of order equals attention over the contiguous cache with each sequence's length, causal
// from its position (independent code on each backend), and write_pages puts each row where the
// contiguous cache's write_rows does.
TEST_F(HostBackends, PagedAttentionEqualsAttentionOverTheContiguousCache) {
  const int64_t batch = 3, steps = 2, heads = 2, dim = 8, page_size = 4, width = 4;
  const int64_t capacity = page_size * width;
  const std::vector<int64_t> positions = {9, 0, 13};  // each sequence's first new position
  // Pages of the three sequences, out of order, in a pool of 14.
  const Tensor table = Tensor::from_vector(
      {batch, width}, std::vector<int64_t>{13, 2, 7, 5, 0, 11, 4, 9, 1, 3, 12, 6});
  const Tensor q = random_tensor({batch, steps, heads, dim}, 1900, -2.0f, 2.0f);
  const Tensor k = random_tensor({batch, capacity, heads, dim}, 1901, -2.0f, 2.0f);
  const Tensor v = random_tensor({batch, capacity, heads, dim}, 1902);
  const Tensor new_k = random_tensor({batch, steps, heads, dim}, 1903, -2.0f, 2.0f);
  const Tensor new_v = random_tensor({batch, steps, heads, dim}, 1904);
  for (Context& c : contexts()) {
    // The contiguous cache with the new rows, and the pages with the old rows then the new.
    Tensor k_cache = ops::to_device(c, k);
    Tensor v_cache = ops::to_device(c, v);
    ops::write_rows(c, k_cache, new_k, positions);
    ops::write_rows(c, v_cache, new_v, positions);
    Tensor k_pages = ops::zeros(c, {14, page_size, heads, dim}, DType::F32);
    Tensor v_pages = ops::zeros(c, {14, page_size, heads, dim}, DType::F32);
    const Tensor from_zero = Tensor::from_vector({batch}, std::vector<int64_t>(batch, 0));
    ops::write_pages(c, k_pages, k, table, from_zero);
    ops::write_pages(c, v_pages, v, table, from_zero);
    const Tensor at = Tensor::from_vector({batch}, positions);
    ops::write_pages(c, k_pages, new_k, table, at);
    ops::write_pages(c, v_pages, new_v, table, at);
    AttentionParams params;
    params.scale = 0.3f;
    params.causal = true;
    params.query_offsets = positions;
    for (int64_t p : positions) params.key_lengths.push_back(p + steps);
    expect_close(ops::paged_attention(c, q, k_pages, v_pages, table, at, params.scale),
                 ops::attention(c, q, k_cache, v_cache, params), 1e-5,
                 c.backend().name() + " paged vs contiguous", false);
    // A window of keys per sequence (Sambert's banded attention) hides the keys before it, as
    // the contiguous attention's key starts do.
    const std::vector<int64_t> starts = {6, 0, 12};
    params.key_starts = starts;
    expect_close(ops::paged_attention(c, q, k_pages, v_pages, table, at, params.scale,
                                      Tensor::from_vector({batch}, starts)),
                 ops::attention(c, q, k_cache, v_cache, params), 1e-5,
                 c.backend().name() + " paged vs contiguous over windows", false);
  }
}

// An LSTM layer run one step at a time, carrying h and c, gives what one run over the steps
// gives: every step's output and the final state.
TEST_F(HostBackends, LstmStepByStepEqualsOneRun) {
  const Tensor gates = random_tensor({2, 3, 32}, 1950, -2.0f, 2.0f);
  const Tensor w_hh = random_tensor({32, 8}, 1951, -0.3f, 0.3f);
  for (Context& c : contexts()) {
    Tensor h = ops::zeros(c, {2, 8});
    Tensor cell = ops::zeros(c, {2, 8});
    const Tensor whole = ops::lstm(c, gates, w_hh, h, cell, {}, false);
    Tensor step_h = ops::zeros(c, {2, 8});
    Tensor step_c = ops::zeros(c, {2, 8});
    for (int64_t t = 0; t < 3; ++t) {
      const Tensor out = ops::lstm(c, gates.narrow(1, t, 1), w_hh, step_h, step_c, {}, false);
      expect_close(out, ops::contiguous(c, whole.narrow(1, t, 1)), 1e-6,
                   c.backend().name() + " step " + std::to_string(t));
    }
    expect_close(step_h, h, 1e-6, c.backend().name() + " final h");
    expect_close(step_c, cell, 1e-6, c.backend().name() + " final c");
  }
}

// conv1d with a ConvFusion is leaky_relu → conv1d → + residual, whatever the backend fuses.
TEST_F(HostBackends, FusedConv1dIsLeakyReluConvPlusResidual) {
  const Tensor x = random_tensor({2, 6, 37}, 1400);
  const Tensor w = random_tensor({5, 6, 7}, 1401);
  const Tensor b = random_tensor({5}, 1402);
  const Conv1dParams p{1, 9, 3, 1};
  const Tensor residual = random_tensor({2, 5, 37}, 1403);
  for (Context& c : contexts()) {
    Tensor expected = ops::conv1d(c, ops::leaky_relu(c, x, 0.1f), w, b, p);
    ops::add_(c, expected, residual);
    expect_close(ops::conv1d(c, x, w, b, p, ConvFusion{0.1f, &residual}), expected, 0.0,
                 "leaky_relu and residual", false);
    expect_close(ops::conv1d(c, x, w, b, p, ConvFusion{}), ops::conv1d(c, x, w, b, p), 0.0,
                 "nothing fused", false);
  }
  const Tensor wrong = random_tensor({2, 5, 36}, 1404);
  EXPECT_EQ(error_message([&] {
              ops::conv1d(cpu(), x, w, b, p, ConvFusion{std::nullopt, &wrong});
            }),
            "conv1d: residual [2, 5, 36] does not match the output [2, 5, 37]");
}

// Mixed precision (x, the weights and the output of different dtypes) runs on the CUDA backend
// (the op table's "F32 in" and "F32 out" cases); the host backends compute in F32, and the ops
// layer checks the dtypes of such a call the same way for every backend first.
TEST_F(HostBackends, FusedConv1dChecksTheDtypesAroundTheWeights) {
  const Tensor x = random_tensor({2, 6, 37}, 1410);
  const Tensor w = random_tensor({5, 6, 7}, 1411);
  const Tensor b = random_tensor({5}, 1412);
  const Tensor residual = random_tensor({2, 5, 37}, 1413);
  const Conv1dParams p{1, 3, 1, 1};
  for (Context& c : contexts()) {
    expect_close(ops::conv1d(c, x, w, b, p, ConvFusion{0.1f, &residual, DType::F32}),
                 ops::conv1d(c, x, w, b, p, ConvFusion{0.1f, &residual}), 0.0,
                 "output dtype F32 = x's", false);
    const auto expect_error = [&](const ConvFusion& fusion, const Tensor& bias,
                                  const std::string& message) {
      EXPECT_EQ(error_message([&] { ops::conv1d(c, x, w, bias, p, fusion); }), message);
    };
    expect_error(ConvFusion{0.1f, &residual, DType::BF16}, b,
                 "conv1d: residual has dtype F32, the output BF16");
    expect_error(ConvFusion{0.1f, nullptr, DType::F32}, ops::to_device(c, b, DType::BF16),
                 "conv1d: bias has dtype BF16, weight has F32");
    expect_error(ConvFusion{0.1f, nullptr, DType::I32}, b,
                 "conv1d: output dtype I32 is not F32, F16 or BF16");
  }
}

TEST_F(HostBackends, OutputShapesOfTheLengthOps) {
  const Tensor x = random_tensor({2, 5, 3}, 900);
  const std::vector<std::vector<int64_t>> durations{{2, 0, 1, 3, 1}, {0, 4, 1}};
  for (Context& c : contexts()) {
    EXPECT_EQ(ops::length_regulate(c, x, durations).shape(), (Shape{2, 7, 3}));
    EXPECT_EQ(ops::length_regulate(c, x, durations, 12).shape(), (Shape{2, 12, 3}));
    EXPECT_EQ(ops::length_regulate(c, x, {{0, 0}, {}}).shape(), (Shape{2, 0, 3}));
    EXPECT_EQ(ops::embedding(c, Tensor::from_vector({2, 4}, std::vector<int64_t>(8, 1)),
                             random_tensor({11, 7}, 500))
                  .shape(),
              (Shape{2, 4, 7}));
    Tensor y = ops::to_device(c, random_tensor({3, 6, 4}, 800));
    ops::zero_beyond_lengths(c, y, {6, 9, 1});
    const std::vector<float> v = y.to_float_vector();
    EXPECT_EQ(v[2 * 24 + 4], 0.0f);
    EXPECT_NE(v[2 * 24 + 3], 0.0f);
  }
}

// torch.bucketize(x, boundaries, right=False) is the index of the first boundary >= x, i.e.
// std::lower_bound, except that NaN (which compares false with everything) goes past the last
// boundary. The expectations come from std::lower_bound over the same boundaries and from
// hand-picked values: ties (a value equal to a repeated boundary goes to the first), out of
// range on both sides, infinities, signed zero, NaN.
TEST_F(HostBackends, BucketizeIsTorchsLowerBound) {
  const std::vector<float> bounds = {-1.0f, 0.0f, 0.5f, 0.5f, 2.0f};
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<float, int64_t>> picked = {
      {-5.0f, 0},   {-1.0f, 0}, {-0.999f, 1}, {-0.0f, 1}, {0.0f, 1}, {0.25f, 2}, {0.5f, 2},
      {0.5001f, 4}, {2.0f, 4},  {2.0001f, 5}, {-inf, 0},  {inf, 5},  {nan, 5}};
  std::vector<float> values;
  std::vector<int64_t> expected;
  for (const auto& [v, index] : picked) {
    values.push_back(v);
    expected.push_back(index);
  }
  for (float v : random_tensor({200}, 1000, -3.0f, 3.0f).to_float_vector()) {
    values.push_back(v);
    expected.push_back(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
  }
  const Tensor x = Tensor::from_vector({static_cast<int64_t>(values.size())}, values);
  const Tensor boundaries = Tensor::from_vector({5}, bounds);
  for (Context& c : contexts()) {
    const Tensor out = ops::bucketize(c, x, boundaries);
    ASSERT_EQ(out.dtype(), DType::I64);
    EXPECT_EQ(out.to_int_vector(), expected) << c.backend().name();
  }
}

TEST_F(HostBackends, CopyConvertsDtypesAndStrides) {
  for (Context& c : contexts()) {
    SCOPED_TRACE(c.backend().name());
    testing::check_dtype_conversions(c);
    const Tensor ints = Tensor::from_vector({2, 3}, std::vector<int64_t>{1, -2, 3, 4, 5, 6});
    const Tensor i32 = ops::to_device(c, ints.transpose(0, 1), DType::I32);
    EXPECT_EQ(i32.to_int_vector(), (std::vector<int64_t>{1, 4, -2, 5, 3, 6}));
    const Tensor z = ops::zeros(c, {3, 3}, DType::I64);
    EXPECT_EQ(z.to_int_vector(), std::vector<int64_t>(9, 0));
  }
}

TEST_F(HostBackends, ShapeMismatchesThrow) {
  Context& c = cpu();
  const Tensor x = random_tensor({1, 16, 100}, 1300);
  const Tensor w = random_tensor({64, 32, 3}, 1301);
  EXPECT_EQ(error_message([&] { ops::conv1d(c, x, w, Tensor(), Conv1dParams{}); }),
            "conv1d: weight [64, 32, 3] expects 32 input channels, x is [1, 16, 100]");
  EXPECT_THROW(ops::conv1d(c, x, random_tensor({8, 16, 3}, 1), random_tensor({7}, 2), {}), Error);
  EXPECT_THROW(ops::conv1d(c, x, random_tensor({8, 16, 200}, 1), Tensor(), {}), Error);
  EXPECT_THROW(ops::conv1d(c, x, random_tensor({6, 4, 3}, 1), Tensor(), {1, 0, 1, 4}), Error);
  EXPECT_THROW(ops::conv1d(c, x.select(0, 0), w, Tensor(), {}), Error);
  EXPECT_THROW(ops::conv_transpose1d(c, x, random_tensor({8, 4, 3}, 1), Tensor(), {}), Error);
  EXPECT_THROW(ops::conv_transpose1d(c, x, random_tensor({16, 4, 3}, 1), Tensor(), {2, 0, 2}),
               Error);
  EXPECT_THROW(ops::linear(c, x, random_tensor({4, 99}, 1), Tensor()), Error);
  EXPECT_THROW(ops::add(c, x, random_tensor({2, 1, 1}, 1)), Error);
  EXPECT_THROW(ops::add(c, x, random_tensor({16, 99}, 1)), Error);
  EXPECT_THROW(ops::layer_norm(c, x, random_tensor({99}, 1), random_tensor({100}, 1), 1e-5f),
               Error);
  const Tensor q = random_tensor({2, 3, 2, 4}, 3);
  EXPECT_THROW(ops::attention(c, q, random_tensor({2, 3, 2, 5}, 4), q, {}), Error);
  AttentionParams lengths;
  lengths.key_lengths = {3};
  EXPECT_THROW(ops::attention(c, q, q, q, lengths), Error);
  lengths.key_lengths = {3, 4};
  EXPECT_THROW(ops::attention(c, q, q, q, lengths), Error);
  EXPECT_THROW(ops::length_regulate(c, x, {{1, -1}}), Error);
  EXPECT_THROW(ops::length_regulate(c, x, {{1}, {1}}), Error);
  EXPECT_THROW(ops::embedding(c, Tensor::from_vector({2}, std::vector<int64_t>{0, 1}),
                              random_tensor({2, 2, 2}, 5)),
               Error);
  EXPECT_THROW(ops::embedding(c, random_tensor({2}, 6), random_tensor({4, 2}, 5)), Error);
  const Tensor descending = Tensor::from_vector({2}, std::vector<float>{1.0f, 0.0f});
  EXPECT_THROW(ops::bucketize(c, x, descending), Error);
  Tensor strided = random_tensor({4, 6}, 7).transpose(0, 1);
  EXPECT_THROW(ops::relu_(c, strided), Error);
  Tensor btc = random_tensor({2, 3, 4}, 8);
  EXPECT_THROW(ops::zero_beyond_lengths(c, btc, {1}), Error);
}

TEST_F(HostBackends, TheNewOpsCheckTheirArguments) {
  Context& c = cpu();
  const Tensor x = random_tensor({2, 3, 4, 8}, 1);
  EXPECT_EQ(error_message([&] { ops::rms_norm(c, x, random_tensor({7}, 2), 1e-6f); }),
            "rms_norm: weight [7] should be [8] for x [2, 3, 4, 8]");
  EXPECT_EQ(error_message([&] {
              ops::rope(c, random_tensor({2, 3, 4, 7}, 3), std::vector<int64_t>{}, 1e4f);
            }),
            "rope: x [B, T, H, D] [2, 3, 4, 7] has an odd head size D; rotate_half pairs "
            "dimension i with i + D/2");
  EXPECT_EQ(error_message([&] {
              ops::rope(c, x, {1, 2, 3}, 1e4f);
            }),
            "rope: 3 start positions for x [2, 3, 4, 8] (one per batch item, or none for 0)");
  EXPECT_NE(
      error_message([&] { ops::rope(c, x, std::vector<int64_t>{}, -1.0f); }).find("theta must be"),
      std::string::npos);
  EXPECT_NE(error_message([&] {
              ops::rope(c, x, Tensor::from_vector({2}, std::vector<float>{0.0f, 1.0f}), 1e4f);
            }).find("start positions must be I64 [B] = [2]"),
            std::string::npos);
  Tensor cache = ops::zeros(c, {2, 5, 4, 8});
  EXPECT_EQ(error_message([&] {
              ops::write_rows(c, cache, x, {0, 3});
            }),
            "write_rows: batch 1: 3 rows at offset 3 do not fit the cache's 5 rows");
  EXPECT_EQ(error_message([&] { ops::write_rows(c, cache, x, {0}); }),
            "write_rows: 1 offsets for cache [2, 5, 4, 8]");
  EXPECT_EQ(error_message([&] {
              ops::write_rows(c, cache, random_tensor({2, 1, 4, 9}, 4), {0, 0});
            }),
            "write_rows: rows [B, T, ...] [2, 1, 4, 9] do not fit cache [B, Tmax, ...] "
            "[2, 5, 4, 8]");
  const Tensor spec = random_tensor({1, 9, 4}, 5);
  const Tensor window = Tensor::from_vector({16}, std::vector<float>(16, 1.0f));
  EXPECT_EQ(error_message([&] {
              ops::istft(c, random_tensor({1, 8, 4}, 6), spec, window, 4);
            }),
            "istft: imag [1, 9, 4] does not match real [1, 8, 4]");
  EXPECT_EQ(error_message([&] {
              ops::istft(c, spec, spec, Tensor::from_vector({12}, std::vector<float>(12, 1)), 4);
            }),
            "istft: real [B, n_fft/2 + 1, frames] [1, 9, 4] does not fit a window of 12 samples "
            "(n_fft), which needs 7 bins");
  EXPECT_EQ(error_message([&] {
              ops::istft(c, random_tensor({1, 9, 1}, 7), random_tensor({1, 9, 1}, 8), window, 4);
            }),
            "istft: 1 frames of n_fft 16 with hop 4 leave no sample after trimming n_fft/2 from "
            "each end");
  // A window that is zero where only one frame reaches: the envelope check, as torch.istft's.
  std::vector<float> gap(16, 1.0f);
  gap[10] = 0.0f;
  EXPECT_NE(error_message([&] {
              ops::istft(c, spec, spec, Tensor::from_vector({16}, gap), 16);
            }).find("is 0.000000 at output sample 2, below torch.istft's 1e-11"),
            std::string::npos);
}

// An op the backend does not support is refused by the ops layer, naming the op, the backend and
// the dtype; the same holds in a planning pass, so a plan for an unsupported model fails early.
TEST_F(HostBackends, AnUnsupportedOpIsRefusedNamingOpBackendAndDtype) {
  const Tensor half = random_tensor({2, 8}, 1).to_host_contiguous(DType::F16);
  for (Context& c : contexts()) {
    const std::string name = c.backend().name();
    EXPECT_EQ(error_message([&] { ops::relu(c, half); }),
              "relu: the backend '" + name + "' does not run relu on F16 tensors");
    EXPECT_EQ(error_message([&] { ops::rms_norm(c, half, half.select(0, 0), 1e-6f); }),
              "rms_norm: the backend '" + name + "' does not run rms_norm on F16 tensors");
  }
  WorkspaceArena arena(Device::cpu());
  Context plan = Context::for_planning(host_backend("cpu"), arena);
  EXPECT_EQ(error_message([&] { ops::linear(plan, half, half, Tensor()); }),
            "linear: the backend 'cpu' does not run linear on F16 tensors");
}

// A backend written against the interface before supports() (as tests and tools may hold): the
// ops it had to implement, each doing nothing.
class MinimalBackend : public Backend {
 public:
  std::string name() const override { return "minimal"; }
  Device device() const override { return Device::cpu(); }
  void copy(const Tensor&, Tensor&, const KernelScratch&) override {}
  void fill(Tensor&, float) override {}
  void unary(const Tensor&, Tensor&, UnaryOp, float) override {}
  void binary(const Tensor&, const Tensor&, Tensor&, BinaryOp) override {}
  void linear(const Tensor&, const Tensor&, const Tensor&, Tensor&, const KernelScratch&) override {
  }
  void conv1d(const Tensor&, const Tensor&, const Tensor&, Tensor&, const Conv1dParams&,
              const KernelScratch&) override {}
  void conv_transpose1d(const Tensor&, const Tensor&, const Tensor&, Tensor&,
                        const ConvTranspose1dParams&, const KernelScratch&) override {}
  void layer_norm(const Tensor&, const Tensor&, const Tensor&, float, Tensor&) override {}
  void embedding(const Tensor&, const Tensor&, Tensor&, const KernelScratch&) override {}
  void attention(const Tensor&, const Tensor&, const Tensor&, Tensor&, const AttentionParams&,
                 const KernelScratch&) override {}
  void zero_beyond_lengths(Tensor&, const std::vector<int64_t>&, const KernelScratch&) override {}
  void length_regulate(const Tensor&, const std::vector<std::vector<int64_t>>&, Tensor&,
                       const KernelScratch&) override {}
  void bucketize(const Tensor&, const Tensor&, Tensor&) override {}
};

// Such a backend: the default answers for the ops it had to implement, refuses the later ones,
// and their kernels' defaults throw if called anyway.
TEST(BackendDefaults, ABackendWithoutSupportsRunsOnlyTheFirstOps) {
  MinimalBackend minimal;
  EXPECT_TRUE(minimal.supports(OpKind::Conv1d, DType::BF16));
  EXPECT_TRUE(minimal.supports(OpKind::Bucketize, DType::F32));
  EXPECT_FALSE(minimal.supports(OpKind::Bucketize, DType::F16));
  for (OpKind op : {OpKind::Silu, OpKind::Gelu, OpKind::Sin, OpKind::Cos, OpKind::ClampMax,
                    OpKind::RmsNorm, OpKind::Rope, OpKind::WriteRows, OpKind::Istft,
                    OpKind::SampleTokens, OpKind::Lstm, OpKind::AddRmsNorm, OpKind::AddLayerNorm,
                    OpKind::Swiglu, OpKind::QkvToPages, OpKind::GatherRows}) {
    EXPECT_FALSE(minimal.supports(op, DType::F32)) << op_name(op);
  }
  Tensor x = random_tensor({1, 1, 1, 2}, 1);
  const std::string message = error_message([&] {
    minimal.rope(x, Tensor::from_vector({1}, std::vector<int64_t>{0}), 1e4f, x,
                 KernelScratch(host_allocator(), false));
  });
  EXPECT_EQ(message.rfind("minimal: rope is not implemented by this backend", 0), 0u) << message;
  Context ctx(minimal, host_allocator());
  EXPECT_EQ(error_message([&] { ops::silu(ctx, x); }),
            "silu: the backend 'minimal' does not run silu on F32 tensors");
}

// A backend whose fused pairs and transposed convolutions read weights in an order of their own:
// one element more than the weight's, here, and it counts the weights it arranged.
class ArrangingBackend final : public MinimalBackend {
 public:
  int64_t arranged_conv1d_weight_elements(const Tensor& weight) const override {
    return weight.numel() + 1;
  }
  void arrange_conv1d_weight(const Tensor&, Tensor&, const KernelScratch&) override { ++arranged; }
  int64_t arranged_conv_transpose1d_elements(const Tensor& weight,
                                             const ConvTranspose1dParams&) const override {
    return weight.numel() + 1;
  }
  void arrange_conv_transpose1d_weight(const Tensor&, const Tensor&, const ConvTranspose1dParams&,
                                       Tensor&, const KernelScratch&) override {
    ++arranged;
  }
  int64_t arranged_conv1d_rows_elements(const Tensor& weight, const Conv1dParams&) const override {
    return weight.numel() + 1;
  }
  void arrange_conv1d_rows_weight(const Tensor&, const Conv1dParams&, Tensor&,
                                  const KernelScratch&) override {
    ++arranged;
  }
  int arranged = 0;
};

// ops::arrange_conv1d_weight makes the backend's arrangement once; a pair takes it, refuses one
// that is not the backend's (naming it), and a backend that arranges none (the CPU's) makes
// none and ignores one it is handed, so a model loaded elsewhere runs there unchanged.
TEST(ArrangedConvWeights, AreTheBackendsOwnOrIgnored) {
  const Tensor x = random_tensor({1, 4, 20}, 1);
  const Tensor weight = random_tensor({4, 4, 3}, 2, -0.1f, 0.1f);
  const auto pair = [&](const Tensor* arranged) {
    return Conv1dPair{.first_weight = &weight,
                      .first = {1, 1, 1, 1},
                      .second_weight = &weight,
                      .second = {1, 1, 1, 1},
                      .slope = 0.1f,
                      .first_arranged = arranged,
                      .second_arranged = arranged};
  };
  ArrangingBackend arranging;
  Context ctx(arranging, host_allocator());
  const Tensor arranged = ops::arrange_conv1d_weight(ctx, weight);
  EXPECT_EQ(arranged.shape(), (Shape{49}));
  EXPECT_EQ(arranging.arranged, 1);
  EXPECT_NO_THROW(ops::conv1d_pair(ctx, x, pair(&arranged)));
  const Tensor other = random_tensor({48}, 3);
  EXPECT_EQ(error_message([&] { ops::conv1d_pair(ctx, x, pair(&other)); }),
            "conv1d_pair: the first weight's arrangement [48] is not this backend's for weight "
            "[4, 4, 3] (49 F32 elements on cpu); make it with ops::arrange_conv1d_weight");

  Context cpu(host_backend("cpu"), host_allocator());
  EXPECT_FALSE(ops::arrange_conv1d_weight(cpu, weight).defined());
  const Tensor expected = ops::conv1d_pair(cpu, x, pair(nullptr));
  const Tensor handed = ops::conv1d_pair(cpu, x, pair(&other));
  EXPECT_EQ(handed.to_float_vector(), expected.to_float_vector());
}

// The same for a single convolution's arranged weight (ConvFusion::arranged_weight): taken,
// another refused, ignored on the CPU.
TEST(ArrangedConvWeights, OfSingleConvolutionsAreTheBackendsOwnOrIgnored) {
  const Tensor x = random_tensor({1, 4, 20}, 8);
  const Tensor weight = random_tensor({4, 4, 3}, 9, -0.1f, 0.1f);
  const auto conv = [&](Context& ctx, const Tensor* arranged) {
    ConvFusion fusion;
    fusion.input_leaky_relu = 0.1f;
    fusion.arranged_weight = arranged;
    return ops::conv1d(ctx, x, weight, Tensor(), Conv1dParams{1, 1, 1, 1}, fusion);
  };
  ArrangingBackend arranging;
  Context ctx(arranging, host_allocator());
  const Tensor arranged = ops::arrange_conv1d_weight(ctx, weight);
  EXPECT_NO_THROW(conv(ctx, &arranged));
  const Tensor other = random_tensor({48}, 10);
  EXPECT_EQ(error_message([&] { conv(ctx, &other); }),
            "conv1d: the weight's arrangement [48] is not this backend's for weight [4, 4, 3] (49 "
            "F32 elements on cpu); make it with ops::arrange_conv1d_weight");

  Context cpu(host_backend("cpu"), host_allocator());
  const Tensor expected = conv(cpu, nullptr);
  EXPECT_EQ(conv(cpu, &other).to_float_vector(), expected.to_float_vector());
}

// The same for a transposed convolution over rows: its weight and bias arranged once, another
// arrangement refused, none made and any ignored on the CPU.
TEST(ArrangedConvWeights, OfTransposedConvolutionsAreTheBackendsOwnOrIgnored) {
  const Tensor rows = random_tensor({1, 10, 4}, 4);
  const Tensor weight = random_tensor({4, 2, 4}, 5, -0.1f, 0.1f);
  const Tensor bias = random_tensor({2}, 6);
  const ConvTranspose1dParams params{2, 1};
  ArrangingBackend arranging;
  Context ctx(arranging, host_allocator());
  const Tensor arranged = ops::arrange_conv_transpose1d_weight(ctx, weight, bias, params);
  EXPECT_EQ(arranged.shape(), (Shape{33}));
  EXPECT_EQ(arranging.arranged, 1);
  const Tensor other = random_tensor({32}, 7);
  EXPECT_EQ(
      error_message([&] { ops::conv_transpose1d_rows(ctx, rows, weight, bias, params, &other); }),
      "conv_transpose1d_rows: the weight's arrangement [32] is not this backend's for "
      "weight [4, 2, 4] (33 F32 elements on cpu); make it with "
      "ops::arrange_conv_transpose1d_weight");

  Context cpu(host_backend("cpu"), host_allocator());
  EXPECT_FALSE(ops::arrange_conv_transpose1d_weight(cpu, weight, bias, params).defined());
  const Tensor expected = ops::conv_transpose1d_rows(cpu, rows, weight, bias, params);
  const Tensor handed = ops::conv_transpose1d_rows(cpu, rows, weight, bias, params, &other);
  EXPECT_EQ(handed.to_float_vector(), expected.to_float_vector());
}

// The same for a convolution over rows: its weight arranged once, another arrangement refused,
// none made and any ignored on the CPU.
TEST(ArrangedConvWeights, OfConvolutionsOverRowsAreTheBackendsOwnOrIgnored) {
  const Tensor rows = random_tensor({1, 10, 4}, 11);
  const Tensor weight = random_tensor({3, 4, 3}, 12, -0.1f, 0.1f);
  const Tensor bias = random_tensor({3}, 13);
  const Conv1dParams params{1, 1, 1, 1};
  ArrangingBackend arranging;
  Context ctx(arranging, host_allocator());
  const Tensor arranged = ops::arrange_conv1d_rows_weight(ctx, weight, params);
  EXPECT_EQ(arranged.shape(), (Shape{37}));
  EXPECT_EQ(arranging.arranged, 1);
  EXPECT_NO_THROW(ops::conv1d_rows(ctx, rows, weight, bias, params, &arranged));
  const Tensor other = random_tensor({36}, 14);
  EXPECT_EQ(error_message([&] { ops::conv1d_rows(ctx, rows, weight, bias, params, &other); }),
            "conv1d_rows: the weight's arrangement [36] is not this backend's for weight [3, 4, 3] "
            "(37 F32 elements on cpu); make it with ops::arrange_conv1d_rows_weight");

  Context cpu(host_backend("cpu"), host_allocator());
  EXPECT_FALSE(ops::arrange_conv1d_rows_weight(cpu, weight, params).defined());
  const Tensor expected = ops::conv1d_rows(cpu, rows, weight, bias, params);
  const Tensor handed = ops::conv1d_rows(cpu, rows, weight, bias, params, &other);
  EXPECT_EQ(handed.to_float_vector(), expected.to_float_vector());
}

// A backend whose arrangement of a convolution over rows is the weight's dimensions permuted
// (as CUDA's, the taps first), run on the host: it records what conv1d_rows was handed.
class PermutingBackend final : public MinimalBackend {
 public:
  bool runs_conv1d_rows(const Tensor&, const Tensor&, const Conv1dParams&) const override {
    return true;
  }
  int64_t arranged_conv1d_rows_elements(const Tensor& weight, const Conv1dParams&) const override {
    return weight.numel();
  }
  std::vector<int64_t> arranged_conv1d_rows_order(const Tensor&,
                                                  const Conv1dParams&) const override {
    return {0, 2, 1};
  }
  void arrange_conv1d_rows_weight(const Tensor& weight, const Conv1dParams&, Tensor& arranged,
                                  const KernelScratch&) override {
    const Tensor taps_first = weight.permute({0, 2, 1}).to_host_contiguous(DType::F32);
    std::copy_n(taps_first.data<float>(), taps_first.numel(), arranged.data<float>());
  }
  void conv1d_rows(const Tensor&, const Tensor& weight, const Tensor&, Tensor&, const Conv1dParams&,
                   const Tensor* arranged, bool, const KernelScratch&) override {
    handed_weight = weight.raw_data();
    handed_arranged = arranged != nullptr ? arranged->raw_data() : nullptr;
  }
  const void* handed_weight = nullptr;
  const void* handed_arranged = nullptr;
};

// Where the backend's arrangement permutes the weight, the weight is held as a view of it (one
// copy): the view has the weight's values, conv1d_rows hands it over uncopied beside the
// arrangement, and any other op reads it through its strides. Elsewhere the weight itself.
TEST(ArrangedConvWeights, OfConvolutionsOverRowsAreHeldOnceWhereTheyArePermuted) {
  const Tensor rows = random_tensor({1, 10, 4}, 15);
  const Tensor weight = random_tensor({3, 4, 5}, 16, -0.1f, 0.1f);
  const Tensor bias = random_tensor({3}, 17);
  const Conv1dParams params{1, 2, 1, 1};
  PermutingBackend permuting;
  Context ctx(permuting, host_allocator());
  const Tensor arranged = ops::arrange_conv1d_rows_weight(ctx, weight, params);
  const Tensor view = ops::conv1d_rows_weight_view(ctx, arranged, weight, params);
  EXPECT_EQ(view.shape(), weight.shape());
  EXPECT_EQ(view.raw_data(), arranged.raw_data());
  EXPECT_FALSE(view.is_contiguous());
  EXPECT_EQ(view.to_host_contiguous(DType::F32).to_float_vector(), weight.to_float_vector());
  ops::conv1d_rows(ctx, rows, view, bias, params, &arranged);
  EXPECT_EQ(permuting.handed_weight, arranged.raw_data());
  EXPECT_EQ(permuting.handed_arranged, arranged.raw_data());
  EXPECT_EQ(error_message([&] {
              ops::conv1d_rows_weight_view(ctx, random_tensor({59}, 18), weight, params);
            }),
            "conv1d_rows_weight_view: the weight's arrangement [59] is not this backend's for "
            "weight [3, 4, 5] (60 F32 elements on cpu); make it with "
            "ops::arrange_conv1d_rows_weight");

  ArrangingBackend arranging;  // an arrangement that is no permutation
  Context other(arranging, host_allocator());
  const Tensor unpermuted = ops::arrange_conv1d_rows_weight(other, weight, params);
  EXPECT_EQ(ops::conv1d_rows_weight_view(other, unpermuted, weight, params).raw_data(),
            weight.raw_data());
  Context cpu(host_backend("cpu"), host_allocator());
  const Tensor none = ops::arrange_conv1d_rows_weight(cpu, weight, params);
  EXPECT_EQ(ops::conv1d_rows_weight_view(cpu, none, weight, params).raw_data(), weight.raw_data());
}

TEST(OpKinds, EveryKindHasItsName) {
  std::vector<std::string> names;
  for (int op = 0; op <= static_cast<int>(OpKind::GatherRows); ++op) {
    names.emplace_back(op_name(static_cast<OpKind>(op)));
  }
  EXPECT_EQ(names.size(), 34u);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end()) << "a name twice";
  EXPECT_EQ(op_kind(UnaryOp::ClampMax), OpKind::ClampMax);
  EXPECT_EQ(op_kind(BinaryOp::Mul), OpKind::Mul);
  EXPECT_EQ(testing::group_name(OpKind::ConvTranspose1d), "ConvTranspose1d");
}

// The new ops in a planning pass over a planning arena (fake addresses: a kernel that read or
// wrote an element would crash) take the same blocks, in the same order, as a run over a real
// arena laid out from that plan: the run then fits the plan exactly.
TEST_F(HostBackends, TheNewOpsPlanWhatTheyRun) {
  const Tensor x = random_tensor({2, 3, 4, 8}, 20);
  const Tensor weight = random_tensor({8}, 21);
  const Tensor rows = random_tensor({2, 1, 4, 8}, 22);
  const Tensor spec = random_tensor({2, 33, 7}, 23);
  std::vector<float> hann(64);
  for (size_t i = 0; i < hann.size(); ++i) hann[i] = 0.5f - 0.5f * std::cos(6.2831853f * i / 64);
  const Tensor window = Tensor::from_vector({64}, hann);
  const Tensor dw_x = random_tensor({2, 16, 50}, 24);
  const Tensor dw_w = random_tensor({16, 1, 7}, 25);
  for (const std::string& name : {std::string("reference"), std::string("cpu")}) {
    Backend& backend = host_backend(name);
    const auto step = [&](Context& c) {
      const Tensor xd = ops::to_device(c, x);
      Tensor cache = ops::zeros(c, {2, 6, 4, 8});
      ops::write_rows(c, cache, ops::to_device(c, rows), {2, 5});
      const Tensor r = ops::rope(c, xd, {0, 4}, 1e4f);
      const Tensor n = ops::rms_norm(c, r, ops::to_device(c, weight), 1e-6f);
      const Tensor g = ops::gelu(c, ops::silu(c, n));
      const Tensor s = ops::clamp_max(c, ops::cos(c, ops::sin(c, g)), 0.5f);
      const Tensor a =
          ops::attention(c, s, cache, cache, AttentionParams{0.5f, {3, 6}, false, {}, {}, {}});
      Tensor pages = ops::zeros(c, {3, 2, 4, 8});
      const Tensor table = Tensor::from_vector({2, 2}, std::vector<int64_t>{0, 1, 2, -1});
      const Tensor positions = Tensor::from_vector({2}, std::vector<int64_t>{0, 1});
      ops::write_pages(c, pages, ops::to_device(c, rows), table, positions);
      const Tensor paged = ops::paged_attention(c, s, pages, pages, table, positions, 0.5f);
      const Tensor conv = ops::conv1d(c, ops::to_device(c, dw_x), ops::to_device(c, dw_w), Tensor(),
                                      Conv1dParams{1, 3, 1, 16});
      const Tensor spec_d = ops::to_device(c, spec);
      const Tensor audio = ops::istft(c, spec_d, spec_d, window, 16);
      return ops::to_host(c, ops::add(c, audio, ops::scale(c, audio, 2.0f))).numel() +
             ops::to_host(c, a).numel() + ops::to_host(c, conv).numel() +
             ops::to_host(c, paged).numel();
    };
    WorkspaceArena planning(Device::cpu());
    Context plan = Context::for_planning(backend, planning);
    const int64_t planned = step(plan);
    WorkspaceArena running(host_allocator(), planning.layout());
    Context run(backend, running);
    EXPECT_EQ(step(run), planned) << name;
    EXPECT_EQ(running.stats().peak_allocated_bytes, planning.stats().peak_allocated_bytes) << name;
    EXPECT_FALSE(running.diverged()) << name;
  }
}

TEST(Registry, MakesKnownBackendsAndRejectsOthers) {
  EXPECT_EQ(make_backend("cpu", 1)->name(), "cpu");
  EXPECT_EQ(make_backend("reference")->name(), "reference");
  try {
    make_backend("tpu");
    ADD_FAILURE() << "unknown backend accepted";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("tpu"), std::string::npos);
    EXPECT_NE(message.find("cpu, reference"), std::string::npos);
  }
}

TEST(CpuBackendThreads, ZeroMeansAllCores) {
  EXPECT_GE(CpuBackend(0).threads(), 1);
  EXPECT_EQ(CpuBackend(3).threads(), 3);
}

TEST(CpuBackendVectors, AvxFiveTwelveWhereTheCpuHasItUnlessRefused) {
  EXPECT_EQ(CpuBackend(1).uses_avx512(), __builtin_cpu_supports("avx512f") != 0);
  EXPECT_FALSE(CpuBackend(1, false).uses_avx512());
}

// The 48-step tiles make each output by the same fused multiply-adds in the same order as the
// 24-step ones: the same bits (lengths with wide tiles, a 24-step tail, a partial one, and a
// partial row block).
TEST(CpuBackendVectors, WideTilesGiveTheSameBits) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512: one kind of tile here";
  CpuBackend widest(2);
  CpuBackend avx2(2, false);
  PoisonAllocator poison;
  Context wide_context(widest, poison);
  Context avx2_context(avx2, poison);
  const Conv1dParams p{1, 6, 3, 1};
  for (const int64_t steps : {48, 100, 173, 1000}) {
    const Tensor x = random_tensor({2, 12, steps}, 1500 + steps);
    const Tensor w = random_tensor({10, 12, 5}, 1501);
    const Tensor b = random_tensor({10}, 1502);
    expect_close(ops::conv1d(wide_context, x, w, b, p), ops::conv1d(avx2_context, x, w, b, p), 0.0,
                 "steps " + std::to_string(steps), false);
  }
}

}  // namespace
}  // namespace voxd
