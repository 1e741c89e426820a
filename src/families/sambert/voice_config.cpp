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
  if (c.vocoder.nsf.has_value() != c.acoustic.nsf) {
    throw InputError(vocoder_where + ".model: " +
                     (c.acoustic.nsf ? std::string("the acoustic model makes f0 and voicing for "
                                                   "an NSF vocoder, this one has no nsf_params")
                                     : std::string("nsf_params is set, but the acoustic model "
                                                   "makes no f0 (its NSF is false)")));
  }
  if (c.vocoder.in_channels != c.mel_channels()) {
    throw InputError(vocoder_where + ".model: field 'in_channels' is " +
                     std::to_string(c.vocoder.in_channels) + ", the acoustic model makes " +
                     std::to_string(c.mel_channels()) + " mel channels");
  }
  if (c.acoustic.nsf && c.acoustic.f0_global_norm) {
    c.f0_scale = c.acoustic.f0_global_maximum - c.acoustic.f0_global_minimum;
    c.f0_offset = c.acoustic.f0_global_minimum;
  } else if (c.acoustic.nsf) {
    const nlohmann::json& mvn = config::require(acoustic, "f0_mean_std", acoustic_where);
    if (!mvn.is_array() || mvn.size() != 2 || !mvn[0].is_number() || !mvn[1].is_number()) {
      throw InputError(acoustic_where +
                       ": field 'f0_mean_std' must be [mean, std] (from the voice's "
                       "am/mvn.npy), got " +
                       mvn.dump());
    }
    c.f0_offset = mvn[0].get<double>();
    c.f0_scale = mvn[1].get<double>();
  }
  return c;
}

}  // namespace voxd::sambert
