// The Mandarin front end against the committed test set (tests/fixtures/zh/pinyin/*.tsv:
// category, sentence, the pinyin a speaker says; conventions in docs/mandarin.md): the accuracy
// per syllable and per sentence, by category, printed, and a floor for each that the test holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "text/mandarin/reader.h"

namespace voxd::text::mandarin {
namespace {

// The floors: what the front end measured when they were set (docs/mandarin.md), less a margin.
constexpr double kSyllableFloor = 0.98;
constexpr double kSentenceFloor = 0.87;

struct Case {
  std::string category;
  std::string sentence;
  std::vector<std::string> expected;
  std::string where;
};

std::vector<std::string> tokens_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string token; in >> token;) out.push_back(token);
  return out;
}

std::vector<Case> read_cases() {
  std::vector<Case> cases;
  const std::filesystem::path folder =
      std::filesystem::path(VOXD_SOURCE_DIR) / "tests" / "fixtures" / "zh" / "pinyin";
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().extension() == ".tsv") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::ifstream in(file);
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      if (line.empty() || line[0] == '#') continue;
      const size_t first = line.find('\t');
      const size_t second = line.find('\t', first + 1);
      if (first == std::string::npos || second == std::string::npos) {
        ADD_FAILURE() << file << ":" << number << ": expected three tab-separated fields";
        continue;
      }
      cases.push_back({line.substr(0, first), line.substr(first + 1, second - first - 1),
                       tokens_of(line.substr(second + 1)),
                       file.filename().string() + ":" + std::to_string(number)});
    }
  }
  return cases;
}

std::vector<std::string> spoken(const MandarinReading& reading) {
  std::vector<std::string> out;
  for (const ReadSentence& sentence : reading.sentences) {
    for (const ReadWord& word : sentence.words) {
      if (word.latin()) out.push_back(word.text);
      for (const Syllable& syllable : word.syllables) out.push_back(syllable.text());
    }
  }
  return out;
}

// Tokens of `expected` matched in order by `actual` (the longest common subsequence).
size_t matched(const std::vector<std::string>& expected, const std::vector<std::string>& actual) {
  std::vector<size_t> row(actual.size() + 1, 0);
  for (const std::string& want : expected) {
    size_t diagonal = 0;
    for (size_t j = 1; j <= actual.size(); ++j) {
      const size_t above = row[j];
      row[j] = want == actual[j - 1] ? diagonal + 1 : std::max(row[j], row[j - 1]);
      diagonal = above;
    }
  }
  return row[actual.size()];
}

std::string joined(const std::vector<std::string>& tokens) {
  std::string out;
  for (const std::string& token : tokens) {
    if (!out.empty()) out.push_back(' ');
    out.append(token);
  }
  return out;
}

TEST(MandarinTestSet, AccuracyHoldsItsFloor) {
  const std::vector<Case> cases = read_cases();
  EXPECT_GE(cases.size(), 300u) << "the test set has fewer than 300 sentences";
  const MandarinReader reader(MandarinLexicon::shared(default_lexicon_directory(), {}));
  struct Tally {
    size_t sentences = 0, right_sentences = 0, syllables = 0, right_syllables = 0;
  };
  std::map<std::string, Tally> by_category;
  Tally total;
  std::string misses;
  for (const Case& c : cases) {
    const std::vector<std::string> actual = spoken(reader.read(c.sentence));
    const size_t right = matched(c.expected, actual);
    const bool exact = actual == c.expected;
    for (Tally* tally : {&by_category[c.category], &total}) {
      tally->sentences += 1;
      tally->right_sentences += exact ? 1 : 0;
      tally->syllables += std::max(c.expected.size(), actual.size());
      tally->right_syllables += right;
    }
    if (!exact) {
      misses += "  " + c.where + " " + c.sentence + "\n    expected " + joined(c.expected) +
                "\n    read     " + joined(actual) + "\n";
    }
  }
  std::printf("Mandarin test set: %zu sentences\n%-12s %9s %9s\n", total.sentences, "category",
              "syllable", "sentence");
  auto print = [](const std::string& name, const Tally& t) {
    std::printf("%-12s %8.1f%% %8.1f%%\n", name.c_str(),
                100.0 * static_cast<double>(t.right_syllables) / static_cast<double>(t.syllables),
                100.0 * static_cast<double>(t.right_sentences) / static_cast<double>(t.sentences));
  };
  for (const auto& [name, tally] : by_category) print(name, tally);
  print("all", total);
  std::printf("misread:\n%s", misses.c_str());
  const double syllable_accuracy =
      static_cast<double>(total.right_syllables) / static_cast<double>(total.syllables);
  const double sentence_accuracy =
      static_cast<double>(total.right_sentences) / static_cast<double>(total.sentences);
  EXPECT_GE(syllable_accuracy, kSyllableFloor);
  EXPECT_GE(sentence_accuracy, kSentenceFloor);
}

}  // namespace
}  // namespace voxd::text::mandarin
