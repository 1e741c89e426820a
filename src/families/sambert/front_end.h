// What a Sambert voice reads: KAN-TTS symbol strings (families/sambert/symbols.h), one
// utterance per line, as KAN-TTS's own front end writes them; and, for voices of KAN-TTS's PinYin
// inventory ("zh-cn"), Chinese text, read by voxd's Mandarin front end (text/mandarin) into those
// symbol strings (pinyin_symbols.h), a sentence an utterance.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "families/sambert/sambert.h"
#include "families/sambert/symbols.h"
#include "text/front_end.h"
#include "text/mandarin/reader.h"

namespace voxd::sambert {

// Whether `input` is KAN-TTS symbol strings rather than text: its first character that is not
// white space is '{' and it holds a '$' ("价格$5" is text).
bool looks_like_symbols(std::string_view input);

class SymbolFrontEnd final : public text::FrontEnd {
 public:
  // `symbols` must outlive the front end; `voice` names the voice in messages. A voice of
  // `language` "zh-cn" reads Chinese text too, through the Mandarin front end (voxd's lexicon,
  // default_lexicon_directory, with the deployment's lexicon file when one is set), loaded on
  // first use or by load_reader.
  SymbolFrontEnd(const SambertSymbols& symbols, std::string voice, std::string language);

  // The Mandarin reader, loaded now if it is not yet (~0.5 s, the lexicon once per process), or
  // nullptr when the voice reads no text: another language, or the lexicon or OpenCC could not
  // be loaded (logged; text requests are refused saying why).
  const text::mandarin::MandarinReader* load_reader() const;

  // The utterances of `input`: each line that is not blank, parsed with the emotion and speaker
  // overrides (SambertSymbols::parse). Throws voxd::InputError for input with no symbols, text
  // that is not symbol strings and the parser's errors, naming the line.
  std::vector<SambertTokens> utterances(
      std::string_view input, const std::optional<std::string>& emotion = std::nullopt,
      const std::optional<std::string>& speaker = std::nullopt) const;

  // The utterances of Chinese text: a sentence each, as symbols (symbol_strings). Throws
  // voxd::InputError for text with nothing to read, text without Chinese characters, a bad
  // pinyin override, and when the voice reads no text (no_text_reason).
  std::vector<SambertTokens> text_utterances(
      std::string_view text, const std::optional<std::string>& emotion = std::nullopt,
      const std::optional<std::string>& speaker = std::nullopt) const;

  // The Mandarin reading of `text` and its sentences as symbol strings, every token with
  // `emotion` and `speaker` (the voice's first ones when not given).
  struct Symbols {
    text::mandarin::MandarinReading reading;
    std::vector<std::string> lines;
  };
  Symbols symbol_strings(std::string_view text, const std::optional<std::string>& emotion,
                         const std::optional<std::string>& speaker) const;

  // One sentence per utterance: its phones as units, the phone ids, and the tone, syllable flag,
  // word segment, emotion and speaker ids as extra channels. Input that looks_like_symbols is
  // symbol strings, other input Chinese text.
  text::Analysis analyze(std::string_view input) const override;
  std::string unit_name() const override { return "kantts-symbols"; }

 private:
  const SambertSymbols& symbols_;
  std::string voice_;
  std::string language_;
  mutable std::once_flag reader_once_;
  mutable std::shared_ptr<const text::mandarin::MandarinReader> reader_;
  mutable std::string no_text_reason_;
};

}  // namespace voxd::sambert
