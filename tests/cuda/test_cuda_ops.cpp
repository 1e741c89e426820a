// Every kernel run through the ops layer on the CUDA backend and on the reference backend with
// the same seeded inputs, for F32, F16 and BF16. Inputs are rounded to the dtype on the host
// before the reference sees them; outputs must agree to 1e-4 (F32, relative above magnitude 1)
// or 1e-2 of the output's scale (F16, BF16). Device outputs come from a NaN-poisoning allocator,
// so an element a kernel never writes fails the comparison.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "backends/reference/reference_backend.h"
#include "core/error.h"
#include "core/ops.h"
#include "cuda_test_util.h"

namespace voxd {
namespace {

using testing::cuda_backend;
using testing::expect_close;
using testing::expect_close_scaled;
using testing::PoisonAllocator;
using testing::PoisonDeviceAllocator;
using testing::random_tensor;
using testing::round_to;

using Inputs = std::vector<Tensor>;
using Op = std::function<Tensor(Context&, const Inputs&)>;

class CudaOps : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }

  // Runs `op` on the reference (floating inputs rounded to the dtype, on the host) and on CUDA
  // (floating inputs moved to the device in the dtype; integer inputs stay on the host), and
  // compares the outputs.
  void check(const std::string& what, const Inputs& inputs, const Op& op, bool allow_nan = false) {
    SCOPED_TRACE(what);
    Inputs ref_in;
    Inputs dev_in;
    for (const Tensor& t : inputs) {
      const bool floating = t.defined() && is_floating(t.dtype());
      ref_in.push_back(floating ? round_to(t, dtype()) : t);
      dev_in.push_back(floating ? ops::to_device(cuda_ctx_, t, dtype()) : t);
    }
    const Tensor expected = op(ref_ctx_, ref_in);
    const Tensor out = op(cuda_ctx_, dev_in);
    ASSERT_EQ(out.device(), cuda_backend().device());
    ASSERT_EQ(out.dtype(), dtype());
    compare(ops::to_host(cuda_ctx_, out), expected, what, allow_nan);
  }

  void compare(const Tensor& actual, const Tensor& expected, const std::string& what,
               bool allow_nan = false) {
    if (dtype() == DType::F32) {
      expect_close(actual, expected, 1e-4, what, allow_nan);
    } else {
      expect_close_scaled(actual, expected, 1e-2, what, allow_nan);
    }
  }

  PoisonAllocator host_poison_;
  PoisonDeviceAllocator device_poison_;
  ReferenceBackend ref_;
  Context ref_ctx_{ref_, host_poison_};
  Context cuda_ctx_{cuda_backend(), device_poison_};
};

TEST_P(CudaOps, Unary) {
  uint32_t seed = 1;
  // 3M elements: more than the 4096 × 256 threads of one grid-stride pass.
  for (const Shape& shape :
       {Shape{7}, Shape{3, 5, 17}, Shape{2, 3, 4, 5}, Shape{70000}, Shape{3, 1000003}}) {
    const Tensor x = random_tensor(shape, seed++, -3.0f, 3.0f);
    const std::string s = shape_to_string(shape);
    check("relu " + s, {x}, [](Context& c, const Inputs& in) { return ops::relu(c, in[0]); });
    check("tanh " + s, {x}, [](Context& c, const Inputs& in) { return ops::tanh(c, in[0]); });
    check("exp " + s, {x}, [](Context& c, const Inputs& in) { return ops::exp(c, in[0]); });
    for (float slope : {0.1f, 0.2f, 1.5f}) {
      check("leaky_relu " + s, {x},
            [&](Context& c, const Inputs& in) { return ops::leaky_relu(c, in[0], slope); });
    }
    for (float factor : {0.5f, -2.0f, 0.0f}) {
      check("scale " + s, {x},
            [&](Context& c, const Inputs& in) { return ops::scale(c, in[0], factor); });
    }
  }
}

