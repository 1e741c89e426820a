// Vocos (gemelo-ai/vocos) as ChatTTS runs it: mel → a ConvNeXt backbone → a linear head giving
// log-magnitude and phase → inverse STFT (centre padding, periodic Hann window) → audio.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ops.h"
#include "core/weight_loading.h"
#include "core/weights.h"
#include "families/chattts/convnext.h"
#include "families/chattts/model_config.h"

namespace voxd::chattts {

class Vocos {
 public:
  // Reads backbone.embed, backbone.norm, backbone.convnext.N (layer scale `gamma`),
  // backbone.final_layer_norm, head.out and head.istft.window by the original's names,
  // shape-checked against `config`; other tensors (the feature extractor's) are ignored.
  static Vocos load(Context& ctx, const VocosConfig& config, const WeightSource& weights,
                    DType dtype = DType::F32);

  // mel [B, input_channels, F] (F ≥ 2) in any floating dtype -> audio [B, hop·(F − 1)] F32.
  Tensor forward(Context& ctx, const Tensor& mel) const;

  const VocosConfig& config() const { return config_; }

 private:
  VocosConfig config_;
  PrecisionPolicy precision_;
  Tensor embed_weight_, embed_bias_;  // [dim, input_channels, 7], [dim]
  Tensor norm_weight_, norm_bias_;
  std::vector<ConvNeXtBlock> blocks_;
  Tensor final_norm_weight_, final_norm_bias_;
  Tensor out_weight_, out_bias_;  // [n_fft + 2, dim], [n_fft + 2]
  Tensor window_;                 // [n_fft] F32 on the host
};

}  // namespace voxd::chattts
