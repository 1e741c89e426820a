#include "text/espeak_front_end.h"

#include <algorithm>

#include "core/error.h"
#include "text/ascii.h"
#include "text/markup.h"
#include "text/normalize.h"
#include "text/sentences.h"

namespace voxd::text {

EspeakFrontEnd::EspeakFrontEnd(PhonemeSet set, SymbolTable symbols, std::string language)
    : set_(set),
      symbols_(std::move(symbols)),
      language_(std::move(language)),
      script_check_(language_) {}

std::string EspeakFrontEnd::unit_name() const {
  return std::string(to_string(set_));
}

Sentence EspeakFrontEnd::phonemize(std::string text) const {
  Sentence sentence;
  switch (set_) {
    case PhonemeSet::EspeakIpa:
      sentence.phonemes = phonemizer_.phonemize_ipa(text, language_);
      break;
    case PhonemeSet::Arpabet:
      sentence.phonemes = phonemizer_.phonemize_arpabet(text, language_);
      break;
    case PhonemeSet::EspeakMnemonic:
      sentence.phonemes = phonemizer_.phonemize_mnemonic(text, language_);
      break;
  }
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
  sentence.text = std::move(text);
  return sentence;
}

Analysis EspeakFrontEnd::analyze(std::string_view text) const {
  if (ascii::is_blank(text)) throw InputError("text is empty");
  check_utf8(text);
  const std::vector<Span> spans = parse_markup(text, language_);
  std::vector<std::string> normalized_spans;
  normalized_spans.reserve(spans.size());
  for (const Span& span : spans) {
    normalized_spans.push_back(normalize(span.text, language_));
    script_check_.check(normalized_spans.back());
  }
  Analysis analysis;
  std::vector<Sentence>& sentences = analysis.sentences;
  size_t dropped = 0;
  for (size_t k = 0; k < spans.size(); ++k) {
    if (!analysis.normalized.empty() && !normalized_spans[k].empty()) analysis.normalized += '\n';
    analysis.normalized += normalized_spans[k];
    for (std::string& sentence_text : split_sentences(normalized_spans[k], kMaxSentenceBytes)) {
      Sentence sentence = phonemize(std::move(sentence_text));
      sentence.rate = spans[k].rate;
      dropped += sentence.dropped;
      const bool pronounceable =
          std::any_of(sentence.phonemes.begin(), sentence.phonemes.end(), is_phoneme);
      if (!sentence.ids.empty() && pronounceable) sentences.push_back(std::move(sentence));
    }
    // A break ends its span's last sentence; one before any sentence has nothing to follow.
    // Spans without a sentence of their own add theirs to it.
    if (!sentences.empty()) {
      int& pause = sentences.back().pause_after_ms;
      pause = add_pause(pause, spans[k].pause_after_ms);
    }
  }
  if (sentences.empty()) {
    throw InputError(dropped == 0 ? std::string("text has nothing to pronounce")
                                  : "text has nothing to pronounce (" + std::to_string(dropped) +
                                        " phonemes have no symbol in the voice)");
  }
  return analysis;
}

}  // namespace voxd::text
