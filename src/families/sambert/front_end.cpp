#include "families/sambert/front_end.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "families/sambert/pinyin_symbols.h"
#include "text/ascii.h"
#include "text/mandarin/characters.h"
#include "text/mandarin/espeak_front_end.h"

namespace voxd::sambert {
namespace {

std::shared_ptr<const text::mandarin::MandarinReader> mandarin_reader_for(
    const std::string& language, std::string& reason) {
  if (language != text::mandarin::kMandarinLanguage) {
    reason = "voxd reads Mandarin text (language zh-cn), not language '" + language +
             "': give KAN-TTS symbol strings";
    return nullptr;
  }
  try {
    return std::make_shared<const text::mandarin::MandarinReader>(
        text::mandarin::MandarinLexicon::shared(text::mandarin::default_lexicon_directory(),
                                                text::mandarin::deployment_lexicon()));
  } catch (const Error& e) {
    reason = std::string("the Mandarin front end cannot be loaded: ") + e.what();
    spdlog::warn("{}; Sambert voices read KAN-TTS symbols only", reason);
    return nullptr;
  }
}

}  // namespace

bool looks_like_symbols(std::string_view input) {
  const size_t first = input.find_first_not_of(" \t\n\v\f\r");
  return first != std::string_view::npos && input[first] == '{' &&
         input.find('$') != std::string_view::npos;
}

SymbolFrontEnd::SymbolFrontEnd(const SambertSymbols& symbols, std::string voice,
                               std::string language)
    : symbols_(symbols), voice_(std::move(voice)), language_(std::move(language)) {}

const text::mandarin::MandarinReader* SymbolFrontEnd::load_reader() const {
  std::call_once(reader_once_,
                 [this] { reader_ = mandarin_reader_for(language_, no_text_reason_); });
  return reader_.get();
}

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
    if (text::ascii::is_blank(line)) continue;
    if (line.find('$') == std::string_view::npos) {
      throw InputError("input_format kantts_symbols: voice '" + voice_ +
                       "' reads KAN-TTS symbol strings such as "
                       "{ge$tone5$s_begin$word_begin$emotion_neutral$F7}, one utterance a line; "
                       "line " +
                       std::to_string(number) +
                       " holds none (for Chinese text use input_format "
                       "text)");
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

SymbolFrontEnd::Symbols SymbolFrontEnd::symbol_strings(
    std::string_view text, const std::optional<std::string>& emotion,
    const std::optional<std::string>& speaker) const {
  const text::mandarin::MandarinReader* reader = load_reader();
  if (!reader) throw InputError("voice '" + voice_ + "' reads no text: " + no_text_reason_);
  if (emotion) (void)symbols_.emotion_id(*emotion);
  if (speaker) (void)symbols_.speaker_id(*speaker);
  if (!text::ascii::is_blank(text) && !text::mandarin::has_chinese(text)) {
    throw InputError("voice '" + voice_ +
                     "' speaks Mandarin (language zh-cn) and the text has no Chinese "
                     "characters; give Chinese text, or use a voice of the text's language");
  }
  Symbols out{.reading = reader->read(text), .lines = {}};
  const std::vector<std::string> emotions = symbols_.emotions();
  const std::vector<std::string> speakers = symbols_.speakers();
  const std::string neutral =
      std::find(emotions.begin(), emotions.end(), "emotion_neutral") != emotions.end()
          ? "emotion_neutral"
          : emotions.front();
  for (const text::mandarin::ReadSentence& sentence : out.reading.sentences) {
    out.lines.push_back(
        kantts_symbols(sentence, emotion.value_or(neutral), speaker.value_or(speakers.front())));
  }
  return out;
}

std::vector<SambertTokens> SymbolFrontEnd::text_utterances(
    std::string_view text, const std::optional<std::string>& emotion,
    const std::optional<std::string>& speaker) const {
  const Symbols made = symbol_strings(text, emotion, speaker);
  if (made.lines.empty()) {
    throw InputError("voice '" + voice_ + "': the text holds nothing to read" +
                     (made.reading.warnings.empty() ? std::string()
                                                    : " (" + made.reading.warnings.front() + ")"));
  }
  std::vector<SambertTokens> out;
  for (const std::string& line : made.lines) out.push_back(symbols_.parse(line));
  return out;
}

text::Analysis SymbolFrontEnd::analyze(std::string_view input) const {
  text::Analysis analysis;
  std::vector<SambertTokens> utterances;
  std::vector<std::string> texts;  // what each utterance says
  if (looks_like_symbols(input)) {
    utterances = this->utterances(input);
  } else {
    const Symbols made = symbol_strings(input, std::nullopt, std::nullopt);
    for (size_t k = 0; k < made.lines.size(); ++k) {
      utterances.push_back(symbols_.parse(made.lines[k]));
      texts.push_back(made.reading.sentences[k].text);
    }
  }
  for (size_t k = 0; k < utterances.size(); ++k) {
    const SambertTokens& tokens = utterances[k];
    text::Sentence sentence;
    sentence.extra_channels.resize(5);
    for (size_t t = 0; t < tokens.linguistic.size(); ++t) {
      const auto& ids = tokens.linguistic[t];
      sentence.phonemes.push_back(symbols_.phone(ids[0]));
      sentence.ids.push_back(ids[0]);
      for (size_t ch = 1; ch < 4; ++ch) sentence.extra_channels[ch - 1].push_back(ids[ch]);
      sentence.extra_channels[3].push_back(tokens.emotion[t]);
      sentence.extra_channels[4].push_back(tokens.speaker[t]);
    }
    if (k < texts.size()) {
      sentence.text = texts[k];
    } else {
      for (const std::string& phone : sentence.phonemes) {
        if (!sentence.text.empty()) sentence.text.push_back(' ');
        sentence.text.append(phone);
      }
    }
    if (!analysis.normalized.empty()) analysis.normalized.push_back('\n');
    analysis.normalized.append(sentence.text);
    analysis.sentences.push_back(std::move(sentence));
  }
  return analysis;
}

}  // namespace voxd::sambert
