#include "op_cases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend_test_util.h"
#include "backends/reference/reference_backend.h"
#include "core/error.h"

namespace voxd::testing {

CaseInput random(const Shape& shape, uint32_t seed, float lo, float hi) {
  CaseInput in;
  in.shape = shape;
  in.seed = seed;
  in.lo = lo;
  in.hi = hi;
  return in;
}

CaseInput given(const Tensor& tensor) {
  CaseInput in;
  in.given = tensor;
  return in;
}

CaseInput given_on_device(const Tensor& tensor) {
  CaseInput in = given(tensor);
  in.on_device = true;
  return in;
}

CaseInput none() {
  CaseInput in;
  in.none = true;
  return in;
}

std::string group_name(OpKind op) {
  std::string name;
  bool upper = true;
  for (char c : op_name(op)) {
    if (c == '_') {
      upper = true;
      continue;
    }
    name += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return name;
}

namespace {

using In = std::vector<Tensor>;

// A case of the group of `op` that needs only `op`.
OpCase make(OpKind op, std::string description, std::vector<CaseInput> inputs, CaseRun run) {
  OpCase c;
  c.group = group_name(op);
  c.needs = {op};
  c.description = std::move(description);
  c.inputs = std::move(inputs);
  c.run = std::move(run);
  return c;
}

std::string str(int64_t v) {
  return std::to_string(v);
}

Tensor floats(const Shape& shape, const std::vector<float>& values) {
  return Tensor::from_vector(shape, values);
}

Tensor ints(const Shape& shape, const std::vector<int64_t>& values) {
  return Tensor::from_vector(shape, values);
}

// torch.hann_window(n) (periodic): 0.5 − 0.5·cos(2π·i/n).
Tensor hann_window(int64_t n) {
  std::vector<float> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    w[static_cast<size_t>(i)] =
        static_cast<float>(0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * static_cast<double>(i) /
                                                static_cast<double>(n)));
  }
  return floats({n}, w);
}

void add_unary_cases(std::vector<OpCase>& cases) {
  struct Kind {
    OpKind op;
    float lo, hi;
    std::vector<float> alphas;  // one case per alpha (the ops without a parameter: one 0)
    std::function<Tensor(Context&, const Tensor&, float)> apply;
  };
  const std::vector<Kind> kinds = {
      {OpKind::Relu,
       -3,
       3,
       {0},
       [](Context& c, const Tensor& x, float) { return ops::relu(c, x); }},
      {OpKind::LeakyRelu,
       -3,
       3,
       {0.1f, 0.01f, 0.2f, 1.5f},
       [](Context& c, const Tensor& x, float a) { return ops::leaky_relu(c, x, a); }},
      {OpKind::Tanh,
       -3,
       3,
       {0},
       [](Context& c, const Tensor& x, float) { return ops::tanh(c, x); }},
      {OpKind::Exp, -3, 3, {0}, [](Context& c, const Tensor& x, float) { return ops::exp(c, x); }},
      {OpKind::Scale,
       -3,
       3,
       {0.5f, -2.0f, 0.0f},
       [](Context& c, const Tensor& x, float a) { return ops::scale(c, x, a); }},
      {OpKind::Silu,
       -8,
       8,
       {0},
       [](Context& c, const Tensor& x, float) { return ops::silu(c, x); }},
      {OpKind::Gelu,
       -6,
       6,
       {0},
       [](Context& c, const Tensor& x, float) { return ops::gelu(c, x); }},
      {OpKind::Sin,
       -20,
       20,
       {0},
       [](Context& c, const Tensor& x, float) { return ops::sin(c, x); }},
      {OpKind::Cos,
       -20,
       20,
       {0},
       [](Context& c, const Tensor& x, float) { return ops::cos(c, x); }},
      {OpKind::ClampMax,
       -3,
       3,
       {0.5f, -1.0f, 100.0f},
       [](Context& c, const Tensor& x, float a) { return ops::clamp_max(c, x, a); }},
  };
  for (const Kind& kind : kinds) {
    uint32_t seed = 1;
    // 3M elements: more than the 4096 × 256 threads of one CUDA grid-stride pass.
    for (const Shape& shape :
         {Shape{7}, Shape{3, 5, 17}, Shape{2, 3, 4, 5}, Shape{70000}, Shape{3, 1000003}}) {
      for (float alpha : kind.alphas) {
        const auto apply = kind.apply;
        const std::string parameter =
            kind.alphas.size() > 1 || alpha != 0 ? " alpha " + std::to_string(alpha) : "";
        cases.push_back(
            make(kind.op, std::string(op_name(kind.op)) + " " + shape_to_string(shape) + parameter,
                 {random(shape, seed, kind.lo, kind.hi)},
                 [apply, alpha](Context& c, const In& in) { return apply(c, in[0], alpha); }));
      }
      ++seed;
    }
    const auto apply = kind.apply;
    const float alpha = kind.alphas.front();
    cases.push_back(make(kind.op, std::string(op_name(kind.op)) + " on a transposed view",
                         {random({2, 37, 12}, 1100, kind.lo, kind.hi)},
                         [apply, alpha](Context& c, const In& in) {
                           return apply(c, in[0].transpose(1, 2), alpha);
                         }));
    // Contiguous, one element in: its data off the 16-byte vectors a backend may read.
    cases.push_back(make(kind.op, std::string(op_name(kind.op)) + " on a view one element in",
                         {random({4099}, 1200, kind.lo, kind.hi)},
                         [apply, alpha](Context& c, const In& in) {
                           return apply(c, in[0].narrow(0, 1, 4098), alpha);
                         }));
  }
  // Vocos clips exp(magnitude) at 1e2; NaN stays NaN and infinities clamp as torch.clamp does.
  const float inf = std::numeric_limits<float>::infinity();
  OpCase clip = make(OpKind::ClampMax, "clamp_max 1e2 of exp-sized values, NaN and infinities",
                     {given(floats({8}, {-inf, -5.0f, 99.99f, 100.0f, 100.01f, 5e4f, inf,
                                         std::numeric_limits<float>::quiet_NaN()}))},
                     [](Context& c, const In& in) { return ops::clamp_max(c, in[0], 1e2f); });
  clip.allow_nan = true;
  cases.push_back(clip);
  // In place: x (a device copy) overwritten.
  cases.push_back(
      make(OpKind::Relu, "relu_ in place", {random({4, 9, 33}, 11)}, [](Context& c, const In& in) {
        Tensor y = ops::to_device(c, in[0], in[0].dtype());
        return ops::relu_(c, y);
      }));
  cases.push_back(make(OpKind::LeakyRelu, "leaky_relu_ in place", {random({4, 9, 33}, 11)},
                       [](Context& c, const In& in) {
                         Tensor y = ops::to_device(c, in[0], in[0].dtype());
                         return ops::leaky_relu_(c, y, 0.2f);
                       }));
}

void add_binary_cases(std::vector<OpCase>& cases) {
  uint32_t seed = 22;
  for (const Shape& b_shape : {Shape{3, 5, 17}, Shape{1, 5, 1}, Shape{1, 1, 17}, Shape{3, 1, 17},
                               Shape{3, 5, 1}, Shape{1, 1, 1}, Shape{17}, Shape{5, 17}}) {
    const std::string s = shape_to_string(b_shape);
    const std::vector<CaseInput> inputs = {random({3, 5, 17}, 21), random(b_shape, seed++)};
    cases.push_back(make(OpKind::Add, "add [3, 5, 17] + " + s, inputs,
                         [](Context& c, const In& in) { return ops::add(c, in[0], in[1]); }));
    cases.push_back(make(OpKind::Mul, "mul [3, 5, 17] · " + s, inputs,
                         [](Context& c, const In& in) { return ops::mul(c, in[0], in[1]); }));
    cases.push_back(
        make(OpKind::Add, "add_ [3, 5, 17] += " + s, inputs, [](Context& c, const In& in) {
          Tensor acc = ops::to_device(c, in[0], in[0].dtype());
          return ops::add_(c, acc, in[1]);
        }));
  }
  cases.push_back(make(OpKind::Add, "add large",
                       {random({2, 64, 1000}, 29), random({1, 64, 1}, 30)},
                       [](Context& c, const In& in) { return ops::add(c, in[0], in[1]); }));
  cases.push_back(make(OpKind::Mul, "mul 5-d broadcast",
                       {random({2, 3, 4, 5, 6}, 31), random({2, 1, 4, 1, 6}, 32)},
                       [](Context& c, const In& in) { return ops::mul(c, in[0], in[1]); }));
  cases.push_back(make(OpKind::Add, "add of two views", {random({2, 37, 12}, 1100)},
                       [](Context& c, const In& in) {
                         const Tensor x = in[0].transpose(1, 2);
                         return ops::add(c, x, x.narrow(2, 0, 1));
                       }));
}

void add_linear_cases(std::vector<OpCase>& cases) {
  struct Case {
    Shape x;
    int64_t out;
    bool bias;
  };
  uint32_t seed = 40;
  for (const Case& tc : {Case{{5, 7}, 3, true}, Case{{5, 7}, 3, false}, Case{{2, 3, 33}, 65, true},
                         Case{{1, 1}, 1, true}, Case{{128, 256}, 256, true},
                         Case{{2, 37, 80}, 257, false}, Case{{3, 0, 16}, 8, true},
                         // A few rows (a decode step's; CUDA's few-rows kernel in F16 and BF16),
                         // and one past them.
                         Case{{1, 64}, 96, true}, Case{{3, 1, 768}, 40, false},
                         Case{{8, 128}, 33, true}, Case{{9, 64}, 16, false}}) {
    const CaseInput x = random(tc.x, seed++);
    const CaseInput w = random({tc.out, tc.x.back()}, seed++);
    const CaseInput b = tc.bias ? random({tc.out}, seed++) : none();
    cases.push_back(make(
        OpKind::Linear,
        "linear " + shape_to_string(tc.x) + " -> " + str(tc.out) + (tc.bias ? " bias" : ""),
        {x, w, b}, [](Context& c, const In& in) { return ops::linear(c, in[0], in[1], in[2]); }));
  }
  cases.push_back(make(OpKind::Linear, "linear on a transposed view",
                       {random({2, 37, 12}, 1100), random({5, 37}, 1104)},
                       [](Context& c, const In& in) {
                         return ops::linear(c, in[0].transpose(1, 2), in[1], Tensor());
                       }));
  // A bias one element into its storage: off 16 bytes, so CUDA fills the output with it and
  // accumulates onto it instead of adding it in cuBLASLt's epilogue.
  cases.push_back(make(OpKind::Linear, "linear with a bias off 16-byte alignment",
                       {random({40, 24}, 1105), random({36, 24}, 1106), random({37}, 1107)},
                       [](Context& c, const In& in) {
                         return ops::linear(c, in[0], in[1], in[2].narrow(0, 1, 36));
                       }));
}

struct ConvCase {
  int64_t batch, cin, cout, t, k, stride, padding, dilation, groups;
  bool bias;
};

std::string describe(const ConvCase& c) {
  return "B" + str(c.batch) + " Cin" + str(c.cin) + " Cout" + str(c.cout) + " T" + str(c.t) + " K" +
         str(c.k) + " s" + str(c.stride) + " p" + str(c.padding) + " d" + str(c.dilation) + " g" +
         str(c.groups) + (c.bias ? " bias" : "");
}

// Multiply-adds of a convolution, to tell the cases the reference takes seconds on.
int64_t macs(const ConvCase& c) {
  return c.batch * c.cout * (c.cin / c.groups) * c.k * c.t;
}

void add_conv1d_cases(std::vector<OpCase>& cases) {
  std::vector<ConvCase> list = {
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
      // Several time blocks of the cpu backend: its direct path (256 output channels) and its
      // im2col path (stride 2).
      {1, 8, 256, 2100, 5, 1, 2, 2, 1, true},
      {2, 4, 4, 4500, 3, 2, 1, 1, 1, true},
      // The cpu backend's direct path edges: wide inputs make short panels (several time blocks
      // per row block), short inputs split output channels across jobs, channel counts off the
      // 4-row tile, outputs off the 24-step tile, padding wider than the kernel's span, grouped
      // thin layers over many panels.
      {1, 512, 6, 150, 11, 1, 25, 5, 1, true},
      {2, 300, 13, 97, 3, 1, 1, 1, 1, false},
      {1, 64, 130, 23, 9, 1, 4, 1, 1, true},
      {1, 10, 9, 25, 7, 1, 9, 1, 1, true},
      {2, 12, 10, 9000, 3, 1, 3, 3, 2, true},
      {1, 8, 1, 5000, 7, 1, 3, 1, 1, true},
      // Columns of 64·7 rows × 40000 steps exceed one CUDA scratch chunk (2^24 elements); in F16
      // and BF16 such long convolutions with stride 1 run as the implicit GEMM: one output
      // channel tile of 32, channels not a multiple of 16, two channel tiles, dilation and
      // padding, no padding, a batch.
      {1, 64, 8, 40000, 7, 1, 3, 1, 1, true},
      {1, 40, 72, 40000, 11, 1, 25, 5, 1, true},
      {1, 96, 20, 60003, 3, 1, 0, 3, 1, false},
      {2, 32, 48, 30000, 9, 1, 4, 1, 1, true},
      // Channel tiles of 128 (one full, one partial), of 64 with a wide tap spread (HiFiGAN V3's
      // K 7 at dilation 12), and one just past the chunk with the window's halo over 16.
      {2, 128, 160, 30000, 5, 1, 2, 1, 1, true},
      {1, 32, 64, 80000, 7, 1, 36, 12, 1, true},
      {1, 48, 256, 50000, 7, 1, 9, 3, 1, false},
      // HiFiGAN V1's first resblock stage (K 3, dilation 3) at two sequences: on Hopper, the wgmma
      // kernel's shortest taps with four channel groups a stage.
      {2, 64, 128, 20000, 3, 1, 3, 3, 1, true},
      // Depthwise (groups == channels; ConvNeXt's K 7, padding 3 in the DVAE decoder and Vocos),
      // strided and dilated depthwise, a depth multiplier of 2, and a long one in half precision.
      {2, 64, 64, 100, 7, 1, 3, 1, 64, true},
      {1, 512, 512, 1000, 7, 1, 3, 1, 512, true},
      {3, 16, 16, 50, 5, 2, 2, 2, 16, false},
      {1, 8, 16, 40, 3, 1, 1, 1, 8, true},
      {1, 1, 1, 20, 4, 1, 0, 1, 1, true},
      {2, 384, 384, 3000, 7, 1, 3, 1, 384, true},
      {1, 64, 64, 40000, 7, 1, 3, 1, 64, true},
  };
  for (int64_t k = 1; k <= 16; ++k) list.push_back({1, 3, 5, 29, k, 1, k / 2, 1, 1, true});
  uint32_t seed = 100;
  for (const ConvCase& tc : list) {
    const CaseInput x = random({tc.batch, tc.cin, tc.t}, seed++);
    const CaseInput w = random({tc.cout, tc.cin / tc.groups, tc.k}, seed++);
    const CaseInput b = tc.bias ? random({tc.cout}, seed++) : none();
    const Conv1dParams p{tc.stride, tc.padding, tc.dilation, tc.groups};
    OpCase c =
        make(OpKind::Conv1d, "conv1d " + describe(tc), {x, w, b},
             [p](Context& ctx, const In& in) { return ops::conv1d(ctx, in[0], in[1], in[2], p); });
    c.large = macs(tc) > 100'000'000;
    cases.push_back(c);
  }
  cases.push_back(
      make(OpKind::Conv1d, "conv1d on a transposed view",
           {random({2, 37, 12}, 1100), random({8, 12, 3}, 1101), random({8}, 1102)},
           [](Context& c, const In& in) {
             return ops::conv1d(c, in[0].transpose(1, 2), in[1], in[2], Conv1dParams{1, 1, 1, 1});
           }));
  // leaky_relu → conv1d → + residual; in F16 and BF16 the long ones run as one fused kernel on
  // CUDA, the short ones step by step unless their weight comes arranged (HiFiGAN's conv_pre over
  // three first chunks is the last case).
  const std::vector<ConvCase> fused = {
      {2, 6, 5, 37, 7, 1, 9, 3, 1, true},      {1, 40, 72, 40000, 11, 1, 25, 5, 1, true},
      {2, 32, 32, 30001, 3, 1, 1, 1, 1, true}, {1, 24, 16, 2000, 3, 1, 1, 1, 1, false},
      {1, 64, 32, 30001, 9, 1, 4, 1, 1, true}, {3, 80, 512, 45, 7, 1, 3, 1, 1, true},
  };
  seed = 250;
  for (const ConvCase& tc : fused) {
    const int64_t t_out = tc.t + 2 * tc.padding - tc.dilation * (tc.k - 1);
    const std::vector<CaseInput> inputs = {random({tc.batch, tc.cin, tc.t}, seed),
                                           random({tc.cout, tc.cin, tc.k}, seed + 1),
                                           tc.bias ? random({tc.cout}, seed + 2) : none(),
                                           random({tc.batch, tc.cout, t_out}, seed + 3)};
    seed += 4;
    const Conv1dParams p{tc.stride, tc.padding, tc.dilation, tc.groups};
    const auto add = [&](const std::string& what, const CaseRun& run) {
      OpCase c = make(OpKind::Conv1d, what + " " + describe(tc), inputs, run);
      c.needs = {OpKind::Conv1d, OpKind::LeakyRelu, OpKind::Add};
      c.large = macs(tc) > 100'000'000;
      cases.push_back(c);
    };
    add("fused conv1d", [p](Context& c, const In& in) {
      return ops::conv1d(c, in[0], in[1], in[2], p, ConvFusion{0.1f, &in[3]});
    });
    add("conv1d of leaky_relu", [p](Context& c, const In& in) {
      return ops::conv1d(c, in[0], in[1], in[2], p, ConvFusion{0.1f, nullptr});
    });
    // The weight arranged once, as a model does when it loads (CUDA: the mma.sync kernel's
    // order, which lets short convolutions run on it too; the reference arranges none).
    const auto arranged = [p](Context& c, const In& in, ConvFusion fusion) {
      const Tensor weight = ops::arrange_conv1d_weight(c, in[1]);
      fusion.arranged_weight = weight.defined() ? &weight : nullptr;
      return ops::conv1d(c, in[0], in[1], in[2], p, fusion);
    };
    add("fused conv1d with its weight arranged once", [arranged](Context& c, const In& in) {
      return arranged(c, in, ConvFusion{0.1f, &in[3]});
    });
    add("conv1d with its weight arranged once",
        [arranged](Context& c, const In& in) { return arranged(c, in, ConvFusion{}); });
    add("F32 in and out with its weight arranged once", [p](Context& c, const In& in) {
      const Tensor weight = ops::arrange_conv1d_weight(c, in[1]);
      const Tensor x32 = ops::to_device(c, in[0], DType::F32);
      const Tensor r32 = ops::to_device(c, in[3], DType::F32);
      ConvFusion fusion{0.1f, &r32, DType::F32};
      fusion.arranged_weight = weight.defined() ? &weight : nullptr;
      return ops::to_device(c, ops::conv1d(c, x32, in[1], in[2], p, fusion), in[0].dtype());
    });
    // Mixed precision (HiFiGAN's BF16 resblocks): the first conv reads an F32 input and writes
    // the weights' dtype, the second reads that and writes F32 with an F32 residual.
    add("F32 in", [p](Context& c, const In& in) {
      const Tensor x32 = ops::to_device(c, in[0], DType::F32);
      return ops::conv1d(c, x32, in[1], in[2], p, ConvFusion{0.1f, nullptr, in[1].dtype()});
    });
    add("F32 out", [p](Context& c, const In& in) {
      const Tensor r32 = ops::to_device(c, in[3], DType::F32);
      const Tensor y = ops::conv1d(c, in[0], in[1], in[2], p, ConvFusion{0.1f, &r32, DType::F32});
      return ops::to_device(c, y, in[0].dtype());
    });
  }
}

// conv1d over time-major rows (FastSpeech2's feed-forward, variance predictors and postnet):
// taps and padding as its layers have them, pointwise, dilation, padding past the kernel's
// span, a chunk of CUDA's columns crossed (256 channels × 9 taps: 7,281 rows a chunk), rows of
// more than one tile of its staged channels (600 × 9 taps), the backends that transpose around
// conv1d for stride 2 and groups, and a view of rows. Then a few output channels (CUDA's
// few-outputs kernel): HiFiGAN's conv_post (32 → 1, K 7) over many 128-step blocks, four
// outputs, channels no multiple of 4 with dilation and padding past the kernel's span, and
// fewer steps than a block.
void add_conv1d_rows_cases(std::vector<OpCase>& cases) {
  const std::vector<ConvCase> list = {
      {2, 16, 24, 37, 9, 1, 4, 1, 1, true},   {3, 12, 8, 20, 3, 1, 1, 1, 1, true},
      {1, 10, 6, 33, 5, 1, 2, 1, 1, false},   {2, 24, 40, 17, 1, 1, 0, 1, 1, true},
      {2, 8, 8, 25, 3, 1, 6, 3, 1, true},     {1, 5, 7, 6, 3, 1, 4, 1, 1, true},
      {1, 256, 4, 8000, 9, 1, 4, 1, 1, true}, {2, 6, 4, 19, 3, 2, 1, 1, 1, true},
      {1, 8, 8, 15, 3, 1, 1, 1, 2, true},     {2, 600, 5, 21, 9, 1, 4, 1, 1, true},
      {2, 32, 1, 3001, 7, 1, 3, 1, 1, true},  {3, 12, 4, 300, 3, 1, 1, 1, 1, true},
      {2, 10, 3, 50, 5, 1, 9, 2, 1, false},   {1, 32, 2, 9, 7, 1, 3, 1, 1, true},
  };
  uint32_t seed = 1200;
  for (const ConvCase& tc : list) {
    const std::vector<CaseInput> inputs = {random({tc.batch, tc.t, tc.cin}, seed),
                                           random({tc.cout, tc.cin / tc.groups, tc.k}, seed + 1),
                                           tc.bias ? random({tc.cout}, seed + 2) : none()};
    seed += 3;
    const Conv1dParams p{tc.stride, tc.padding, tc.dilation, tc.groups};
    OpCase c = make(
        OpKind::Conv1d, "conv1d_rows " + describe(tc), inputs,
        [p](Context& ctx, const In& in) { return ops::conv1d_rows(ctx, in[0], in[1], in[2], p); });
    c.large = macs(tc) > 100'000'000;
    cases.push_back(c);
    // The weight as a model holds it: arranged once, and a view of the arrangement where that
    // is a permutation of it; then with ReLU after it, as FastSpeech2's feed-forward and
    // predictors run it (CUDA: in the gemm's epilogue, or after the few-outputs kernel and the
    // gemm without a bias).
    for (const auto& [suffix, activation] :
         {std::pair{" arranged once", ops::RowsActivation::None},
          std::pair{" arranged once, relu", ops::RowsActivation::Relu}}) {
      OpCase arranged =
          make(OpKind::Conv1d, "conv1d_rows " + describe(tc) + suffix, inputs,
               [p, activation](Context& ctx, const In& in) {
                 const Tensor w = ops::arrange_conv1d_rows_weight(ctx, in[1], p);
                 return ops::conv1d_rows(ctx, in[0], ops::conv1d_rows_weight_view(ctx, w, in[1], p),
                                         in[2], p, w.defined() ? &w : nullptr, activation);
               });
      arranged.large = c.large;
      cases.push_back(arranged);
    }
  }
  cases.push_back(make(
      OpKind::Conv1d, "conv1d_rows of a narrowed view",
      {random({2, 30, 12}, 1290), random({8, 12, 3}, 1291), random({8}, 1292)},
      [](Context& c, const In& in) {
        return ops::conv1d_rows(c, in[0].narrow(1, 5, 20), in[1], in[2], Conv1dParams{1, 1, 1, 1});
      }));
}

// Two convolutions of one length in a row, leaky_relu before each, the second adding a residual
// (HiFiGAN V1's resblock step). On CUDA in F16 and BF16 they run as one pair at any length, the
// first writing the second's time-major input: equal channels (V1), channels that are no multiple
// of 16 on the way (zero padding channels) and an odd length, the 128-channel tile, and mixed
// precision; and the short chunks of a served stream: a few sequences of a few steps, fewer
// steps than the convolutions reach (T = 5 and T = 16, a multiple of 8, against K 11 d 5), and
// just past one 128-step tile. With their weights arranged once, CUDA runs V1's 32- and
// 64-channel pairs over rows on chip: every shape of C 32 or 64 below, and over many blocks of
// 118 steps (K 11), a second convolution that dilates, and one whose halo (96) is past what the
// on-chip kernel takes, so it runs as two; the long ones of C 64 (B 2, T 45,000) and C 32 (B 8,
// T 10,000) in tiles of 256 steps, enough of them to give every multiprocessor two.
void add_conv1d_pair_cases(std::vector<OpCase>& cases) {
  struct PairCase {
    int64_t batch, cin, channels, cout, t, k1, d1, k2, d2;
    bool bias;
  };
  const std::vector<PairCase> list = {
      {2, 6, 10, 6, 37, 3, 3, 3, 1, true},         {2, 64, 64, 64, 45000, 3, 3, 3, 1, true},
      {1, 24, 40, 32, 70001, 11, 5, 11, 1, false}, {1, 128, 128, 128, 20000, 7, 3, 7, 1, true},
      {2, 128, 128, 128, 100, 11, 5, 11, 1, true}, {2, 16, 16, 16, 5, 11, 5, 11, 1, true},
      {2, 32, 32, 32, 16, 11, 5, 11, 1, true},     {2, 64, 64, 64, 130, 7, 3, 7, 1, true},
      {3, 32, 32, 32, 1000, 11, 5, 11, 1, true},   {1, 64, 64, 64, 300, 3, 5, 5, 2, true},
      {1, 32, 32, 32, 200, 3, 1, 33, 3, true},     {8, 32, 32, 32, 10000, 7, 3, 7, 1, true},
  };
  uint32_t seed = 300;
  for (const PairCase& tc : list) {
    // Weights at a trained model's scale (|w| < 0.1): with ±1 the second convolution sums
    // hundreds of products of magnitude ~10, and F32's rounding of those sums alone exceeds the
    // F32 tolerance on its small outputs.
    const std::vector<CaseInput> inputs = {
        random({tc.batch, tc.cin, tc.t}, seed),
        random({tc.channels, tc.cin, tc.k1}, seed + 1, -0.1f, 0.1f),
        tc.bias ? random({tc.channels}, seed + 2) : none(),
        random({tc.cout, tc.channels, tc.k2}, seed + 3, -0.1f, 0.1f),
        tc.bias ? random({tc.cout}, seed + 4) : none(),
        random({tc.batch, tc.cout, tc.t}, seed + 5),
        random({tc.batch, tc.cout, tc.t}, seed + 6)};
    seed += 7;
    const Conv1dParams first{1, tc.d1 * (tc.k1 - 1) / 2, tc.d1, 1};
    const Conv1dParams second{1, tc.d2 * (tc.k2 - 1) / 2, tc.d2, 1};
    const std::string shape = std::string("B") + str(tc.batch) + " C" + str(tc.cin) + "→" +
                              str(tc.channels) + "→" + str(tc.cout) + " T" + str(tc.t) + " K" +
                              str(tc.k1) + " d" + str(tc.d1) + ", K" + str(tc.k2) + " d" +
                              str(tc.d2) + (tc.bias ? " bias" : "");
    const int64_t macs = tc.batch * tc.t * tc.channels * (tc.cin * tc.k1 + tc.cout * tc.k2);
    const auto add = [&](const std::string& what, const CaseRun& run) {
      OpCase c = make(OpKind::Conv1d, what + " " + shape, inputs, run);
      c.needs = {OpKind::Conv1d, OpKind::LeakyRelu, OpKind::Add};
      c.large = macs > 100'000'000;
      cases.push_back(c);
    };
    const auto pair = [first, second](const In& in, const Tensor* residual,
                                      std::optional<DType> output_dtype) {
      return Conv1dPair{&in[1], &in[2], first,    &in[3],      &in[4],
                        second, 0.1f,   residual, output_dtype};
    };
    add("conv1d pair", [pair](Context& c, const In& in) {
      return ops::conv1d_pair(c, in[0], pair(in, &in[5], std::nullopt));
    });
    add("conv1d pair without residual", [pair](Context& c, const In& in) {
      return ops::conv1d_pair(c, in[0], pair(in, nullptr, std::nullopt));
    });
    // Over time-major rows [B, T, C]: read and written in place where the backend can (CUDA:
    // channels a multiple of 16 in, 8 out), else transposed around the pair.
    add("conv1d pair on rows", [pair](Context& c, const In& in) {
      const Tensor rows = ops::transpose(c, in[0], 1, 2);
      const Tensor residual = ops::transpose(c, in[5], 1, 2);
      return ops::conv1d_pair_rows(c, rows, pair(in, &residual, std::nullopt));
    });
    add("conv1d pair on rows without residual", [pair](Context& c, const In& in) {
      return ops::conv1d_pair_rows(c, ops::transpose(c, in[0], 1, 2),
                                   pair(in, nullptr, std::nullopt));
    });
    // HiFiGAN's last resblock of a stage: the running sum of the others added, the mean taken
    // and the next leaky ReLU applied, in the epilogue where the pair is fused.
    const auto summed = [pair](const In& in, const Tensor* residual, const Tensor* addend) {
      Conv1dPair p = pair(in, residual, std::nullopt);
      p.addend = addend;
      p.output_scale = 1.0f / 3.0f;
      p.output_slope = 0.1f;
      return p;
    };
    add("conv1d pair into a sum, averaged and activated", [summed](Context& c, const In& in) {
      return ops::conv1d_pair(c, in[0], summed(in, &in[5], &in[6]));
    });
    add("conv1d pair on rows into a sum, averaged and activated",
        [summed](Context& c, const In& in) {
          const Tensor rows = ops::transpose(c, in[0], 1, 2);
          const Tensor residual = ops::transpose(c, in[5], 1, 2);
          const Tensor addend = ops::transpose(c, in[6], 1, 2);
          return ops::conv1d_pair_rows(c, rows, summed(in, &residual, &addend));
        });
    // The weights arranged once, as a model does when it loads (CUDA: the mma.sync kernel's
    // order; the reference arranges none and runs the pair as it is).
    const auto arranged = [pair](Context& c, const In& in, const Tensor& x, const Tensor* residual,
                                 bool rows) {
      const Tensor first = ops::arrange_conv1d_weight(c, in[1]);
      const Tensor second = ops::arrange_conv1d_weight(c, in[3]);
      Conv1dPair p = pair(in, residual, std::nullopt);
      p.first_arranged = first.defined() ? &first : nullptr;
      p.second_arranged = second.defined() ? &second : nullptr;
      return rows ? ops::conv1d_pair_rows(c, x, p) : ops::conv1d_pair(c, x, p);
    };
    add("conv1d pair with its weights arranged once",
        [arranged](Context& c, const In& in) { return arranged(c, in, in[0], &in[5], false); });
    add("conv1d pair on rows with its weights arranged once", [arranged](Context& c, const In& in) {
      const Tensor residual = ops::transpose(c, in[5], 1, 2);
      return arranged(c, in, ops::transpose(c, in[0], 1, 2), &residual, true);
    });
    add("conv1d pair on rows into a sum with its weights arranged once",
        [summed](Context& c, const In& in) {
          const Tensor first = ops::arrange_conv1d_weight(c, in[1]);
          const Tensor second = ops::arrange_conv1d_weight(c, in[3]);
          const Tensor residual = ops::transpose(c, in[5], 1, 2);
          const Tensor addend = ops::transpose(c, in[6], 1, 2);
          Conv1dPair p = summed(in, &residual, &addend);
          p.first_arranged = first.defined() ? &first : nullptr;
          p.second_arranged = second.defined() ? &second : nullptr;
          return ops::conv1d_pair_rows(c, ops::transpose(c, in[0], 1, 2), p);
        });
    // Mixed precision: F32 in, F32 residual and out around the weights' dtype.
    add("conv1d pair F32 in and out", [pair](Context& c, const In& in) {
      const Tensor x32 = ops::to_device(c, in[0], DType::F32);
      const Tensor r32 = ops::to_device(c, in[5], DType::F32);
      const Tensor y = ops::conv1d_pair(c, x32, pair(in, &r32, DType::F32));
      return ops::to_device(c, y, in[0].dtype());
    });
  }
  // Pairs the ops layer refuses: a convolution that changes the length, channels that do not
  // chain.
  const std::vector<CaseInput> inputs = {random({1, 4, 20}, 400), random({4, 4, 3}, 401), none(),
                                         random({4, 5, 3}, 402), none()};
  const auto refused = [&](const std::string& what, Conv1dParams first, size_t second_weight,
                           const std::string& error) {
    OpCase c = make(OpKind::Conv1d, "conv1d pair refuses " + what, inputs,
                    [first, second_weight](Context& ctx, const In& in) {
                      return ops::conv1d_pair(ctx, in[0],
                                              Conv1dPair{.first_weight = &in[1],
                                                         .first_bias = &in[2],
                                                         .first = first,
                                                         .second_weight = &in[second_weight],
                                                         .second_bias = &in[4],
                                                         .second = {1, 1, 1, 1},
                                                         .slope = 0.1f});
                    });
    c.error = error;
    cases.push_back(c);
  };
  refused("a convolution that changes the length", {1, 2, 1, 1}, 1,
          "the first convolution must keep the sequence's length");
  refused("channels that do not chain", {1, 1, 1, 1}, 3,
          "expects 5 input channels, the first convolution makes 4");
  OpCase wrong_addend = make(OpKind::Conv1d, "conv1d pair refuses an addend of another shape",
                             {random({1, 4, 20}, 403), random({4, 4, 3}, 404),
                              random({4, 4, 3}, 405), random({1, 4, 19}, 406)},
                             [](Context& ctx, const In& in) {
                               return ops::conv1d_pair(ctx, in[0],
                                                       Conv1dPair{.first_weight = &in[1],
                                                                  .first = {1, 1, 1, 1},
                                                                  .second_weight = &in[2],
                                                                  .second = {1, 1, 1, 1},
                                                                  .slope = 0.1f,
                                                                  .addend = &in[3]});
                             });
  wrong_addend.error = "addend [1, 4, 19] does not match the output [1, 4, 20]";
  cases.push_back(wrong_addend);
}

void add_conv_transpose1d_cases(std::vector<OpCase>& cases) {
  struct Case {
    ConvCase conv;
    int64_t output_padding;
  };
  const std::vector<Case> list = {
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
      // Several output blocks of the cpu backend (each job recomputes the inputs that reach
      // across its edges).
      {{1, 64, 256, 200, 16, 8, 4, 1, 1, true}, 0},
      {{2, 32, 24, 3001, 4, 2, 1, 1, 2, true}, 1},
      {{1, 8, 512, 90, 16, 8, 5, 2, 1, true}, 3},
      // Columns of 64·16 rows × 17000 input steps exceed one CUDA scratch chunk.
      {{1, 4, 64, 17000, 16, 8, 4, 1, 1, true}, 0},
  };
  uint32_t seed = 300;
  for (const Case& tc : list) {
    const ConvCase& cc = tc.conv;
    const CaseInput x = random({cc.batch, cc.cin, cc.t}, seed++);
    const CaseInput w = random({cc.cin, cc.cout / cc.groups, cc.k}, seed++);
    const CaseInput b = cc.bias ? random({cc.cout}, seed++) : none();
    const ConvTranspose1dParams p{cc.stride, cc.padding, tc.output_padding, cc.dilation, cc.groups};
    cases.push_back(make(OpKind::ConvTranspose1d,
                         "conv_transpose1d " + describe(cc) + " op" + str(tc.output_padding),
                         {x, w, b}, [p](Context& c, const In& in) {
                           return ops::conv_transpose1d(c, in[0], in[1], in[2], p);
                         }));
  }
  // Over time-major rows x [B, T, Cin] -> [B, Tout, Cout]: every shape above (transposed around
  // the op where the backend does not run it on rows), and outputs exactly stride times the input
  // (K − 2·padding = stride) with channels the CUDA backend runs as one convolution of the
  // stride's phases: HiFiGAN V1's upsamplers (strides 8 and 2), an odd length, a single
  // sequence of many blocks, the widest tile, and V1's first upsampler over a short chunk's one
  // or two mel frames of two sequences.
  std::vector<ConvCase> rows_list;
  for (const Case& tc : list) {
    if (tc.output_padding == 0) rows_list.push_back(tc.conv);
  }
  rows_list.insert(rows_list.end(), {{2, 32, 16, 300, 16, 8, 4, 1, 1, true},
                                     {1, 16, 4, 77, 4, 2, 1, 1, 1, false},
                                     {1, 64, 32, 9000, 4, 2, 1, 1, 1, true},
                                     {2, 128, 64, 700, 4, 2, 1, 1, 1, true},
                                     {1, 512, 256, 40, 16, 8, 4, 1, 1, true},
                                     {1, 48, 24, 50, 12, 4, 4, 1, 1, true},
                                     {2, 512, 256, 2, 16, 8, 4, 1, 1, true},
                                     {2, 64, 32, 1, 16, 8, 4, 1, 1, true}});
  for (const ConvCase& cc : rows_list) {
    const CaseInput x = random({cc.batch, cc.t, cc.cin}, seed++);
    const CaseInput w = random({cc.cin, cc.cout / cc.groups, cc.k}, seed++, -0.1f, 0.1f);
    const CaseInput b = cc.bias ? random({cc.cout}, seed++) : none();
    const ConvTranspose1dParams p{cc.stride, cc.padding, 0, cc.dilation, cc.groups};
    OpCase c = make(OpKind::ConvTranspose1d, "conv_transpose1d_rows " + describe(cc), {x, w, b},
                    [p](Context& ctx, const In& in) {
                      return ops::conv_transpose1d_rows(ctx, in[0], in[1], in[2], p);
                    });
    c.large = macs(cc) > 100'000'000;
    cases.push_back(c);
    if (c.large) continue;
    // The weight and bias arranged once, as a model does when it loads (CUDA: the phases in the
    // mma.sync kernel's order; the reference arranges none).
    cases.push_back(
        make(OpKind::ConvTranspose1d, "conv_transpose1d_rows " + describe(cc) + " arranged once",
             {x, w, b}, [p](Context& ctx, const In& in) {
               const Tensor arranged = ops::arrange_conv_transpose1d_weight(ctx, in[1], in[2], p);
               return ops::conv_transpose1d_rows(ctx, in[0], in[1], in[2], p,
                                                 arranged.defined() ? &arranged : nullptr);
             }));
  }
  cases.push_back(make(OpKind::ConvTranspose1d, "conv_transpose1d on a transposed view",
                       {random({2, 37, 12}, 1100), random({12, 4, 4}, 1103), random({4}, 1102)},
                       [](Context& c, const In& in) {
                         return ops::conv_transpose1d(c, in[0].transpose(1, 2), in[1], in[2],
                                                      ConvTranspose1dParams{2, 1});
                       }));
}

void add_norm_cases(std::vector<OpCase>& cases) {
  uint32_t seed = 400;
  for (const Shape& shape : {Shape{3, 7}, Shape{2, 5, 256}, Shape{1, 1}, Shape{300, 384},
                             Shape{2, 3000}, Shape{5, 1000}}) {
    const int64_t c = shape.back();
    const std::vector<CaseInput> inputs = {
        random(shape, seed, -4.0f, 6.0f), random({c}, seed + 1, 0.5f, 1.5f), random({c}, seed + 2)};
    seed += 3;
    for (float eps : {1e-5f, 1e-3f}) {
      cases.push_back(make(OpKind::LayerNorm,
                           "layer_norm " + shape_to_string(shape) + " eps " + std::to_string(eps),
                           inputs, [eps](Context& ctx, const In& in) {
                             return ops::layer_norm(ctx, in[0], in[1], in[2], eps);
                           }));
    }
    for (float eps : {1e-6f, 1e-5f}) {
      cases.push_back(make(
          OpKind::RmsNorm, "rms_norm " + shape_to_string(shape) + " eps " + std::to_string(eps),
          {inputs[0], inputs[1]},
          [eps](Context& ctx, const In& in) { return ops::rms_norm(ctx, in[0], in[1], eps); }));
    }
  }
  // add_layer_norm: FastSpeech2's rows (256), odd sizes, a view, and out = residual through the
  // kernel (the contract allows it).
  for (const Shape& shape : {Shape{2, 5, 256}, Shape{3, 7}, Shape{300, 384}, Shape{4, 1000}}) {
    const int64_t c = shape.back();
    cases.push_back(make(OpKind::AddLayerNorm, "add_layer_norm " + shape_to_string(shape),
                         {random(shape, seed, -4.0f, 6.0f), random(shape, seed + 1, -3.0f, 3.0f),
                          random({c}, seed + 2, 0.5f, 1.5f), random({c}, seed + 3)},
                         [](Context& ctx, const In& in) {
                           return ops::add_layer_norm(ctx, in[0], in[1], in[2], in[3], 1e-5f);
                         }));
    seed += 4;
  }
  cases.push_back(make(OpKind::AddLayerNorm, "add_layer_norm of a transposed view",
                       {random({2, 37, 12}, 1110), random({2, 12, 37}, 1111), random({37}, 1112),
                        random({37}, 1113)},
                       [](Context& c, const In& in) {
                         return ops::add_layer_norm(c, in[0].transpose(1, 2), in[1], in[2], in[3],
                                                    1e-5f);
                       }));
  cases.push_back(make(OpKind::AddLayerNorm, "add_layer_norm into its residual",
                       {random({6, 64}, 1120, -2.0f, 2.0f), random({6, 64}, 1121, -3.0f, 5.0f),
                        random({64}, 1122), random({64}, 1123)},
                       [](Context& c, const In& in) {
                         Tensor residual = ops::to_device(c, in[1], in[1].dtype());
                         c.backend().add_layer_norm(in[0], residual, in[2], in[3], 1e-5f, residual);
                         return residual;
                       }));
  // Large offsets: the mean must not swamp the variance.
  const Tensor ones = floats({64}, std::vector<float>(64, 1.0f));
  const Tensor zeros = floats({64}, std::vector<float>(64, 0.0f));
  const CaseInput shifted = random({4, 64}, 410, 999.0f, 1001.0f);
  cases.push_back(make(
      OpKind::LayerNorm, "layer_norm offset", {shifted, given(ones), given(zeros)},
      [](Context& c, const In& in) { return ops::layer_norm(c, in[0], in[1], in[2], 1e-5f); }));
  // out = x, through the kernel (the contract allows it; ops has no in-place layer_norm).
  cases.push_back(make(OpKind::LayerNorm, "layer_norm in place",
                       {shifted, given(ones), given(zeros)}, [](Context& c, const In& in) {
                         Tensor x = ops::to_device(c, in[0], in[0].dtype());
                         c.backend().layer_norm(x, in[1], in[2], 1e-5f, x);
                         return x;
                       }));
  cases.push_back(make(OpKind::LayerNorm, "layer_norm on a transposed view",
                       {random({2, 37, 12}, 1100), random({37}, 1105)},
                       [](Context& c, const In& in) {
                         return ops::layer_norm(c, in[0].transpose(1, 2), in[1], in[1], 1e-5f);
                       }));
  // rms_norm: GPT-sized rows (768), values far from zero, a row of zeros (eps alone), a view.
  cases.push_back(
      make(OpKind::RmsNorm, "rms_norm [2, 9, 768] (ChatTTS GPT)",
           {random({2, 9, 768}, 420, -3.0f, 3.0f), random({768}, 421, -2.0f, 2.0f)},
           [](Context& c, const In& in) { return ops::rms_norm(c, in[0], in[1], 1e-5f); }));
  cases.push_back(
      make(OpKind::RmsNorm, "rms_norm offset", {random({4, 64}, 422, 999.0f, 1001.0f), given(ones)},
           [](Context& c, const In& in) { return ops::rms_norm(c, in[0], in[1], 1e-6f); }));
  cases.push_back(
      make(OpKind::RmsNorm, "rms_norm of zeros",
           {given(floats({2, 64}, std::vector<float>(128, 0.0f))), given(ones)},
           [](Context& c, const In& in) { return ops::rms_norm(c, in[0], in[1], 1e-6f); }));
  cases.push_back(make(OpKind::RmsNorm, "rms_norm on a transposed view",
                       {random({2, 37, 12}, 1100), random({37}, 1105)},
                       [](Context& c, const In& in) {
                         return ops::rms_norm(c, in[0].transpose(1, 2), in[1], 1e-6f);
                       }));
}

void add_embedding_cases(std::vector<OpCase>& cases) {
  const CaseInput table = random({11, 7}, 500);
  const Tensor ids64 = ints({2, 4}, {0, 3, 10, 10, 1, 5, 2, 9});
  const Tensor ids32 = ids64.to_host_contiguous(DType::I32);
  const CaseRun lookup = [](Context& c, const In& in) { return ops::embedding(c, in[0], in[1]); };
  cases.push_back(make(OpKind::Embedding, "embedding I64", {given(ids64), table}, lookup));
  cases.push_back(make(OpKind::Embedding, "embedding I32", {given(ids32), table}, lookup));
  cases.push_back(make(OpKind::Embedding, "embedding strided ids",
                       {given(ids64.transpose(0, 1)), table}, lookup));
  cases.push_back(
      make(OpKind::Embedding, "embedding device I64 ids", {given_on_device(ids64), table}, lookup));
  cases.push_back(
      make(OpKind::Embedding, "embedding device I32 ids", {given_on_device(ids32), table}, lookup));
  for (int64_t bad : {int64_t{11}, int64_t{-1}}) {
    const Tensor bad_ids = ints({1, 3}, {1, bad, 2});
    for (bool device : {false, true}) {
      OpCase c = make(OpKind::Embedding,
                      "embedding id " + str(bad) + (device ? " on the device" : " on the host"),
                      {device ? given_on_device(bad_ids) : given(bad_ids), table}, lookup);
      c.error = "id " + str(bad) + " at position 1";
      cases.push_back(c);
    }
  }
}

void add_gather_rows_cases(std::vector<OpCase>& cases) {
  // Indices inside the table, −1 (padding) and one past the end: zeros for the last two.
  const Tensor rows = ints({2, 4}, {4, -1, 0, 5, 2, 2, 3, 1});
  const CaseRun gather = [](Context& c, const In& in) { return ops::gather_rows(c, in[0], in[1]); };
  for (bool device : {false, true}) {
    cases.push_back(make(
        OpKind::GatherRows, std::string("gather_rows, rows on the ") + (device ? "device" : "host"),
        {random({5, 6}, 520), device ? given_on_device(rows) : given(rows)}, gather));
  }
  // A length regulator's frame map over x [2, 3, 4] viewed as [6, 4].
  const std::vector<int64_t> map = ops::length_regulation_rows({{2, 0, 1}, {1, 1}}, 3, 5);
  cases.push_back(make(OpKind::GatherRows, "gather_rows by length_regulation_rows",
                       {random({2, 3, 4}, 521), given_on_device(ints({2, 5}, map))},
                       [](Context& c, const In& in) {
                         return ops::gather_rows(c, in[0].reshape({6, 4}), in[1]);
                       }));
  OpCase refused = make(OpKind::GatherRows, "gather_rows refuses I32 rows",
                        {random({5, 6}, 522), given(rows.to_host_contiguous(DType::I32))}, gather);
  refused.error = "rows must be contiguous I64";
  cases.push_back(refused);
}

void add_attention_cases(std::vector<OpCase>& cases) {
  struct Case {
    int64_t batch, tq, tk, heads, dim;
    std::vector<int64_t> key_lengths;
    bool causal;
    std::vector<int64_t> offsets;
    std::string what;
  };
  const std::vector<Case> list = {
      {1, 1, 1, 1, 1, {}, false, {}, ""},
      {2, 5, 7, 3, 4, {}, false, {}, ""},
      {2, 5, 7, 3, 4, {7, 3}, false, {}, ""},
      {2, 6, 6, 2, 8, {}, true, {}, ""},
      {2, 3, 9, 2, 5, {9, 6}, true, {6, 2}, ""},
      {3, 17, 33, 2, 16, {33, 1, 20}, false, {}, ""},
      {1, 64, 80, 2, 128, {71}, false, {}, ""},
      {2, 4, 4, 1, 3, {4, 2}, true, {}, ""},
      {1, 3, 200, 1, 300, {}, false, {}, ""},
      // 1000 rows × 20000 keys: more rows than fit CUDA's scores scratch at once.
      {1, 1000, 20000, 1, 8, {19000}, false, {}, ""},
      // Over a KV cache of 64 rows (ChatTTS's GPT: 12 heads of 64): a decode step, each batch
      // item at its own position (lengths alone, and causal with the query at length − 1), and a
      // prefill of 5 rows into an empty cache. The rows past each length are random: they must
      // weigh nothing.
      {4, 1, 64, 12, 64, {1, 17, 64, 40}, false, {}, " decode over a cache"},
      {4, 1, 64, 12, 64, {1, 17, 64, 40}, true, {0, 16, 63, 39}, " causal decode over a cache"},
      {2, 5, 64, 12, 64, {5, 5}, true, {0, 0}, " prefill into a cache"},
      {3, 2, 48, 2, 16, {7, 2, 30}, true, {5, 0, 28}, " two steps over a cache"},
      // A long cache with 128-element heads: more keys than CUDA's decode kernel has threads.
      {2, 1, 1500, 3, 128, {1500, 700}, true, {1499, 699}, " long decode"},
      // Many queries of 32-, 64- and 128-element heads (CUDA's flash kernel in F16 and BF16):
      // several query blocks and key tiles, lengths that end inside a tile, one key alone.
      {3, 130, 200, 2, 128, {200, 77, 1}, false, {}, " encoder"},
      {2, 70, 150, 3, 64, {150, 90}, true, {80, 20}, " causal prefill after a prefix"},
      {2, 65, 64, 4, 32, {64, 63}, false, {}, ""},
      // More sequences than CUDA passes by value: their lengths go up as an array.
      {130,
       6,
       9,
       1,
       32,
       [] {
         std::vector<int64_t> lengths(130);
         for (size_t b = 0; b < lengths.size(); ++b) lengths[b] = 1 + static_cast<int64_t>(b % 9);
         return lengths;
       }(),
       false,
       {},
       " many sequences"},
  };
  uint32_t seed = 600;
  for (const Case& tc : list) {
    const std::vector<CaseInput> inputs = {
        random({tc.batch, tc.tq, tc.heads, tc.dim}, seed, -2.0f, 2.0f),
        random({tc.batch, tc.tk, tc.heads, tc.dim}, seed + 1, -2.0f, 2.0f),
        random({tc.batch, tc.tk, tc.heads, tc.dim}, seed + 2)};
    seed += 3;
    AttentionParams p;
    p.scale = 1.0f / std::sqrt(static_cast<float>(tc.dim));
    p.key_lengths = tc.key_lengths;
    p.causal = tc.causal;
    p.query_offsets = tc.offsets;
    cases.push_back(
        make(OpKind::Attention,
             "attention B" + str(tc.batch) + " Tq" + str(tc.tq) + " Tk" + str(tc.tk) + " H" +
                 str(tc.heads) + " D" + str(tc.dim) + (tc.causal ? " causal" : "") + tc.what,
             inputs,
             [p](Context& c, const In& in) { return ops::attention(c, in[0], in[1], in[2], p); }));
  }
  // Key lengths in a tensor on the host or the device (a recorded step's): each path above that
  // lengths can take without causality — one query per sequence, many queries of 32-, 64- and
  // 128-element heads, and other head sizes.
  struct LengthTensorCase {
    int64_t batch, tq, tk, heads, dim;
    std::vector<int64_t> key_lengths;
  };
  const std::vector<LengthTensorCase> tensor_cases = {{4, 1, 64, 12, 64, {1, 17, 64, 40}},
                                                      {3, 130, 200, 2, 128, {200, 77, 1}},
                                                      {2, 65, 64, 4, 32, {64, 63}},
                                                      {2, 5, 7, 3, 4, {7, 3}}};
  for (const LengthTensorCase& tc : tensor_cases) {
    for (bool device : {false, true}) {
      const Tensor lengths = ints({tc.batch}, tc.key_lengths);
      const float scale = 1.0f / std::sqrt(static_cast<float>(tc.dim));
      cases.push_back(make(OpKind::Attention,
                           "attention B" + str(tc.batch) + " Tq" + str(tc.tq) + " Tk" + str(tc.tk) +
                               " D" + str(tc.dim) + ", key lengths in a tensor on the " +
                               (device ? "device" : "host"),
                           {random({tc.batch, tc.tq, tc.heads, tc.dim}, seed, -2.0f, 2.0f),
                            random({tc.batch, tc.tk, tc.heads, tc.dim}, seed + 1, -2.0f, 2.0f),
                            random({tc.batch, tc.tk, tc.heads, tc.dim}, seed + 2),
                            device ? given_on_device(lengths) : given(lengths)},
                           [scale](Context& c, const In& in) {
                             AttentionParams p;
                             p.scale = scale;
                             p.key_length_tensor = in[3];
                             return ops::attention(c, in[0], in[1], in[2], p);
                           }));
    }
    seed += 3;
  }
  OpCase causal_tensor = make(OpKind::Attention, "attention refuses key lengths in a causal tensor",
                              {random({1, 2, 1, 8}, 1120), random({1, 2, 1, 8}, 1121),
                               random({1, 2, 1, 8}, 1122), given(ints({1}, {2}))},
                              [](Context& c, const In& in) {
                                AttentionParams p;
                                p.causal = true;
                                p.key_length_tensor = in[3];
                                return ops::attention(c, in[0], in[1], in[2], p);
                              });
  causal_tensor.error = "key_length_tensor goes without key_lengths, causal";
  cases.push_back(causal_tensor);
  // Windows of keys [key_starts, key_lengths), as Sambert's PNCA decoder attends: its own steps
  // [s − band, s] and the memory groups [s, s + band] (one query, CUDA's decode kernel), then
  // many queries (CUDA's flash kernel in the half dtypes, its gemm path in F32), with and without
  // causal masking inside a window.
  struct Window {
    int64_t batch, tq, tk;
    std::vector<int64_t> key_lengths, key_starts;
    bool causal;
    std::vector<int64_t> offsets;
    std::string what;
  };
  const std::vector<Window> windows = {
      {3, 1, 40, {10, 40, 1}, {7, 35, 0}, false, {}, " own steps"},
      {2, 40, 300, {300, 150}, {100, 149}, false, {}, " many queries"},
      {2, 1, 30, {8, 30}, {3, 27}, false, {}, " memory groups"},
      {2, 20, 300, {300, 150}, {100, 149}, true, {150, 149}, " causal, many queries"},
      {2, 3, 12, {12, 12}, {0, 11}, false, {}, " one key"},
  };
  // Causal inside a window whose first queries come before it: those see no key (NaN).
  const std::vector<Window> early = {
      {1, 3, 30, {30}, {10}, true, {8}, " one query before the window"},
      {2, 20, 300, {300, 200}, {10, 150}, true, {0, 140}, " many queries before the window"},
  };
  const auto add_window = [&](const Window& w, bool allow_nan) {
    const std::vector<CaseInput> inputs = {random({w.batch, w.tq, 8, 32}, seed, -2.0f, 2.0f),
                                           random({w.batch, w.tk, 8, 32}, seed + 1, -2.0f, 2.0f),
                                           random({w.batch, w.tk, 8, 32}, seed + 2)};
    seed += 3;
    AttentionParams p;
    p.scale = 0.18f;
    p.key_lengths = w.key_lengths;
    p.key_starts = w.key_starts;
    p.causal = w.causal;
    p.query_offsets = w.offsets;
    OpCase c = make(
        OpKind::Attention,
        "attention over a window B" + str(w.batch) + " Tq" + str(w.tq) + " Tk" + str(w.tk) + w.what,
        inputs,
        [p](Context& ctx, const In& in) { return ops::attention(ctx, in[0], in[1], in[2], p); });
    c.allow_nan = allow_nan;
    cases.push_back(c);
  };
  for (const Window& w : windows) add_window(w, false);
  for (const Window& w : early) add_window(w, true);
  // A query that sees no key is NaN: a batch with no keys, causal with a negative offset (query
  // 0 of batch 1 sits before every key), and a window that starts at its end.
  const std::vector<CaseInput> small = {random({2, 3, 2, 4}, 700), random({2, 5, 2, 4}, 701),
                                        random({2, 5, 2, 4}, 702)};
  AttentionParams masked;
  masked.key_lengths = {0, 5};
  AttentionParams before;
  before.causal = true;
  before.query_offsets = {0, -1};
  AttentionParams empty_window;
  empty_window.key_lengths = {3, 5};
  empty_window.key_starts = {3, 1};
  for (const auto& [what, p] :
       {std::pair{"fully masked batch", masked}, std::pair{"causal before the keys", before},
        std::pair{"empty window", empty_window}}) {
    OpCase c = make(
        OpKind::Attention, std::string("attention ") + what, small,
        [p](Context& ctx, const In& in) { return ops::attention(ctx, in[0], in[1], in[2], p); });
    c.allow_nan = true;
    cases.push_back(c);
  }
  AttentionParams past_the_keys;
  past_the_keys.key_starts = {0, 6};
  OpCase refused = make(OpKind::Attention, "attention refuses a key start past the keys", small,
                        [past_the_keys](Context& c, const In& in) {
                          return ops::attention(c, in[0], in[1], in[2], past_the_keys);
                        });
  refused.error = "key start 6 outside [0, 5]";
  cases.push_back(refused);
  // q, k and v one element into their storage: views no copy realigns.
  const auto unaligned = [](const Tensor& flat, const Shape& shape) {
    return flat.narrow(0, 1, flat.size(0) - 1).reshape(shape);
  };
  AttentionParams unaligned_params;
  unaligned_params.scale = 0.125f;
  unaligned_params.key_lengths = {30, 17};
  cases.push_back(make(
      OpKind::Attention, "attention on views one element into their storage",
      {random({2 * 20 * 2 * 64 + 1}, 1107, -2.0f, 2.0f),
       random({2 * 30 * 2 * 64 + 1}, 1108, -2.0f, 2.0f), random({2 * 30 * 2 * 64 + 1}, 1109)},
      [unaligned, unaligned_params](Context& c, const In& in) {
        return ops::attention(c, unaligned(in[0], {2, 20, 2, 64}), unaligned(in[1], {2, 30, 2, 64}),
                              unaligned(in[2], {2, 30, 2, 64}), unaligned_params);
      }));
  cases.push_back(make(OpKind::Attention, "attention on permuted q", {random({2, 4, 3, 5}, 1106)},
                       [](Context& c, const In& in) {
                         const Tensor q = in[0].permute({0, 2, 1, 3});
                         return ops::attention(c, q, q, q, AttentionParams{});
                       }));
}

void add_rope_cases(std::vector<OpCase>& cases) {
  struct Case {
    Shape x;
    std::vector<int64_t> positions;
    float theta;
  };
  const std::vector<Case> list = {
      {{1, 1, 1, 2}, {1}, 10000.0f},
      {{2, 5, 3, 8}, {0, 3}, 10000.0f},
      {{2, 7, 4, 64}, {0, 100}, 10000.0f},
      // A decode step of ChatTTS's GPT (12 heads of 64), each item at its own position.
      {{4, 1, 12, 64}, {0, 17, 300, 4095}, 10000.0f},
      // Left padding: a negative start puts the padded rows before 0.
      {{2, 3, 2, 16}, {-2, 5}, 10000.0f},
      {{1, 3, 2, 128}, {100000}, 500000.0f},
      {{3, 40, 12, 64}, {}, 10000.0f},
  };
  uint32_t seed = 1500;
  for (const Case& tc : list) {
    std::string positions;
    for (int64_t p : tc.positions) positions += (positions.empty() ? "" : ", ") + str(p);
    const std::vector<int64_t> start = tc.positions;
    const float theta = tc.theta;
    cases.push_back(make(
        OpKind::Rope,
        "rope " + shape_to_string(tc.x) + " from [" + positions + "] theta " +
            std::to_string(theta),
        {random(tc.x, seed++, -2.0f, 2.0f)},
        [start, theta](Context& c, const In& in) { return ops::rope(c, in[0], start, theta); }));
  }
  cases.push_back(make(OpKind::Rope, "rope on a permuted view", {random({2, 4, 5, 8}, 1510)},
                       [](Context& c, const In& in) {
                         return ops::rope(c, in[0].permute({0, 2, 1, 3}), {3, 9}, 10000.0f);
                       }));
  // Positions in device memory, as a recorded decode step reads them (more than fit by value).
  for (const int64_t batch : {int64_t{3}, int64_t{130}}) {
    std::vector<int64_t> start(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) start[static_cast<size_t>(b)] = (b * 37) % 1000 - 2;
    cases.push_back(
        make(OpKind::Rope, "rope from " + str(batch) + " positions in a tensor on the device",
             {random({batch, 1, 2, 16}, 1511 + static_cast<uint32_t>(batch))},
             [start, batch](Context& c, const In& in) {
               return ops::rope(c, in[0],
                                ops::to_device(c, Tensor::from_vector({batch}, start), DType::I64),
                                10000.0f);
             }));
  }
}

void add_write_rows_cases(std::vector<OpCase>& cases) {
  struct Case {
    Shape cache;
    int64_t steps;
    std::vector<int64_t> offsets;
  };
  const std::vector<Case> list = {
      {{3, 10, 2, 4}, 1, {0, 4, 9}},  // a decode step: one row per item
      {{2, 8, 5}, 3, {5, 0}},
      {{2, 4, 3}, 4, {0, 0}},  // the whole cache
      {{4, 64, 12, 64}, 1, {0, 17, 63, 40}},
  };
  uint32_t seed = 1600;
  for (const Case& tc : list) {
    Shape rows = tc.cache;
    rows[1] = tc.steps;
    const std::vector<int64_t> offsets = tc.offsets;
    cases.push_back(
        make(OpKind::WriteRows,
             "write_rows " + shape_to_string(rows) + " into " + shape_to_string(tc.cache),
             {random(tc.cache, seed), random(rows, seed + 1)}, [offsets](Context& c, const In& in) {
               Tensor cache = ops::to_device(c, in[0], in[0].dtype());
               return ops::write_rows(c, cache, in[1], offsets);
             }));
    seed += 2;
  }
  cases.push_back(make(OpKind::WriteRows, "write_rows of a transposed view",
                       {random({2, 6, 3}, 1610), random({2, 3, 2}, 1611)},
                       [](Context& c, const In& in) {
                         Tensor cache = ops::to_device(c, in[0], in[0].dtype());
                         return ops::write_rows(c, cache, in[1].transpose(1, 2), {1, 3});
                       }));
  // A decode step end to end: rope on the new key, its row and value written at each item's
  // length, attention of the new query over the cache.
  OpCase step =
      make(OpKind::WriteRows, "decode step: rope, write_rows, attention over the cache",
           {random({3, 1, 4, 16}, 1620), random({3, 1, 4, 16}, 1621), random({3, 1, 4, 16}, 1622),
            random({3, 20, 4, 16}, 1623), random({3, 20, 4, 16}, 1624)},
           [](Context& c, const In& in) {
             const std::vector<int64_t> lengths = {3, 0, 19};  // rows held before the step
             Tensor k_cache = ops::to_device(c, in[3], in[3].dtype());
             Tensor v_cache = ops::to_device(c, in[4], in[4].dtype());
             ops::write_rows(c, k_cache, ops::rope(c, in[1], lengths, 10000.0f), lengths);
             ops::write_rows(c, v_cache, in[2], lengths);
             AttentionParams p;
             p.scale = 0.25f;
             p.key_lengths = {4, 1, 20};
             return ops::attention(c, ops::rope(c, in[0], lengths, 10000.0f), k_cache, v_cache, p);
           });
  step.needs = {OpKind::WriteRows, OpKind::Rope, OpKind::Attention};
  cases.push_back(step);
}

// The fused steps of a Llama decoder layer (add_rms_norm, swiglu, qkv_to_pages); each output
// of a fused op is a case of its own.
void add_decoder_layer_cases(std::vector<OpCase>& cases) {
  const auto residual = [](bool normed, Shape shape, uint32_t seed, std::string what) {
    const int64_t c = shape.back();
    return make(OpKind::AddRmsNorm,
                std::string("add_rms_norm ") + (normed ? "normed " : "sum ") + what,
                {random(shape, seed, -3.0f, 3.0f), random(shape, seed + 1, -3.0f, 3.0f),
                 random({c}, seed + 2, -2.0f, 2.0f)},
                [normed](Context& ctx, const In& in) {
                  const ops::ResidualNorm r =
                      ops::add_rms_norm(ctx, in[0], in[1], in[2], 1e-5f, in[0].dtype());
                  return normed ? r.normed : r.sum;
                });
  };
  for (bool normed : {false, true}) {
    cases.push_back(residual(normed, {2, 9, 768}, 1900, "[2, 9, 768] (ChatTTS GPT)"));
    cases.push_back(residual(normed, {3, 37}, 1910, "[3, 37]"));
  }
  cases.push_back(make(OpKind::AddRmsNorm, "add_rms_norm of a view, normed",
                       {random({2, 37, 12}, 1920), random({2, 12, 37}, 1921), random({37}, 1922)},
                       [](Context& ctx, const In& in) {
                         return ops::add_rms_norm(ctx, in[0].transpose(1, 2), in[1], in[2], 1e-6f,
                                                  in[0].dtype())
                             .normed;
                       }));
  for (const Shape& shape : {Shape{2, 3, 2 * 48}, Shape{1, 1, 2 * 3072}, Shape{5, 2}}) {
    cases.push_back(make(OpKind::Swiglu, "swiglu " + shape_to_string(shape),
                         {random(shape, 1930, -6.0f, 6.0f)},
                         [](Context& ctx, const In& in) { return ops::swiglu(ctx, in[0]); }));
  }
  struct Case {
    int64_t batch, steps, pages, page_size, heads, dim;
    std::vector<int64_t> table;  // [batch, P] (-1: none)
    std::vector<int64_t> positions;
    std::string what;
  };
  const std::vector<Case> list = {
      {3, 1, 8, 4, 2, 16, {5, 2, 7, 0, -1, -1, 3, 6, 1}, {9, 2, 11}, "decode"},
      {2, 5, 6, 4, 2, 8, {4, 1, 0, 3}, {0, 0}, "prefill"},
      // Sequence 1's steps from position 4 on have no page: q still rotated, nothing written.
      {2, 3, 6, 4, 3, 8, {4, 1, 0, -1}, {5, 2}, "into a missing page"},
      {2, 1, 10, 16, 12, 64, {9, 0, 7, 1, 3, 4}, {40, 17}, "over ChatTTS's heads"},
  };
  uint32_t seed = 1940;
  for (const Case& tc : list) {
    const auto width = static_cast<int64_t>(tc.table.size()) / tc.batch;
    const Tensor table = ints({tc.batch, width}, tc.table);
    const Tensor positions = ints({tc.batch}, tc.positions);
    const Shape pages = {tc.pages, tc.page_size, tc.heads, tc.dim};
    for (bool device : {false, true}) {
      const auto meta = [&](const Tensor& t) { return device ? given_on_device(t) : given(t); };
      for (int output = 0; output < 3; ++output) {
        const char* name[] = {"q", "k_pages", "v_pages"};
        cases.push_back(make(
            OpKind::QkvToPages,
            std::string("qkv_to_pages ") + tc.what + " B" + str(tc.batch) + " T" + str(tc.steps) +
                ", " + name[output] + (device ? ", table on the device" : ""),
            {random({tc.batch, tc.steps, 3, tc.heads, tc.dim}, seed, -2.0f, 2.0f),
             random(pages, seed + 1), random(pages, seed + 2), meta(table), meta(positions)},
            [output](Context& c, const In& in) {
              Tensor k_pages = ops::to_device(c, in[1], in[1].dtype());
              Tensor v_pages = ops::to_device(c, in[2], in[2].dtype());
              const Tensor q = ops::qkv_to_pages(c, in[0], k_pages, v_pages, in[3], in[4], 1e4f);
              return output == 0 ? q : (output == 1 ? k_pages : v_pages);
            }));
      }
    }
    seed += 3;
  }
  cases.push_back(
      make(OpKind::QkvToPages, "qkv_to_pages refuses an odd head size",
           {random({1, 1, 3, 2, 5}, 1960), random({2, 4, 2, 5}, 1961), random({2, 4, 2, 5}, 1962),
            given(ints({1, 1}, {0})), given(ints({1}, {0}))},
           [](Context& c, const In& in) {
             Tensor k_pages = ops::to_device(c, in[1], in[1].dtype());
             Tensor v_pages = ops::to_device(c, in[2], in[2].dtype());
             return ops::qkv_to_pages(c, in[0], k_pages, v_pages, in[3], in[4], 1e4f);
           }));
  cases.back().error = "even head size";
}

// Pages [pages, page_size, heads, dim] and a page table [B, P] per case: paged_attention of q
// over them, and write_pages of rows into them.
void add_paged_cases(std::vector<OpCase>& cases) {
  struct Case {
    int64_t batch, tq, pages, page_size, heads, dim;
    std::vector<std::vector<int64_t>> table;  // per sequence, P entries (-1: none)
    std::vector<int64_t> positions;
    std::string what;
  };
  const std::vector<Case> list = {
      // Sequences of 10, 3 and 12 positions in pages out of order; the first page of sequence
      // 1 only.
      {3, 1, 8, 4, 2, 16, {{5, 2, 7}, {0, -1, -1}, {3, 6, 1}}, {9, 2, 11}, "decode"},
      {2, 5, 6, 4, 2, 8, {{4, 1}, {0, 3}}, {0, 0}, "prefill"},
      {2, 2, 6, 4, 3, 8, {{4, 1}, {0, 3}}, {5, 0}, "two steps"},
      // A missing page inside the sequence: its keys weigh nothing.
      {1, 1, 3, 4, 2, 8, {{2, -1, 0}}, {10}, "a missing page"},
      // ChatTTS's heads (12 of 64) in pages of 16.
      {4,
       1,
       40,
       16,
       12,
       64,
       {{39, 0, 7, 8, 12, 30, 2, 5},
        {1, 3, 4, 6, 9, 10, 11, 13},
        {14, 15, 16, 17, 18, 19, 20, 21},
        {22, 23, 24, 25, 26, 27, 28, 29}},
       {1, 17, 120, 64},
       "over ChatTTS's heads"},
      // A ChatTTS prefill in pieces: 9 positions of each sequence after 100 and 30 cached ones.
      {2,
       9,
       40,
       16,
       12,
       64,
       {{39, 0, 7, 8, 12, 30, 2, 5}, {1, 3, 4, 6, 9, 10, 11, 13}},
       {100, 30},
       "a prefill piece after cached positions"},
      // Hundreds of keys (many passes of the vectorised kernel) in a table 64 pages wide.
      {2,
       1,
       70,
       16,
       4,
       64,
       {[] {
          std::vector<int64_t> row;
          for (int64_t p = 0; p < 64; ++p) row.push_back(p < 45 ? 69 - p : -1);
          return row;
        }(),
        [] {
          std::vector<int64_t> row;
          for (int64_t p = 0; p < 64; ++p) row.push_back(p < 20 ? p : -1);
          return row;
        }()},
       {700, 301},
       "over hundreds of keys"},
      // 24 sequences of 12 heads: enough blocks that a decode step's keys are not split.
      {24, 1, 30, 16, 12, 64,
       [] {
         std::vector<std::vector<int64_t>> rows;
         for (int64_t b = 0; b < 24; ++b) rows.push_back({b % 30, (b + 7) % 30});
         return rows;
       }(),
       [] {
         std::vector<int64_t> positions;
         for (int64_t b = 0; b < 24; ++b) positions.push_back(b * 5 % 32);
         return positions;
       }(),
       "of 24 sequences"},
  };
  uint32_t seed = 1700;
  for (const Case& tc : list) {
    const auto width = static_cast<int64_t>(tc.table[0].size());
    std::vector<int64_t> entries;
    for (const auto& row : tc.table) entries.insert(entries.end(), row.begin(), row.end());
    const Tensor table = ints({tc.batch, width}, entries);
    const Tensor positions = ints({tc.batch}, tc.positions);
    const Shape pages = {tc.pages, tc.page_size, tc.heads, tc.dim};
    const float scale = 1.0f / std::sqrt(static_cast<float>(tc.dim));
    for (bool device : {false, true}) {
      const std::string where = device ? ", table on the device" : "";
      const auto meta = [&](const Tensor& t) { return device ? given_on_device(t) : given(t); };
      cases.push_back(
          make(OpKind::PagedAttention,
               "paged_attention " + tc.what + " B" + str(tc.batch) + " T" + str(tc.tq) + where,
               {random({tc.batch, tc.tq, tc.heads, tc.dim}, seed, -2.0f, 2.0f),
                random(pages, seed + 1, -2.0f, 2.0f), random(pages, seed + 2), meta(table),
                meta(positions)},
               [scale](Context& c, const In& in) {
                 return ops::paged_attention(c, in[0], in[1], in[2], in[3], in[4], scale);
               }));
      cases.push_back(
          make(OpKind::WritePages,
               "write_pages " + tc.what + " B" + str(tc.batch) + " T" + str(tc.tq) + where,
               {random(pages, seed + 3), random({tc.batch, tc.tq, tc.heads, tc.dim}, seed + 4),
                meta(table), meta(positions)},
               [](Context& c, const In& in) {
                 Tensor written = ops::to_device(c, in[0], in[0].dtype());
                 return ops::write_pages(c, written, in[1], in[2], in[3]);
               }));
    }
    seed += 5;
  }
  // A query whose keys are all in missing pages is NaN (sequence 0); a row whose page is missing
  // or past the table is dropped (sequence 1's rows at positions 4 and beyond).
  OpCase blind =
      make(OpKind::PagedAttention, "paged_attention of a query with no page",
           {random({2, 1, 2, 8}, 1760), random({2, 4, 2, 8}, 1761), random({2, 4, 2, 8}, 1762),
            given(ints({2, 2}, {-1, 0, 1, -1})), given(ints({2}, {2, 3}))},
           [](Context& c, const In& in) {
             return ops::paged_attention(c, in[0], in[1], in[2], in[3], in[4], 0.5f);
           });
  blind.allow_nan = true;
  cases.push_back(blind);
  cases.push_back(make(OpKind::WritePages, "write_pages past the table and into no page",
                       {random({3, 4, 6}, 1770), random({2, 6, 6}, 1771),
                        given(ints({2, 2}, {2, -1, 0, 1})), given(ints({2}, {1, 5}))},
                       [](Context& c, const In& in) {
                         Tensor written = ops::to_device(c, in[0], in[0].dtype());
                         return ops::write_pages(c, written, in[1], in[2], in[3]);
                       }));
  // A decode step end to end: the new key and value written into the pages at each sequence's
  // position, then attention of the new query over them.
  OpCase step =
      make(OpKind::WritePages, "paged decode step: write_pages, paged_attention",
           {random({2, 1, 2, 8}, 1780), random({2, 1, 2, 8}, 1781), random({2, 1, 2, 8}, 1782),
            random({5, 4, 2, 8}, 1783), random({5, 4, 2, 8}, 1784)},
           [](Context& c, const In& in) {
             const Tensor table = ints({2, 2}, {3, 1, 0, -1});
             const Tensor positions = ints({2}, {6, 2});
             Tensor k_pages = ops::to_device(c, in[3], in[3].dtype());
             Tensor v_pages = ops::to_device(c, in[4], in[4].dtype());
             ops::write_pages(c, k_pages, in[1], table, positions);
             ops::write_pages(c, v_pages, in[2], table, positions);
             return ops::paged_attention(c, in[0], k_pages, v_pages, table, positions, 0.35f);
           });
  step.needs = {OpKind::WritePages, OpKind::PagedAttention};
  cases.push_back(step);
  // Windows of keys (Sambert's banded attention): sequence b sees keys [key_starts[b], its
  // position]; a window that starts past the position sees none (NaN, sequence 2).
  struct Window {
    int64_t tq;
    std::vector<int64_t> positions, starts;
    std::string what;
  };
  const std::vector<Window> windows = {{1, {9, 2, 11}, {4, 0, 12}, "decode"},
                                       {2, {5, 0, 7}, {3, 0, 8}, "two steps"},
                                       {1, {11, 3, 6}, {11, 3, 6}, "of one key"}};
  for (const Window& w : windows) {
    const Tensor table = ints({3, 3}, {5, 2, 7, 0, -1, -1, 3, 6, 1});
    const Shape pages = {8, 4, 2, 16};
    for (bool device : {false, true}) {
      const auto meta = [&](const Tensor& t) { return device ? given_on_device(t) : given(t); };
      OpCase c =
          make(OpKind::PagedAttention,
               "paged_attention over a window, " + w.what + (device ? ", table on the device" : ""),
               {random({3, w.tq, 2, 16}, 1800, -2.0f, 2.0f), random(pages, 1801, -2.0f, 2.0f),
                random(pages, 1802), meta(table), meta(ints({3}, w.positions)),
                meta(ints({3}, w.starts))},
               [](Context& ctx, const In& in) {
                 return ops::paged_attention(ctx, in[0], in[1], in[2], in[3], in[4], 0.25f, in[5]);
               });
      c.allow_nan = true;
      cases.push_back(c);
    }
  }
  // Tables the ops layer refuses before any kernel runs.
  const std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> bad = {
      {"page_table[0, 1] = 4 is neither a page in [0, 4)", {ints({1, 2}, {0, 4}), ints({1}, {0})}},
      {"positions[0] = -1 is negative", {ints({1, 2}, {0, 1}), ints({1}, {-1})}},
      {"page_table must be [B, P] with B = 1", {ints({2, 2}, {0, 1, 2, 3}), ints({1}, {0})}},
  };
  for (const auto& [message, metadata] : bad) {
    OpCase c = make(OpKind::PagedAttention, "paged_attention refuses: " + message,
                    {random({1, 1, 2, 8}, 1790), random({4, 4, 2, 8}, 1791),
                     random({4, 4, 2, 8}, 1792), given(metadata.first), given(metadata.second)},
                    [](Context& ctx, const In& in) {
                      return ops::paged_attention(ctx, in[0], in[1], in[2], in[3], in[4], 1.0f);
                    });
    c.error = message;
    cases.push_back(c);
  }
  OpCase negative_start =
      make(OpKind::PagedAttention, "paged_attention refuses: key_starts[0] = -2 is negative",
           {random({1, 1, 2, 8}, 1793), random({4, 4, 2, 8}, 1794), random({4, 4, 2, 8}, 1795),
            given(ints({1, 2}, {0, 1})), given(ints({1}, {5})), given(ints({1}, {-2}))},
           [](Context& ctx, const In& in) {
             return ops::paged_attention(ctx, in[0], in[1], in[2], in[3], in[4], 1.0f, in[5]);
           });
  negative_start.error = "key_starts[0] = -2 is negative";
  cases.push_back(negative_start);
}

void add_length_cases(std::vector<OpCase>& cases) {
  for (const std::vector<int64_t>& lengths :
       {std::vector<int64_t>{6, 2, 0}, std::vector<int64_t>{6, 9, 1}}) {
    std::string list;
    for (int64_t l : lengths) list += (list.empty() ? "" : ", ") + str(l);
    cases.push_back(make(OpKind::ZeroBeyondLengths, "zero_beyond_lengths [" + list + "]",
                         {random({3, 6, 4}, 800)}, [lengths](Context& c, const In& in) {
                           Tensor y = ops::to_device(c, in[0], in[0].dtype());
                           return ops::zero_beyond_lengths(c, y, lengths);
                         }));
  }
  for (bool device : {false, true}) {
    const Tensor lengths = ints({3}, {6, 2, 0});
    cases.push_back(
        make(OpKind::ZeroBeyondLengths,
             std::string("zero_beyond_lengths [6, 2, 0] in a tensor on the ") +
                 (device ? "device" : "host"),
             {random({3, 6, 4}, 801), device ? given_on_device(lengths) : given(lengths)},
             [](Context& c, const In& in) {
               Tensor y = ops::to_device(c, in[0], in[0].dtype());
               return ops::zero_beyond_lengths(c, y, in[1]);
             }));
  }
  const std::vector<std::vector<int64_t>> durations{{2, 0, 1, 3, 1}, {0, 4, 1}};
  for (int64_t min_frames : {0, 7, 12}) {
    cases.push_back(make(OpKind::LengthRegulate, "length_regulate min " + str(min_frames),
                         {random({2, 5, 3}, 900)},
                         [durations, min_frames](Context& c, const In& in) {
                           return ops::length_regulate(c, in[0], durations, min_frames);
                         }));
  }
  cases.push_back(
      make(OpKind::LengthRegulate, "length_regulate strided x", {random({2, 5, 3}, 900)},
           [](Context& c, const In& in) {
             return ops::length_regulate(c, in[0].narrow(1, 1, 3), {{1, 2, 3}, {3, 0, 0}});
           }));
}

void add_bucketize_cases(std::vector<OpCase>& cases) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor boundaries = floats({5}, {-1.0f, 0.0f, 0.5f, 0.5f, 2.0f});
  std::vector<float> values = random_tensor({3, 41}, 1000, -3.0f, 3.0f).to_float_vector();
  const std::vector<float> picked = {-1.0f, 0.5f, 2.0f, std::numeric_limits<float>::quiet_NaN(),
                                     inf,   -inf, 0.0f, -0.0f};
  std::copy(picked.begin(), picked.end(), values.begin());
  OpCase c = make(OpKind::Bucketize, "bucketize ties, infinities, NaN and random values",
                  {given(floats({3, 41}, values)), given(boundaries)},
                  [](Context& ctx, const In& in) { return ops::bucketize(ctx, in[0], in[1]); });
  c.dtypes = {DType::F32};
  c.exact = true;
  cases.push_back(c);
}

