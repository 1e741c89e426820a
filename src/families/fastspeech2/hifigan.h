// HiFiGAN vocoder: mel spectrogram -> waveform, behaving exactly as jik876/hifi-gan's Generator
// (models.py), so its checkpoints load by their state-dict names and give the same audio.
//
// Architecture (C0 = upsample_initial_channel, C_i = C0 / 2^i with floor division):
//   conv_pre      Conv1d(num_mels, C0, 7, padding 3)
//   per stage i   leaky_relu(0.1) -> ConvTranspose1d(C_i, C_{i+1}, k_i, stride u_i,
//                 padding (k_i − u_i)/2 floored) -> (Σ_j resblocks[i·num_kernels + j](x)) /
//                 num_kernels
//   then          leaky_relu(0.01, torch's default slope) -> Conv1d(C_last, 1, 7, padding 3) ->
//   tanh
// ResBlock1, per dilation d of its first three: x += conv_{k,1}(lrelu(conv_{k,d}(lrelu(x)))).
// ResBlock2, per dilation d of its first two:   x += conv_{k,d}(lrelu(x)).
// Resblock convs pad by get_padding(k, d) = (k·d − d)/2, so they keep the length.
// Every conv carries weight norm (dim 0): weight = g · v / ‖v‖ with the norm over all dims but
// the first, i.e. per output channel for Conv1d and per input channel for ConvTranspose1d.
// Precision (PrecisionPolicy): the upsampling and resblock convs and their weights in the compute
// dtype; the model's edge convs (conv_pre, which reads the mel, and conv_post, which writes the
// audio; 0.3 % of V1's multiply-adds), the activations between convs (leaky ReLU, resblock
// residual sums, the stage mean, tanh) and the audio in the stream dtype.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/weight_loading.h"
#include "core/weights.h"

namespace voxd {

// The generator fields of a jik876/hifi-gan config.json (training fields are ignored).
struct HifiGanConfig {
  int resblock = 1;  // 1: ResBlock1, 2: ResBlock2 (config "resblock": "1" or "2")
  std::vector<int64_t> upsample_rates;
  std::vector<int64_t> upsample_kernel_sizes;
  int64_t upsample_initial_channel = 0;
  std::vector<int64_t> resblock_kernel_sizes;
  // Per kernel size; ResBlock1 uses the first three dilations, ResBlock2 the first two, and the
  // rest are ignored, as in the original.
  std::vector<std::vector<int64_t>> resblock_dilation_sizes;
  // Input channels of conv_pre. The original hardcodes 80; a config may say otherwise for
  // checkpoints of forks, and the weights' shapes must agree.
  int64_t num_mels = 80;

  // Parses and validates `j`; throws voxd::InputError "<where>: field '<name>' ..." saying what
  // was expected.
  static HifiGanConfig from_json(const nlohmann::json& j, const std::string& where);
  // Throws voxd::InputError naming `where` and the field for a config the original could not
  // build or run (mismatched list lengths, non-positive values, k < u, resblock convs that would
  // not keep the length, fewer dilations than the resblock uses, a stage left with 0 channels).
  void validate(const std::string& where) const;

  int64_t num_upsamples() const { return static_cast<int64_t>(upsample_rates.size()); }
  int64_t num_kernels() const { return static_cast<int64_t>(resblock_kernel_sizes.size()); }
  // Audio samples per mel frame: the product of the upsample rates.
  int64_t hop_length() const;
  // Channels entering upsample stage `stage` (stage == num_upsamples(): after the last stage).
  int64_t channels(int64_t stage) const;
  // Audio samples for `frames` mel frames: frames·hop_length() when every k − u is even; each
  // stage with an odd k − u adds one sample to its output (torch's transposed-conv arithmetic).
  int64_t output_length(int64_t frames) const;
  // R such that an output sample in mel frame f (sample n, f = ⌊n / hop⌋) depends only on frames
  // [f − R, f + R]. Computed by carrying the index interval a sample depends on back through the
  // stack, for every n in [0, hop): a length-keeping conv with padding p widens [a, b] to
  // [a − p, b + p] (conv_post, conv_pre: p = 3; a stage's resblocks: the largest, over kernels,
  // sum of their convs' paddings); a transposed conv (stride u, kernel k, padding p) maps [a, b]
  // to [⌈(a + p − k + 1) / u⌉, ⌊(b + p) / u⌋]. R is the farthest frame reached on either side.
  int64_t receptive_field_frames() const;
};

// A loaded generator: parameters (weight norm folded) on one device, ready to vocode.
class HifiGan {
 public:
  // Reads the parameters from `weights` by the original's state-dict names (conv_pre.*,
  // ups.N.*, resblocks.N.convs1/convs2/convs.M.*, conv_post.*), each either as weight_g +
  // weight_v (folded here, on the host) or as a folded .weight, plus .bias; checks every shape
  // against `config` and moves them to ctx's device in the dtypes PrecisionPolicy::for_weights(
  // dtype) gives. Other tensors are ignored; a missing or misshapen one throws voxd::Error naming
  // it.
  static HifiGan load(Context& ctx, const HifiGanConfig& config, const WeightSource& weights,
                      DType dtype = DType::F32);

