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

  // Reads `directory`/config.json. Throws voxd::InputError naming the file and the field for a
  // missing or malformed field, a missing weights file, or sizes that do not fit together (the
  // vocoder's upsampling against hop_length, its input channels against the mel's).
  static VoiceConfig load(const std::string& directory);
};

}  // namespace voxd::sambert