TEST_P(CudaOps, InPlaceUnaryMatchesOutOfPlace) {
  const Tensor x = random_tensor({4, 9, 33}, 11);
  Tensor a = ops::to_device(cuda_ctx_, x, dtype());
  const void* before = a.raw_data();
  Tensor& r = ops::relu_(cuda_ctx_, a);
  EXPECT_EQ(r.raw_data(), before);
  const Tensor xd = ops::to_device(cuda_ctx_, x, dtype());
  expect_close(ops::to_host(cuda_ctx_, a), ops::to_host(cuda_ctx_, ops::relu(cuda_ctx_, xd)), 0,
               "relu_");
  Tensor b = ops::to_device(cuda_ctx_, x, dtype());
  ops::leaky_relu_(cuda_ctx_, b, 0.1f);
  expect_close(ops::to_host(cuda_ctx_, b),
               ops::to_host(cuda_ctx_, ops::leaky_relu(cuda_ctx_, xd, 0.1f)), 0, "leaky_relu_");
  check("leaky_relu_ against the reference", {x}, [](Context& c, const Inputs& in) {
    Tensor y = ops::to_device(c, in[0], in[0].dtype());
    return ops::leaky_relu_(c, y, 0.2f);
  });
}

TEST_P(CudaOps, BinaryBroadcast) {
  const Shape a_shape{3, 5, 17};
  const Tensor a = random_tensor(a_shape, 21);
  uint32_t seed = 22;
  for (const Shape& b_shape : {Shape{3, 5, 17}, Shape{1, 5, 1}, Shape{1, 1, 17}, Shape{3, 1, 17},
                               Shape{3, 5, 1}, Shape{1, 1, 1}, Shape{17}, Shape{5, 17}}) {
    const Tensor b = random_tensor(b_shape, seed++);
    const std::string s = shape_to_string(b_shape);
    check("add " + s, {a, b},
          [](Context& c, const Inputs& in) { return ops::add(c, in[0], in[1]); });
    check("mul " + s, {a, b},
          [](Context& c, const Inputs& in) { return ops::mul(c, in[0], in[1]); });
    check("add_ " + s, {a, b}, [](Context& c, const Inputs& in) {
      Tensor acc = ops::to_device(c, in[0], in[0].dtype());
      return ops::add_(c, acc, in[1]);
    });
  }
  const Tensor big = random_tensor({2, 64, 1000}, 29);
  const Tensor col = random_tensor({1, 64, 1}, 30);
  check("add large", {big, col},
        [](Context& c, const Inputs& in) { return ops::add(c, in[0], in[1]); });
  const Tensor five_d = random_tensor({2, 3, 4, 5, 6}, 31);
  const Tensor mixed = random_tensor({2, 1, 4, 1, 6}, 32);
  check("mul 5-d broadcast", {five_d, mixed},
        [](Context& c, const Inputs& in) { return ops::mul(c, in[0], in[1]); });
}

