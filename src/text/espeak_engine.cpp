#include "text/espeak_engine.h"

#include <espeak-ng/speak_lib.h>

#include <mutex>

#include "core/error.h"

namespace voxd::text {
namespace {

// Guards every call into libespeak-ng and the state below.
std::mutex& espeak_mutex() {
  static std::mutex mutex;
  return mutex;
}
bool g_initialized = false;
std::string g_voice;

void initialize_locked() {
  if (g_initialized) return;
  const int rate =
      espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, nullptr, espeakINITIALIZE_DONT_EXIT);
  if (rate <= 0) throw Error("cannot initialise libespeak-ng (is espeak-ng-data installed?)");
  g_initialized = true;
}

void select_voice_locked(const std::string& language) {
  if (language == g_voice) return;
  if (language.empty() || espeak_SetVoiceByName(language.c_str()) != EE_OK) {
    g_voice.clear();
    throw InputError("eSpeak NG has no voice for language '" + language + "'");
  }
  g_voice = language;
}

}  // namespace

void initialize_espeak() {
  std::lock_guard<std::mutex> lock(espeak_mutex());
  initialize_locked();
}

std::vector<std::string> espeak_phonemes_in_process(const std::vector<std::string>& clauses,
                                                    const std::string& language, int phoneme_mode) {
  std::vector<std::string> raws(clauses.size());
  std::lock_guard<std::mutex> lock(espeak_mutex());
  initialize_locked();
  select_voice_locked(language);
  for (size_t i = 0; i < clauses.size(); ++i) {
    const void* p = clauses[i].c_str();
    while (p != nullptr) {
      const char* out = espeak_TextToPhonemes(&p, espeakCHARS_UTF8, phoneme_mode);
      if (out == nullptr) break;
      raws[i] += out;
      raws[i] += ' ';
    }
  }
  return raws;
}

}  // namespace voxd::text
