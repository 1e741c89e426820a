// The ConvNeXt block ChatTTS's DVAE decoders and Vocos share: a depthwise conv, LayerNorm
// (eps 1e-6), Linear, exact GELU, Linear, a per-channel layer scale, and the residual. Vocos
// names the scale `gamma`, dvae.py names it `weight`.
#pragma once

#include <cstdint>
#include <string>

#include "core/ops.h"
#include "core/weight_loading.h"
#include "core/weights.h"

namespace voxd::chattts {

// LayerNorm's eps in both dvae.py's and Vocos's ConvNeXt (and Vocos's other LayerNorms).
inline constexpr float kConvNeXtLayerNormEps = 1e-6f;

class ConvNeXtBlock {
 public:
  struct Shape {
    int64_t channels = 0;
    int64_t intermediate = 0;
    int64_t kernel = 7;
    int64_t dilation = 1;
  };

  // Reads `prefix`.dwconv, .norm, .pwconv1, .pwconv2 (.weight, .bias) and `prefix`.`scale_name`,
  // shape-checked, in the policy's dtypes.
  static ConvNeXtBlock load(Context& ctx, const WeightSource& weights, const std::string& prefix,
                            const Shape& shape, const std::string& scale_name,
                            const PrecisionPolicy& precision);

  // x [B, T, channels] in the stream dtype (time-major: the layer norm and linears read rows)
  // -> x + block(x), the same shape and dtype.
  Tensor forward(Context& ctx, const Tensor& x) const;

 private:
  Shape shape_;
  PrecisionPolicy precision_;
  Tensor dw_weight_, dw_bias_;      // [C, 1, K], [C]
  Tensor norm_weight_, norm_bias_;  // [C]
  Tensor pw1_weight_, pw1_bias_;    // [I, C], [I]
  Tensor pw2_weight_, pw2_bias_;    // [C, I], [C]
  Tensor scale_;                    // [C]
};

}  // namespace voxd::chattts