TEST_P(CudaOps, Linear) {
  struct Case {
    Shape x;
    int64_t out;
    bool bias;
  };
  uint32_t seed = 40;
  for (const Case& tc : {Case{{5, 7}, 3, true}, Case{{5, 7}, 3, false}, Case{{2, 3, 33}, 65, true},
                         Case{{1, 1}, 1, true}, Case{{128, 256}, 256, true},
                         Case{{2, 37, 80}, 257, false}, Case{{3, 0, 16}, 8, true}}) {
    const Tensor x = random_tensor(tc.x, seed++);
    const Tensor w = random_tensor({tc.out, tc.x.back()}, seed++);
    const Tensor b = tc.bias ? random_tensor({tc.out}, seed++) : Tensor();
    check("linear " + shape_to_string(tc.x) + " -> " + std::to_string(tc.out), {x, w, b},
          [](Context& c, const Inputs& in) { return ops::linear(c, in[0], in[1], in[2]); });
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

TEST_P(CudaOps, Conv1d) {
  std::vector<ConvCase> cases = {
      {1, 1, 1, 5, 1, 1, 0, 1, 1, false},
      {2, 3, 4, 17, 3, 1, 1, 1, 1, true},
      {2, 4, 6, 23, 5, 2, 2, 1, 2, true},
      {1, 6, 6, 31, 3, 1, 3, 3, 3, true},
      {3, 8, 4, 40, 7, 3, 0, 2, 4, false},
      {1, 5, 7, 19, 16, 1, 7, 1, 1, true},
      {2, 16, 32, 64, 1, 1, 0, 1, 1, true},
      {1, 8, 8, 50, 1, 2, 1, 1, 2, true},
      {2, 12, 8, 33, 11, 1, 25, 5, 4, true},
      {1, 32, 32, 2500, 3, 1, 5, 5, 1, true},
      {1, 4, 1, 3000, 7, 1, 3, 1, 1, true},
      {2, 7, 3, 9, 9, 1, 0, 1, 1, true},
      {1, 6, 9, 1, 3, 1, 1, 1, 3, true},
      {1, 8, 256, 2100, 5, 1, 2, 2, 1, true},
      {2, 4, 4, 4500, 3, 2, 1, 1, 1, true},
      // Columns of 64·7 rows × 40000 steps exceed one scratch chunk (2^24 elements); in F16
      // and BF16 such long convolutions with stride 1 run as the implicit GEMM: one output
      // channel tile of 32, channels not a multiple of 16, two channel tiles, dilation and
      // padding, no padding, a batch.
      {1, 64, 8, 40000, 7, 1, 3, 1, 1, true},
      {1, 40, 72, 40000, 11, 1, 25, 5, 1, true},
      {1, 96, 20, 60003, 3, 1, 0, 3, 1, false},
      {2, 32, 48, 30000, 9, 1, 4, 1, 1, true},
      // Channel tiles of 128 (one full, one partial), of 64 with a wide tap spread (HiFiGAN
      // V3's K 7 at dilation 12), and one just past the chunk with the window's halo over 16.
      {2, 128, 160, 30000, 5, 1, 2, 1, 1, true},
      {1, 32, 64, 80000, 7, 1, 36, 12, 1, true},
      {1, 48, 256, 50000, 7, 1, 9, 3, 1, false},
  };
  for (int64_t k = 1; k <= 16; ++k) cases.push_back({1, 3, 5, 29, k, 1, k / 2, 1, 1, true});
  uint32_t seed = 100;
  for (const ConvCase& tc : cases) {
    const Tensor x = random_tensor({tc.batch, tc.cin, tc.t}, seed++);
    const Tensor w = random_tensor({tc.cout, tc.cin / tc.groups, tc.k}, seed++);
    const Tensor b = tc.bias ? random_tensor({tc.cout}, seed++) : Tensor();
    const Conv1dParams p{tc.stride, tc.padding, tc.dilation, tc.groups};
    check("conv1d " + describe(tc), {x, w, b},
          [&](Context& c, const Inputs& in) { return ops::conv1d(c, in[0], in[1], in[2], p); });
  }
}

// leaky_relu → conv1d → + residual; in F16 and BF16 these long ones run as one fused kernel.
TEST_P(CudaOps, FusedConv1d) {
  const std::vector<ConvCase> cases = {
      {1, 40, 72, 40000, 11, 1, 25, 5, 1, true},
      {2, 32, 32, 30001, 3, 1, 1, 1, 1, true},
      {1, 24, 16, 2000, 3, 1, 1, 1, 1, false},  // short: step by step
  };
  uint32_t seed = 250;
  for (const ConvCase& tc : cases) {
    const Tensor x = random_tensor({tc.batch, tc.cin, tc.t}, seed++);
    const Tensor w = random_tensor({tc.cout, tc.cin, tc.k}, seed++);
    const Tensor b = tc.bias ? random_tensor({tc.cout}, seed++) : Tensor();
    const Conv1dParams p{tc.stride, tc.padding, tc.dilation, tc.groups};
    const int64_t t_out = tc.t + 2 * tc.padding - tc.dilation * (tc.k - 1);
    const Tensor residual = random_tensor({tc.batch, tc.cout, t_out}, seed++);
    check("fused conv1d " + describe(tc), {x, w, b, residual}, [&](Context& c, const Inputs& in) {
      return ops::conv1d(c, in[0], in[1], in[2], p, ConvFusion{0.1f, &in[3]});
    });
    check("conv1d of leaky_relu " + describe(tc), {x, w, b}, [&](Context& c, const Inputs& in) {
      return ops::conv1d(c, in[0], in[1], in[2], p, ConvFusion{0.1f, nullptr});
    });
  }
}

// Mixed precision (HiFiGAN's BF16 resblocks): the first conv reads an F32 input and writes the
// weights' dtype, the second reads that and writes F32 with an F32 residual. Long ones run in the
// implicit GEMM (the second case's steps are not a multiple of 8: the scalar transpose), the
// short one step by step.
TEST_P(CudaOps, FusedConv1dAcrossDtypes) {
  const std::vector<ConvCase> cases = {
      {1, 40, 72, 40000, 11, 1, 25, 5, 1, true},
      {1, 64, 32, 30001, 9, 1, 4, 1, 1, true},
      {1, 24, 16, 2000, 3, 1, 1, 1, 1, true},
  };
  uint32_t seed = 270;
  for (const ConvCase& tc : cases) {
    const Tensor x = random_tensor({tc.batch, tc.cin, tc.t}, seed++);
    const Tensor w = random_tensor({tc.cout, tc.cin, tc.k}, seed++);
    const Tensor b = random_tensor({tc.cout}, seed++);
    const Conv1dParams p{tc.stride, tc.padding, tc.dilation, tc.groups};
    const int64_t t_out = tc.t + 2 * tc.padding - tc.dilation * (tc.k - 1);
    const Tensor residual = random_tensor({tc.batch, tc.cout, t_out}, seed++);
    check("F32 in " + describe(tc), {x, w, b}, [&](Context& c, const Inputs& in) {
      const Tensor x32 = ops::to_device(c, in[0], DType::F32);
      return ops::conv1d(c, x32, in[1], in[2], p, ConvFusion{0.1f, nullptr, in[1].dtype()});
    });
    check("F32 out " + describe(tc), {x, w, b, residual}, [&](Context& c, const Inputs& in) {
      const Tensor r32 = ops::to_device(c, in[3], DType::F32);
      const Tensor y = ops::conv1d(c, in[0], in[1], in[2], p, ConvFusion{0.1f, &r32, DType::F32});
      EXPECT_EQ(y.dtype(), DType::F32);
      return ops::to_device(c, y, in[0].dtype());
    });
  }
}

TEST_P(CudaOps, ConvTranspose1d) {
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
      // Columns of 64·16 rows × 17000 input steps exceed one scratch chunk.
      {{1, 4, 64, 17000, 16, 8, 4, 1, 1, true}, 0},
  };
  uint32_t seed = 300;
  for (const Case& tc : cases) {
    const ConvCase& cc = tc.conv;
    const Tensor x = random_tensor({cc.batch, cc.cin, cc.t}, seed++);
    const Tensor w = random_tensor({cc.cin, cc.cout / cc.groups, cc.k}, seed++);
    const Tensor b = cc.bias ? random_tensor({cc.cout}, seed++) : Tensor();
    const ConvTranspose1dParams p{cc.stride, cc.padding, tc.output_padding, cc.dilation, cc.groups};
    check("conv_transpose1d " + describe(cc) + " op" + std::to_string(tc.output_padding), {x, w, b},
          [&](Context& c, const Inputs& in) {
            return ops::conv_transpose1d(c, in[0], in[1], in[2], p);
          });
  }
}

TEST_P(CudaOps, LayerNorm) {
  uint32_t seed = 400;
  for (const Shape& shape :
       {Shape{3, 7}, Shape{2, 5, 256}, Shape{1, 1}, Shape{300, 384}, Shape{2, 3000}}) {
    const int64_t c = shape.back();
    const Tensor x = random_tensor(shape, seed++, -4.0f, 6.0f);
    const Tensor gamma = random_tensor({c}, seed++, 0.5f, 1.5f);
    const Tensor beta = random_tensor({c}, seed++);
    for (float eps : {1e-5f, 1e-3f}) {
      check("layer_norm " + shape_to_string(shape), {x, gamma, beta},
            [&](Context& ctx, const Inputs& in) {
              return ops::layer_norm(ctx, in[0], in[1], in[2], eps);
            });
    }
  }
  // Large offsets: the mean must not swamp the variance.
  const Tensor shifted = random_tensor({4, 64}, 410, 999.0f, 1001.0f);
  const Tensor ones = Tensor::from_vector({64}, std::vector<float>(64, 1.0f));
  const Tensor zeros = Tensor::from_vector({64}, std::vector<float>(64, 0.0f));
  check("layer_norm offset", {shifted, ones, zeros}, [](Context& c, const Inputs& in) {
    return ops::layer_norm(c, in[0], in[1], in[2], 1e-5f);
  });
  check("layer_norm in place", {shifted, ones, zeros}, [](Context& c, const Inputs& in) {
    Tensor x = ops::to_device(c, in[0], in[0].dtype()).reshape({4, 64});
    c.backend().layer_norm(x, in[1], in[2], 1e-5f, x);
    return x;
  });
}

TEST_P(CudaOps, Embedding) {
  const Tensor table = random_tensor({11, 7}, 500);
  const Tensor ids64 = Tensor::from_vector({2, 4}, std::vector<int64_t>{0, 3, 10, 10, 1, 5, 2, 9});
  const Tensor ids32 = ids64.to_host_contiguous(DType::I32);
  const Op lookup = [](Context& c, const Inputs& in) { return ops::embedding(c, in[0], in[1]); };
  check("embedding I64", {ids64, table}, lookup);
  check("embedding I32", {ids32, table}, lookup);
  check("embedding strided ids", {ids64.transpose(0, 1), table}, lookup);
  const Tensor table_dev = ops::to_device(cuda_ctx_, table, dtype());
  for (DType id_type : {DType::I64, DType::I32}) {
    const Tensor device_ids = ops::to_device(cuda_ctx_, ids64, id_type);
    compare(ops::to_host(cuda_ctx_, ops::embedding(cuda_ctx_, device_ids, table_dev)),
            ops::embedding(ref_ctx_, ids64, round_to(table, dtype())), "embedding device ids");
  }
  for (int64_t bad : {int64_t{11}, int64_t{-1}}) {
    const Tensor bad_ids = Tensor::from_vector({1, 3}, std::vector<int64_t>{1, bad, 2});
    for (const Tensor& ids : {bad_ids, ops::to_device(cuda_ctx_, bad_ids, DType::I64)}) {
      try {
        ops::embedding(cuda_ctx_, ids, table_dev);
        ADD_FAILURE() << "embedding accepted id " << bad;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("id " + std::to_string(bad)), std::string::npos)
            << e.what();
      }
    }
  }
}

