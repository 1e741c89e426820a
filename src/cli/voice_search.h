// Voices by name: `--voice` takes a voice directory or the name of a voice found on a search
// path, the way a shell finds a command on PATH.
#pragma once

#include <string>
#include <vector>

namespace voxd {

// The directories voice names are looked up in, in order: those in VOXD_VOICES (colon-separated),
// the repository's voices/ when the executable runs from a build tree inside it, and the
// installed share/voxd/voices. Directories that do not exist are listed too.
std::vector<std::string> voice_search_path();

// The search path for messages: "a, b (missing), c".
std::string describe_voice_search_path();

struct FoundVoice {
  std::string name;
  std::string directory;
};

// Every voice on the search path, sorted by name; where two directories hold a voice of the same
// name, the earlier one's (the one resolve_voice gives).
std::vector<FoundVoice> voices_on_search_path();

// `voice` itself when it is an existing path or holds a '/', else the directory of the voice of
// that name on the search path. Throws voxd::InputError, listing the search path and the names
// found on it, for a name that is on none of it.
std::string resolve_voice(const std::string& voice);

// resolve_voice for each of `voices`.
std::vector<std::string> resolve_voices(const std::vector<std::string>& voices);

}  // namespace voxd
