// The teachers of voxd's own voices: a synthesiser that speaks a sentence and says when each
// phoneme starts (eSpeak NG here; Festival in festival_teacher.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/symbols.h"
#include "tools/align.h"

namespace voxd::tools {

// One sentence as a teacher spoke it.
struct Utterance {
  std::vector<int16_t> audio;        // mono, at Teacher::kSampleRate
  std::vector<PhonemeEvent> events;  // in order; phoneme names, "" for pauses
};

// A synthesiser that teaches a voice: speaks a sentence and says when each phoneme starts.
class Teacher {
 public:
  // The rate every teacher's audio comes at (eSpeak NG's own; others are resampled to it).
  static constexpr int kSampleRate = 22050;

  virtual ~Teacher() = default;
  // Speaks `sentence` (UTF-8, already normalised). Error if the synthesiser fails.
  virtual Utterance speak(const std::string& sentence) = 0;
  // What spoke, for info.json: "espeak-ng 1.51 en-us", "festival 2.5.0 cmu_us_slt_arctic_hts".
  virtual std::string description() const = 0;
};

// eSpeak NG in synchronous mode with phoneme events (IPA names, or ASCII mnemonics), speaking with
// one fixed voice at its default rate and pitch (deterministic). libespeak-ng is process-global:
// use one EspeakTeacher per process, from one thread. Construct it after a voxd Phonemizer (a
// FrontEnd holds one) has initialised eSpeak: the Phonemizer initialises without phoneme events,
// so the teacher re-initialises eSpeak with them and then selects the voice again for both.
class EspeakTeacher final : public Teacher {
 public:
  // Events named in `set`'s phonemes (IPA for PhonemeSet::EspeakIpa, else mnemonics). Error if
  // eSpeak cannot be initialised or its rate is not kSampleRate; InputError if it has no voice
  // `voice`.
  EspeakTeacher(const std::string& voice, text::PhonemeSet set);
  EspeakTeacher(const EspeakTeacher&) = delete;
  EspeakTeacher& operator=(const EspeakTeacher&) = delete;

  Utterance speak(const std::string& sentence) override;
  std::string description() const override;

  // eSpeak NG's version ("1.51").
  static std::string version();

 private:
  std::string voice_;
};

}  // namespace voxd::tools
