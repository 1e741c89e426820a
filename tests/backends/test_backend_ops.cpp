// Every kernel run through the ops layer on the CPU backend and on the reference backend with the
// same seeded inputs; outputs must agree to 1e-4 (relative above magnitude 1). Outputs come from
// a NaN-poisoning allocator, so an element a kernel never writes fails the comparison.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/reference/reference_backend.h"
#include "backends/registry.h"
#include "core/error.h"
#include "core/ops.h"

namespace voxd {
namespace {

using testing::expect_close;
using testing::PoisonAllocator;
using testing::random_tensor;

constexpr double kTol = 1e-4;

class BackendOps : public ::testing::Test {
 protected:
  // Runs `op` on both backends and compares the outputs.
  void check(const std::string& what, const std::function<Tensor(Context&)>& op,
             bool allow_nan = false) {
    SCOPED_TRACE(what);
    const Tensor expected = op(ref_ctx_);
    const Tensor actual = op(cpu_ctx_);
    expect_close(actual, expected, kTol, what, allow_nan);
  }

  PoisonAllocator poison_;
  ReferenceBackend ref_;
  CpuBackend cpu_{2};
  Context ref_ctx_{ref_, poison_};
  Context cpu_ctx_{cpu_, poison_};
};

TEST_F(BackendOps, Unary) {
  uint32_t seed = 1;
  for (const Shape& shape : {Shape{7}, Shape{3, 5, 17}, Shape{2, 3, 4, 5}, Shape{70000}}) {
    const Tensor x = random_tensor(shape, seed++, -3.0f, 3.0f);
    const std::string s = shape_to_string(shape);
    check("relu " + s, [&](Context& c) { return ops::relu(c, x); });
    check("tanh " + s, [&](Context& c) { return ops::tanh(c, x); });
    check("exp " + s, [&](Context& c) { return ops::exp(c, x); });
    for (float slope : {0.1f, 0.01f, 0.2f, 1.5f}) {
      check("leaky_relu " + s, [&](Context& c) { return ops::leaky_relu(c, x, slope); });
    }
    for (float factor : {0.5f, -2.0f, 0.0f}) {
      check("scale " + s, [&](Context& c) { return ops::scale(c, x, factor); });
    }
  }
}

TEST_F(BackendOps, InPlaceUnaryMatchesOutOfPlace) {
  const Tensor x = random_tensor({4, 9, 33}, 11);
  for (Context* c : {&ref_ctx_, &cpu_ctx_}) {
    Tensor a = ops::to_device(*c, x);
    Tensor& r = ops::relu_(*c, a);
    EXPECT_EQ(r.raw_data(), a.raw_data());
    expect_close(a, ops::relu(*c, x), 0, "relu_");
    Tensor b = ops::to_device(*c, x);
    ops::leaky_relu_(*c, b, 0.1f);
    expect_close(b, ops::leaky_relu(*c, x, 0.1f), 0, "leaky_relu_");
  }
  check("relu_ across backends", [&](Context& c) {
    Tensor a = ops::to_device(c, x);
    return ops::leaky_relu_(c, a, 0.2f);
  });
}

TEST_F(BackendOps, BinaryBroadcast) {
  const Shape a_shape{3, 5, 17};
  const Tensor a = random_tensor(a_shape, 21);
  uint32_t seed = 22;
  for (const Shape& b_shape : {Shape{3, 5, 17}, Shape{1, 5, 1}, Shape{1, 1, 17}, Shape{3, 1, 17},
                               Shape{3, 5, 1}, Shape{1, 1, 1}, Shape{17}, Shape{5, 17}}) {
    const Tensor b = random_tensor(b_shape, seed++);
    const std::string s = shape_to_string(b_shape);
    check("add " + s, [&](Context& c) { return ops::add(c, a, b); });
    check("mul " + s, [&](Context& c) { return ops::mul(c, a, b); });
    check("add_ " + s, [&](Context& c) {
      Tensor acc = ops::to_device(c, a);
      return ops::add_(c, acc, b);
    });
  }
  const Tensor big = random_tensor({2, 64, 1000}, 29);
  const Tensor col = random_tensor({1, 64, 1}, 30);
  check("add large", [&](Context& c) { return ops::add(c, big, col); });
}

TEST_F(BackendOps, Linear) {
  struct Case {
    Shape x;
    int64_t out;
    bool bias;
  };
  uint32_t seed = 40;
  for (const Case& tc :
       {Case{{5, 7}, 3, true}, Case{{5, 7}, 3, false}, Case{{2, 3, 33}, 65, true},
        Case{{1, 1}, 1, true}, Case{{128, 256}, 256, true}, Case{{2, 37, 80}, 257, false}}) {
    const Tensor x = random_tensor(tc.x, seed++);
    const Tensor w = random_tensor({tc.out, tc.x.back()}, seed++);
    const Tensor b = tc.bias ? random_tensor({tc.out}, seed++) : Tensor();
    check("linear " + shape_to_string(tc.x) + " -> " + std::to_string(tc.out),
          [&](Context& c) { return ops::linear(c, x, w, b); });
  }
}

struct ConvCase {
  int64_t batch, cin, cout, t, k, stride, padding, dilation, groups;
  bool bias;
};

std::string describe(const ConvCase& c) {
  return "B" + std::to_string(c.batch) + " Cin" + std::to_string(c.cin) + " Cout" +
         std::to_string(c.cout) + " T" + std::to_string(c.t) + " K" + std::to_string(c.k) + " s" +
         std::to_string(c.stride) + " p" + std::to_string(c.padding) + " d" +
         std::to_string(c.dilation) + " g" + std::to_string(c.groups) + (c.bias ? " bias" : "");
}

TEST_F(BackendOps, Conv1d) {
  std::vector<ConvCase> cases = {
      {1, 1, 1, 5, 1, 1, 0, 1, 1, false},    {2, 3, 4, 17, 3, 1, 1, 1, 1, true},
      {2, 4, 6, 23, 5, 2, 2, 1, 2, true},    {1, 6, 6, 31, 3, 1, 3, 3, 3, true},
      {3, 8, 4, 40, 7, 3, 0, 2, 4, false},   {1, 5, 7, 19, 16, 1, 7, 1, 1, true},
      {2, 16, 32, 64, 1, 1, 0, 1, 1, true},  {1, 8, 8, 50, 1, 2, 1, 1, 2, true},
      {2, 12, 8, 33, 11, 1, 25, 5, 4, true}, {1, 32, 32, 2500, 3, 1, 5, 5, 1, true},
      {1, 4, 1, 3000, 7, 1, 3, 1, 1, true},  {2, 7, 3, 9, 9, 1, 0, 1, 1, true},
      {1, 6, 9, 1, 3, 1, 1, 1, 3, true},
  };
  // Several time blocks: the direct path (256 output channels) and the im2col path (stride 2).
  cases.push_back({1, 8, 256, 2100, 5, 1, 2, 2, 1, true});
  cases.push_back({2, 4, 4, 4500, 3, 2, 1, 1, 1, true});
  // Direct path edges: wide inputs make short panels (several time blocks per row block), short
  // inputs split output channels across jobs, channel counts off the 4-row tile, outputs off the
  // 24-step tile, padding wider than the kernel's span, grouped thin layers over many panels.
  cases.push_back({1, 512, 6, 150, 11, 1, 25, 5, 1, true});
  cases.push_back({2, 300, 13, 97, 3, 1, 1, 1, 1, false});
  cases.push_back({1, 64, 130, 23, 9, 1, 4, 1, 1, true});
  cases.push_back({1, 10, 9, 25, 7, 1, 9, 1, 1, true});
  cases.push_back({2, 12, 10, 9000, 3, 1, 3, 3, 2, true});
  cases.push_back({1, 8, 1, 5000, 7, 1, 3, 1, 1, true});
  for (int64_t k = 1; k <= 16; ++k) cases.push_back({1, 3, 5, 29, k, 1, k / 2, 1, 1, true});
  uint32_t seed = 100;
  for (const ConvCase& tc : cases) {
    const Tensor x = random_tensor({tc.batch, tc.cin, tc.t}, seed++);
    const Tensor w = random_tensor({tc.cout, tc.cin / tc.groups, tc.k}, seed++);
    const Tensor b = tc.bias ? random_tensor({tc.cout}, seed++) : Tensor();
    const Conv1dParams p{tc.stride, tc.padding, tc.dilation, tc.groups};
    check("conv1d " + describe(tc), [&](Context& c) { return ops::conv1d(c, x, w, b, p); });
  }
}

// conv1d with a ConvFusion is leaky_relu → conv1d → + residual, whatever the backend fuses.
TEST_F(BackendOps, FusedConv1dIsLeakyReluConvPlusResidual) {
  const Tensor x = random_tensor({2, 6, 37}, 1400);
  const Tensor w = random_tensor({5, 6, 7}, 1401);
  const Tensor b = random_tensor({5}, 1402);
  const Conv1dParams p{1, 9, 3, 1};
  const Tensor residual = random_tensor({2, 5, 37}, 1403);
  for (Context* c : {&ref_ctx_, &cpu_ctx_}) {
    Tensor expected = ops::conv1d(*c, ops::leaky_relu(*c, x, 0.1f), w, b, p);
    ops::add_(*c, expected, residual);
    expect_close(ops::conv1d(*c, x, w, b, p, ConvFusion{0.1f, &residual}), expected, 0.0,
                 "leaky_relu and residual", false);
    expect_close(ops::conv1d(*c, x, w, b, p, ConvFusion{}), ops::conv1d(*c, x, w, b, p), 0.0,
                 "nothing fused", false);
  }
  check("fused conv1d", [&](Context& c) {
    return ops::conv1d(c, x, w, b, p, ConvFusion{0.2f, &residual});
  });
  const Tensor wrong = random_tensor({2, 5, 36}, 1404);
  try {
    ops::conv1d(cpu_ctx_, x, w, b, p, ConvFusion{std::nullopt, &wrong});
    ADD_FAILURE() << "conv1d accepted a residual of the wrong shape";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "conv1d: residual [2, 5, 36] does not match the output [2, 5, 37]");
  }
}

// Mixed precision (x, the weights and the output of different dtypes) runs on the CUDA backend
// (test_cuda_ops: FusedConv1dAcrossDtypes); the host backends compute in F32, and every backend
// checks the dtypes of such a call the same way first.
TEST_F(BackendOps, FusedConv1dChecksTheDtypesAroundTheWeights) {
  const Tensor x = random_tensor({2, 6, 37}, 1410);
  const Tensor w = random_tensor({5, 6, 7}, 1411);
  const Tensor b = random_tensor({5}, 1412);
  const Tensor residual = random_tensor({2, 5, 37}, 1413);
  const Conv1dParams p{1, 3, 1, 1};
  for (Context* c : {&ref_ctx_, &cpu_ctx_}) {
    expect_close(ops::conv1d(*c, x, w, b, p, ConvFusion{0.1f, &residual, DType::F32}),
                 ops::conv1d(*c, x, w, b, p, ConvFusion{0.1f, &residual}), 0.0,
                 "output dtype F32 = x's", false);
    const auto expect_error = [&](const ConvFusion& fusion, const Tensor& bias,
                                  const std::string& message) {
      try {
        ops::conv1d(*c, x, w, bias, p, fusion);
        ADD_FAILURE() << "conv1d accepted a call that should fail with: " << message;
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), message);
      }
    };
    expect_error(ConvFusion{0.1f, &residual, DType::BF16}, b,
                 "conv1d: residual has dtype F32, the output BF16");
    expect_error(ConvFusion{0.1f, nullptr, DType::F32}, ops::to_device(*c, b, DType::BF16),
                 "conv1d: bias has dtype BF16, weight has F32");
    expect_error(ConvFusion{0.1f, nullptr, DType::I32}, b,
                 "conv1d: output dtype I32 is not F32, F16 or BF16");
  }
}

