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
#include "text/phonemizer.h"

namespace voxd {
namespace {

struct PhonemizeOptions {
  std::string voice;
  std::optional<std::string> text;
  bool json = false;
};

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
  const std::string directory = resolve_voice(options.voice);
  const std::unique_ptr<scheduler::VoiceDefinition> voice =
      families::registry().family_of(directory).read(directory);
  std::string input;
  if (options.text) {
    input = *options.text;
  } else {
    input.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  const text::Analysis analysis = voice->front_end().analyze(input);
  if (options.json) {
    std::cout << to_json(*voice, analysis).dump(2) << "\n";
  } else {
    print_text(*voice, analysis);
  }
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
                  "Voice directory or name (only its config and symbols are read)")
      ->required();
  cmd->add_option("--text", options->text, "Text to analyse (default: read standard input)");
  cmd->add_flag("--json", options->json, "Print the analysis as JSON");
  cmd->callback([options] { exit_after([&] { return run_phonemize(*options); }); });
}

}  // namespace voxd
