#include "families/chattts/model_config.h"

#include <nlohmann/json.hpp>

#include "core/config_fields.h"
#include "core/error.h"

namespace voxd::chattts {

using nlohmann::json;

GptConfig GptConfig::from_json(const json& j, const std::string& where) {
  GptConfig c;
  c.hidden_size = config::positive_int(j, "hidden_size", where);
  c.intermediate_size = config::positive_int(j, "intermediate_size", where);
  c.num_attention_heads = config::positive_int(j, "num_attention_heads", where);
  c.num_hidden_layers = config::positive_int(j, "num_hidden_layers", where);
  c.max_position_embeddings = config::positive_int(j, "max_position_embeddings", where);
  c.rms_norm_eps = config::positive_number(j, "rms_norm_eps", where);
  c.rope_theta = config::positive_number(j, "rope_theta", where);
  c.num_vq = config::positive_int(j, "num_vq", where);
  c.num_audio_tokens = config::positive_int(j, "num_audio_tokens", where);
  c.num_text_tokens = config::positive_int(j, "num_text_tokens", where);
  if (c.hidden_size % c.num_attention_heads != 0 || c.head_dim() % 2 != 0) {
    throw InputError(where + ": hidden_size " + std::to_string(c.hidden_size) +
                     " must split into num_attention_heads " +
                     std::to_string(c.num_attention_heads) + " heads of an even size");
  }
  if (j.contains("head_dim") && !j.at("head_dim").is_null() &&
      config::positive_int(j, "head_dim", where) != c.head_dim()) {
    throw InputError(where + ": field 'head_dim' must be hidden_size / num_attention_heads (" +
                     std::to_string(c.head_dim()) + ")");
  }
  if (j.contains("num_key_value_heads") && !j.at("num_key_value_heads").is_null() &&
      config::positive_int(j, "num_key_value_heads", where) != c.num_attention_heads) {
    throw InputError(where +
                     ": field 'num_key_value_heads' must equal num_attention_heads (ChatTTS's "
                     "GPT has no grouped-query attention)");
  }
  if (j.contains("hidden_act") && config::string(j, "hidden_act", where) != "silu") {
    throw InputError(where + ": field 'hidden_act' must be \"silu\"");
  }
  return c;
}

ConvNeXtDecoderConfig ConvNeXtDecoderConfig::from_json(const json& j, const std::string& where) {
  ConvNeXtDecoderConfig c;
  c.idim = config::positive_int(j, "idim", where);
  c.odim = config::positive_int(j, "odim", where);
  c.hidden = config::positive_int(j, "hidden", where);
  c.n_layer = config::non_negative_int(j, "n_layer", where);
  c.bn_dim = config::positive_int(j, "bn_dim", where);
  c.kernel = config::positive_int(j, "kernel", where);
  c.dilation = config::positive_int(j, "dilation", where);
  if (c.kernel % 2 != 1) throw InputError(where + ": field 'kernel' must be odd");
  return c;
}

int64_t GfsqConfig::codebook_size() const {
  int64_t size = 1;
  for (int64_t level : levels) size *= level;
  return size;
}

GfsqConfig GfsqConfig::from_json(const json& j, const std::string& where) {
  GfsqConfig c;
  c.dim = config::positive_int(j, "dim", where);
  c.levels = config::positive_int_list(j, "levels", where);
  c.groups = config::positive_int(j, "G", where);
  c.residuals = config::positive_int(j, "R", where);
  for (int64_t level : c.levels) {
    if (level < 3 || level % 2 != 1) {
      throw InputError(where + ": field 'levels' must hold odd numbers >= 3 (FSQ levels)");
    }
  }
  if (c.dim % c.groups != 0) {
    throw InputError(where + ": field 'dim' must be a multiple of G");
  }
  return c;
}

DvaeConfig DvaeConfig::from_json(const json& j, const std::string& where, bool flat) {
  DvaeConfig c;
  c.decoder = ConvNeXtDecoderConfig::from_json(flat ? j : config::require(j, "decoder", where),
                                               flat ? where : where + ".decoder");
  c.dim = config::positive_int(j, "dim", where);
  if (c.dim != c.decoder.odim) {
    throw InputError(where + ": field 'dim' must equal the decoder's odim (" +
                     std::to_string(c.decoder.odim) + ")");
  }
  if (!flat && j.contains("vq") && !j.at("vq").is_null()) {
    c.vq = GfsqConfig::from_json(j.at("vq"), where + ".vq");
    if (c.vq->dim != 2 * c.decoder.idim) {
      throw InputError(where + ": the decoder's idim must be half of vq.dim (" +
                       std::to_string(c.vq->dim / 2) + ")");
    }
  }
  return c;
}

VocosConfig VocosConfig::from_json(const json& j, const std::string& where) {
  VocosConfig c;
  c.input_channels = config::positive_int(j, "input_channels", where);
  c.dim = config::positive_int(j, "dim", where);
  c.intermediate_dim = config::positive_int(j, "intermediate_dim", where);
  c.num_layers = config::non_negative_int(j, "num_layers", where);
  c.n_fft = config::positive_int(j, "n_fft", where);
  c.hop_length = config::positive_int(j, "hop_length", where);
  if (j.contains("padding") && config::string(j, "padding", where) != "center") {
    throw InputError(where + ": field 'padding' must be \"center\" (ChatTTS's Vocos)");
  }
  if (j.contains("win_length") && config::positive_int(j, "win_length", where) != c.n_fft) {
    throw InputError(where + ": field 'win_length' must equal n_fft");
  }
  if (c.n_fft % 2 != 0) throw InputError(where + ": field 'n_fft' must be even");
  return c;
}

}  // namespace voxd::chattts
