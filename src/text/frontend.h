// The text front end: text → normalised sentences → phonemes → the voice's symbol ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/phonemizer.h"
#include "text/symbols.h"

namespace voxd::text {

// One sentence ready for the acoustic model.
struct Sentence {
  std::string text;                   // the normalised sentence
  std::vector<std::string> phonemes;  // as the phonemizer produced them
  std::vector<int64_t> ids;           // symbol ids of the phonemes that the voice knows
  size_t dropped = 0;                 // phonemes without a symbol in the voice, left out of ids
};

// Turns text into symbol ids for one voice. process() is const and safe to call from several
// threads at once.
class FrontEnd {
 public:
  // A front end for a voice whose symbols are `set` phonemes of eSpeak voice `language`.
  FrontEnd(PhonemeSet set, SymbolTable symbols, std::string language = "en-us");

  // Normalises, splits and phonemises `text`; sentences that yield no ids are left out. ARPAbet
  // phoneme X is looked up as symbol "@X", an IPA token as itself. InputError("text is empty")
  // for empty or whitespace-only text, InputError("text has nothing to pronounce...") when no
  // sentence yields an id.
  std::vector<Sentence> process(std::string_view text) const;

  // The longest sentence, in bytes, that process() passes to the phonemizer.
  static constexpr size_t kMaxSentenceBytes = 400;

  PhonemeSet phoneme_set() const { return set_; }
  const SymbolTable& symbols() const { return symbols_; }
  const std::string& language() const { return language_; }

 private:
  PhonemeSet set_;
  SymbolTable symbols_;
  std::string language_;
  Phonemizer phonemizer_;
};

}  // namespace voxd::text
