#include "families/sambert/sambert_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/config_fields.h"
#include "core/error.h"

namespace voxd {
namespace {

using nlohmann::json;

int64_t centre(int64_t filter_size) {
  // int(round((K − 1) / 2)) and int((K − 1) / 2) differ only for even K, where Python's round
  // goes to the even neighbour of x.5.
  return static_cast<int64_t>(std::nearbyint(static_cast<double>(filter_size - 1) / 2.0));
}

FsmnSizes read_fsmn(const json& p, const std::string& prefix, const std::string& where) {
  FsmnSizes s;
  s.filter_size = config::positive_int(p, prefix + "_filter_size", where);
  s.layers = config::positive_int(p, prefix + "_fsmn_num_layers", where);
  s.memory_units = config::positive_int(p, prefix + "_num_memory_units", where);
  s.ffn_inner = config::positive_int(p, prefix + "_ffn_inner_dim", where);
  if (p.contains(prefix + "_shift")) {
    const json& shift = p[prefix + "_shift"];
    if (!shift.is_number_integer()) {
      throw InputError(where + ": field '" + prefix + "_shift' must be a whole number, got " +
                       shift.dump());
    }
    s.shift = shift.get<int64_t>();
  }
  s.lstm_units = config::positive_int(p, prefix + "_lstm_units", where);
  if (s.left_padding() + s.right_padding() != s.filter_size - 1) {
    throw InputError(where + ": field '" + prefix + "_filter_size' is " +
                     std::to_string(s.filter_size) +
                     ", whose FSMN window does not keep the sequence length (KAN-TTS fails on "
                     "it too); use an odd size or a multiple of 4");
  }
  return s;
}

void require_divides(int64_t heads, int64_t units, const std::string& heads_field,
                     const std::string& where) {
  if (units % heads != 0) {
    throw InputError(where + ": field '" + heads_field + "' is " + std::to_string(heads) +
                     ", which does not divide the " + std::to_string(units) + " units");
  }
}

}  // namespace

int64_t FsmnSizes::left_padding() const {
  return centre(filter_size) + (shift > 0 ? shift : 0);
}

int64_t FsmnSizes::right_padding() const {
  return (filter_size - 1) / 2 - (shift > 0 ? shift : 0);
}

SambertConfig SambertConfig::from_json(const json& p, const std::string& where) {
  if (!p.is_object()) {
    throw InputError(where + ": expected Model.KanTtsSAMBERT.params as an object, got " + p.dump());
  }
  for (const char* variant : {"FP", "using_byte"}) {
    if (p.contains(variant) && p[variant].is_boolean() && p[variant].get<bool>()) {
      throw InputError(where + ": field '" + variant +
                       "' is true; voxd runs Sambert with phone, tone, syllable flag and word "
                       "segment input and not this variant yet");
    }
  }
  const auto flag = [&](const char* name) {
    if (!p.contains(name)) return false;
    if (!p[name].is_boolean()) {
      throw InputError(where + ": field '" + name + "' must be true or false, got " +
                       p[name].dump());
    }
    return p[name].get<bool>();
  };
  SambertConfig c;
  c.max_len = config::positive_int(p, "max_len", where);
  c.embedding_dim = config::positive_int(p, "embedding_dim", where);
  c.encoder_layers = config::positive_int(p, "encoder_num_layers", where);
  c.encoder_heads = config::positive_int(p, "encoder_num_heads", where);
  c.encoder_units = config::positive_int(p, "encoder_num_units", where);
  c.encoder_ffn_inner = config::positive_int(p, "encoder_ffn_inner_dim", where);
  c.projection_units = config::positive_int(p, "encoder_projection_units", where);
  c.speaker_units = config::positive_int(p, "speaker_units", where);
  c.emotion_units = config::positive_int(p, "emotion_units", where);
  c.predictor = read_fsmn(p, "predictor", where);
  c.duration_prenet_units = config::positive_int_list(p, "dur_pred_prenet_units", where);
  c.duration_lstm_units = config::positive_int(p, "dur_pred_lstm_units", where);
  c.decoder_prenet_units = config::positive_int_list(p, "decoder_prenet_units", where);
  c.decoder_layers = config::positive_int(p, "decoder_num_layers", where);
  c.decoder_heads = config::positive_int(p, "decoder_num_heads", where);
  c.decoder_units = config::positive_int(p, "decoder_num_units", where);
  c.decoder_ffn_inner = config::positive_int(p, "decoder_ffn_inner_dim", where);
  c.outputs_per_step = config::positive_int(p, "outputs_per_step", where);
  c.num_mels = config::positive_int(p, "num_mels", where);
  c.postnet = read_fsmn(p, "postnet", where);
  // SE (a personal voice's speaker embedding) needs nothing of the model: the converter writes
  // the embedding as the speaker table's rows.
  (void)flag("SE");
  c.nsf = flag("NSF");
  if (c.nsf) {
    if (c.num_mels < 3) {
      throw InputError(where + ": field 'num_mels' is " + std::to_string(c.num_mels) +
                       "; with NSF it holds the mel's channels, then f0 and voicing");
    }
    const std::string norm =
        p.contains("nsf_norm_type") ? config::string(p, "nsf_norm_type", where) : "mean_std";
    if (norm != "mean_std" && norm != "global") {
      throw InputError(where + ": field 'nsf_norm_type' is '" + norm +
                       "'; KAN-TTS knows 'mean_std' and 'global'");
    }
    c.f0_global_norm = norm == "global";
    if (p.contains("nsf_f0_global_minimum")) {
      c.f0_global_minimum = config::number(p, "nsf_f0_global_minimum", where);
    }
    if (p.contains("nsf_f0_global_maximum")) {
      c.f0_global_maximum = config::number(p, "nsf_f0_global_maximum", where);
    }
  }
  require_divides(c.encoder_heads, c.encoder_units, "encoder_num_heads", where);
  require_divides(c.decoder_heads, c.decoder_units, "decoder_num_heads", where);
  if (c.embedding_dim % 2 != 0 || c.embedding_dim < 4) {
    throw InputError(where +
                     ": field 'embedding_dim' must be even and at least 4 (its position "
                     "table holds sines and cosines), got " +
                     std::to_string(c.embedding_dim));
  }
  if (c.projection_units % 2 != 0) {
    throw InputError(where +
                     ": field 'encoder_projection_units' must be even (the duration "
                     "position encoding pairs sines and cosines), got " +
                     std::to_string(c.projection_units));
  }
  return c;
}

}  // namespace voxd
