// ChatTTS's front end: markup removed (text/markup.h; ChatTTS's bracketed control tokens such as
// "[uv_break]" and "[laugh]" kept as they are), the text cut into sentences short enough for one
// generation each (at . ! ? and at 。！？), and each sentence's WordPiece ids (ChatTTS's
// tokenizer), without the tokens only a prompt holds ([Stts], [spk_emb], [empty_spk]). ChatTTS's
// own normalisation (ChatTTS/norm.py: punctuation mapped to ，。, half- to full-width, characters
// outside its set dropped, homophones) is not applied.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "families/chattts/tokenizer.h"
#include "text/front_end.h"

namespace voxd::chattts {

class TextFrontEnd final : public text::FrontEnd {
 public:
  TextFrontEnd(Tokenizer tokenizer, std::string language);

  // Sentences of at most kMaxSentenceBytes, each with its token ids (Sentence::phonemes holds
  // the tokens). InputError("text is empty") for blank text, invalid UTF-8, markup errors, an
  // SSML <prosody rate> (ChatTTS has no rate control), and "text has nothing to pronounce" when
  // no sentence has a token.
  text::Analysis analyze(std::string_view text) const override;
  std::string unit_name() const override { return "wordpiece"; }

  const Tokenizer& tokenizer() const { return tokenizer_; }
  // Whether `id` is a token only a prompt holds ([Stts], [spk_emb], [empty_spk]): the original
  // removes them from the text.
  bool prompt_only(int64_t id) const;

  // A sentence's text, in bytes, at most, a control token counting as 3: its tokens and the
  // prompt stay far inside the GPT's positions, and its codes inside the code stage's
  // max_new_token.
  static constexpr size_t kMaxSentenceBytes = 300;

 private:
  Tokenizer tokenizer_;
  std::string language_;
  std::vector<int64_t> prompt_only_;
};

}  // namespace voxd::chattts
