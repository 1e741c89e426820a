// A voice of the FastSpeech2 + HiFiGAN family: an acoustic model plus a vocoder, loaded from a
// voice directory (docs/voice-format.md). VoiceConfig reads and validates config.json without
// touching the weights; Voice loads both models onto a context's device.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/safetensors.h"
#include "families/fastspeech2/fastspeech2.h"
#include "families/fastspeech2/hifigan.h"

namespace voxd {

// The family's "type" in config.json; also the family of configs that name none.
inline constexpr const char* kFastSpeech2HifiGanType = "fastspeech2-hifigan";

struct VoiceConfig {
  std::string directory;
  std::string name;
  std::string language;
  int64_t sample_rate = 22050;
  int64_t hop_length = 256;
  int64_t n_mels = 80;
  std::string phonemes;      // "arpabet", "espeak-ipa" or "espeak-mnemonic"
  std::string symbols_path;  // absolute or relative to the working directory
  std::map<std::string, int64_t> speakers;
  FastSpeech2Config acoustic;
  std::string acoustic_weights_path;
  HifiGanConfig vocoder;
  std::string vocoder_weights_path;

  // Reads `directory`/config.json. Throws voxd::InputError naming the file and the field when
  // the directory or file is missing, the JSON is malformed, or a value is out of range.
  static VoiceConfig load(const std::string& directory);
};

class Voice {
 public:
  enum class Parts { All, VocoderOnly };

  // Loads the config and the models onto ctx's device in `dtype`. Errors name the file and the
  // tensor or field.
  static std::unique_ptr<Voice> load(Context& ctx, const std::string& directory,
                                     DType dtype = DType::F32, Parts parts = Parts::All);

  const VoiceConfig& config() const { return config_; }
  bool has_acoustic() const { return acoustic_ != nullptr; }
  // Requires has_acoustic().
  const FastSpeech2& acoustic() const { return *acoustic_; }
  const HifiGan& vocoder() const { return *vocoder_; }
  // Speaker id for `name`, or the number itself when `name` is an integer; InputError otherwise.
  int64_t speaker_id(const std::string& name) const;

 private:
  Voice() = default;
  VoiceConfig config_;
  std::unique_ptr<FastSpeech2> acoustic_;
  std::shared_ptr<HifiGan> vocoder_;
};

}  // namespace voxd
