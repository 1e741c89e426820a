#include "core/voice_directory.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace voxd {

namespace fs = std::filesystem;

VoiceConfigFile read_voice_config(const std::string& directory) {
  const fs::path dir(directory);
  if (!fs::is_directory(dir)) throw InputError("voice directory not found: " + directory);
  const fs::path config_path = dir / "config.json";
  if (!fs::is_regular_file(config_path)) {
    throw InputError("not a voice directory (no config.json): " + directory);
  }
  VoiceConfigFile file;
  file.directory = dir.lexically_normal().string();
  file.path = config_path.string();
  std::ifstream in(config_path);
  if (!in) throw InputError("cannot read " + file.path);
  try {
    file.root = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(file.path + ": not valid JSON: " + e.what());
  }
  if (!file.root.is_object()) throw InputError(file.path + ": expected a JSON object");
  if (file.root.contains("format") && file.root.at("format") != "voxd-voice") {
    throw InputError(file.path + ": field 'format' must be \"voxd-voice\"");
  }
  return file;
}

std::string voice_family_type(const VoiceConfigFile& file, const std::string& fallback) {
  if (!file.root.contains("type")) return fallback;
  const nlohmann::json& type = file.root.at("type");
  if (!type.is_string()) throw InputError(file.path + ": field 'type' must be a string");
  return type.get<std::string>();
}

std::string voice_file(const std::string& directory, const std::string& relative,
                       const std::string& where) {
  const fs::path path = fs::path(directory) / relative;
  if (!fs::is_regular_file(path)) {
    throw InputError(where + ": file '" + relative + "' not found (looked for " + path.string() +
                     ")");
  }
  return path.lexically_normal().string();
}

std::vector<std::string> find_voices(const std::string& root) {
  if (!fs::is_directory(root)) throw InputError("not a directory: " + root);
  std::vector<std::string> voices;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory() && fs::is_regular_file(entry.path() / "config.json")) {
      voices.push_back(entry.path().filename().string());
    }
  }
  std::sort(voices.begin(), voices.end());
  return voices;
}

}  // namespace voxd