TEST_F(BackendOps, ConvTranspose1d) {
  struct Case {
    ConvCase conv;
    int64_t output_padding;
  };
  const std::vector<Case> cases = {
      {{1, 1, 1, 4, 3, 2, 0, 1, 1, false}, 0},
      {{2, 3, 4, 9, 4, 2, 1, 1, 1, true}, 1},
      {{1, 8, 4, 10, 16, 8, 4, 1, 1, true}, 0},
      {{2, 4, 6, 7, 5, 3, 2, 2, 2, true}, 2},
      {{1, 6, 3, 12, 3, 1, 1, 1, 3, false}, 0},
      {{1, 16, 8, 1500, 4, 2, 1, 1, 1, true}, 0},
      {{2, 5, 5, 13, 1, 1, 0, 1, 1, true}, 0},
      {{1, 4, 8, 6, 7, 5, 0, 3, 4, true}, 2},
      {{1, 2, 3, 1, 2, 1, 0, 1, 1, true}, 0},
      {{2, 12, 6, 21, 11, 5, 3, 1, 2, true}, 4},
      // Several output blocks (each job recomputes the inputs that reach across its edges).
      {{1, 64, 256, 200, 16, 8, 4, 1, 1, true}, 0},
      {{2, 32, 24, 3001, 4, 2, 1, 1, 2, true}, 1},
      {{1, 8, 512, 90, 16, 8, 5, 2, 1, true}, 3},
  };
  uint32_t seed = 300;
  for (const Case& tc : cases) {
    const ConvCase& cc = tc.conv;
    const Tensor x = random_tensor({cc.batch, cc.cin, cc.t}, seed++);
    const Tensor w = random_tensor({cc.cin, cc.cout / cc.groups, cc.k}, seed++);
    const Tensor b = cc.bias ? random_tensor({cc.cout}, seed++) : Tensor();
    const ConvTranspose1dParams p{cc.stride, cc.padding, tc.output_padding, cc.dilation, cc.groups};
    check("conv_transpose1d " + describe(cc) + " op" + std::to_string(tc.output_padding),
          [&](Context& c) { return ops::conv_transpose1d(c, x, w, b, p); });
  }
}

