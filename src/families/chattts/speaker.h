// The speaker a ChatTTS request asks for, as the vector the GPT's [spk_emb] position takes: a
// speaker the voice names, a random one drawn from the voice's spk_stat with a seed, or a spk_emb
// string copied from ChatTTS (speaker_code.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "families/chattts/voice_config.h"

namespace voxd::chattts {

// The name that asks for a random speaker.
inline constexpr const char* kRandomSpeaker = "random";

class Speakers {
 public:
  // Opens the voice's speaker file, when it has one.
  explicit Speakers(const VoiceConfig& config);

  // `spec`'s speaker vector of `dim` values: a named speaker, kRandomSpeaker (mean + std · a
  // normal draw per value from `seed`, rounded to float16 as ChatTTS's strings hold it; voxd's
  // draws, not torch's, so a seed does not give the original's speaker), or a spk_emb string.
  // InputError naming the speaker for anything else.
  std::vector<float> resolve(const std::string& spec, uint64_t seed, int64_t dim) const;

  // The names a request may use (sorted), kRandomSpeaker among them when the voice has spk_stat.
  std::vector<std::string> names() const;

 private:
  const VoiceConfig* config_;
  std::shared_ptr<SafetensorsFile> file_;
};

// F.normalize(p=2) as ChatTTS applies it to the float16 speaker vector: the norm of the
// float16 values accumulated in float32 and rounded to float16, each value divided in float32
// and rounded to float16; returned as floats.
std::vector<float> normalize_speaker(std::span<const float> speaker);

}  // namespace voxd::chattts
