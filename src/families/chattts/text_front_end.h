// ChatTTS's front end: markup removed (text/markup.h), the text cut into sentences short enough
// for one generation each, and each sentence's WordPiece ids (ChatTTS's tokenizer). ChatTTS's
// own text normalisation (an optional external package in the original) is not applied.
#pragma once

#include <string>
#include <string_view>

#include "families/chattts/tokenizer.h"
#include "text/front_end.h"

namespace voxd::chattts {

class TextFrontEnd final : public text::FrontEnd {
 public:
  TextFrontEnd(Tokenizer tokenizer, std::string language)
      : tokenizer_(std::move(tokenizer)), language_(std::move(language)) {}

  // Sentences of at most kMaxSentenceBytes, each with its token ids (Sentence::phonemes holds
  // the tokens). InputError("text is empty") for blank text, invalid UTF-8 or markup errors, and
  // "text has nothing to pronounce" when no sentence has a token.
  text::Analysis analyze(std::string_view text) const override;
  std::string unit_name() const override { return "wordpiece"; }

  const Tokenizer& tokenizer() const { return tokenizer_; }

  // A sentence's text, in bytes, at most: its tokens and the prompt stay far inside the GPT's
  // positions, and its codes inside the code stage's max_new_token.
  static constexpr size_t kMaxSentenceBytes = 300;

 private:
  Tokenizer tokenizer_;
  std::string language_;
};

}  // namespace voxd::chattts
