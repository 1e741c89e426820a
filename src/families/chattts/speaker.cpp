#include "families/chattts/speaker.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/dtype.h"
#include "core/error.h"
#include "core/token_sampling.h"
#include "families/chattts/speaker_code.h"

namespace voxd::chattts {
namespace {

float to_half(float value) {
  return half_to_float(float_to_half(value));
}

// A salt that keeps the speaker's draws apart from the sampling draws of the same seed.
constexpr uint64_t kSpeakerDraws = 0x5bea4e5;

}  // namespace

Speakers::Speakers(const VoiceConfig& config) : config_(&config) {
  if (!config.speaker_weights_path.empty())
    file_ = SafetensorsFile::open(config.speaker_weights_path);
}

std::vector<float> Speakers::resolve(const std::string& spec, uint64_t seed, int64_t dim) const {
  const auto read = [&](const std::string& tensor) {
    const Tensor t = file_->get(tensor);
    if (t.numel() != dim) {
      throw InputError(config_->speaker_weights_path + ": tensor '" + tensor + "' has " +
                       std::to_string(t.numel()) + " values, the GPT takes " + std::to_string(dim));
    }
    return t.to_float_vector();
  };
  if (const auto named = config_->speakers.find(spec); named != config_->speakers.end()) {
    return read(named->second);
  }
  if (spec == kRandomSpeaker) {
    if (!config_->spk_stat) {
      throw InputError("voice '" + config_->name +
                       "' has no speaker statistics (spk_stat) to draw a random speaker from");
    }
    const std::vector<float> mean = read(config_->spk_stat->first);
    const std::vector<float> std = read(config_->spk_stat->second);
    std::vector<float> out(static_cast<size_t>(dim));
    for (size_t i = 0; i < out.size(); ++i) {
      // Box–Muller from two uniforms in (0, 1].
      const double u1 = 1.0 - uniform_draw(seed ^ kSpeakerDraws, i, 0);
      const double u2 = uniform_draw(seed ^ kSpeakerDraws, i, 1);
      const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      out[i] = to_half(static_cast<float>(normal * std[i] + mean[i]));
    }
    return out;
  }
  try {
    return decode_speaker(spec, dim);
  } catch (const InputError& e) {
    std::string known;
    for (const std::string& name : names()) known += (known.empty() ? "" : ", ") + name;
    throw InputError("speaker '" + (spec.size() > 40 ? spec.substr(0, 40) + "..." : spec) +
                     "' is neither a speaker of voice '" + config_->name + "' (" +
                     (known.empty() ? std::string("none") : known) +
                     ") nor a ChatTTS speaker string: " + e.what());
  }
}

std::vector<std::string> Speakers::names() const {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : config_->speakers) out.push_back(name);
  if (config_->spk_stat) out.push_back(kRandomSpeaker);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<float> normalize_speaker(std::span<const float> speaker) {
  float sum = 0.0f;
  std::vector<float> half(speaker.size());
  for (size_t i = 0; i < speaker.size(); ++i) {
    half[i] = to_half(speaker[i]);
    sum += half[i] * half[i];
  }
  const float norm = std::max(to_half(std::sqrt(sum)), 1e-12f);
  for (float& value : half) value = to_half(value / norm);
  return half;
}

}  // namespace voxd::chattts
