// The text front end: text (plain, Markdown, HTML or SSML) → normalised sentences → phonemes →
// the voice's symbol ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/phonemizer.h"
#include "text/scripts.h"
#include "text/symbols.h"

namespace voxd::text {

// One sentence ready for the acoustic model.
struct Sentence {
  std::string text;                   // the normalised sentence
  std::vector<std::string> phonemes;  // as the phonemizer produced them
  std::vector<int64_t> ids;           // symbol ids of the phonemes that the voice knows
  size_t dropped = 0;                 // phonemes without a symbol in the voice, left out of ids
  int pause_after_ms = 0;             // silence to insert after the sentence (SSML <break>)
  float rate = 1.0f;                  // speed multiplier for this sentence (<prosody rate>)
};

// What the front end made of a text: the normalised text as split into sentences (one line
// per stretch between breaks and rate changes) and the sentences.
struct Analysis {
  std::string normalized;
  std::vector<Sentence> sentences;
};

// Turns text into symbol ids for one voice. process() is const and safe to call from several
// threads at once.
class FrontEnd {
 public:
  // A front end for a voice whose symbols are `set` phonemes of eSpeak voice `language`.
  FrontEnd(PhonemeSet set, SymbolTable symbols, std::string language = "en-us");

  // Removes markup (text/markup.h), normalises, splits and phonemises `text`; sentences that
  // yield no ids are left out (a pause after one moves to the sentence before). ARPAbet phoneme
  // X is looked up as symbol "@X", an IPA token as itself. InputError("text is empty") for
  // empty or whitespace-only text, InputError naming the script for letters the language cannot
  // speak (ScriptCheck), InputError("text has nothing to pronounce...") when no sentence yields
  // an id, and markup's InputErrors.
  std::vector<Sentence> process(std::string_view text) const;

  // process(), with the normalised text it split.
  Analysis analyze(std::string_view text) const;

  // The longest sentence, in bytes, that process() passes to the phonemizer.
  static constexpr size_t kMaxSentenceBytes = 400;

  PhonemeSet phoneme_set() const { return set_; }
  const SymbolTable& symbols() const { return symbols_; }
  const std::string& language() const { return language_; }

 private:
  // One normalised sentence's phonemes and ids.
  Sentence phonemize(std::string text) const;

  PhonemeSet set_;
  SymbolTable symbols_;
  std::string language_;
  ScriptCheck script_check_;
  Phonemizer phonemizer_;
};

}  // namespace voxd::text
