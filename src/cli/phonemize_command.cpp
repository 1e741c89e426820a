#include "cli/phonemize_command.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/command_exit.h"
#include "cli/voice_search.h"
#include "core/error.h"
#include "families/registry.h"
#include "families/sambert/front_end.h"
#include "text/mandarin/reader.h"
#include "text/phonemizer.h"

namespace voxd {
namespace {

struct PhonemizeOptions {
  std::optional<std::string> voice;
  std::optional<std::string> language;
  std::optional<std::string> text;
  bool json = false;
};

// --language values for the Mandarin front end.
bool reads_mandarin(const std::string& language) {
  return language == "zh-cn" || language == "zh";
}

const char* break_name(text::mandarin::Break mark) {
  switch (mark) {
    case text::mandarin::Break::kNone:
      return "";
    case text::mandarin::Break::kWord:
      return "#1";
    case text::mandarin::Break::kShort:
      return "#2";
    case text::mandarin::Break::kClause:
      return "#3";
    case text::mandarin::Break::kSentence:
      return "#4";
  }
  return "";
}

std::string pinyin_of(const text::mandarin::ReadWord& word) {
  std::string out;
  for (const text::mandarin::Syllable& syllable : word.syllables) {
    if (!out.empty()) out.push_back(' ');
    out.append(syllable.text());
  }
  return out;
}

// The Mandarin front end's reading: each sentence's words with their pinyin and the breaks
// between prosodic words ("银行[yin2 hang2] 行长[hang2 zhang3] #4").
void print_mandarin(const text::mandarin::MandarinReading& reading) {
  std::printf("mandarin:\n");
  for (size_t k = 0; k < reading.sentences.size(); ++k) {
    std::string line;
    for (const text::mandarin::ReadWord& word : reading.sentences[k].words) {
      if (!line.empty()) line.push_back(' ');
      line.append(word.text);
      if (!word.latin()) line.append("[").append(pinyin_of(word)).append("]");
      if (word.after != text::mandarin::Break::kNone)
        line.append(" ").append(break_name(word.after));
    }
    std::printf("  sentence %zu: %s\n", k + 1, line.c_str());
  }
  for (const std::string& warning : reading.warnings) {
    std::printf("  warning: %s\n", warning.c_str());
  }
}

nlohmann::json mandarin_json(const text::mandarin::MandarinReading& reading) {
  nlohmann::json sentences = nlohmann::json::array();
  for (const text::mandarin::ReadSentence& sentence : reading.sentences) {
    nlohmann::json words = nlohmann::json::array();
    for (const text::mandarin::ReadWord& word : sentence.words) {
      nlohmann::json pinyin = nlohmann::json::array();
      for (const text::mandarin::Syllable& syllable : word.syllables) {
        pinyin.push_back(syllable.text());
      }
      words.push_back({{"text", word.text},
                       {"pinyin", pinyin},
                       {"tag", word.tag},
                       {"break", break_name(word.after)}});
    }
    sentences.push_back({{"text", sentence.text}, {"words", words}});
  }
  return {
      {"normalized", reading.normalized}, {"sentences", sentences}, {"warnings", reading.warnings}};
}

// Phonemes joined with spaces, the word boundary (itself a space) shown as "|".
std::string joined_phonemes(const std::vector<std::string>& phonemes) {
  std::string out;
  for (const std::string& phoneme : phonemes) {
    if (!out.empty()) out += ' ';
    out += phoneme == text::kWordBoundary ? std::string("|") : phoneme;
  }
  return out;
}

void print_text(const scheduler::VoiceDefinition& voice, const text::Analysis& analysis) {
  std::printf("voice: %s (language %s, %s phonemes)\n", voice.card().name.c_str(),
              voice.card().language.c_str(), voice.front_end().unit_name().c_str());
  std::printf("normalized:\n");
  size_t start = 0;
  while (start <= analysis.normalized.size()) {
    size_t end = analysis.normalized.find('\n', start);
    if (end == std::string::npos) end = analysis.normalized.size();
    std::printf("  %s\n", analysis.normalized.substr(start, end - start).c_str());
    start = end + 1;
  }
  for (size_t k = 0; k < analysis.sentences.size(); ++k) {
    const text::Sentence& s = analysis.sentences[k];
    std::printf("sentence %zu: %s\n", k + 1, s.text.c_str());
    if (s.rate != 1.0f) std::printf("  rate: %g\n", static_cast<double>(s.rate));
    if (s.pause_after_ms > 0) std::printf("  pause after: %d ms\n", s.pause_after_ms);
    std::printf("  phonemes: %s\n", joined_phonemes(s.phonemes).c_str());
    std::string ids;
    for (int64_t id : s.ids) {
      if (!ids.empty()) ids += ' ';
      ids += std::to_string(id);
    }
    std::printf("  ids: %s\n", ids.c_str());
    if (s.dropped > 0) {
      std::printf("  dropped: %zu phonemes without a symbol in the voice\n", s.dropped);
    }
  }
}

nlohmann::json to_json(const scheduler::VoiceDefinition& voice, const text::Analysis& analysis) {
  nlohmann::json sentences = nlohmann::json::array();
  for (const text::Sentence& s : analysis.sentences) {
    sentences.push_back({{"text", s.text},
                         {"phonemes", s.phonemes},
                         {"ids", s.ids},
                         {"dropped", s.dropped},
                         {"pause_after_ms", s.pause_after_ms},
                         {"rate", s.rate}});
  }
  return {{"voice", voice.card().name},
          {"language", voice.card().language},
          {"phonemes", voice.front_end().unit_name()},
          {"normalized", analysis.normalized},
          {"sentences", sentences}};
}

int run_phonemize(const PhonemizeOptions& options) {
  if (!options.voice && !options.language) {
    throw InputError("give --voice, or --language zh for the Mandarin front end alone");
  }
  if (options.language && !reads_mandarin(*options.language)) {
    throw InputError("--language '" + *options.language +
                     "': only zh (the Mandarin front end) is read without a voice");
  }
  std::unique_ptr<scheduler::VoiceDefinition> voice;
  if (options.voice) {
    const std::string directory = resolve_voice(*options.voice);
    voice = families::registry().family_of(directory).read(directory);
  }
  std::string input;
  if (options.text) {
    input = *options.text;
  } else {
    input.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::optional<text::mandarin::MandarinReading> mandarin;
  // Held to the end, so that the voice's front end finds the lexicon loaded.
  std::shared_ptr<const text::mandarin::MandarinLexicon> lexicon;
  const bool symbols = sambert::looks_like_symbols(input);
  // Sambert's PinYin voices ("zh-cn") read text through the Mandarin front end; ChatTTS ("zh")
  // reads characters.
  if (options.language || (!symbols && voice->card().language == "zh-cn")) {
    lexicon = text::mandarin::MandarinLexicon::shared(text::mandarin::default_lexicon_directory(),
                                                      text::mandarin::deployment_lexicon());
    mandarin = text::mandarin::MandarinReader(lexicon).read(input);
  }
  if (options.json) {
    nlohmann::json out =
        voice ? to_json(*voice, voice->front_end().analyze(input)) : nlohmann::json::object();
    if (mandarin) out["mandarin"] = mandarin_json(*mandarin);
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (mandarin) print_mandarin(*mandarin);
  if (voice) print_text(*voice, voice->front_end().analyze(input));
  return 0;
}

}  // namespace

void add_phonemize_command(CLI::App& app) {
  auto options = std::make_shared<PhonemizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "phonemize",
      "Print what the text front end makes of a text: the normalised text, the sentences "
      "(with pauses and rates from SSML), their phonemes and symbol ids");
  cmd->add_option("--voice", options->voice,
                  "Voice directory or name (only its config and symbols are read)");
  cmd->add_option("--language", options->language,
                  "zh: the Mandarin front end's reading (words, pinyin, breaks), no voice needed");
  cmd->add_option("--text", options->text, "Text to analyse (default: read standard input)");
  cmd->add_flag("--json", options->json, "Print the analysis as JSON");
  cmd->callback([options] { exit_after([&] { return run_phonemize(*options); }); });
}

}  // namespace voxd