TEST_P(CudaOps, Attention) {
  struct Case {
    int64_t batch, tq, tk, heads, dim;
    std::vector<int64_t> key_lengths;
    bool causal;
    std::vector<int64_t> offsets;
  };
  const std::vector<Case> cases = {
      {1, 1, 1, 1, 1, {}, false, {}},
      {2, 5, 7, 3, 4, {}, false, {}},
      {2, 5, 7, 3, 4, {7, 3}, false, {}},
      {2, 6, 6, 2, 8, {}, true, {}},
      {2, 3, 9, 2, 5, {9, 6}, true, {6, 2}},
      {3, 17, 33, 2, 16, {33, 1, 20}, false, {}},
      {1, 64, 80, 2, 128, {71}, false, {}},
      {2, 4, 4, 1, 3, {4, 2}, true, {}},
      {1, 3, 200, 1, 300, {}, false, {}},
      // 1000 rows × 20000 keys: more rows than fit the scores scratch at once.
      {1, 1000, 20000, 1, 8, {19000}, false, {}},
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
          {q, k, v},
          [&](Context& c, const Inputs& in) { return ops::attention(c, in[0], in[1], in[2], p); });
  }
}

TEST_P(CudaOps, AttentionQueryThatSeesNoKeyIsNaN) {
  const Tensor q = random_tensor({2, 3, 2, 4}, 700);
  const Tensor k = random_tensor({2, 5, 2, 4}, 701);
  const Tensor v = random_tensor({2, 5, 2, 4}, 702);
  AttentionParams p;
  p.key_lengths = {0, 5};
  const Op attend = [&](Context& c, const Inputs& in) {
    return ops::attention(c, in[0], in[1], in[2], p);
  };
  const std::vector<float> out =
      ops::to_host(cuda_ctx_, attend(cuda_ctx_, {ops::to_device(cuda_ctx_, q, dtype()),
                                                 ops::to_device(cuda_ctx_, k, dtype()),
                                                 ops::to_device(cuda_ctx_, v, dtype())}))
          .to_float_vector();
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(std::isnan(out[i]), i < out.size() / 2) << "element " << i;
  }
  check("fully masked batch", {q, k, v}, attend, true);
  // Causal with a negative offset: query 0 of batch 1 sits before every key.
  p = AttentionParams{};
  p.causal = true;
  p.query_offsets = {0, -1};
  check("causal before keys", {q, k, v}, attend, true);
}

