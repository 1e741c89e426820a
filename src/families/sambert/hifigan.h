// KAN-TTS's HiFiGAN generator (kantts/models/hifigan/hifigan.py, Generator, with or without NSF):
// mel -> waveform as the original computes it (up to rounding: the resblocks' mean multiplies by
// 1/R where the original divides by R), loaded by its state-dict names.
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
//
// With nsf_params (HiFiGAN-NSF, kantts/models/hifigan/layers.py SourceModule) the generator also
// takes the f0 and voicing of each frame: a source of nb_harmonics + 1 sine harmonics of f0 (their
// phases accumulated over the utterance, each but the first with a random start) plus Gaussian
// noise, noise alone where unvoiced (NsfSource makes it on the host), through a 1x1 conv and tanh,
// is added at every stage through a strided conv down to the stage's rate.
#pragma once

#include <array>
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
  // nsf_params: the source's harmonics above the fundamental and the audio's sample rate.
  struct Nsf {
    int64_t harmonics = 7;
    int64_t sampling_rate = 24000;
  };
  std::optional<Nsf> nsf;

  // Throws voxd::InputError "<where>: field '<name>' ..." for a missing or wrong field, and for
  // what voxd does not run: several output channels (PQMF), an activation other than LeakyReLU,
  // repeat_upsample false (the original fails on it too), even kernels, a non-causal NSF
  // generator with an odd source rate (the original's shapes do not meet there).
  static KanTtsHifiGanConfig from_json(const nlohmann::json& params, const std::string& where);

  int64_t hop_length() const;  // audio samples per mel frame
  // How many earlier mel frames an output sample of a frame depends on (the context a chunk
  // needs on its left), and how many later ones (0 for a causal generator), found by carrying
  // each output sample's index interval back through the layers (and, with NSF, through the
  // source's convs to the frames of its samples; the source's phase, accumulated from the
  // utterance's start, is NsfSource's state).
  int64_t left_context_frames() const;
  int64_t lookahead_frames() const;
  // The source's rate at upsampling stage i, in samples per index of the stage's output.
  int64_t source_stride(size_t stage) const;
};

// The excitation of an NSF generator's source before its 1x1 conv, made on the host: per
// harmonic h (0 .. harmonics) and sample n of an utterance, with f0 and voicing v (0 or 1 after
// the acoustic model's binarisation) of n's frame repeated over its hop samples,
//   e = v · (α·sin(2π·(Σ_{k ≤ n} f0_k·(h + 1) / rate mod 1) + φ_h) + ε) + (1 − v) · α/(3σ)·ε,
// α = 0.1, σ = 0.003, φ_0 = 0 and φ_h uniform in [−π, π), ε Gaussian with deviation σ. The
// phases and noise come from a seed (the same seed, the same excitation), or are given (tests).
// Any part of an utterance can be made alone: its first sample's phase comes from the f0 of the
// frames before it (the sum of their f0, excitation's f0_before).
class NsfSource {
 public:
  // Phases and noise drawn from `seed`: φ_h is a hash of (seed, h), the noise of harmonics 2j
  // and 2j + 1 at sample n one Box-Muller draw from a hash of (seed, j, n), so they do not depend
  // on how the utterance is cut.
  NsfSource(const KanTtsHifiGanConfig& config, uint64_t seed);
  // Phases [harmonics + 1] (the first is taken as 0) and noise [harmonics + 1, samples] given.
  NsfSource(const KanTtsHifiGanConfig& config, std::vector<float> phases, Tensor noise);

  // The excitation [harmonics + 1, frames · hop] of frames [first, first + frames), given their
  // f0 (Hz) and voicing, `f0_before` the sum of f0 over frames [0, first).
  std::vector<float> excitation(const float* f0, const float* voiced, int64_t first, int64_t frames,
                                double f0_before) const;

 private:
  // The noise of harmonics h and h + 1 at `sample` (one Box-Muller draw gives both).
  std::array<float, 2> noise_pair(int64_t h, int64_t sample) const;

  int64_t harmonics_;
  int64_t hop_;
  int64_t rate_;
  uint64_t seed_key_ = 0;  // the seed's hash
  std::vector<float> phases_;
  Tensor noise_;  // given noise [harmonics + 1, samples], or undefined
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

  // mel [B, in_channels, T] on ctx's device -> audio [B, T · hop_length()] in [−1, 1]. An NSF
  // generator also takes its source's excitation [B, harmonics + 1, T · hop_length()]
  // (NsfSource), in any floating dtype, on the host or ctx's device.
  Tensor forward(Context& ctx, const Tensor& mel, const Tensor& excitation = Tensor{}) const;

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
  // NSF: the source e [B, 1, samples] down to stage `stage`'s rate, in the stream dtype.
  Tensor source_down(Context& ctx, size_t stage, const Tensor& e) const;

  KanTtsHifiGanConfig config_;
  PrecisionPolicy precision_;
  Conv conv_pre_;
  std::vector<Conv> repeat_convs_;
  std::vector<Conv> transposed_;
  std::vector<ResBlock> resblocks_;  // stage · kernels + j
  Conv conv_post_;
  Conv source_;                     // NSF: the source's 1x1 conv over the harmonics
  std::vector<Conv> source_downs_;  // NSF: per stage, the source down to the stage's rate
};

}  // namespace voxd