void add_istft_cases(std::vector<OpCase>& cases) {
  struct Case {
    int64_t batch, n_fft, hop, frames;
    bool hann;
  };
  const std::vector<Case> list = {
      {1, 16, 4, 5, true},
      // Vocos (ChatTTS): n_fft 1024, hop 256.
      {2, 1024, 256, 12, true},
      {1, 15, 5, 6, true},  // odd n_fft: no Nyquist bin, one more sample
      {2, 8, 8, 3, false},  // no overlap with a rectangular window: envelope 1
      {1, 12, 1, 9, true},
      {3, 1, 1, 4, false},
      // 1500 frames: CUDA transforms two batch items per chunk, then the last one alone.
      {3, 256, 64, 1500, true},
  };
  uint32_t seed = 1700;
  for (const Case& tc : list) {
    const int64_t bins = tc.n_fft / 2 + 1;
    const Tensor window =
        tc.hann ? hann_window(tc.n_fft)
                : floats({tc.n_fft}, std::vector<float>(static_cast<size_t>(tc.n_fft), 1.0f));
    const int64_t hop = tc.hop;
    OpCase c = make(
        OpKind::Istft,
        "istft B" + str(tc.batch) + " n_fft " + str(tc.n_fft) + " hop " + str(hop) + " frames " +
            str(tc.frames) + (tc.hann ? " hann" : " rectangular"),
        {random({tc.batch, bins, tc.frames}, seed), random({tc.batch, bins, tc.frames}, seed + 1)},
        [window, hop](Context& ctx, const In& in) {
          return ops::istft(ctx, in[0], in[1], window, hop);
        });
    seed += 2;
    c.dtypes = {DType::F32};
    cases.push_back(c);
  }
  // A periodic Hann window with hop n_fft leaves a zero envelope between frames: torch.istft
  // refuses it ("window overlap add min"), so does voxd.
  OpCase gap =
      make(OpKind::Istft, "istft hann with hop n_fft",
           {random({1, 9, 4}, 1720), random({1, 9, 4}, 1721)}, [](Context& ctx, const In& in) {
             return ops::istft(ctx, in[0], in[1], hann_window(16), 16);
           });
  gap.dtypes = {DType::F32};
  gap.error = "below torch.istft's 1e-11";
  cases.push_back(gap);
}