TEST_P(CudaOps, ZeroBeyondLengths) {
  const Tensor x = random_tensor({3, 6, 4}, 800);
  for (const std::vector<int64_t>& lengths :
       {std::vector<int64_t>{6, 2, 0}, std::vector<int64_t>{6, 9, 1}}) {
    check("zero_beyond_lengths", {x}, [&](Context& c, const Inputs& in) {
      Tensor y = ops::to_device(c, in[0], in[0].dtype());
      return ops::zero_beyond_lengths(c, y, lengths);
    });
  }
}

TEST_P(CudaOps, LengthRegulate) {
  const Tensor x = random_tensor({2, 5, 3}, 900);
  const std::vector<std::vector<int64_t>> durations{{2, 0, 1, 3, 1}, {0, 4, 1}};
  for (int64_t min_frames : {0, 7, 12}) {
    check("length_regulate min " + std::to_string(min_frames), {x},
          [&](Context& c, const Inputs& in) {
            return ops::length_regulate(c, in[0], durations, min_frames);
          });
  }
  const Tensor none =
      ops::length_regulate(cuda_ctx_, ops::to_device(cuda_ctx_, x, dtype()), {{0, 0}, {}});
  EXPECT_EQ(none.shape(), (Shape{2, 0, 3}));
  check("length_regulate strided x", {x}, [](Context& c, const Inputs& in) {
    return ops::length_regulate(c, in[0].narrow(1, 1, 3), {{1, 2, 3}, {3, 0, 0}});
  });
}

