#include "families/chattts/vocos.h"

#include "core/error.h"

namespace voxd::chattts {
namespace {

// ISTFTHead clips the magnitude at this value after the exp.
constexpr float kMaxMagnitude = 1e2f;

}  // namespace

Vocos Vocos::load(Context& ctx, const VocosConfig& config, const WeightSource& weights,
                  DType dtype) {
  Vocos v;
  v.config_ = config;
  v.precision_ = PrecisionPolicy::for_weights(dtype);
  const DType compute = v.precision_.compute;
  const DType stream = v.precision_.stream;
  const int64_t dim = config.dim;
  v.embed_weight_ = load_parameter(ctx, weights, "backbone.embed.weight",
                                   {dim, config.input_channels, 7}, compute);
  v.embed_bias_ = load_parameter(ctx, weights, "backbone.embed.bias", {dim}, compute);
  v.norm_weight_ = load_parameter(ctx, weights, "backbone.norm.weight", {dim}, stream);
  v.norm_bias_ = load_parameter(ctx, weights, "backbone.norm.bias", {dim}, stream);
  const ConvNeXtBlock::Shape block{dim, config.intermediate_dim, 7, 1};
  for (int64_t i = 0; i < config.num_layers; ++i) {
    v.blocks_.push_back(ConvNeXtBlock::load(ctx, weights, "backbone.convnext." + std::to_string(i),
                                            block, "gamma", v.precision_));
  }
  v.final_norm_weight_ =
      load_parameter(ctx, weights, "backbone.final_layer_norm.weight", {dim}, stream);
  v.final_norm_bias_ =
      load_parameter(ctx, weights, "backbone.final_layer_norm.bias", {dim}, stream);
  v.out_weight_ = load_parameter(ctx, weights, "head.out.weight", {config.n_fft + 2, dim}, compute);
  v.out_bias_ = load_parameter(ctx, weights, "head.out.bias", {config.n_fft + 2}, compute);
  v.window_ = load_host_parameter(weights, "head.istft.window", {config.n_fft});
  return v;
}

Tensor Vocos::forward(Context& ctx, const Tensor& mel) const {
  if (mel.dim() != 3 || mel.size(1) != config_.input_channels || mel.size(2) < 2) {
    throw Error("vocos: mel must be [B, " + std::to_string(config_.input_channels) +
                ", F] with F >= 2, got " + mel.shape_string());
  }
  Conv1dParams embed;
  embed.padding = 3;
  Tensor x = ops::conv1d(ctx, precision_.to_compute(ctx, mel), embed_weight_, embed_bias_, embed);
  x = precision_.to_stream(ctx, ops::transpose(ctx, x, 1, 2));
  x = ops::layer_norm(ctx, x, norm_weight_, norm_bias_, kConvNeXtLayerNormEps);
  for (const ConvNeXtBlock& block : blocks_) x = block.forward(ctx, x);
  x = ops::layer_norm(ctx, x, final_norm_weight_, final_norm_bias_, kConvNeXtLayerNormEps);
  // [B, F, n_fft + 2] -> [B, n_fft + 2, F]: log-magnitude bins, then phase bins.
  const Tensor spectrum = ops::to_device(
      ctx,
      ops::transpose(ctx, ops::linear(ctx, precision_.to_compute(ctx, x), out_weight_, out_bias_),
                     1, 2),
      DType::F32);
  const int64_t bins = config_.n_fft / 2 + 1;
  const Tensor log_magnitude = ops::contiguous(ctx, spectrum.narrow(1, 0, bins));
  const Tensor phase = ops::contiguous(ctx, spectrum.narrow(1, bins, bins));
  const Tensor magnitude = ops::clamp_max(ctx, ops::exp(ctx, log_magnitude), kMaxMagnitude);
  const Tensor real = ops::mul(ctx, magnitude, ops::cos(ctx, phase));
  const Tensor imag = ops::mul(ctx, magnitude, ops::sin(ctx, phase));
  return ops::istft(ctx, real, imag, window_, config_.hop_length);
}

}  // namespace voxd::chattts