// sample_tokens: rows of ChatTTS's shapes and settings (four code heads of 626, its text head of
// 21178), every warper alone and together, ties, the penalty's history, rows that draw nothing,
// rows long enough for global scratch, and settings the ops layer refuses.
void add_sampling_cases(std::vector<OpCase>& cases) {
  struct Case {
    std::string what;
    int64_t rows, vocab, window;
    float lo, hi;  // the logits' range
    TokenDraw draw;
    std::vector<float> temperatures;  // cycled over the rows
  };
  const TokenDraw chattts_code{.temperature = 0.3f,
                               .repetition_penalty = 1.05f,
                               .top_p = 0.7,
                               .top_k = 20,
                               .min_keep = 3,
                               .banned = 625};
  const TokenDraw text{
      .temperature = 0.7f, .repetition_penalty = 1.0f, .top_p = 0.7, .top_k = 20, .min_keep = 3};
  const std::vector<Case> list = {
      {"ChatTTS code heads", 64, 626, 16, -6.0f, 6.0f, chattts_code, {0.3f, 0.1f, 1.0f, 0.7f}},
      {"ChatTTS text head", 4, 21178, 16, -5.0f, 5.0f, text, {0.7f, 1.0f}},
      {"top-P alone", 16, 300, 0, -3.0f, 3.0f, {.top_p = 0.9, .min_keep = 1}, {1.0f}},
      {"top-P of 1 and a narrow one, keeping none",
       8,
       100,
       0,
       -3.0f,
       3.0f,
       {.top_p = 1.0, .min_keep = 0},
       {1.0f, 40.0f}},
      {"top-K alone", 16, 300, 0, -3.0f, 3.0f, {.top_k = 7, .min_keep = 1}, {1.0f}},
      {"no warper", 16, 300, 0, -3.0f, 3.0f, {}, {1.0f, 0.5f}},
      {"the penalty over a window of 8",
       16,
       40,
       8,
       -2.0f,
       2.0f,
       {.repetition_penalty = 1.5f, .top_p = 0.8, .min_keep = 1},
       {1.0f}},
      {"rows in global scratch", 2, 50000, 4, -4.0f, 4.0f, text, {1.0f}},
  };
  uint32_t seed = 1800;
  for (const Case& tc : list) {
    std::vector<TokenDraw> draws;
    std::vector<int64_t> history;
    for (int64_t r = 0; r < tc.rows; ++r) {
      TokenDraw d = tc.draw;
      d.temperature = tc.temperatures[static_cast<size_t>(r) % tc.temperatures.size()];
      if (tc.what.starts_with("top-P of 1")) d.top_p = r % 2 == 0 ? 1.0 : 0.01;
      d.seed = 77 + static_cast<uint64_t>(r % 5);
      d.step = static_cast<uint64_t>(r / 5);
      d.row = static_cast<uint64_t>(r % 4);
      draws.push_back(d);
      // Ids that repeat, padding (−1) and one past the vocabulary, which count for nothing.
      for (int64_t j = 0; j < tc.window; ++j) {
        const int64_t id = j == 0 ? -1 : j == 1 ? tc.vocab : (r * 7 + j * j) % (tc.vocab / 8 + 2);
        history.push_back(id);
      }
    }
    const Tensor past = ints({tc.rows, tc.window}, history);
    for (bool device : {false, true}) {
      if (device && tc.window == 0) continue;
      OpCase c = make(OpKind::SampleTokens,
                      "sample_tokens " + tc.what + " R" + str(tc.rows) + " V" + str(tc.vocab) +
                          (device ? ", history on the device" : ""),
                      {random({tc.rows, tc.vocab}, seed, tc.lo, tc.hi),
                       device ? given_on_device(past) : given(past)},
                      [draws](Context& ctx, const In& in) {
                        return ops::sample_tokens(ctx, in[0], in[1], draws);
                      });
      c.dtypes = {DType::F32};
      c.exact = true;
      cases.push_back(c);
    }
    ++seed;
  }
  // Ties: in ascending (logit, id) order top-P cuts between equal logits; top-K keeps every
  // logit equal to the k-th largest.
  std::vector<float> tied;
  for (int64_t i = 0; i < 3 * 40; ++i) tied.push_back(static_cast<float>((i * 7) % 5) * 0.5f);
  std::vector<TokenDraw> tie_draws;
  for (uint64_t r = 0; r < 3; ++r) {
    tie_draws.push_back({.top_p = r == 0 ? 0.6 : 0.0, .top_k = r == 1 ? 3 : 0, .seed = r});
  }
  tie_draws[2].top_p = 0.35;
  tie_draws[2].top_k = 9;
  OpCase ties = make(OpKind::SampleTokens, "sample_tokens of tied logits",
                     {given(floats({3, 40}, tied)), given(ints({3, 0}, {}))},
                     [tie_draws](Context& ctx, const In& in) {
                       return ops::sample_tokens(ctx, in[0], in[1], tie_draws);
                     });
  ties.dtypes = {DType::F32};
  ties.exact = true;
  cases.push_back(ties);
  // A NaN, every logit −inf, the one finite logit banned: −1; the last row draws.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpCase nothing = make(
      OpKind::SampleTokens, "sample_tokens of rows that draw nothing",
      {given(
           floats({4, 3}, {0.5f, nan, 1.0f, -inf, -inf, -inf, -inf, 2.0f, -inf, 0.1f, 0.2f, 0.3f})),
       given(ints({4, 0}, {}))},
      [](Context& ctx, const In& in) {
        return ops::sample_tokens(ctx, in[0], in[1],
                                  {TokenDraw{}, TokenDraw{}, TokenDraw{.banned = 1}, TokenDraw{}});
      });
  nothing.dtypes = {DType::F32};
  nothing.exact = true;
  cases.push_back(nothing);
  // An infinite logit divided by an infinite penalty (1e30 twice) is NaN: the row draws nothing;
  // the other row's penalty is finite.
  OpCase infinite =
      make(OpKind::SampleTokens, "sample_tokens of an infinite logit under an infinite penalty",
           {given(floats({2, 3}, {inf, 1.0f, 2.0f, 0.5f, 1.0f, 2.0f})),
            given(ints({2, 2}, {0, 0, 2, 2}))},
           [](Context& ctx, const In& in) {
             return ops::sample_tokens(ctx, in[0], in[1],
                                       {TokenDraw{.repetition_penalty = 1e30f},
                                        TokenDraw{.repetition_penalty = 3.0f, .seed = 4}});
           });
  infinite.dtypes = {DType::F32};
  infinite.exact = true;
  cases.push_back(infinite);
  const std::vector<std::pair<std::string, TokenDraw>> refused = {
      {"draws[0].temperature is out of range", {.temperature = 0.0f}},
      {"draws[0].top_p is out of range", {.top_p = 1.5}},
      {"draws[0].top_k is out of range", {.top_k = -1}},
      {"draws[0].repetition_penalty is out of range", {.repetition_penalty = nan}},
  };
  for (const auto& [message, draw] : refused) {
    OpCase c =
        make(OpKind::SampleTokens, "sample_tokens refuses: " + message,
             {random({1, 5}, 1850), given(ints({1, 0}, {}))}, [draw](Context& ctx, const In& in) {
               return ops::sample_tokens(ctx, in[0], in[1], {draw});
             });
    c.dtypes = {DType::F32};
    c.error = message;
    cases.push_back(c);
  }
}