TEST_P(CudaOps, StridedInputsThroughOps) {
  const Tensor btc = random_tensor({2, 37, 12}, 1100);
  const Tensor w = random_tensor({8, 12, 3}, 1101);
  const Tensor bias = random_tensor({8}, 1102);
  const Tensor wt = random_tensor({12, 4, 4}, 1103);
  const Tensor lw = random_tensor({5, 37}, 1104);
  const Tensor gamma = random_tensor({37}, 1105);
  // in[0] is btc; its transpose [2, 12, 37] is the strided input.
  check("conv1d on a transposed view", {btc, w, bias}, [](Context& c, const Inputs& in) {
    return ops::conv1d(c, in[0].transpose(1, 2), in[1], in[2], Conv1dParams{1, 1, 1, 1});
  });
  check("conv_transpose1d on a transposed view", {btc, wt, bias}, [](Context& c, const Inputs& in) {
    return ops::conv_transpose1d(c, in[0].transpose(1, 2), in[1], in[2].narrow(0, 0, 4),
                                 ConvTranspose1dParams{2, 1});
  });
  check("linear on a transposed view", {btc, lw}, [](Context& c, const Inputs& in) {
    return ops::linear(c, in[0].transpose(1, 2), in[1], Tensor());
  });
  check("relu on a transposed view", {btc},
        [](Context& c, const Inputs& in) { return ops::relu(c, in[0].transpose(1, 2)); });
  check("add of two views", {btc}, [](Context& c, const Inputs& in) {
    const Tensor x = in[0].transpose(1, 2);
    return ops::add(c, x, x.narrow(2, 0, 1));
  });
  check("layer_norm on a transposed view", {btc, gamma}, [](Context& c, const Inputs& in) {
    return ops::layer_norm(c, in[0].transpose(1, 2), in[1], in[1], 1e-5f);
  });
  check("transpose", {btc},
        [](Context& c, const Inputs& in) { return ops::transpose(c, in[0], 0, 2); });
  check("attention on permuted q", {random_tensor({2, 4, 3, 5}, 1106)},
        [](Context& c, const Inputs& in) {
          const Tensor q = in[0].permute({0, 2, 1, 3});
          return ops::attention(c, q, q, q, AttentionParams{});
        });
}

