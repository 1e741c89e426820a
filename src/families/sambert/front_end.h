// What a Sambert voice reads: KAN-TTS symbol strings (families/sambert/symbols.h), one utterance
// per line, as KAN-TTS's own front end writes them. Text is refused with a message saying so
// until voxd has a Mandarin front end.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "families/sambert/sambert.h"
#include "families/sambert/symbols.h"
#include "text/front_end.h"

namespace voxd::sambert {

class SymbolFrontEnd final : public text::FrontEnd {
 public:
  // `symbols` must outlive the front end; `voice` names the voice in messages.
  SymbolFrontEnd(const SambertSymbols& symbols, std::string voice)
      : symbols_(symbols), voice_(std::move(voice)) {}

  // The utterances of `input`: each line that is not blank, parsed with the emotion and speaker
  // overrides (SambertSymbols::parse). Throws voxd::InputError for input with no symbols, text
  // that is not symbol strings (saying that voxd reads no Mandarin text yet) and the parser's
  // errors, naming the line.
  std::vector<SambertTokens> utterances(
      std::string_view input, const std::optional<std::string>& emotion = std::nullopt,
      const std::optional<std::string>& speaker = std::nullopt) const;

  // One sentence per utterance: its phones as units, the phone ids, and the tone, syllable flag,
  // word segment, emotion and speaker ids as extra channels.
  text::Analysis analyze(std::string_view input) const override;
  std::string unit_name() const override { return "kantts-symbols"; }

 private:
  const SambertSymbols& symbols_;
  std::string voice_;
};

}  // namespace voxd::sambert
