// The eSpeak NG front end: text (plain, Markdown, HTML or SSML) → normalised sentences →
// phonemes → the voice's symbol ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/front_end.h"
#include "text/phonemizer.h"
#include "text/scripts.h"
#include "text/symbols.h"

namespace voxd::text {

// Turns text into symbol ids for one voice of eSpeak phonemes.
class EspeakFrontEnd final : public FrontEnd {
 public:
  // A front end for a voice whose symbols are `set` phonemes of eSpeak voice `language`.
  EspeakFrontEnd(PhonemeSet set, SymbolTable symbols, std::string language = "en-us");

  // Removes markup (text/markup.h), normalises, splits and phonemises `text`; sentences that
  // yield no ids are left out (a pause after one moves to the sentence before). ARPAbet phoneme
  // X is looked up as symbol "@X", other tokens as themselves. InputError("text is empty") for
  // empty or whitespace-only text, InputError naming the script for letters the language cannot
  // speak (ScriptCheck), InputError("text has nothing to pronounce...") when no sentence yields
  // an id, and markup's InputErrors.
  Analysis analyze(std::string_view text) const override;
  std::string unit_name() const override;

  // The longest sentence, in bytes, that process() passes to the phonemizer.
  static constexpr size_t kMaxSentenceBytes = 400;

  // The phonemes and ids of one sentence that needs no normalising (`text` as eSpeak reads it),
  // phonemes without a symbol counted in Sentence::dropped.
  Sentence phonemize(std::string text) const;

  PhonemeSet phoneme_set() const { return set_; }
  const SymbolTable& symbols() const { return symbols_; }
  const std::string& language() const { return language_; }

 private:
  PhonemeSet set_;
  SymbolTable symbols_;
  std::string language_;
  ScriptCheck script_check_;
  Phonemizer phonemizer_;
};

}  // namespace voxd::text