TEST_F(BackendOps, LayerNorm) {
  uint32_t seed = 400;
  for (const Shape& shape : {Shape{3, 7}, Shape{2, 5, 256}, Shape{1, 1}, Shape{300, 384}}) {
    const int64_t c = shape.back();
    const Tensor x = random_tensor(shape, seed++, -4.0f, 6.0f);
    const Tensor gamma = random_tensor({c}, seed++, 0.5f, 1.5f);
    const Tensor beta = random_tensor({c}, seed++);
    for (float eps : {1e-5f, 1e-3f}) {
      check("layer_norm " + shape_to_string(shape),
            [&](Context& ctx) { return ops::layer_norm(ctx, x, gamma, beta, eps); });
    }
  }
  // Large offsets: the mean must not swamp the variance.
  const Tensor shifted = random_tensor({4, 64}, 410, 999.0f, 1001.0f);
  const Tensor ones = Tensor::from_vector({64}, std::vector<float>(64, 1.0f));
  const Tensor zeros = Tensor::from_vector({64}, std::vector<float>(64, 0.0f));
  check("layer_norm offset",
        [&](Context& c) { return ops::layer_norm(c, shifted, ones, zeros, 1e-5f); });
}

TEST_F(BackendOps, Embedding) {
  const Tensor table = random_tensor({11, 7}, 500);
  const std::vector<int64_t> ids{0, 3, 10, 10, 1, 5, 2, 9};
  const Tensor ids64 = Tensor::from_vector({2, 4}, ids);
  const Tensor ids32 = ids64.to_host_contiguous(DType::I32);
  check("embedding I64", [&](Context& c) { return ops::embedding(c, ids64, table); });
  check("embedding I32", [&](Context& c) { return ops::embedding(c, ids32, table); });
  EXPECT_EQ(ops::embedding(cpu_ctx_, ids64, table).shape(), (Shape{2, 4, 7}));
  check("embedding strided ids",
        [&](Context& c) { return ops::embedding(c, ids64.transpose(0, 1), table); });
  for (int64_t bad : {int64_t{11}, int64_t{-1}}) {
    const Tensor bad_ids = Tensor::from_vector({1, 3}, std::vector<int64_t>{1, bad, 2});
    for (Context* c : {&ref_ctx_, &cpu_ctx_}) {
      try {
        ops::embedding(*c, bad_ids, table);
        ADD_FAILURE() << "embedding accepted id " << bad;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("id " + std::to_string(bad)), std::string::npos)
            << e.what();
      }
    }
  }
}

