#include "families/chattts/text_front_end.h"

#include "core/error.h"
#include "text/markup.h"
#include "text/normalize.h"
#include "text/sentences.h"

namespace voxd::chattts {

text::Analysis TextFrontEnd::analyze(std::string_view input) const {
  if (input.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos) {
    throw InputError("text is empty");
  }
  text::check_utf8(input);
  text::Analysis analysis;
  for (const text::Span& span : text::parse_markup(input, language_)) {
    if (!analysis.normalized.empty() && !span.text.empty()) analysis.normalized += '\n';
    analysis.normalized += span.text;
    for (std::string& piece : text::split_sentences(span.text, kMaxSentenceBytes)) {
      const std::vector<int32_t> ids = tokenizer_.encode(piece);
      if (ids.empty()) continue;
      text::Sentence sentence;
      sentence.text = std::move(piece);
      sentence.ids.assign(ids.begin(), ids.end());
      sentence.phonemes = tokenizer_.decode(ids);
      sentence.rate = span.rate;
      analysis.sentences.push_back(std::move(sentence));
    }
    if (!analysis.sentences.empty())
      analysis.sentences.back().pause_after_ms += span.pause_after_ms;
  }
  if (analysis.sentences.empty()) throw InputError("text has nothing to pronounce");
  return analysis;
}

}  // namespace voxd::chattts