void add_copy_cases(std::vector<OpCase>& cases) {
  const auto add = [&](const std::string& what, const CaseInput& input, const CaseRun& run) {
    OpCase c;
    c.group = "Copy";
    c.description = what;
    c.inputs = {input};
    c.run = run;
    cases.push_back(c);
  };
  add("transpose", random({2, 37, 12}, 1100),
      [](Context& c, const In& in) { return ops::transpose(c, in[0], 0, 2); });
  add("contiguous of a permuted view", random({3, 4, 5}, 1200, -100.0f, 100.0f),
      [](Context& c, const In& in) {
        return ops::contiguous(c, in[0].permute({2, 0, 1}));
      });
  add("to_device of a permuted host view", random({3, 4, 5}, 1201, -100.0f, 100.0f),
      [](Context& c, const In& in) {
        const Tensor host = ops::to_host(c, in[0], in[0].dtype());
        return ops::to_device(c, host.permute({2, 0, 1}), in[0].dtype());
      });
  add("to_host of a permuted view", random({3, 4, 5}, 1202, -100.0f, 100.0f),
      [](Context& c, const In& in) {
        return ops::to_device(c, ops::to_host(c, in[0].permute({2, 0, 1}), in[0].dtype()),
                              in[0].dtype());
      });
}

void add_lstm_cases(std::vector<OpCase>& cases) {
  // What the case returns after running the layer once from a state.
  enum class Result { kOut, kH, kC };
  struct Case {
    int64_t batch, steps, hidden;
    std::vector<int64_t> lengths;
    bool reverse;
    bool from_zero;  // zeros as the state, else a seeded one
    Result result;
    std::string what;
  };
  const std::vector<Case> list = {
      {1, 1, 1, {}, false, true, Result::kOut, ""},
      {2, 7, 8, {}, false, true, Result::kOut, ""},
      {2, 7, 8, {7, 4}, true, true, Result::kOut, " backward over packed lengths"},
      {3, 9, 5, {9, 0, 3}, false, false, Result::kOut, " from a state, one sequence empty"},
      {3, 9, 5, {9, 0, 3}, false, false, Result::kH, " final h"},
      {3, 9, 5, {2, 9, 0}, true, false, Result::kC, " final c, backward"},
      // Sambert's sizes: the pitch and energy BiLSTMs and the postnet (128 units), a batch of
      // sentences, and its duration predictor one step at a time.
      {4, 40, 128, {40, 13, 1, 27}, false, true, Result::kOut, " Sambert's postnet"},
      {4, 40, 128, {40, 13, 1, 27}, true, true, Result::kOut, " Sambert's backward half"},
      {16, 1, 128, {}, false, false, Result::kH, " one step of a batch"},
  };
  uint32_t seed = 1300;
  for (const Case& tc : list) {
    const std::vector<CaseInput> inputs = {
        random({tc.batch, tc.steps, 4 * tc.hidden}, seed, -2.0f, 2.0f),
        random({4 * tc.hidden, tc.hidden}, seed + 1, -0.3f, 0.3f)};
    const uint32_t state_seed = seed + 2;
    seed += 3;
    const auto run = [tc, state_seed](Context& c, const In& in) {
      const auto state = [&](uint32_t s) {
        if (tc.from_zero) return ops::zeros(c, {tc.batch, tc.hidden});
        return ops::to_device(c, random_tensor({tc.batch, tc.hidden}, s), DType::F32);
      };
      Tensor h = state(state_seed);
      Tensor cell = state(state_seed + 1);
      Tensor out = ops::lstm(c, in[0], in[1], h, cell, tc.lengths, tc.reverse);
      if (tc.result == Result::kOut) return out;
      // The state is F32 in every dtype; compared in the dtype the case runs in.
      return ops::to_device(c, tc.result == Result::kH ? h : cell, in[0].dtype());
    };
    cases.push_back(make(OpKind::Lstm,
                         "lstm B" + str(tc.batch) + " T" + str(tc.steps) + " H" + str(tc.hidden) +
                             (tc.reverse ? " reverse" : "") + tc.what,
                         inputs, run));
  }
  // One step at a time, the state carried (HostBackends.LstmStepByStepEqualsOneRun checks that
  // it equals one run).
  cases.push_back(make(OpKind::Lstm, "lstm three single steps",
                       {random({2, 3, 32}, 1400, -2.0f, 2.0f), random({32, 8}, 1401, -0.3f, 0.3f)},
                       [](Context& c, const In& in) {
                         Tensor h = ops::zeros(c, {2, 8});
                         Tensor cell = ops::zeros(c, {2, 8});
                         Tensor out;
                         for (int64_t t = 0; t < 3; ++t) {
                           out = ops::lstm(c, in[0].narrow(1, t, 1), in[1], h, cell, {}, false);
                         }
                         return out;
                       }));
  OpCase refused =
      make(OpKind::Lstm, "lstm refuses a state in another dtype",
           {random({1, 2, 8}, 1402), random({8, 2}, 1403)}, [](Context& c, const In& in) {
             Tensor h = ops::zeros(c, {1, 2}, DType::F16);
             Tensor cell = ops::zeros(c, {1, 2});
             return ops::lstm(c, in[0], in[1], h, cell, {}, false);
           });
  refused.error = "h must be contiguous F32 [1, 2]";
  cases.push_back(refused);
}

