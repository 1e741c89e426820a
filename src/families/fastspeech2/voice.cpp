#include "families/fastspeech2/voice.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/voice_directory.h"

namespace voxd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const json& require(const json& object, const std::string& key, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) {
    throw InputError(where + ": missing field '" + key + "'");
  }
  return object.at(key);
}

std::string require_string(const json& object, const std::string& key, const std::string& where) {
  const json& value = require(object, key, where);
  if (!value.is_string()) throw InputError(where + ": field '" + key + "' must be a string");
  return value.get<std::string>();
}

int64_t positive_int(const json& object, const std::string& key, int64_t fallback,
                     const std::string& where) {
  if (!object.contains(key)) return fallback;
  const json& value = object.at(key);
  if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
    throw InputError(where + ": field '" + key + "' must be a positive integer");
  }
  return value.get<int64_t>();
}

}  // namespace

VoiceConfig VoiceConfig::load(const std::string& directory) {
  const VoiceConfigFile file = read_voice_config(directory);
  const fs::path dir(file.directory);
  const std::string& where = file.path;
  const json& root = file.root;
  if (const std::string type = voice_family_type(file, kFastSpeech2HifiGanType);
      type != kFastSpeech2HifiGanType) {
    throw InputError(where + ": field 'type' is \"" + type + "\", not a " +
                     kFastSpeech2HifiGanType + " voice");
  }

  VoiceConfig config;
  config.directory = file.directory;
  config.name = root.value("name", dir.filename().string());
  config.language = root.value("language", std::string("en-us"));
  config.sample_rate = positive_int(root, "sample_rate", 22050, where);
  config.hop_length = positive_int(root, "hop_length", 256, where);
  config.n_mels = positive_int(root, "n_mels", 80, where);
  config.phonemes = require_string(root, "phonemes", where);
  if (config.phonemes != "arpabet" && config.phonemes != "espeak-ipa" &&
      config.phonemes != "espeak-mnemonic") {
    throw InputError(where +
                     ": field 'phonemes' must be \"arpabet\", \"espeak-ipa\" or "
                     "\"espeak-mnemonic\", got \"" +
                     config.phonemes + "\"");
  }
  config.symbols_path =
      voice_file(file.directory, root.value("symbols", std::string("symbols.txt")), where);
  if (root.contains("speakers")) {
    const json& speakers = root.at("speakers");
    if (!speakers.is_object()) throw InputError(where + ": field 'speakers' must be an object");
    for (const auto& [name, id] : speakers.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) {
        throw InputError(where + ": speaker '" + name + "' must map to a non-negative integer");
      }
      config.speakers[name] = id.get<int64_t>();
    }
  }

  const json& acoustic = require(root, "acoustic", where);
  const std::string acoustic_where = where + ": acoustic";
  if (acoustic.value("type", std::string("fastspeech2")) != "fastspeech2") {
    throw InputError(acoustic_where + ": field 'type' must be \"fastspeech2\"");
  }
  config.acoustic = FastSpeech2Config::from_json(acoustic, acoustic_where);
  config.acoustic.n_mels = config.n_mels;
  config.acoustic_weights_path = voice_file(
      file.directory, require_string(acoustic, "weights", acoustic_where), acoustic_where);

  const json& vocoder = require(root, "vocoder", where);
  const std::string vocoder_where = where + ": vocoder";
  if (vocoder.value("type", std::string("hifigan")) != "hifigan") {
    throw InputError(vocoder_where + ": field 'type' must be \"hifigan\"");
  }
  config.vocoder =
      HifiGanConfig::from_json(require(vocoder, "model", vocoder_where), vocoder_where + ".model");
  config.vocoder_weights_path =
      voice_file(file.directory, require_string(vocoder, "weights", vocoder_where), vocoder_where);

  if (config.vocoder.hop_length() != config.hop_length) {
    throw InputError(where + ": the vocoder's upsample rates multiply to " +
                     std::to_string(config.vocoder.hop_length()) + " but hop_length is " +
                     std::to_string(config.hop_length));
  }
  if (config.vocoder.num_mels != config.n_mels) {
    throw InputError(where + ": the vocoder expects " + std::to_string(config.vocoder.num_mels) +
                     " mel channels but n_mels is " + std::to_string(config.n_mels));
  }
  return config;
}

std::unique_ptr<Voice> Voice::load(Context& ctx, const std::string& directory, DType dtype,
                                   Parts parts) {
  std::unique_ptr<Voice> voice(new Voice());
  voice->config_ = VoiceConfig::load(directory);
  const VoiceConfig& config = voice->config_;
  if (parts == Parts::All) {
    auto weights = SafetensorsFile::open(config.acoustic_weights_path);
    voice->acoustic_ =
        std::make_unique<FastSpeech2>(FastSpeech2::load(ctx, config.acoustic, *weights, dtype));
  }
  auto weights = SafetensorsFile::open(config.vocoder_weights_path);
  voice->vocoder_ = std::make_shared<HifiGan>(HifiGan::load(ctx, config.vocoder, *weights, dtype));
  return voice;
}

int64_t Voice::speaker_id(const std::string& name) const {
  auto it = config_.speakers.find(name);
  if (it != config_.speakers.end()) return it->second;
  int64_t id = 0;
  const char* end = name.data() + name.size();
  auto [ptr, ec] = std::from_chars(name.data(), end, id);
  if (ec == std::errc() && ptr == end && id >= 0) return id;
  std::string known;
  for (const auto& [speaker, speaker_id] : config_.speakers) {
    known += (known.empty() ? "" : ", ") + speaker;
  }
  throw InputError("voice '" + config_.name + "' has no speaker '" + name + "'" +
                   (known.empty() ? " (it is single-speaker; use 0)" : " (known: " + known + ")"));
}

}  // namespace voxd
