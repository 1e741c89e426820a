#include "families/sambert/voice_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/config_fields.h"
#include "core/error.h"
#include "core/voice_directory.h"

namespace voxd::sambert {

VoiceConfig VoiceConfig::load(const std::string& directory) {
  const VoiceConfigFile file = read_voice_config(directory);
  const std::string& where = file.path;
  const nlohmann::json& root = file.root;
  if (voice_family_type(file, "") != kSambertType) {
    throw InputError(where + ": field 'type' must be \"sambert\" for a Sambert-HiFiGAN voice");
  }
  const nlohmann::json& acoustic = config::require(root, "acoustic", where);
  const nlohmann::json& vocoder = config::require(root, "vocoder", where);
  const std::string acoustic_where = where + ": acoustic";
  const std::string vocoder_where = where + ": vocoder";
  VoiceConfig c{
      .directory = file.directory,
      .name = root.contains("name") ? config::string(root, "name", where)
                                    : std::filesystem::path(file.directory).filename().string(),
      .language = config::string(root, "language", where),
      .sample_rate = config::positive_int(root, "sample_rate", where),
      .hop_length = config::positive_int(root, "hop_length", where),
      .acoustic = SambertConfig::from_json(config::require(acoustic, "model", acoustic_where),
                                           acoustic_where + ".model"),
      .symbols = SambertSymbols::from_json(config::require(acoustic, "symbols", acoustic_where),
                                           acoustic_where + ".symbols"),
      .acoustic_weights_path = voice_file(
          file.directory, config::string(acoustic, "weights", acoustic_where), acoustic_where),
      .vocoder = KanTtsHifiGanConfig::from_json(config::require(vocoder, "model", vocoder_where),
                                                vocoder_where + ".model"),
      .vocoder_weights_path = voice_file(
          file.directory, config::string(vocoder, "weights", vocoder_where), vocoder_where),
  };
  if (c.vocoder.hop_length() != c.hop_length) {
    throw InputError(vocoder_where + ".model: the upsample scales multiply to " +
                     std::to_string(c.vocoder.hop_length()) + ", the voice's hop_length is " +
                     std::to_string(c.hop_length));
  }
  if (c.vocoder.in_channels != c.acoustic.num_mels) {
    throw InputError(vocoder_where + ".model: field 'in_channels' is " +
                     std::to_string(c.vocoder.in_channels) + ", the acoustic model makes " +
                     std::to_string(c.acoustic.num_mels) + " mel channels");
  }
  return c;
}

}  // namespace voxd::sambert