std::vector<OpCase> build_cases() {
  std::vector<OpCase> cases;
  add_unary_cases(cases);
  add_binary_cases(cases);
  add_linear_cases(cases);
  add_conv1d_cases(cases);
  add_conv1d_rows_cases(cases);
  add_conv1d_pair_cases(cases);
  add_conv_transpose1d_cases(cases);
  add_norm_cases(cases);
  add_embedding_cases(cases);
  add_gather_rows_cases(cases);
  add_attention_cases(cases);
  add_paged_cases(cases);
  add_decoder_layer_cases(cases);
  add_rope_cases(cases);
  add_sampling_cases(cases);
  add_lstm_cases(cases);
  add_write_rows_cases(cases);
  add_length_cases(cases);
  add_bucketize_cases(cases);
  add_istft_cases(cases);
  add_copy_cases(cases);
  return cases;
}

// The worst error of `actual` against `expected` by the case's rule for `dtype`, with a message
// where they disagree; NaN must match NaN when allowed.
struct Comparison {
  double worst = 0;
  std::string failure;
};

Comparison compare(const Tensor& actual, const Tensor& expected, DType dtype, const OpCase& c) {
  Comparison result;
  if (actual.shape() != expected.shape()) {
    result.failure = "shape " + actual.shape_string() + ", expected " + expected.shape_string();
    return result;
  }
  const std::vector<float> a = actual.to_float_vector();
  const std::vector<float> e = expected.to_float_vector();
  const bool half = dtype != DType::F32;
  double scale = 1;
  if (half) {
    for (float v : e) {
      if (std::isfinite(v)) scale = std::max(scale, std::abs(static_cast<double>(v)));
    }
  }
  size_t worst_at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(e[i]) || std::isnan(a[i])) {
      if (!(c.allow_nan && std::isnan(e[i]) && std::isnan(a[i]))) {
        result.failure = "element " + std::to_string(i) + " is " + std::to_string(a[i]) +
                         ", expected " + std::to_string(e[i]);
        return result;
      }
      continue;
    }
    if (std::isinf(e[i]) || std::isinf(a[i])) {
      if (a[i] != e[i]) {
        result.failure = "element " + std::to_string(i) + " is " + std::to_string(a[i]) +
                         ", expected " + std::to_string(e[i]);
        return result;
      }
      continue;
    }
    const double diff = std::abs(static_cast<double>(a[i]) - e[i]);
    const double err =
        half ? diff / scale : diff / std::max(1.0, std::abs(static_cast<double>(e[i])));
    if (err > result.worst) {
      result.worst = err;
      worst_at = i;
    }
  }
  const double tol = c.exact ? 0.0 : (half ? c.tolerance.half : c.tolerance.f32);
  if (result.worst > tol) {
    result.failure = "worst error " + std::to_string(result.worst) + " > " + std::to_string(tol) +
                     " at element " + std::to_string(worst_at) + " (got " +
                     std::to_string(a[worst_at]) + ", expected " + std::to_string(e[worst_at]) +
                     (half ? ", scale " + std::to_string(scale) : std::string()) + ")";
  }
  return result;
}