TEST_F(BackendOps, Attention) {
  struct Case {
    int64_t batch, tq, tk, heads, dim;
    std::vector<int64_t> key_lengths;
    bool causal;
    std::vector<int64_t> offsets;
  };
  const std::vector<Case> cases = {
      {1, 1, 1, 1, 1, {}, false, {}},        {2, 5, 7, 3, 4, {}, false, {}},
      {2, 5, 7, 3, 4, {7, 3}, false, {}},    {2, 6, 6, 2, 8, {}, true, {}},
      {2, 3, 9, 2, 5, {9, 6}, true, {6, 2}}, {3, 17, 33, 2, 16, {33, 1, 20}, false, {}},
      {1, 64, 80, 2, 128, {71}, false, {}},  {2, 4, 4, 1, 3, {4, 2}, true, {}},
  };
  uint32_t seed = 600;
  for (const Case& tc : cases) {
    const Tensor q = random_tensor({tc.batch, tc.tq, tc.heads, tc.dim}, seed++, -2.0f, 2.0f);
    const Tensor k = random_tensor({tc.batch, tc.tk, tc.heads, tc.dim}, seed++, -2.0f, 2.0f);
    const Tensor v = random_tensor({tc.batch, tc.tk, tc.heads, tc.dim}, seed++);
    AttentionParams p;
    p.scale = 1.0f / std::sqrt(static_cast<float>(tc.dim));
    p.key_lengths = tc.key_lengths;
    p.causal = tc.causal;
    p.query_offsets = tc.offsets;
    check("attention B" + std::to_string(tc.batch) + " Tq" + std::to_string(tc.tq) + " Tk" +
              std::to_string(tc.tk) + " H" + std::to_string(tc.heads) + " D" +
              std::to_string(tc.dim) + (tc.causal ? " causal" : ""),
          [&](Context& c) { return ops::attention(c, q, k, v, p); });
  }
}

