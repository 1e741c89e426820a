// What a Sambert voice reads: KAN-TTS symbol strings (families/sambert/symbols.h), one
// utterance per line, as KAN-TTS's own front end writes them; and, for voices of KAN-TTS's PinYin
// inventory ("zh-cn"), Chinese text, read by voxd's Mandarin front end (text/mandarin) into those
// symbol strings (pinyin_symbols.h), a sentence an utterance.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "families/sambert/sambert.h"
#include "families/sambert/symbols.h"
#include "families/sambert/voice_config.h"
#include "text/front_end.h"
#include "text/mandarin/reader.h"

namespace voxd::sambert {

class SymbolFrontEnd final : public text::FrontEnd {
 public:
  // `symbols` must outlive the front end; `voice` names the voice in messages. With a `reader`
  // the voice reads Chinese text too; without, `no_text_reason` says why not.
  SymbolFrontEnd(const SambertSymbols& symbols, std::string voice,
                 std::shared_ptr<const text::mandarin::MandarinReader> reader,
                 std::string no_text_reason);

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
  // word segment, emotion and speaker ids as extra channels. Input with a '$' is symbol strings,
  // other input Chinese text.
  text::Analysis analyze(std::string_view input) const override;
  std::string unit_name() const override { return "kantts-symbols"; }

  // The Mandarin reader, or nullptr when the voice reads no text.
  const text::mandarin::MandarinReader* reader() const { return reader_.get(); }

 private:
  const SambertSymbols& symbols_;
  std::string voice_;
  std::shared_ptr<const text::mandarin::MandarinReader> reader_;
  std::string no_text_reason_;
};

// The front end of a voice: for language "zh-cn" with a Mandarin reader (voxd's lexicon,
// default_lexicon_directory, with the deployment's lexicon file when one is set); symbols only
// for other languages, or when the lexicon or OpenCC cannot be loaded (logged).
SymbolFrontEnd make_front_end(const VoiceConfig& config);

}  // namespace voxd::sambert