  // mel [B, num_mels, T] (T ≥ 1) on ctx's device, in any floating dtype (converted as conv_pre
  // needs) -> audio [B, output_length(T)] in [−1, 1], in the stream dtype (the weights' dtype,
  // F32 for BF16). The original returns [B, 1, T·hop]; the channel dimension is dropped here.
  Tensor forward(Context& ctx, const Tensor& mel) const;

  const HifiGanConfig& config() const { return config_; }
  // The dtype the weights were loaded in (PrecisionPolicy's compute dtype).
  DType dtype() const { return precision_.compute; }

 private:
  struct Conv {
    Tensor weight;  // folded; [Cout, Cin, K] (Conv1d) or [Cin, Cout, K] (ConvTranspose1d)
    Tensor bias;    // [Cout]
    // conv_pre and ResBlock1's convolutions: the weight as the backend's fused convolutions read
    // it (ops::arrange_conv1d_weight); the upsamplers: the weight and bias as the backend
    // upsamples rows with them (ops::arrange_conv_transpose1d_weight); undefined where it reads
    // them as they are.
    Tensor arranged;
    int64_t stride = 1;
    int64_t padding = 0;
    int64_t dilation = 1;
  };
  // ResBlock1: dilated[m] then plain[m] per step; ResBlock2: dilated[m] only (plain empty).
  struct ResBlock {
    std::vector<Conv> dilated;
    std::vector<Conv> plain;
  };

  static Conv1dParams conv1d_params(const Conv& c);
  // A single conv1d of `c` (its weight as arranged at load where it was) with `fusion`.
  static Tensor conv(Context& ctx, const Conv& c, const Tensor& x, ConvFusion fusion = {});
  // An upsampler's stride and padding as conv_transpose1d's params.
  static ConvTranspose1dParams upsample_params(const Conv& up);
  // ResBlock1's step m as a Conv1dPair adding `residual`, its output in the stream dtype.
  Conv1dPair pair(const ResBlock& block, size_t m, const Tensor* residual) const;
  // Whether stage `stage`'s resblocks run over time-major rows: ResBlock1, and every pair of the
  // stage read and written as rows by the backend (ops::fuses_conv1d_pair_rows) for the stage's
  // input x [B, C, T] (a view is fine) transposed. They then need no transposes between their
  // convolutions.
  bool resblocks_on_rows(Context& ctx, size_t stage, const Tensor& x) const;
  // Whether the first upsampler reads conv_pre's output x [B, C, T] as time-major rows: the
  // backend upsamples rows (Backend::runs_conv_transpose1d_rows) and the first stage runs on the
  // rows it writes (resblocks_on_rows), so one transpose of the mel-rate x replaces the
  // upsampler's gemm and col2im.
  bool first_upsampler_on_rows(Context& ctx, const Tensor& x) const;
  // What a stage does with a resblock's output before it is the stage's running sum: adds the
  // sum so far (addend), and after the last resblock takes the mean (scale) and the activation
  // of what follows (slope). V1's last pair does all three in its epilogue.
  struct SumTerms {
    const Tensor* addend = nullptr;
    float scale = 1.0f;
    std::optional<float> slope;
  };
  // x and the result in the stream dtype: [B, C, T], or [B, T, C] with `rows`; `terms` applied
  // to the result.
  Tensor resblock(Context& ctx, const ResBlock& block, const Tensor& x, bool rows,
                  const SumTerms& terms) const;

  HifiGanConfig config_;
  PrecisionPolicy precision_;
  Conv conv_pre_;
  std::vector<Conv> ups_;
  std::vector<ResBlock> resblocks_;  // index stage · num_kernels + j
  Conv conv_post_;
};

}  // namespace voxd