TEST_F(BackendOps, AttentionQueryThatSeesNoKeyIsNaN) {
  const Tensor q = random_tensor({2, 3, 2, 4}, 700);
  const Tensor k = random_tensor({2, 5, 2, 4}, 701);
  const Tensor v = random_tensor({2, 5, 2, 4}, 702);
  AttentionParams p;
  p.key_lengths = {0, 5};
  for (Context* c : {&ref_ctx_, &cpu_ctx_}) {
    const std::vector<float> out = ops::attention(*c, q, k, v, p).to_float_vector();
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(std::isnan(out[i]), i < out.size() / 2) << c->backend().name() << " element " << i;
    }
  }
  check(
      "fully masked batch", [&](Context& c) { return ops::attention(c, q, k, v, p); }, true);
  // Causal with a negative offset: query 0 of batch 1 sits before every key.
  AttentionParams causal;
  causal.causal = true;
  causal.query_offsets = {0, -1};
  check(
      "causal before keys", [&](Context& c) { return ops::attention(c, q, k, v, causal); }, true);
  const std::vector<float> out = ops::attention(cpu_ctx_, q, k, v, causal).to_float_vector();
  EXPECT_TRUE(std::isnan(out[24]));   // batch 1, query 0, head 0
  EXPECT_FALSE(std::isnan(out[32]));  // batch 1, query 1
}

TEST_F(BackendOps, ZeroBeyondLengths) {
  const Tensor x = random_tensor({3, 6, 4}, 800);
  check("zero_beyond_lengths", [&](Context& c) {
    Tensor y = ops::to_device(c, x);
    return ops::zero_beyond_lengths(c, y, {6, 2, 0});
  });
  Tensor y = ops::to_device(cpu_ctx_, x);
  ops::zero_beyond_lengths(cpu_ctx_, y, {6, 9, 1});
  const std::vector<float> v = y.to_float_vector();
  EXPECT_EQ(v[2 * 24 + 4], 0.0f);
  EXPECT_NE(v[2 * 24 + 3], 0.0f);
}

TEST_F(BackendOps, LengthRegulate) {
  const Tensor x = random_tensor({2, 5, 3}, 900);
  const std::vector<std::vector<int64_t>> durations{{2, 0, 1, 3, 1}, {0, 4, 1}};
  for (int64_t min_frames : {0, 7, 12}) {
    check("length_regulate min " + std::to_string(min_frames),
          [&](Context& c) { return ops::length_regulate(c, x, durations, min_frames); });
  }
  EXPECT_EQ(ops::length_regulate(cpu_ctx_, x, durations).shape(), (Shape{2, 7, 3}));
  EXPECT_EQ(ops::length_regulate(cpu_ctx_, x, durations, 12).shape(), (Shape{2, 12, 3}));
  const std::vector<std::vector<int64_t>> none{{0, 0}, {}};
  EXPECT_EQ(ops::length_regulate(ref_ctx_, x, none).shape(), (Shape{2, 0, 3}));
  check("length_regulate strided x", [&](Context& c) {
    return ops::length_regulate(c, x.transpose(0, 1).transpose(0, 1).narrow(1, 1, 3),
                                {{1, 2, 3}, {3, 0, 0}});
  });
}

