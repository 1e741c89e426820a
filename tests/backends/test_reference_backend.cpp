// Pins the reference backend to values worked out by hand, so the definition every other backend
// is tested against is itself checked.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend_test_util.h"
#include "backends/reference/reference_backend.h"
#include "core/error.h"
#include "core/ops.h"

namespace voxd {
namespace {

using testing::expect_values;

class ReferenceHand : public ::testing::Test {
 protected:
  static Tensor t(const Shape& shape, const std::vector<float>& values) {
    return Tensor::from_vector(shape, values);
  }
  testing::PoisonAllocator poison_;
  ReferenceBackend backend_;
  Context ctx_{backend_, poison_};
};

TEST_F(ReferenceHand, Unary) {
  const Tensor x = t({4}, {-2.0f, -0.5f, 0.0f, 3.0f});
  expect_values(ops::relu(ctx_, x), {4}, {0, 0, 0, 3});
  expect_values(ops::leaky_relu(ctx_, x, 0.1f), {4}, {-0.2f, -0.05f, 0, 3});
  expect_values(ops::scale(ctx_, x, -2.0f), {4}, {4, 1, 0, -6});
  expect_values(ops::exp(ctx_, t({2}, {0.0f, 1.0f})), {2}, {1.0f, 2.7182818f});
  expect_values(ops::tanh(ctx_, t({2}, {0.0f, 0.5f})), {2}, {0.0f, 0.46211716f});
}

TEST_F(ReferenceHand, TheUnaryOpsOfChatTTS) {
  // silu(x) = x / (1 + e^−x); gelu(x) = x · Φ(x) with Φ the standard normal CDF (erf form).
  expect_values(ops::silu(ctx_, t({3}, {1.0f, -2.0f, 0.0f})), {3}, {0.7310586f, -0.23840584f, 0});
  expect_values(ops::gelu(ctx_, t({3}, {1.0f, -1.0f, 0.0f})), {3}, {0.8413447f, -0.15865525f, 0});
  expect_values(ops::sin(ctx_, t({2}, {0.0f, 1.5707964f})), {2}, {0, 1});
  expect_values(ops::cos(ctx_, t({2}, {0.0f, 3.1415927f})), {2}, {1, -1});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> clipped =
      ops::clamp_max(ctx_, t({4}, {1.0f, 150.0f, -3.0f, nan}), 100.0f).to_float_vector();
  EXPECT_EQ(std::vector<float>(clipped.begin(), clipped.begin() + 3),
            (std::vector<float>{1.0f, 100.0f, -3.0f}));
  EXPECT_TRUE(std::isnan(clipped[3]));  // torch.clamp keeps NaN
}

// add_layer_norm is, on the reference, exactly the add and the layer_norm it stands for; also with
// its output written over the residual.
TEST_F(ReferenceHand, AddLayerNormIsTheAddAndTheNorm) {
  const Tensor x = testing::random_tensor({3, 40}, 11);
  const Tensor residual = testing::random_tensor({3, 40}, 12);
  const Tensor gamma = testing::random_tensor({40}, 13);
  const Tensor beta = testing::random_tensor({40}, 14);
  const std::vector<float> separate =
      ops::layer_norm(ctx_, ops::add(ctx_, x, residual), gamma, beta, 1e-5f).to_float_vector();
  EXPECT_EQ(ops::add_layer_norm(ctx_, x, residual, gamma, beta, 1e-5f).to_float_vector(), separate);
  Tensor into = ops::contiguous(ctx_, residual);
  backend_.add_layer_norm(x, into, gamma, beta, 1e-5f, into);
  EXPECT_EQ(into.to_float_vector(), separate);
}

// The fused decoder-layer ops are, on the reference, exactly the ops they stand for.
TEST_F(ReferenceHand, TheFusedDecoderOpsAreTheOpsTheyReplace) {
  const Tensor x = testing::random_tensor({3, 40}, 1);
  const Tensor delta = testing::random_tensor({3, 40}, 2);
  const Tensor weight = testing::random_tensor({40}, 3);
  const ops::ResidualNorm fused = ops::add_rms_norm(ctx_, x, delta, weight, 1e-5f, DType::F32);
  const Tensor sum = ops::add(ctx_, x, delta);
  EXPECT_EQ(fused.sum.to_float_vector(), sum.to_float_vector());
  EXPECT_EQ(fused.normed.to_float_vector(),
            ops::rms_norm(ctx_, sum, weight, 1e-5f).to_float_vector());

  const Tensor gate_up = testing::random_tensor({2, 3, 16}, 4);
  EXPECT_EQ(ops::swiglu(ctx_, gate_up).to_float_vector(),
            ops::mul(ctx_, ops::silu(ctx_, gate_up.narrow(2, 0, 8)), gate_up.narrow(2, 8, 8))
                .to_float_vector());

  // Two sequences of two steps at positions 5 and 2 in pages of 4 (sequence 1's second page
  // missing, so its step at position 4 writes nothing).
  const Tensor qkv = testing::random_tensor({2, 2, 3, 2, 8}, 5);
  const Tensor table = Tensor::from_vector({2, 2}, std::vector<int64_t>{3, 1, 0, -1});
  const Tensor positions = Tensor::from_vector({2}, std::vector<int64_t>{5, 3});
  const Tensor pages = testing::random_tensor({4, 4, 2, 8}, 6);
  Tensor k_fused = ops::to_device(ctx_, pages);
  Tensor v_fused = ops::to_device(ctx_, pages);
  const Tensor q = ops::qkv_to_pages(ctx_, qkv, k_fused, v_fused, table, positions, 1e4f);
  const auto part = [&](int64_t i) {
    return ops::contiguous(ctx_, qkv.narrow(2, i, 1)).reshape({2, 2, 2, 8});
  };
  Tensor k_pages = ops::to_device(ctx_, pages);
  Tensor v_pages = ops::to_device(ctx_, pages);
  ops::write_pages(ctx_, k_pages, ops::rope(ctx_, part(1), positions, 1e4f), table, positions);
  ops::write_pages(ctx_, v_pages, part(2), table, positions);
  EXPECT_EQ(q.to_float_vector(), ops::rope(ctx_, part(0), positions, 1e4f).to_float_vector());
  EXPECT_EQ(k_fused.to_float_vector(), k_pages.to_float_vector());
  EXPECT_EQ(v_fused.to_float_vector(), v_pages.to_float_vector());
  EXPECT_NE(v_fused.to_float_vector(), pages.to_float_vector());  // something was written
}

TEST_F(ReferenceHand, RmsNorm) {
  // [3, 4]: mean of squares 12.5, so x / sqrt(12.5) = [0.8485281, 1.1313708], times [1, 2].
  expect_values(ops::rms_norm(ctx_, t({1, 2}, {3, 4}), t({2}, {1, 2}), 0.0f), {1, 2},
                {0.8485281f, 2.2627417f});
  // eps under the root: a row of zeros stays zero, a constant row of 1 with eps 3 becomes 1/2.
  expect_values(ops::rms_norm(ctx_, t({2, 2}, {0, 0, 1, 1}), t({2}, {1, 1}), 3.0f), {2, 2},
                {0, 0, 0.5f, 0.5f});
}

TEST_F(ReferenceHand, RopeRotatesHalvesByPosition) {
  // D = 2: one frequency, 1; x = [1, 0] at position 1 turns by one radian.
  expect_values(ops::rope(ctx_, t({1, 2, 1, 2}, {1, 0, 1, 0}), {0}, 10000.0f), {1, 2, 1, 2},
                {1, 0, 0.5403023f, 0.84147098f});
  // D = 4, theta 10000: frequencies 1 and 10000^(−1/2) = 0.01; x = [1, 2, 3, 4] at position 2
  // pairs dimension 0 with 2 (angle 2) and 1 with 3 (angle 0.02): rotate_half, not interleaved.
  expect_values(ops::rope(ctx_, t({1, 1, 1, 4}, {1, 2, 3, 4}), {2}, 10000.0f), {1, 1, 1, 4},
                {-3.1440391f, 1.9196053f, -0.3391431f, 4.0391974f}, 1e-6);
  EXPECT_EQ(rope_frequencies(10000.0f, 4), (std::vector<float>{1.0f, 0.01f}));
}

TEST_F(ReferenceHand, WriteRowsWritesAtEachOffset) {
  Tensor cache = t({2, 3, 1}, {0, 0, 0, 0, 0, 0});
  ops::write_rows(ctx_, cache, t({2, 1, 1}, {5, 7}), {2, 0});
  expect_values(cache, {2, 3, 1}, {0, 0, 5, 7, 0, 0});
}

TEST_F(ReferenceHand, IstftOfKnownSpectra) {
  // n_fft 4, a rectangular window and hop 4 (no overlap, envelope 1): frame 0 holds only the DC
  // bin (4 → four ones; its imaginary part is ignored), frame 1 only the Nyquist bin (4 →
  // 1, −1, 1, −1; imaginary part ignored too). Overlap-add gives 1 1 1 1 1 −1 1 −1, of which
  // centre trimming keeps samples 2..5.
  const Tensor real = t({1, 3, 2}, {4, 0, 0, 0, 0, 4});
  const Tensor imag = t({1, 3, 2}, {5, 0, 0, 0, 0, 3});
  const Tensor ones = t({4}, {1, 1, 1, 1});
  expect_values(ops::istft(ctx_, real, imag, ones, 4), {1, 4}, {1, 1, 1, -1});
  // Frame 0 holds bin 1 = 2 + 2i: (2/4)·(2·cos(πm/2) − 2·sin(πm/2)) = 1, −1, −1, 1; frame 1
  // is silent. Hop 2: samples 2 and 3 get both frames (envelope 2), so the kept two are −1/2, 1/2.
  const Tensor bin1 = t({1, 3, 2}, {0, 0, 2, 0, 0, 0});
  expect_values(ops::istft(ctx_, bin1, bin1, ones, 2), {1, 2}, {-0.5f, 0.5f});
}

TEST_F(ReferenceHand, BinaryBroadcast) {
  const Tensor a = t({2, 2}, {1, 2, 3, 4});
  expect_values(ops::add(ctx_, a, t({1, 2}, {10, 20})), {2, 2}, {11, 22, 13, 24});
  expect_values(ops::add(ctx_, a, t({2, 1}, {10, 20})), {2, 2}, {11, 12, 23, 24});
  expect_values(ops::mul(ctx_, a, t({2}, {2, -1})), {2, 2}, {2, -2, 6, -4});
}

TEST_F(ReferenceHand, Linear) {
  // [1, 2]·[[1, 1], [2, −1]]ᵀ + [0.5, 0] = [3.5, 0]
  expect_values(ops::linear(ctx_, t({1, 2}, {1, 2}), t({2, 2}, {1, 1, 2, -1}), t({2}, {0.5f, 0})),
                {1, 2}, {3.5f, 0.0f});
}

TEST_F(ReferenceHand, Conv1d) {
  const Tensor x = t({1, 1, 3}, {1, 2, 3});
  const Tensor w = t({1, 1, 2}, {1, 1});
  expect_values(ops::conv1d(ctx_, x, w, Tensor(), {}), {1, 1, 2}, {3, 5});
  expect_values(ops::conv1d(ctx_, x, w, Tensor(), {1, 1, 1, 1}), {1, 1, 4}, {1, 3, 5, 3});
  expect_values(ops::conv1d(ctx_, x, w, t({1}, {0.5f}), {}), {1, 1, 2}, {3.5f, 5.5f});
  const Tensor ramp = t({1, 1, 5}, {1, 2, 3, 4, 5});
  const Tensor diff = t({1, 1, 3}, {1, 0, -1});
  expect_values(ops::conv1d(ctx_, ramp, diff, Tensor(), {}), {1, 1, 3}, {-2, -2, -2});
  expect_values(ops::conv1d(ctx_, ramp, diff, Tensor(), {1, 0, 2, 1}), {1, 1, 1}, {-4});
  expect_values(ops::conv1d(ctx_, ramp, t({1, 1, 1}, {1}), Tensor(), {2, 0, 1, 1}), {1, 1, 3},
                {1, 3, 5});
  // Two groups of one channel each: channel c is scaled by weight c.
  expect_values(
      ops::conv1d(ctx_, t({1, 2, 2}, {1, 2, 3, 4}), t({2, 1, 1}, {1, 2}), Tensor(), {1, 0, 1, 2}),
      {1, 2, 2}, {1, 2, 6, 8});
}

TEST_F(ReferenceHand, ConvTranspose1d) {
  // x [1, 2], w [1, 1, 1], stride 2: x0 lands on 0..2, x1 on 2..4.
  const Tensor x = t({1, 1, 2}, {1, 2});
  const Tensor w = t({1, 1, 3}, {1, 1, 1});
  expect_values(ops::conv_transpose1d(ctx_, x, w, Tensor(), {2}), {1, 1, 5}, {1, 1, 3, 2, 2});
  expect_values(ops::conv_transpose1d(ctx_, x, w, Tensor(), {2, 1}), {1, 1, 3}, {1, 3, 2});
  expect_values(ops::conv_transpose1d(ctx_, x, w, t({1}, {1}), {2, 1, 1}), {1, 1, 4}, {2, 4, 3, 3});
  // Dilation 2, stride 1, K 2: x0 on 0 and 2, x1 on 1 and 3.
  expect_values(ops::conv_transpose1d(ctx_, x, t({1, 1, 2}, {1, 10}), Tensor(), {1, 0, 0, 2}),
                {1, 1, 4}, {1, 2, 10, 20});
}

TEST_F(ReferenceHand, LayerNorm) {
  const Tensor x = t({1, 3}, {1, 2, 3});
  // mean 2, biased variance 2/3: (x − 2)/sqrt(2/3) = ∓1.2247449.
  expect_values(ops::layer_norm(ctx_, x, t({3}, {1, 1, 1}), t({3}, {0, 0, 0}), 0.0f), {1, 3},
                {-1.2247449f, 0.0f, 1.2247449f});
  expect_values(ops::layer_norm(ctx_, x, t({3}, {2, 2, 2}), t({3}, {1, 1, 1}), 0.0f), {1, 3},
                {-1.4494897f, 1.0f, 3.4494897f});
  // eps dominates a constant row: output is beta.
  expect_values(ops::layer_norm(ctx_, t({1, 2}, {5, 5}), t({2}, {1, 1}), t({2}, {0.5f, -1}), 1e-5f),
                {1, 2}, {0.5f, -1});
}

TEST_F(ReferenceHand, Attention) {
  // One key: softmax is 1, so the output is that key's value whatever q is.
  const Tensor q = t({1, 2, 1, 2}, {3, -1, 0.5f, 7});
  const Tensor k = t({1, 1, 1, 2}, {1, 2});
  const Tensor v = t({1, 1, 1, 2}, {4, -8});
  expect_values(ops::attention(ctx_, q, k, v, {}), {1, 2, 1, 2}, {4, -8, 4, -8});
  // Scores 0 and ln 3 -> weights 1/4, 3/4 -> 0.25·4 + 0.75·8 = 7.
  const Tensor q1 = t({1, 1, 1, 1}, {1});
  const Tensor k2 = t({1, 2, 1, 1}, {0, std::log(3.0f)});
  const Tensor v2 = t({1, 2, 1, 1}, {4, 8});
  expect_values(ops::attention(ctx_, q1, k2, v2, {}), {1, 1, 1, 1}, {7}, 1e-5);
  // Masking the second key leaves only the first.
  AttentionParams masked;
  masked.key_lengths = {1};
  expect_values(ops::attention(ctx_, q1, k2, v2, masked), {1, 1, 1, 1}, {4});
  // Causal: query 0 sees key 0 only, query 1 both.
  AttentionParams causal;
  causal.causal = true;
  const Tensor q2 = t({1, 2, 1, 1}, {1, 1});
  expect_values(ops::attention(ctx_, q2, k2, v2, causal), {1, 2, 1, 1}, {4, 7}, 1e-5);
  causal.query_offsets = {1};
  expect_values(ops::attention(ctx_, q2, k2, v2, causal), {1, 2, 1, 1}, {7, 7}, 1e-5);
  masked.key_lengths = {0};
  EXPECT_TRUE(std::isnan(ops::attention(ctx_, q1, k2, v2, masked).to_float_vector()[0]));
}

TEST_F(ReferenceHand, Bucketize) {
  // torch.bucketize(right=False): index of the first boundary >= x.
  const Tensor boundaries = t({4}, {1, 3, 5, 7});
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = t({9}, {0, 1, 2, 3, 7, 8, -inf, inf, std::numeric_limits<float>::quiet_NaN()});
  EXPECT_EQ(ops::bucketize(ctx_, x, boundaries).to_int_vector(),
            (std::vector<int64_t>{0, 0, 1, 1, 3, 4, 0, 4, 4}));
  // Repeated boundaries: a value equal to them goes to the first.
  EXPECT_EQ(ops::bucketize(ctx_, t({2}, {2, 2.5f}), t({3}, {2, 2, 3})).to_int_vector(),
            (std::vector<int64_t>{0, 2}));
  // No boundaries: everything is in bucket 0. (Tensor::empty: from_vector({0}, {}) passes a null
  // pointer to memcpy.)
  EXPECT_EQ(ops::bucketize(ctx_, t({2}, {-5, 5}), Tensor::empty({0}, DType::F32)).to_int_vector(),
            (std::vector<int64_t>{0, 0}));
}

TEST_F(ReferenceHand, LengthRegulate) {
  const Tensor x = t({1, 3, 1}, {1, 2, 3});
  expect_values(ops::length_regulate(ctx_, x, {{2, 0, 1}}), {1, 3, 1}, {1, 1, 3});
  expect_values(ops::length_regulate(ctx_, x, {{2, 0, 1}}, 5), {1, 5, 1}, {1, 1, 3, 0, 0});
  // Batches of different totals: the shorter is zero-padded.
  const Tensor x2 = t({2, 2, 1}, {1, 2, 3, 4});
  expect_values(ops::length_regulate(ctx_, x2, {{1, 2}, {1}}), {2, 3, 1}, {1, 2, 2, 3, 0, 0});
}

TEST_F(ReferenceHand, LengthRegulationRowsGatherWhatLengthRegulateCopies) {
  // Row b · rows + t for each frame, −1 past each total, frames past `frames` dropped.
  EXPECT_EQ(ops::length_regulation_rows({{2, 0, 1}, {1, 1}}, 3, 4),
            (std::vector<int64_t>{0, 0, 2, -1, 3, 4, -1, -1}));
  EXPECT_EQ(ops::length_regulation_rows({{3, 2}}, 2, 4), (std::vector<int64_t>{0, 0, 0, 1}));
  const Tensor x = t({2, 2, 1}, {1, 2, 3, 4});
  const std::vector<std::vector<int64_t>> durations{{1, 2}, {1}};
  const Tensor rows = Tensor::from_vector({2, 3}, ops::length_regulation_rows(durations, 2, 3));
  expect_values(ops::gather_rows(ctx_, x.reshape({4, 1}), rows), {2, 3, 1},
                ops::length_regulate(ctx_, x, durations).to_float_vector());
}

TEST_F(ReferenceHand, GatherRowsGivesZerosOutsideTheTable) {
  const Tensor table = t({3, 2}, {0, 1, 10, 11, 20, 21});
  const Tensor rows = Tensor::from_vector({4}, std::vector<int64_t>{2, -1, 3, 0});
  expect_values(ops::gather_rows(ctx_, table, rows), {4, 2}, {20, 21, 0, 0, 0, 0, 0, 1});
}

TEST_F(ReferenceHand, EmbeddingAndZeroBeyondLengths) {
  const Tensor table = t({3, 2}, {0, 1, 10, 11, 20, 21});
  const Tensor ids = Tensor::from_vector({1, 3}, std::vector<int64_t>{2, 0, 2});
  expect_values(ops::embedding(ctx_, ids, table), {1, 3, 2}, {20, 21, 0, 1, 20, 21});
  EXPECT_THROW(ops::embedding(ctx_, Tensor::from_vector({1, 1}, std::vector<int64_t>{3}), table),
               Error);
  Tensor x = t({2, 2, 1}, {1, 2, 3, 4});
  ops::zero_beyond_lengths(ctx_, x, {1, 2});
  expect_values(x, {2, 2, 1}, {1, 0, 3, 4});
  Tensor y = t({2, 2, 1}, {1, 2, 3, 4});
  ops::zero_beyond_lengths(ctx_, y, Tensor::from_vector({2}, std::vector<int64_t>{0, 1}));
  expect_values(y, {2, 2, 1}, {0, 0, 3, 0});
  EXPECT_THROW(ops::zero_beyond_lengths(ctx_, y, Tensor::from_vector({1}, std::vector<int64_t>{1})),
               Error);
}

}  // namespace
}  // namespace voxd
