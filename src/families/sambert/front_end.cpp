#include "families/sambert/front_end.h"

#include "core/error.h"

namespace voxd::sambert {
namespace {

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\v\f\r") == std::string_view::npos;
}

}  // namespace

std::vector<SambertTokens> SymbolFrontEnd::utterances(
    std::string_view input, const std::optional<std::string>& emotion,
    const std::optional<std::string>& speaker) const {
  // The overrides are checked once, before any line.
  if (emotion) (void)symbols_.emotion_id(*emotion);
  if (speaker) (void)symbols_.speaker_id(*speaker);
  std::vector<SambertTokens> out;
  size_t number = 0;
  while (!input.empty()) {
    const size_t end = input.find('\n');
    const std::string_view line = input.substr(0, end);
    input.remove_prefix(end == std::string_view::npos ? input.size() : end + 1);
    ++number;
    if (blank(line)) continue;
    if (line.find('$') == std::string_view::npos) {
      throw InputError("voice '" + voice_ +
                       "' reads KAN-TTS symbol strings such as "
                       "{ge$tone5$s_begin$word_begin$emotion_neutral$F7}, one utterance a line; "
                       "line " +
                       std::to_string(number) +
                       " holds none (voxd has no Mandarin front end for Sambert voices yet)");
    }
    try {
      out.push_back(symbols_.parse(line, emotion, speaker));
    } catch (const InputError& e) {
      throw InputError("line " + std::to_string(number) + ": " + e.what());
    }
  }
  if (out.empty()) {
    throw InputError("voice '" + voice_ + "': the input holds no KAN-TTS symbols");
  }
  return out;
}

text::Analysis SymbolFrontEnd::analyze(std::string_view input) const {
  text::Analysis analysis;
  for (const SambertTokens& tokens : utterances(input)) {
    text::Sentence sentence;
    sentence.extra_channels.resize(5);
    for (size_t t = 0; t < tokens.linguistic.size(); ++t) {
      const auto& ids = tokens.linguistic[t];
      sentence.phonemes.push_back(symbols_.phone(ids[0]));
      sentence.ids.push_back(ids[0]);
      for (size_t ch = 1; ch < 4; ++ch) sentence.extra_channels[ch - 1].push_back(ids[ch]);
      sentence.extra_channels[3].push_back(tokens.emotion[t]);
      sentence.extra_channels[4].push_back(tokens.speaker[t]);
      sentence.text += (t == 0 ? "" : " ") + symbols_.phone(ids[0]);
    }
    analysis.normalized += (analysis.normalized.empty() ? "" : "\n") + sentence.text;
    analysis.sentences.push_back(std::move(sentence));
  }
  return analysis;
}

}  // namespace voxd::sambert
