// The Mandarin front end's throughput on one thread: characters per second over ~100 KB of
// Chinese text (the test set's sentences, repeated), the lexicon's load time, and the time a
// sentence takes.
//
//   build/bench/voxd_zh_front_end_bench [--text FILE] [--bytes 100000] [--rounds 5]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "text/mandarin/characters.h"
#include "text/mandarin/reader.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The sentences of the test set (tests/fixtures/zh/pinyin/*.tsv, column 2), a line each.
std::string test_set_text(const std::string& root) {
  std::string text;
  for (const char* name : {"words.tsv", "numbers.tsv"}) {
    std::ifstream in(root + "/tests/fixtures/zh/pinyin/" + name);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const size_t first = line.find('\t');
      const size_t second = line.find('\t', first + 1);
      text.append(line.substr(first + 1, second - first - 1)).push_back('\n');
    }
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Mandarin front-end throughput on one thread"};
  std::string text_file;
  size_t bytes = 100000;
  int rounds = 5;
  app.add_option("--text", text_file, "UTF-8 Chinese text (default: the test set's sentences)");
  app.add_option("--bytes", bytes, "Repeat the text up to this many bytes")->capture_default_str();
  app.add_option("--rounds", rounds, "Timed rounds; the median is reported")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::string unit;
  if (text_file.empty()) {
    unit = test_set_text(VOXD_SOURCE_DIR);
  } else {
    std::ifstream in(text_file);
    std::stringstream buffer;
    buffer << in.rdbuf();
    unit = buffer.str();
  }
  if (unit.empty()) {
    std::fprintf(stderr, "no text\n");
    return 1;
  }
  std::string text;
  while (text.size() < bytes) text += unit;
  const size_t characters = voxd::text::mandarin::characters(text).size();

  const auto load_start = Clock::now();
  const auto lexicon = voxd::text::mandarin::MandarinLexicon::shared(
      voxd::text::mandarin::default_lexicon_directory(), {});
  const double load_seconds = seconds_since(load_start);
  const voxd::text::mandarin::MandarinReader reader(lexicon);

  std::vector<double> times;
  size_t sentences = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    sentences = reader.read(text).sentences.size();
    times.push_back(seconds_since(start));
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  std::printf("lexicon load: %.3f s\n", load_seconds);
  std::printf("text: %zu bytes, %zu characters, %zu sentences\n", text.size(), characters,
              sentences);
  std::printf("read: %.1f ms (median of %d), %.0f characters/s, %.3f ms a sentence\n", median * 1e3,
              rounds, static_cast<double>(characters) / median,
              median * 1e3 / static_cast<double>(sentences));
  return 0;
}
