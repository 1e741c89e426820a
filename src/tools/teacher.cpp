#include "tools/teacher.h"

#include <espeak-ng/speak_lib.h>

#include <cstring>

#include "core/error.h"
#include "text/phonemizer.h"

namespace voxd::tools {
namespace {

// The utterance being spoken: eSpeak is process-global, and so is its callback's target.
Utterance* g_utterance = nullptr;
bool g_mnemonics = false;  // events named by mnemonic (not IPA)

// Appends eSpeak's audio and phoneme events to *g_utterance.
int collect(short* audio, int count, espeak_EVENT* events) {
  if (audio != nullptr && count > 0) {
    g_utterance->audio.insert(g_utterance->audio.end(), audio, audio + count);
  }
  for (espeak_EVENT* event = events; event->type != espeakEVENT_LIST_TERMINATED; ++event) {
    if (event->type != espeakEVENT_PHONEME) continue;
    // The name fills up to 8 bytes and is NUL-terminated only when shorter.
    const size_t length = strnlen(event->id.string, sizeof(event->id.string));
    std::string name(event->id.string, length);
    if (name.starts_with('_')) {
      name.clear();  // a pause mnemonic ("_", "_:", "_|")
    } else if (g_mnemonics) {
      name = text::mnemonic_phoneme(name);
    }
    g_utterance->events.push_back({std::move(name), event->sample});
  }
  return 0;
}

}  // namespace

EspeakTeacher::EspeakTeacher(const std::string& voice, text::PhonemeSet set) : voice_(voice) {
  const int ipa = set == text::PhonemeSet::EspeakIpa ? espeakINITIALIZE_PHONEME_IPA : 0;
  g_mnemonics = ipa == 0;
  const int rate =
      espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, nullptr,
                        espeakINITIALIZE_DONT_EXIT | espeakINITIALIZE_PHONEME_EVENTS | ipa);
  if (rate <= 0) {
    throw Error(
        "cannot initialise libespeak-ng (set ESPEAK_DATA_PATH to the folder that holds "
        "espeak-ng-data)");
  }
  if (rate != kSampleRate) {
    throw Error("eSpeak NG speaks at " + std::to_string(rate) + " Hz, expected " +
                std::to_string(kSampleRate));
  }
  if (espeak_SetVoiceByName(voice.c_str()) != EE_OK) {
    throw InputError("eSpeak NG has no voice '" + voice + "'");
  }
  espeak_SetSynthCallback(collect);
}

Utterance EspeakTeacher::speak(const std::string& sentence) {
  Utterance utterance;
  g_utterance = &utterance;
  const espeak_ERROR status = espeak_Synth(sentence.c_str(), sentence.size() + 1, 0, POS_CHARACTER,
                                           0, espeakCHARS_UTF8, nullptr, nullptr);
  g_utterance = nullptr;
  if (status != EE_OK) {
    throw Error("eSpeak NG failed to speak \"" + sentence + "\" (error " + std::to_string(status) +
                ")");
  }
  return utterance;
}

std::string EspeakTeacher::description() const {
  return "espeak-ng " + version() + " " + voice_;
}

std::string EspeakTeacher::version() {
  return espeak_Info(nullptr);
}

}  // namespace voxd::tools
