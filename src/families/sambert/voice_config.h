// A Sambert-HiFiGAN voice directory's config.json ("type": "sambert", docs/voice-format.md), as
// tools/convert_checkpoint.py --kantts writes it: the acoustic model's KAN-TTS params and symbol
// lists, the vocoder's params, the audio settings and where the weights are.
#pragma once

#include <cstdint>
#include <string>

#include "families/sambert/hifigan.h"
#include "families/sambert/sambert_config.h"
#include "families/sambert/symbols.h"

namespace voxd::sambert {

inline constexpr const char* kSambertType = "sambert";

struct VoiceConfig {
  std::string directory;
  std::string name;
  std::string language;  // "zh-cn" for KAN-TTS's PinYin inventory
  int64_t sample_rate = 16000;
  int64_t hop_length = 200;

  SambertConfig acoustic;
  SambertSymbols symbols;
  std::string acoustic_weights_path;
  KanTtsHifiGanConfig vocoder;
  std::string vocoder_weights_path;
  // NSF voices: the acoustic model's f0 channel maps back to Hz as f0 · f0_scale + f0_offset
  // (KAN-TTS's denorm_f0: its global range, or the voice's mvn.npy std and mean, which the
  // converter writes as acoustic.f0_mean_std).
  double f0_scale = 1.0;
  double f0_offset = 0.0;

  // The vocoder's mel channels: the acoustic model's, less f0 and voicing for NSF.
  int64_t mel_channels() const { return acoustic.num_mels - (acoustic.nsf ? 2 : 0); }

  // Reads `directory`/config.json. Throws voxd::InputError naming the file and the field for a
  // missing or malformed field, a missing weights file, or sizes that do not fit together (the
  // vocoder's upsampling against hop_length, its input channels against the mel's, NSF on one
  // side only).
  static VoiceConfig load(const std::string& directory);
};

}  // namespace voxd::sambert
