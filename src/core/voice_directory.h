// Reading a voice directory's config.json (docs/voice-format.md), for every family and for the
// registry that picks a voice's family by the config's "type".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace voxd {

struct VoiceConfigFile {
  std::string directory;  // lexically normal
  std::string path;       // of config.json
  nlohmann::json root;    // a JSON object
};

// Reads `directory`/config.json. Throws voxd::InputError naming the directory or file when the
// directory or file is missing, the JSON is malformed or not an object, or "format" is not
// "voxd-voice".
VoiceConfigFile read_voice_config(const std::string& directory);

// config.json's "type": the family's name; `fallback` when the config has none.
std::string voice_family_type(const VoiceConfigFile& file, const std::string& fallback);

// The file `relative` names, relative to the voice directory `directory` (lexically normal).
// Throws voxd::InputError "<where>: file '<relative>' not found (looked for <path>)" when it is
// not a file.
std::string voice_file(const std::string& directory, const std::string& relative,
                       const std::string& where);

// Names of the voices in `root`: each subdirectory holding a config.json, sorted.
std::vector<std::string> find_voices(const std::string& root);

}  // namespace voxd
