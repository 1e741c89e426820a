// The sizes of a KAN-TTS Sambert acoustic model: the `Model.KanTtsSAMBERT.params` block of its
// config.yaml (kantts/configs/sambert_16k.yaml and its variants), under the original's field
// names. Vocabulary sizes are not part of it: they come from the checkpoint's embedding tables.
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace voxd {

// An FSMN encoder's sizes (the pitch and energy predictors' and the postnet's).
struct FsmnSizes {
  int64_t filter_size = 41;
  int64_t layers = 3;
  int64_t memory_units = 128;
  int64_t ffn_inner = 256;
  int64_t shift = 0;  // a negative shift is read and, as in the original, has no effect
  int64_t lstm_units = 128;
  // The memory block's window over context frames [t − left, t + right] (MemoryBlockV2: the
  // shift moves it into the past only when positive; right may then be negative).
  int64_t left_padding() const;
  int64_t right_padding() const;
};

struct SambertConfig {
  int64_t max_len = 800;
  int64_t embedding_dim = 512;
  int64_t encoder_layers = 8;
  int64_t encoder_heads = 8;
  int64_t encoder_units = 128;
  int64_t encoder_ffn_inner = 1024;
  int64_t projection_units = 32;
  int64_t speaker_units = 32;
  int64_t emotion_units = 32;
  FsmnSizes predictor{41, 3, 128, 256, 0, 128};
  std::vector<int64_t> duration_prenet_units{128, 128};
  int64_t duration_lstm_units = 128;
  std::vector<int64_t> decoder_prenet_units{256, 256};
  int64_t decoder_layers = 12;
  int64_t decoder_heads = 8;
  int64_t decoder_units = 128;
  int64_t decoder_ffn_inner = 1024;
  int64_t outputs_per_step = 3;
  int64_t num_mels = 80;  // with NSF, the mel's channels and then f0 and voicing
  FsmnSizes postnet{41, 4, 256, 512, 17, 128};
  // NSF: the last two of num_mels are a normalised f0 and a voicing, for a HiFiGAN-NSF vocoder;
  // nsf_norm_type "global" maps f0 back with nsf_f0_global_minimum/maximum, "mean_std" with the
  // voice's mvn.npy (the voice's config carries it).
  bool nsf = false;
  bool f0_global_norm = false;
  double f0_global_minimum = 30.0;
  double f0_global_maximum = 730.0;

  // Reads the params block `params` (unknown fields, such as the dropouts, are ignored). The
  // variants voxd does not run yet — filled-pause insertion (FP) and byte input (using_byte) —
  // are refused by name, as are sizes the original cannot build (heads that do not divide the
  // units, an FSMN filter whose window does not keep the length, NSF with fewer than three mel
  // channels). Throws voxd::InputError "<where>: field '<name>' ...".
  static SambertConfig from_json(const nlohmann::json& params, const std::string& where);

  // Width of the decoder's memory: r text frames, the speaker and the emotion.
  int64_t memory_units() const {
    return outputs_per_step * projection_units + speaker_units + emotion_units;
  }
  // Width of the variance predictors' input: text, speaker, emotion.
  int64_t predictor_input_units() const { return projection_units + speaker_units + emotion_units; }
  // Decoder frames before and after a postnet frame that it depends on.
  int64_t postnet_context() const {
    return postnet.layers * std::max<int64_t>(0, postnet.left_padding());
  }
  int64_t postnet_lookahead() const {
    return postnet.layers * std::max<int64_t>(0, postnet.right_padding());
  }
};

}  // namespace voxd
