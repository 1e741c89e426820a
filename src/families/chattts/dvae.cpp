#include "families/chattts/dvae.h"

#include <cmath>

#include "core/error.h"

namespace voxd::chattts {
namespace {

// [B, T, C] -> [B, C/2, 2T]: frame 2t + j, channel c takes row t's channel j·C/2 + c (dvae.py's
// view + permute + flatten on [B, C, T]).
Tensor interleave(Context& ctx, const Tensor& x) {
  const int64_t b = x.size(0);
  const int64_t t = x.size(1);
  const int64_t half = x.size(2) / 2;
  return ops::contiguous(ctx, x.reshape({b, t, 2, half}).permute({0, 3, 1, 2}))
      .reshape({b, half, 2 * t});
}

}  // namespace

Dvae Dvae::load(Context& ctx, const DvaeConfig& config, const WeightSource& weights, DType dtype) {
  Dvae d;
  d.config_ = config;
  d.precision_ = PrecisionPolicy::for_weights(dtype);
  const ConvNeXtDecoderConfig& dec = config.decoder;
  const DType compute = d.precision_.compute;
  const DType stream = d.precision_.stream;
  d.conv_in0_weight_ =
      load_parameter(ctx, weights, "decoder.conv_in.0.weight", {dec.bn_dim, dec.idim, 3}, compute);
  d.conv_in0_bias_ = load_parameter(ctx, weights, "decoder.conv_in.0.bias", {dec.bn_dim}, compute);
  d.conv_in2_weight_ = load_parameter(ctx, weights, "decoder.conv_in.2.weight",
                                      {dec.hidden, dec.bn_dim, 3}, compute);
  d.conv_in2_bias_ = load_parameter(ctx, weights, "decoder.conv_in.2.bias", {dec.hidden}, compute);
  const ConvNeXtBlock::Shape block{dec.hidden, 4 * dec.hidden, dec.kernel, dec.dilation};
  for (int64_t i = 0; i < dec.n_layer; ++i) {
    d.blocks_.push_back(ConvNeXtBlock::load(
        ctx, weights, "decoder.decoder_block." + std::to_string(i), block, "weight", d.precision_));
  }
  d.conv_out_weight_ =
      load_parameter(ctx, weights, "decoder.conv_out.weight", {dec.odim, dec.hidden, 1}, compute);
  d.out_conv_weight_ =
      load_parameter(ctx, weights, "out_conv.weight", {config.n_mels, config.dim, 3}, compute);
  d.coef_ = load_parameter(ctx, weights, "coef", {1, config.n_mels, 1}, stream);
  if (config.vq) {
    const GfsqConfig& vq = *config.vq;
    const auto levels = static_cast<int64_t>(vq.levels.size());
    const int64_t per_group = vq.dim / vq.groups;
    Tensor weight = Tensor::zeros({vq.dim, vq.groups * levels}, DType::F32);
    Tensor bias = Tensor::zeros({vq.dim}, DType::F32);
    for (int64_t g = 0; g < vq.groups; ++g) {
      const std::string prefix = "vq_layer.quantizer.rvqs." + std::to_string(g) + ".project_out";
      const Tensor w = load_host_parameter(weights, prefix + ".weight", {per_group, levels});
      const Tensor b = load_host_parameter(weights, prefix + ".bias", {per_group});
      for (int64_t o = 0; o < per_group; ++o) {
        for (int64_t l = 0; l < levels; ++l) {
          weight.data<float>()[(g * per_group + o) * vq.groups * levels + g * levels + l] =
              w.data<float>()[o * levels + l];
        }
        bias.data<float>()[g * per_group + o] = b.data<float>()[o];
      }
    }
    d.project_out_weight_ = ops::to_device(ctx, weight, compute);
    d.project_out_bias_ = ops::to_device(ctx, bias, compute);
  }
  return d;
}

Tensor Dvae::decode_hidden(Context& ctx, const Tensor& hidden) const {
  if (hidden.dim() != 3 || hidden.size(2) != 2 * config_.decoder.idim) {
    throw Error("chattts decoder: hidden states must be [B, T, " +
                std::to_string(2 * config_.decoder.idim) + "], got " + hidden.shape_string());
  }
  return decode_features(ctx, precision_.to_stream(ctx, hidden));
}

Tensor Dvae::decode_codes(Context& ctx, const Tensor& codes) const {
  if (!config_.vq) throw Error("chattts decoder: this decoder has no quantizer to decode codes");
  const GfsqConfig& vq = *config_.vq;
  const auto levels = static_cast<int64_t>(vq.levels.size());
  const int64_t columns = vq.groups * vq.residuals;
  if (codes.dim() != 3 || codes.size(2) != columns || codes.dtype() != DType::I64 ||
      !codes.device().is_cpu()) {
    throw Error("chattts dvae: codes must be I64 [B, T, " + std::to_string(columns) +
                "] on the host, got " + codes.shape_string());
  }
  const int64_t rows = codes.size(0) * codes.size(1);
  const Tensor contiguous_codes = codes.to_host_contiguous(DType::I64);
  const int64_t* code = contiguous_codes.data<int64_t>();
  const int64_t codebook = vq.codebook_size();
  // Each row's residual codes summed per group: digit d of code c is (c / Π levels[<d]) mod
  // levels[d], mapped to [-1, 1] by (digit − L/2) / (L/2); residual r is scaled by (L − 1)^−r.
  Tensor summed = Tensor::zeros({rows, vq.groups * levels}, DType::F32);
  float* out = summed.data<float>();
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t g = 0; g < vq.groups; ++g) {
      for (int64_t r = 0; r < vq.residuals; ++r) {
        int64_t c = code[row * columns + g * vq.residuals + r];
        if (c < 0 || c >= codebook) {
          throw InputError("chattts dvae: audio code " + std::to_string(c) + " is outside [0, " +
                           std::to_string(codebook) + ")");
        }
        for (int64_t l = 0; l < levels; ++l) {
          const int64_t level = vq.levels[static_cast<size_t>(l)];
          const int64_t half = level / 2;
          const double digit = static_cast<double>(c % level - half) / static_cast<double>(half);
          c /= level;
          out[row * vq.groups * levels + g * levels + l] += static_cast<float>(
              digit * std::pow(static_cast<double>(level - 1), -static_cast<double>(r)));
        }
      }
    }
  }
  Tensor features = ops::linear(ctx, ops::to_device(ctx, summed, precision_.compute),
                                project_out_weight_, project_out_bias_);
  features = precision_.to_stream(ctx, features).reshape({codes.size(0), codes.size(1), vq.dim});
  return decode_features(ctx, features);
}

Tensor Dvae::decode_features(Context& ctx, const Tensor& features) const {
  Conv1dParams same3;
  same3.padding = 1;
  Tensor x = precision_.to_compute(ctx, interleave(ctx, features));
  x = ops::gelu(ctx, ops::conv1d(ctx, x, conv_in0_weight_, conv_in0_bias_, same3));
  x = ops::conv1d(ctx, x, conv_in2_weight_, conv_in2_bias_, same3);
  x = precision_.to_stream(ctx, ops::transpose(ctx, x, 1, 2));
  for (const ConvNeXtBlock& block : blocks_) x = block.forward(ctx, x);
  x = precision_.to_compute(ctx, ops::transpose(ctx, x, 1, 2));
  x = ops::conv1d(ctx, x, conv_out_weight_, Tensor(), Conv1dParams{});
  x = ops::conv1d(ctx, x, out_conv_weight_, Tensor(), same3);
  return ops::mul(ctx, precision_.to_stream(ctx, x), coef_);
}

}  // namespace voxd::chattts