// The message of the voxd::Error `run` throws, or nothing (with a failure) when it throws none.
std::string error_of(const std::function<void()>& run, const std::string& where) {
  try {
    run();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << where << " threw no voxd::Error";
  return "";
}

class OpTableTest : public ::testing::Test {
 public:
  OpTableTest(OpTableTarget target, std::string group, DType dtype)
      : target_(std::move(target)), group_(std::move(group)), dtype_(dtype) {}

  void TestBody() override {
    Backend& backend = target_.backend();
    PoisonAllocator host_poison;
    ReferenceBackend reference;
    Context ref_ctx(reference, host_poison);
    Context ctx(backend, target_.allocator());
    const std::string dtype(dtype_name(dtype_));
    int ran = 0;
    double worst = 0;
    std::string worst_case;
    std::vector<std::string> skipped;
    const char* selected = std::getenv("VOXD_OP_CASES");
    for (const OpCase& c : op_cases()) {
      if (c.group != group_ ||
          std::find(c.dtypes.begin(), c.dtypes.end(), dtype_) == c.dtypes.end() ||
          (selected != nullptr && c.description.find(selected) == std::string::npos)) {
        continue;
      }
      if (c.large && !target_.include_large) {
        skipped.push_back(c.description + ": a large case, run on devices only");
        continue;
      }
      std::string missing;
      for (OpKind op : c.needs) {
        if (!reference.supports(op, DType::F32)) {
          missing = "the reference does not run " + std::string(op_name(op));
        } else if (!backend.supports(op, dtype_)) {
          missing = backend.name() + " does not run " + std::string(op_name(op)) + " on " + dtype;
        }
        if (!missing.empty()) break;
      }
      if (!missing.empty()) {
        skipped.push_back(c.description + ": " + missing);
        continue;
      }
      SCOPED_TRACE(c.description + " in " + dtype + " on " + backend.name());
      const double err = run_case(c, ref_ctx, ctx);
      ++ran;
      if (err >= worst) {
        worst = err;
        worst_case = c.description;
      }
    }
    for (const std::string& s : skipped) std::printf("[   skip   ] %s\n", s.c_str());
    if (ran == 0) {
      std::string reasons;
      for (const std::string& s : skipped) reasons += "\n  " + s;
      GTEST_SKIP() << "no case of " << group_ << " ran in " << dtype << " on " << backend.name()
                   << ":" << reasons;
    }
    std::printf("[ op table ] %s %s on %s: %d cases, worst error %.3g (%s)\n", group_.c_str(),
                dtype.c_str(), backend.name().c_str(), ran, worst, worst_case.c_str());
  }

 private:
  // Runs one case on both backends and compares; returns its worst error.
  double run_case(const OpCase& c, Context& ref_ctx, Context& ctx) {
    std::vector<Tensor> ref_in;
    std::vector<Tensor> dev_in;
    for (const CaseInput& input : c.inputs) {
      Tensor t;
      if (!input.none) {
        t = input.given.defined() ? input.given
                                  : random_tensor(input.shape, input.seed, input.lo, input.hi);
      }
      const bool floating = t.defined() && is_floating(t.dtype());
      ref_in.push_back(floating ? t.to_host_contiguous(dtype_).to_host_contiguous(DType::F32) : t);
      if (floating) {
        dev_in.push_back(ops::to_device(ctx, t, dtype_));
      } else {
        dev_in.push_back(input.on_device ? ops::to_device(ctx, t, t.dtype()) : t);
      }
    }
    if (!c.error.empty()) {
      for (const auto& [where, run] : {std::pair<std::string, std::function<void()>>{
                                           "the reference", [&] { c.run(ref_ctx, ref_in); }},
                                       std::pair<std::string, std::function<void()>>{
                                           ctx.backend().name(), [&] { c.run(ctx, dev_in); }}}) {
        const std::string message = error_of(run, where);
        EXPECT_NE(message.find(c.error), std::string::npos)
            << where << " threw \"" << message << "\", expected it to contain \"" << c.error
            << "\"";
      }
      return 0;
    }
    const Tensor expected = c.run(ref_ctx, ref_in);
    const Tensor out = c.run(ctx, dev_in);
    EXPECT_EQ(out.device(), ctx.device());
    const bool floating = is_floating(expected.dtype());
    EXPECT_EQ(out.dtype(), floating ? dtype_ : expected.dtype());
    const Tensor actual = ops::to_host(ctx, out, floating ? DType::F32 : out.dtype());
    const Comparison result = compare(actual, expected, dtype_, c);
    EXPECT_TRUE(result.failure.empty()) << result.failure;
    return result.worst;
  }

  OpTableTarget target_;
  std::string group_;
  DType dtype_;
};

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = build_cases();
  return cases;
}

