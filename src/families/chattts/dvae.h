// ChatTTS's mel decoders (ChatTTS/model/dvae.py): the Decoder, which turns the GPT's hidden
// states into mel (`use_decoder=True`, the default), and the DVAE, which turns audio codes into
// mel through GFSQ dequantisation. Both interleave their input's channels into twice the frames
// (each GPT step makes 2 mel frames), run a ConvNeXt decoder and out_conv, and scale by `coef`.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ops.h"
#include "core/weight_loading.h"
#include "core/weights.h"
#include "families/chattts/convnext.h"
#include "families/chattts/model_config.h"

namespace voxd::chattts {

class Dvae {
 public:
  // Reads coef, decoder.conv_in.{0,2}, decoder.decoder_block.N, decoder.conv_out, out_conv and,
  // when config.vq is set, vq_layer.quantizer.rvqs.G.project_out by the original's names,
  // shape-checked against `config`; other tensors (the encoder's) are ignored.
  static Dvae load(Context& ctx, const DvaeConfig& config, const WeightSource& weights,
                   DType dtype = DType::F32);

  // hidden [B, T, 2·idim] (the GPT's last hidden states, one row per step) -> mel
  // [B, n_mels, 2T] in the stream dtype. The Decoder's path.
  Tensor decode_hidden(Context& ctx, const Tensor& hidden) const;
  // codes [B, T, num_vq] (I64 on the host, each in [0, codebook size)) -> mel [B, n_mels, 2T].
  // The DVAE's path; InputError for a code out of range; requires config().vq.
  Tensor decode_codes(Context& ctx, const Tensor& codes) const;

  const DvaeConfig& config() const { return config_; }

 private:
  // features [B, T, C] (time-major) -> mel [B, n_mels, 2T].
  Tensor decode_features(Context& ctx, const Tensor& features) const;

  DvaeConfig config_;
  PrecisionPolicy precision_;
  Tensor conv_in0_weight_, conv_in0_bias_;  // [bn_dim, idim, 3]
  Tensor conv_in2_weight_, conv_in2_bias_;  // [hidden, bn_dim, 3]
  std::vector<ConvNeXtBlock> blocks_;
  Tensor conv_out_weight_;  // [odim, hidden, 1]
  Tensor out_conv_weight_;  // [n_mels, dim, 3]
  Tensor coef_;             // [1, n_mels, 1]
  // GFSQ's project_out of every group as one block-diagonal linear: [dim, G·len(levels)] and
  // [dim], so that one linear maps every group's summed residual codes to the features.
  Tensor project_out_weight_, project_out_bias_;
};

}  // namespace voxd::chattts
