#include "cli/voice_search.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <system_error>

#include "core/error.h"
#include "core/voice_directory.h"

namespace voxd {
namespace fs = std::filesystem;
namespace {

// The repository's voices/ when the executable is build/src/cli/voxd inside a checkout (the
// directory three levels up holds the top CMakeLists.txt); empty otherwise.
std::string repository_voices() {
  std::error_code error;
  const fs::path executable = fs::canonical("/proc/self/exe", error);
  if (error) return {};
  const fs::path root = executable.parent_path().parent_path().parent_path().parent_path();
  if (!fs::is_regular_file(root / "CMakeLists.txt", error)) return {};
  return (root / "voices").string();
}

bool has_voice_config(const std::string& directory) {
  std::error_code error;
  return fs::is_regular_file(fs::path(directory) / "config.json", error);
}

}  // namespace

std::vector<std::string> voice_search_path() {
  std::vector<std::string> path;
  if (const char* variable = std::getenv("VOXD_VOICES")) {
    const std::string list = variable;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t end = std::min(list.find(':', start), list.size());
      if (end > start) path.push_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  if (std::string repository = repository_voices(); !repository.empty()) {
    path.push_back(std::move(repository));
  }
  path.emplace_back(VOXD_INSTALLED_VOICES_DIR);
  return path;
}

std::string describe_voice_search_path() {
  std::string description;
  for (const std::string& root : voice_search_path()) {
    std::error_code error;
    description += (description.empty() ? "" : ", ") + root +
                   (fs::is_directory(root, error) ? "" : " (missing)");
  }
  return description;
}

std::vector<FoundVoice> voices_on_search_path() {
  std::map<std::string, std::string> first_directory;
  for (const std::string& root : voice_search_path()) {
    std::error_code error;
    if (!fs::is_directory(root, error)) continue;
    for (const std::string& name : find_voices(root)) {
      first_directory.try_emplace(name, (fs::path(root) / name).string());
    }
  }
  std::vector<FoundVoice> voices;
  for (const auto& [name, directory] : first_directory) voices.push_back({name, directory});
  return voices;
}

std::string resolve_voice(const std::string& voice) {
  std::error_code error;
  if (fs::exists(voice, error) || voice.find('/') != std::string::npos) return voice;
  for (const std::string& root : voice_search_path()) {
    const std::string directory = (fs::path(root) / voice).string();
    if (has_voice_config(directory)) return directory;
  }
  std::string names;
  for (const FoundVoice& found : voices_on_search_path()) {
    names += (names.empty() ? "" : ", ") + found.name;
  }
  throw InputError(
      "no voice directory or voice named '" + voice + "': looked in " +
      describe_voice_search_path() +
      " (set VOXD_VOICES to add directories); voices found: " + (names.empty() ? "none" : names));
}

std::vector<std::string> resolve_voices(const std::vector<std::string>& voices) {
  std::vector<std::string> directories;
  for (const std::string& voice : voices) directories.push_back(resolve_voice(voice));
  return directories;
}

}  // namespace voxd