void register_op_table(const OpTableTarget& target) {
  std::vector<std::string> groups;
  for (const OpCase& c : op_cases()) {
    if (std::find(groups.begin(), groups.end(), c.group) == groups.end()) {
      groups.push_back(c.group);
    }
  }
  for (const std::string& group : groups) {
    for (DType dtype : target.dtypes) {
      const bool any = std::any_of(op_cases().begin(), op_cases().end(), [&](const OpCase& c) {
        return c.group == group &&
               std::find(c.dtypes.begin(), c.dtypes.end(), dtype) != c.dtypes.end();
      });
      if (!any) continue;  // an F32-only op has no F16 test
      const std::string name = group + "/" + std::string(dtype_name(dtype));
      ::testing::RegisterTest(target.suite.c_str(), name.c_str(), nullptr, nullptr, __FILE__,
                              __LINE__, [target, group, dtype]() -> ::testing::Test* {
                                return new OpTableTest(target, group, dtype);
                              });
    }
  }
}

namespace {

float from_bits(uint32_t bits) {
  return std::bit_cast<float>(bits);
}

uint32_t bits_of(float value) {
  return std::bit_cast<uint32_t>(value);
}

// The 16-bit patterns of a host F16 or BF16 tensor.
std::vector<uint16_t> half_bits(const Tensor& t) {
  std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
  std::memcpy(bits.data(), t.raw_data(), bits.size() * sizeof(uint16_t));
  return bits;
}

bool is_half_nan(uint16_t bits, DType dtype) {
  const uint16_t exponent = dtype == DType::F16 ? 0x7C00 : 0x7F80;
  return (bits & exponent) == exponent && (bits & ~exponent & 0x7FFF) != 0;
}

}  // namespace

