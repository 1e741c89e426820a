// The teacher: eSpeak NG speaking a sentence, with the start sample of every phoneme it speaks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/symbols.h"
#include "tools/align.h"

namespace voxd::tools {

// One sentence as eSpeak spoke it.
struct Utterance {
  std::vector<int16_t> audio;        // mono, at Teacher::kSampleRate
  std::vector<PhonemeEvent> events;  // in order; IPA names or mnemonics, "" for pauses
};

// eSpeak NG in synchronous mode with phoneme events (IPA names, or ASCII mnemonics), speaking with
// one fixed voice at its default rate and pitch (deterministic). libespeak-ng is process-global:
// use one Teacher per process, from one thread. Construct it after a voxd Phonemizer (a
// FrontEnd holds one) has initialised eSpeak: the Phonemizer initialises without phoneme events,
// so the Teacher re-initialises eSpeak with them and then selects the voice again for both.
class Teacher {
 public:
  // eSpeak's native sample rate, which the teacher data keeps.
  static constexpr int kSampleRate = 22050;

  // Events named in `set`'s phonemes (IPA for PhonemeSet::EspeakIpa, else mnemonics). Error if
  // eSpeak cannot be initialised or its rate is not kSampleRate; InputError if it has no voice
  // `voice`.
  Teacher(const std::string& voice, text::PhonemeSet set);
  Teacher(const Teacher&) = delete;
  Teacher& operator=(const Teacher&) = delete;

  // Speaks `sentence` (UTF-8, already normalised). Error if eSpeak fails.
  Utterance speak(const std::string& sentence);

  // eSpeak NG's version ("1.51").
  static std::string version();
};

}  // namespace voxd::tools
