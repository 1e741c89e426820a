#include "families/chattts/convnext.h"

namespace voxd::chattts {

ConvNeXtBlock ConvNeXtBlock::load(Context& ctx, const WeightSource& weights,
                                  const std::string& prefix, const Shape& shape,
                                  const std::string& scale_name, const PrecisionPolicy& precision) {
  ConvNeXtBlock block;
  block.shape_ = shape;
  block.precision_ = precision;
  const int64_t c = shape.channels;
  const int64_t i = shape.intermediate;
  const DType compute = precision.compute;
  const DType stream = precision.stream;
  block.dw_weight_ =
      load_parameter(ctx, weights, prefix + ".dwconv.weight", {c, 1, shape.kernel}, compute);
  block.dw_bias_ = load_parameter(ctx, weights, prefix + ".dwconv.bias", {c}, compute);
  block.norm_weight_ = load_parameter(ctx, weights, prefix + ".norm.weight", {c}, stream);
  block.norm_bias_ = load_parameter(ctx, weights, prefix + ".norm.bias", {c}, stream);
  block.pw1_weight_ = load_parameter(ctx, weights, prefix + ".pwconv1.weight", {i, c}, compute);
  block.pw1_bias_ = load_parameter(ctx, weights, prefix + ".pwconv1.bias", {i}, compute);
  block.pw2_weight_ = load_parameter(ctx, weights, prefix + ".pwconv2.weight", {c, i}, compute);
  block.pw2_bias_ = load_parameter(ctx, weights, prefix + ".pwconv2.bias", {c}, compute);
  block.scale_ = load_parameter(ctx, weights, prefix + "." + scale_name, {c}, stream);
  return block;
}

Tensor ConvNeXtBlock::forward(Context& ctx, const Tensor& x) const {
  Conv1dParams depthwise;
  depthwise.dilation = shape_.dilation;
  depthwise.padding = shape_.dilation * (shape_.kernel / 2);
  depthwise.groups = shape_.channels;
  Tensor y = ops::conv1d(ctx, precision_.to_compute(ctx, ops::transpose(ctx, x, 1, 2)), dw_weight_,
                         dw_bias_, depthwise);
  y = ops::layer_norm(ctx, precision_.to_stream(ctx, ops::transpose(ctx, y, 1, 2)), norm_weight_,
                      norm_bias_, kConvNeXtLayerNormEps);
  y = ops::gelu(ctx, ops::linear(ctx, precision_.to_compute(ctx, y), pw1_weight_, pw1_bias_));
  y = ops::linear(ctx, y, pw2_weight_, pw2_bias_);
  y = ops::mul(ctx, precision_.to_stream(ctx, y), scale_);
  return ops::add(ctx, x, y);
}

}  // namespace voxd::chattts