void check_dtype_conversions(Context& ctx) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // F32 value -> its F16 and BF16 patterns (IEEE 754 binary16; bfloat16 = the top half of
  // binary32), round to nearest, ties to even. 0 stands for NaN (checked by class).
  struct Rounding {
    float value;
    uint16_t f16;
    uint16_t bf16;
  };
  const std::vector<Rounding> roundings = {
      {1.0f, 0x3C00, 0x3F80},
      {-2.0f, 0xC000, 0xC000},
      {0.5f, 0x3800, 0x3F00},
      {-0.0f, 0x8000, 0x8000},
      {65504.0f, 0x7BFF, 0x4780},  // the largest finite F16; 65504 = 0x477FE000 ties up in BF16
      {std::ldexp(1.0f, -14), 0x0400, 0x3880},         // the smallest normal F16
      {std::ldexp(1.0f, -24), 0x0001, 0x3380},         // the smallest F16 subnormal
      {std::ldexp(1.0f, -25), 0x0000, 0x3300},         // F16: half way to 2^-24, ties to even 0
      {std::ldexp(3.0f, -25), 0x0002, 0x33C0},         // F16: between 1 and 2 ulps, ties to even 2
      {1.0f + std::ldexp(1.0f, -11), 0x3C00, 0x3F80},  // F16 tie between 1 and 1 + 2^-10: 1
      {1.0f + std::ldexp(3.0f, -11), 0x3C02, 0x3F80},  // F16 tie, up to the even 1 + 2^-9
      {1.0f + std::ldexp(1.0f, -8), 0x3C04, 0x3F80},   // BF16 tie between 1 and 1 + 2^-7: 1
      {1.0f + std::ldexp(3.0f, -8), 0x3C0C, 0x3F82},   // BF16 tie, up to the even 1 + 2^-6
      {1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20), 0x3C04, 0x3F81},  // past the tie
      {65520.0f, 0x7C00, 0x4780},  // F16: the tie between 65504 and 2^16 rounds to even (inf)
      {1e6f, 0x7C00, 0x4974},      // 1e6 = 0x49742400: BF16 drops 0x2400
      {from_bits(0x7F7FFFFF), 0x7C00, 0x7F80},  // the largest F32 overflows BF16 by rounding
      {from_bits(0x7F7F0000), 0x7C00, 0x7F7F},  // the largest finite BF16
      {from_bits(0x00010000), 0x0000, 0x0001},  // a F32 subnormal that BF16 holds exactly
      {inf, 0x7C00, 0x7F80},
      {-inf, 0xFC00, 0xFF80},
      {nan, 0, 0},
  };
  const auto n = static_cast<int64_t>(roundings.size());
  std::vector<float> values;
  for (const Rounding& r : roundings) values.push_back(r.value);
  // Column 0 of [n, 2]: a strided view of the values (column 1 is padding).
  std::vector<float> padded;
  for (float v : values) {
    padded.push_back(v);
    padded.push_back(7.0f);
  }
  const Tensor host = Tensor::from_vector({n}, values);
  const Tensor host_strided = Tensor::from_vector({n, 2}, padded).select(1, 0);
  const Tensor device_strided =
      ops::to_device(ctx, Tensor::from_vector({n, 2}, padded)).select(1, 0);
  for (DType dtype : {DType::F16, DType::BF16}) {
    const std::string name(dtype_name(dtype));
    for (const auto& [what, source] :
         {std::pair{"host to device", host}, std::pair{"strided host to device", host_strided},
          std::pair{"strided on the device", device_strided}}) {
      const Tensor converted = ops::to_device(ctx, source, dtype);
      const std::vector<uint16_t> bits = half_bits(ops::to_host(ctx, converted, dtype));
      for (size_t i = 0; i < roundings.size(); ++i) {
        const uint16_t expected = dtype == DType::F16 ? roundings[i].f16 : roundings[i].bf16;
        if (std::isnan(roundings[i].value)) {
          EXPECT_TRUE(is_half_nan(bits[i], dtype))
              << name << " " << what << ": NaN became 0x" << std::hex << bits[i];
        } else {
          EXPECT_EQ(bits[i], expected) << name << " " << what << ": " << roundings[i].value
                                       << " (0x" << std::hex << bits_of(roundings[i].value)
                                       << ") became 0x" << bits[i] << ", expected 0x" << expected;
        }
      }
    }
  }
  // F16 / BF16 patterns -> the F32 values they stand for.
  struct Widening {
    uint16_t bits;
    float value;
  };
  const std::vector<std::pair<DType, std::vector<Widening>>> widenings = {
      {DType::F16,
       {{0x3C01, 1.0f + std::ldexp(1.0f, -10)},
        {0x0001, std::ldexp(1.0f, -24)},
        {0x03FF, std::ldexp(1023.0f, -24)},
        {0x7BFF, 65504.0f},
        {0xC000, -2.0f},
        {0x8000, -0.0f},
        {0xFC00, -inf},
        {0x7E00, nan}}},
      {DType::BF16,
       {{0x3F81, 1.0078125f},
        {0x0001, from_bits(0x00010000)},
        {0x7F7F, from_bits(0x7F7F0000)},
        {0xC000, -2.0f},
        {0x8000, -0.0f},
        {0xFF80, -inf},
        {0x7FC0, nan}}},
  };
  for (const auto& [dtype, list] : widenings) {
    Tensor half = Tensor::empty({static_cast<int64_t>(list.size())}, dtype);
    for (size_t i = 0; i < list.size(); ++i) {
      std::memcpy(static_cast<char*>(half.raw_data()) + 2 * i, &list[i].bits, 2);
    }
    const Tensor on_device = ops::to_device(ctx, half, dtype);
    for (const Tensor& wide : {ops::to_host(ctx, ops::to_device(ctx, on_device, DType::F32)),
                               ops::to_host(ctx, on_device, DType::F32)}) {
      const std::vector<float> got = wide.to_float_vector();
      for (size_t i = 0; i < list.size(); ++i) {
        if (std::isnan(list[i].value)) {
          EXPECT_TRUE(std::isnan(got[i])) << dtype_name(dtype) << " NaN became " << got[i];
        } else {
          EXPECT_EQ(bits_of(got[i]), bits_of(list[i].value))
              << dtype_name(dtype) << " 0x" << std::hex << list[i].bits << " became " << got[i]
              << ", expected " << list[i].value;
        }
      }
    }
  }
}

}  // namespace voxd::testing
