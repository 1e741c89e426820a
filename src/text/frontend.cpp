#include "text/frontend.h"

#include <algorithm>

#include "core/error.h"
#include "text/normalize.h"
#include "text/sentences.h"

namespace voxd::text {
namespace {

bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos;
}

}  // namespace

FrontEnd::FrontEnd(PhonemeSet set, SymbolTable symbols, std::string language)
    : set_(set), symbols_(std::move(symbols)), language_(std::move(language)) {}

std::vector<Sentence> FrontEnd::process(std::string_view text) const {
  if (is_blank(text)) throw InputError("text is empty");
  const std::string normalized = normalize(text, language_);
  std::vector<Sentence> sentences;
  size_t dropped = 0;
  for (std::string& sentence_text : split_sentences(normalized, kMaxSentenceBytes)) {
    Sentence sentence;
    sentence.phonemes = set_ == PhonemeSet::Arpabet
                            ? phonemizer_.phonemize_arpabet(sentence_text, language_)
                            : phonemizer_.phonemize_ipa(sentence_text, language_);
    sentence.ids.reserve(sentence.phonemes.size());
    for (const std::string& phoneme : sentence.phonemes) {
      const std::optional<int64_t> id =
          symbols_.id(set_ == PhonemeSet::Arpabet ? "@" + phoneme : phoneme);
      if (id) {
        sentence.ids.push_back(*id);
      } else {
        ++sentence.dropped;
      }
    }
    dropped += sentence.dropped;
    const bool pronounceable =
        std::any_of(sentence.phonemes.begin(), sentence.phonemes.end(), is_phoneme);
    if (sentence.ids.empty() || !pronounceable) continue;
    sentence.text = std::move(sentence_text);
    sentences.push_back(std::move(sentence));
  }
  if (sentences.empty()) {
    throw InputError(dropped == 0 ? std::string("text has nothing to pronounce")
                                  : "text has nothing to pronounce (" + std::to_string(dropped) +
                                        " phonemes have no symbol in the voice)");
  }
  return sentences;
}

}  // namespace voxd::text
