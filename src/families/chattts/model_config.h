// The sizes of ChatTTS's networks as a voice's config.json gives them (docs/voice-format.md,
// "ChatTTS voices"): the GPT (transformers' Llama at ChatTTS's sizes), the ConvNeXt decoders of
// the Decoder and the DVAE, and Vocos.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace voxd::chattts {

struct GptConfig {
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_attention_heads = 12;
  int64_t num_hidden_layers = 20;
  int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t num_vq = 4;
  int64_t num_audio_tokens = 626;
  int64_t num_text_tokens = 21178;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // Reads the "gpt" section; InputError "<where>: field '...' ..." for a missing or bad size
  // (hidden_size not a multiple of the heads, an odd head_dim, key/value heads other than the
  // attention heads, an activation other than silu).
  static GptConfig from_json(const nlohmann::json& j, const std::string& where);
};

// dvae.py's DVAEDecoder: conv_in (k3 → bn_dim, GELU, k3 → hidden), n_layer ConvNeXt blocks
// (depthwise k `kernel` with `dilation`, 4·hidden inside), conv_out (k1 → odim).
struct ConvNeXtDecoderConfig {
  int64_t idim = 0;
  int64_t odim = 0;
  int64_t hidden = 0;
  int64_t n_layer = 0;
  int64_t bn_dim = 0;
  int64_t kernel = 7;
  int64_t dilation = 2;

  static ConvNeXtDecoderConfig from_json(const nlohmann::json& j, const std::string& where);
};

// GFSQ (grouped residual finite scalar quantisation): each code is a number of len(levels)
// digits; G groups of R residuals make the num_vq = G·R code columns.
struct GfsqConfig {
  int64_t dim = 0;  // the features' channels (dim / G per group)
  std::vector<int64_t> levels;
  int64_t groups = 0;     // G
  int64_t residuals = 0;  // R

  // Codes per column: the product of the levels.
  int64_t codebook_size() const;
  static GfsqConfig from_json(const nlohmann::json& j, const std::string& where);
};

// The Decoder (GPT hidden states → mel) and the DVAE (codes → mel) share this shape; only the
// DVAE has a quantizer.
struct DvaeConfig {
  ConvNeXtDecoderConfig decoder;
  int64_t dim = 0;  // out_conv's input channels (the decoder's odim)
  int64_t n_mels = 100;
  std::optional<GfsqConfig> vq;

  // Reads the "decoder" section (the decoder's fields and "dim" side by side) when `flat`, else
  // the "dvae" section ({"decoder": {...}, "dim", "vq"}).
  static DvaeConfig from_json(const nlohmann::json& j, const std::string& where, bool flat);
};

// Vocos (gemelo-ai/vocos) as ChatTTS configures it: a ConvNeXt backbone and the ISTFT head.
struct VocosConfig {
  int64_t input_channels = 100;
  int64_t dim = 512;
  int64_t intermediate_dim = 1536;
  int64_t num_layers = 8;
  int64_t n_fft = 1024;
  int64_t hop_length = 256;

  static VocosConfig from_json(const nlohmann::json& j, const std::string& where);
};

}  // namespace voxd::chattts
