// Floating-point operations of the two models' forward passes, counted from their configs (a
// multiply-add is 2 FLOP; only matrix work is counted: convolutions, transposed convolutions,
// linear layers and attention's two products). Benchmarks divide these by measured time to
// report achieved TFLOP/s per stage.
#pragma once

#include <cstdint>

#include "families/fastspeech2/fastspeech2.h"
#include "families/fastspeech2/hifigan.h"

namespace voxd::bench {

// HiFiGAN generator on `frames` mel frames (one sequence).
inline double hifigan_flops(const HifiGanConfig& config, int64_t frames) {
  double flops = 2.0 * static_cast<double>(config.num_mels * config.channels(0) * 7 * frames);
  int64_t length = frames;
  for (int64_t stage = 0; stage < config.num_upsamples(); ++stage) {
    const auto i = static_cast<size_t>(stage);
    const int64_t in = config.channels(stage);
    const int64_t out = config.channels(stage + 1);
    flops += 2.0 * static_cast<double>(in * out * config.upsample_kernel_sizes[i] * length);
    length *= config.upsample_rates[i];
    const int64_t convs_per_kernel = config.resblock == 1 ? 6 : 2;
    for (const int64_t kernel : config.resblock_kernel_sizes) {
      flops += 2.0 * static_cast<double>(convs_per_kernel * out * out * kernel * length);
    }
  }
  return flops + 2.0 * static_cast<double>(config.channels(config.num_upsamples()) * 7 * length);
}

// FastSpeech2 on one sequence of `phonemes` symbols giving `frames` mel frames, with
// ming024's postnet (5 convolutions of kernel 5, `postnet_channels` wide).
inline double fastspeech2_flops(const FastSpeech2Config& config, int64_t phonemes, int64_t frames,
                                int64_t postnet_channels = 512) {
  const auto transformer = [&](int64_t layers, int64_t hidden, int64_t length) {
    const auto d = static_cast<double>(hidden);
    const auto n = static_cast<double>(length);
    const double projections = 2.0 * 4.0 * d * d * n;
    const double attention = 2.0 * 2.0 * n * n * d;
    const double ffn = 2.0 * d * static_cast<double>(config.conv_filter_size) * n *
                       static_cast<double>(config.conv_kernel_size[0] + config.conv_kernel_size[1]);
    return static_cast<double>(layers) * (projections + attention + ffn);
  };
  const auto predictor = [&](int64_t length) {
    const auto f = static_cast<double>(config.variance_filter_size);
    const auto k = static_cast<double>(config.variance_kernel_size);
    const auto d = static_cast<double>(config.encoder_hidden);
    return 2.0 * static_cast<double>(length) * (d * f * k + f * f * k + f);
  };
  const int64_t pitch_length =
      config.pitch_feature_level == FeatureLevel::Phoneme ? phonemes : frames;
  const int64_t energy_length =
      config.energy_feature_level == FeatureLevel::Phoneme ? phonemes : frames;
  const auto mels = static_cast<double>(config.n_mels);
  const auto post = static_cast<double>(postnet_channels);
  const double postnet =
      2.0 * 5.0 * static_cast<double>(frames) * (2.0 * mels * post + 3.0 * post * post);
  return transformer(config.encoder_layers, config.encoder_hidden, phonemes) + predictor(phonemes) +
         predictor(pitch_length) + predictor(energy_length) +
         transformer(config.decoder_layers, config.decoder_hidden, frames) +
         2.0 * static_cast<double>(config.decoder_hidden) * mels * static_cast<double>(frames) +
         postnet;
}

}  // namespace voxd::bench
