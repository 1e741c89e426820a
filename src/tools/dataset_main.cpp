// voxd-dataset: generates the teacher dataset for training voxd's own voices (see
// docs/dataset-format.md and docs/voices.md).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>

#include "core/error.h"
#include "tools/dataset.h"

int main(int argc, char** argv) {
  voxd::tools::DatasetOptions options;
  options.corpus = "data/corpus/en-sentences.txt";
  options.symbols = "data/symbols/espeak-ipa-en.txt";
  CLI::App app{
      "voxd-dataset: teacher data (WAVs, phonemes, durations) for training, spoken by eSpeak NG "
      "or Festival"};
  app.add_option("--corpus", options.corpus, "Sentences, one per line")->capture_default_str();
  app.add_option("--out", options.out, "Dataset directory to write")->required();
  app.add_option("--symbols", options.symbols, "The voice's symbol table (espeak-ipa)")
      ->capture_default_str();
  std::string phonemes = "espeak-ipa";
  app.add_option("--phonemes", phonemes,
                 "The voice's phoneme set (espeak-ipa, espeak-mnemonic, arpabet)")
      ->capture_default_str();
  app.add_option("--language", options.language,
                 "The voice's language (en-us; zh-cn: Mandarin, taught by eSpeak NG's "
                 "cmn-latn-pinyin)")
      ->capture_default_str();
  app.add_option("--limit", options.limit, "Use only the first N sentences (0: all)")
      ->capture_default_str();
  app.add_option("--jobs", options.jobs, "Worker processes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  std::string teacher = "espeak";
  app.add_option("--teacher", teacher,
                 "Who speaks the corpus: espeak (eSpeak NG) or festival (with --festival-voice; "
                 "needs --phonemes arpabet)")
      ->check(CLI::IsMember({"espeak", "festival"}))
      ->capture_default_str();
  app.add_option("--festival-voice", options.festival_voice,
                 "Festival's voice, without voice_ (Debian's festvox-us-slt-hts: "
                 "cmu_us_slt_arctic_hts)")
      ->capture_default_str();
  std::string festival_command = "festival";
  app.add_option("--festival-command", festival_command,
                 "Festival's program and options, separated by spaces (e.g. a carried copy: "
                 "\"DIR/bin/festival --libdir DIR/share/festival\")")
      ->capture_default_str();
  app.add_option("--max-extra-phonemes", options.rules.max_extra_phonemes,
                 "Teacher phonemes per sentence that may lack a front-end token")
      ->capture_default_str();
  app.add_option("--max-substitutions", options.rules.max_substitutions,
                 "Front-end phonemes per sentence the teacher may say as another vowel or "
                 "consonant (ARPAbet)")
      ->capture_default_str();
  app.add_option("--max-missing", options.rules.max_missing,
                 "Front-end phonemes per sentence the teacher may leave out")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    options.phonemes = voxd::text::parse_phoneme_set(phonemes);
    options.festival_command.clear();
    std::istringstream words(festival_command);
    for (std::string word; words >> word;) options.festival_command.push_back(word);
    options.teacher = teacher == "festival" ? voxd::tools::TeacherKind::kFestival
                                            : voxd::tools::TeacherKind::kEspeak;
    const auto start = std::chrono::steady_clock::now();
    const voxd::tools::DatasetReport r = voxd::tools::generate_dataset(options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "voxd-dataset: %zu sentences: %zu written, %zu dropped (front end %zu, split %zu, "
        "unknown symbols %zu, alignment %zu); %zu extra teacher phonemes absorbed, %zu said as "
        "another phoneme, %zu not said, %zu frames moved to short phonemes\n"
        "voxd-dataset: %.3f h of audio in %s; %.1f s, %.1f sentences/s\n",
        r.sentences, r.written, r.dropped(), r.dropped_front_end, r.dropped_split,
        r.dropped_symbols, r.dropped_alignment, r.extra_phonemes, r.substitutions,
        r.missing_phonemes, r.frames_moved,
        static_cast<double>(r.samples) / voxd::tools::kDatasetSampleRate / 3600.0,
        options.out.c_str(), seconds, static_cast<double>(r.sentences) / seconds);
    return 0;
  } catch (const voxd::InputError& e) {
    std::fprintf(stderr, "voxd-dataset: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "voxd-dataset: %s\n", e.what());
    return 1;
  }
}