TEST_F(BackendOps, Bucketize) {
  const Tensor boundaries =
      Tensor::from_vector({5}, std::vector<float>{-1.0f, 0.0f, 0.5f, 0.5f, 2.0f});
  std::vector<float> values = random_tensor({3, 41}, 1000, -3.0f, 3.0f).to_float_vector();
  values[0] = -1.0f;
  values[1] = 0.5f;
  values[2] = 2.0f;
  values[3] = std::numeric_limits<float>::quiet_NaN();
  values[4] = std::numeric_limits<float>::infinity();
  values[5] = -std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector({3, 41}, values);
  const Tensor expected = ops::bucketize(ref_ctx_, x, boundaries);
  const Tensor actual = ops::bucketize(cpu_ctx_, x, boundaries);
  ASSERT_EQ(actual.dtype(), DType::I64);
  EXPECT_EQ(actual.to_int_vector(), expected.to_int_vector());
}

TEST_F(BackendOps, StridedInputsThroughOps) {
  const Tensor btc = random_tensor({2, 37, 12}, 1100);
  const Tensor x = btc.transpose(1, 2);  // [2, 12, 37], strided
  ASSERT_FALSE(x.is_contiguous());
  const Tensor w = random_tensor({8, 12, 3}, 1101);
  const Tensor bias = random_tensor({8}, 1102);
  check("conv1d on a transposed view", [&](Context& c) {
    return ops::conv1d(c, x, w, bias, Conv1dParams{1, 1, 1, 1});
  });
  const Tensor wt = random_tensor({12, 4, 4}, 1103);
  check("conv_transpose1d on a transposed view", [&](Context& c) {
    return ops::conv_transpose1d(c, x, wt, bias.narrow(0, 0, 4), ConvTranspose1dParams{2, 1});
  });
  const Tensor lw = random_tensor({5, 37}, 1104);
  check("linear on a transposed view", [&](Context& c) { return ops::linear(c, x, lw, Tensor()); });
  check("relu on a transposed view", [&](Context& c) { return ops::relu(c, x); });
  check("add of two views", [&](Context& c) { return ops::add(c, x, x.narrow(2, 0, 1)); });
  const Tensor gamma = random_tensor({37}, 1105);
  check("layer_norm on a transposed view",
        [&](Context& c) { return ops::layer_norm(c, x, gamma, gamma, 1e-5f); });
  check("transpose", [&](Context& c) { return ops::transpose(c, btc, 0, 2); });
  const Tensor t = ops::transpose(cpu_ctx_, btc, 1, 2);
  EXPECT_TRUE(t.is_contiguous());
  expect_close(t, x.to_host_contiguous(DType::F32), 0, "transpose values");
  const Tensor q = random_tensor({2, 4, 3, 5}, 1106).permute({0, 2, 1, 3});  // [2, 3, 4, 5]
  check("attention on permuted q",
        [&](Context& c) { return ops::attention(c, q, q, q, AttentionParams{}); });
}

TEST_F(BackendOps, CopyConvertsDtypesAndStrides) {
  const Tensor x = random_tensor({3, 4, 5}, 1200, -100.0f, 100.0f).permute({2, 0, 1});
  for (DType dtype : {DType::F16, DType::BF16, DType::F32}) {
    check(std::string("to_device ") + std::string(dtype_name(dtype)),
          [&](Context& c) { return ops::to_host(c, ops::to_device(c, x, dtype), DType::F32); });
  }
  const Tensor ints = Tensor::from_vector({2, 3}, std::vector<int64_t>{1, -2, 3, 4, 5, 6});
  for (Context* c : {&ref_ctx_, &cpu_ctx_}) {
    const Tensor i32 = ops::to_device(*c, ints.transpose(0, 1), DType::I32);
    EXPECT_EQ(i32.to_int_vector(), (std::vector<int64_t>{1, 4, -2, 5, 3, 6}));
    const Tensor z = ops::zeros(*c, {3, 3}, DType::I64);
    EXPECT_EQ(z.to_int_vector(), std::vector<int64_t>(9, 0));
  }
}

TEST_F(BackendOps, ShapeMismatchesThrow) {
  Context& c = cpu_ctx_;
  const Tensor x = random_tensor({1, 16, 100}, 1300);
  const Tensor w = random_tensor({64, 32, 3}, 1301);
  try {
    ops::conv1d(c, x, w, Tensor(), Conv1dParams{});
    ADD_FAILURE() << "conv1d accepted mismatched channels";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "conv1d: weight [64, 32, 3] expects 32 input channels, x is [1, 16, 100]");
  }
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

}  // namespace
}  // namespace voxd
