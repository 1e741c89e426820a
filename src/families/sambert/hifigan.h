// KAN-TTS's HiFiGAN generator (kantts/models/hifigan/hifigan.py, Generator, without NSF): mel ->
// waveform as the original computes it (up to rounding: the resblocks' mean multiplies by 1/R
// where the original divides by R), loaded by its state-dict names.
//
//   conv_pre     conv(in_channels → C0, kernel_size)
//   stage i      x = sin(x) + x; x = repeat(x) + transposed(x), where repeat is nearest
//                upsampling by s_i, leaky ReLU, conv(kernel_size), and transposed is leaky ReLU,
//                transposed conv (k_i, stride s_i); then the mean of the stage's resblocks,
//                each x += conv_{k,1}(act(conv_{k,d}(act(x)))) per dilation d
//   then         leaky ReLU with torch's default slope 0.01, conv_post(kernel_size), tanh
// C_i = channels / 2^i. A causal generator (every ModelScope config) pads each conv with
// (k − 1)·d zeros on the left only and drops a transposed conv's last k − s samples, so its
// output up to a frame depends on no later frame: chunks vocoded with left_context_frames() of
// context and that context's samples dropped equal the whole. A non-causal one pads
// symmetrically and looks ahead. Every conv carries weight norm (folded at load).
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

// `Model.Generator.params` of a KAN-TTS HiFiGAN config.yaml (hifigan_v1_16k.yaml and its
// variants), under the original's field names (upsample_kernal_sizes sic).
struct KanTtsHifiGanConfig {
  int64_t in_channels = 80;
  int64_t channels = 256;
  int64_t kernel_size = 7;
  std::vector<int64_t> upsample_scales;
  std::vector<int64_t> upsample_kernel_sizes;
  std::vector<int64_t> resblock_kernel_sizes;
  std::vector<std::vector<int64_t>> resblock_dilations;
  bool causal = true;
  float negative_slope = 0.1f;  // nonlinear_activation_params' negative_slope

  // Throws voxd::InputError "<where>: field '<name>' ..." for a missing or wrong field, and for
  // what voxd does not run: NSF (nsf_params), several output channels (PQMF), an activation
  // other than LeakyReLU, repeat_upsample false (the original fails on it too), even kernels.
  static KanTtsHifiGanConfig from_json(const nlohmann::json& params, const std::string& where);

  int64_t hop_length() const;  // audio samples per mel frame
  // How many earlier mel frames an output sample of a frame depends on (the context a chunk
  // needs on its left), and how many later ones (0 for a causal generator), found by carrying
  // each output sample's index interval back through the layers.
  int64_t left_context_frames() const;
  int64_t lookahead_frames() const;
};

// A loaded generator on one device. Cheap to copy.
class KanTtsHifiGan {
 public:
  // Weight-norm pairs (weight_g, weight_v) or folded .weight per conv, checked against `config`,
  // in the dtypes PrecisionPolicy::for_weights(dtype) gives: the convolutions compute in the
  // compute dtype, the activations between them (the stage sums, the resblocks' residuals) are
  // in the stream dtype (F32 for BF16). A missing or misshapen tensor throws voxd::Error naming
  // it.
  static KanTtsHifiGan load(Context& ctx, const KanTtsHifiGanConfig& config,
                            const WeightSource& weights, DType dtype = DType::F32);

  // mel [B, in_channels, T] on ctx's device -> audio [B, T · hop_length()] in [−1, 1].
  Tensor forward(Context& ctx, const Tensor& mel) const;

  const KanTtsHifiGanConfig& config() const { return config_; }

 private:
  struct Conv {
    Tensor weight;  // [Cout, Cin, K], or [Cin, Cout, K] for a transposed conv
    Tensor bias;    // [Cout]
    int64_t dilation = 1;
    int64_t stride = 1;  // transposed convs
  };
  struct ResBlock {
    std::vector<Conv> dilated, plain;
  };

  // c over x (any floating dtype), through leaky_relu(slope) first when it is set; the output
  // in `out`.
  Tensor conv(Context& ctx, const Conv& c, const Tensor& x, std::optional<float> slope,
              DType out) const;
  // The transposed conv over x (the compute dtype), its output in the stream dtype.
  Tensor transposed(Context& ctx, const Conv& c, const Tensor& x) const;

  KanTtsHifiGanConfig config_;
  PrecisionPolicy precision_;
  Conv conv_pre_;
  std::vector<Conv> repeat_convs_;
  std::vector<Conv> transposed_;
  std::vector<ResBlock> resblocks_;  // stage · kernels + j
  Conv conv_post_;
};

}  // namespace voxd
