#include "scheduler/family.h"

#include "core/error.h"
#include "core/voice_directory.h"

namespace voxd::scheduler {

void require_plain_text(const SpeechOptions& options, const std::string& voice) {
  if (options.emotion) {
    throw OptionError("voice '" + voice + "' has no emotions to choose from", "emotion");
  }
  if (options.input_format != InputFormat::kText) {
    throw OptionError("voice '" + voice + "' reads text; KAN-TTS symbols are for Sambert voices",
                      "input_format");
  }
}

void FamilyRegistry::add(std::unique_ptr<Family> family) {
  VOXD_CHECK(find(family->type()) == nullptr,
             "family '" + std::string(family->type()) + "' is registered twice");
  families_.push_back(std::move(family));
}

const Family* FamilyRegistry::find(std::string_view type) const {
  for (const auto& family : families_) {
    if (family->type() == type) return family.get();
  }
  return nullptr;
}

const Family& FamilyRegistry::family_of(const std::string& directory) const {
  VOXD_CHECK(!families_.empty(), "no model family is registered");
  const VoiceConfigFile file = read_voice_config(directory);
  const std::string type = voice_family_type(file, std::string(families_.front()->type()));
  if (const Family* family = find(type)) return *family;
  std::string known;
  for (const auto& family : families_) {
    known += (known.empty() ? "\"" : ", \"") + std::string(family->type()) + "\"";
  }
  throw InputError(file.path + ": field 'type' is \"" + type +
                   "\", which this voxd does not know (" + known + ")");
}

}  // namespace voxd::scheduler