TEST_P(CudaOps, CopyConvertsDtypesAndStrides) {
  const Tensor x = random_tensor({3, 4, 5}, 1200, -100.0f, 100.0f);
  const Tensor expected = round_to(x.permute({2, 0, 1}), dtype());
  // Host -> device with conversion and strides, device -> host.
  const Tensor a = ops::to_device(cuda_ctx_, x.permute({2, 0, 1}), dtype());
  expect_close(ops::to_host(cuda_ctx_, a), expected, 0, "host to device");
  // Device -> device: strided, and through every other float dtype.
  const Tensor d = ops::to_device(cuda_ctx_, x, dtype());
  expect_close(ops::to_host(cuda_ctx_, ops::contiguous(cuda_ctx_, d.permute({2, 0, 1}))), expected,
               0, "device strided");
  const Tensor f32 = ops::to_device(cuda_ctx_, d.permute({2, 0, 1}), DType::F32);
  expect_close(ops::to_host(cuda_ctx_, f32), expected, 0, "device to F32");
  // Device strided -> host in another dtype.
  expect_close(ops::to_host(cuda_ctx_, d.permute({2, 0, 1}), DType::F32), expected, 0,
               "device strided to host");
  for (DType other : {DType::F32, DType::F16, DType::BF16}) {
    const Tensor there = ops::to_device(cuda_ctx_, d, other);
    const Tensor back = ops::to_host(cuda_ctx_, there, other).to_host_contiguous(DType::F32);
    expect_close(back, round_to(round_to(x, dtype()), other), 0,
                 std::string("device to ") + std::string(dtype_name(other)));
  }
  // Floats to ints: NaN -> 0, saturating, as convert_elements does.
  const Tensor specials = Tensor::from_vector(
      {4}, std::vector<float>{std::numeric_limits<float>::quiet_NaN(), 3e9f, -3e9f, -2.75f});
  const Tensor dev_specials = ops::to_device(cuda_ctx_, specials, DType::F32);
  for (DType to : {DType::I32, DType::I64}) {
    const Tensor ints = ops::to_device(cuda_ctx_, dev_specials, to);
    EXPECT_EQ(ops::to_host(cuda_ctx_, ints, to).to_int_vector(),
              specials.to_host_contiguous(to).to_int_vector());
  }
  const Tensor ints = Tensor::from_vector({2, 3}, std::vector<int64_t>{1, -2, 3, 4, 5, 6});
  const Tensor i64 = ops::to_device(cuda_ctx_, ints, DType::I64);
  const Tensor i32 = ops::to_device(cuda_ctx_, i64.transpose(0, 1), DType::I32);
  EXPECT_EQ(ops::to_host(cuda_ctx_, i32, DType::I64).to_int_vector(),
            (std::vector<int64_t>{1, 4, -2, 5, 3, 6}));
  for (DType t : {dtype(), DType::I32, DType::I64}) {
    const Tensor z = ops::zeros(cuda_ctx_, {3, 3}, t);
    EXPECT_EQ(ops::to_host(cuda_ctx_, z, DType::I64).to_int_vector(), std::vector<int64_t>(9, 0));
  }
  Tensor filled = ops::empty(cuda_ctx_, {5}, dtype());
  cuda_backend().fill(filled, -1.5f);
  EXPECT_EQ(ops::to_host(cuda_ctx_, filled).to_float_vector(), std::vector<float>(5, -1.5f));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOps, ::testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

// F32 only (bucketize's contract).
TEST(CudaBackend, Bucketize) {
  PoisonDeviceAllocator poison;
  Context ctx(cuda_backend(), poison);
  ReferenceBackend ref;
  Context ref_ctx(ref, host_allocator());
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
  const Tensor actual =
      ops::bucketize(ctx, ops::to_device(ctx, x), ops::to_device(ctx, boundaries));
  ASSERT_EQ(actual.dtype(), DType::I64);
  EXPECT_EQ(ops::to_host(ctx, actual, DType::I64).to_int_vector(),
            ops::bucketize(ref_ctx, x, boundaries).to_int_vector());
}

TEST(CudaBackend, RejectsTensorsOnTheWrongDeviceOrDtype) {
  CudaDeviceAllocator allocator(0);
  Context ctx(cuda_backend(), allocator);
  const Tensor host = random_tensor({2, 3}, 1);
  Tensor out = ops::empty(ctx, {2, 3});
  try {
    cuda_backend().unary(host, out, UnaryOp::Relu, 0);
    ADD_FAILURE() << "unary accepted a host tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is on cpu"), std::string::npos) << e.what();
  }
  const Tensor half = ops::to_device(ctx, host, DType::F16);
  EXPECT_THROW(cuda_backend().unary(half, out, UnaryOp::Relu, 0), Error);
  EXPECT_THROW(ops::relu(ctx, host), Error);
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

}  // namespace
}  // namespace voxd
