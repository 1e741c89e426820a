// Runs tests/fixtures/text/normalize_corpus.tsv: each line is an input, a tab and the text the
// front end should make of it (Analysis::normalized); "\n" in either stands for a line break,
// and a line without a tab is a comment. Every mismatch is reported with its line number.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "text/espeak_front_end.h"

namespace voxd::text {
namespace {

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == 'n') {
      out += '\n';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

TEST(NormalizeCorpus, EveryLineNormalisesAsExpected) {
  const std::string path =
      std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/text/normalize_corpus.tsv";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  const EspeakFrontEnd frontend(
      PhonemeSet::EspeakIpa,
      SymbolTable::load(std::string(VOXD_SOURCE_DIR) + "/data/symbols/espeak-ipa-en.txt"), "en-us");
  std::string line;
  int number = 0;
  int cases = 0;
  while (std::getline(in, line)) {
    ++number;
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    ++cases;
    const std::string input = unescape(line.substr(0, tab));
    const std::string expected = unescape(line.substr(tab + 1));
    try {
      EXPECT_EQ(frontend.analyze(input).normalized, expected)
          << "normalize_corpus.tsv:" << number << ": " << line.substr(0, tab);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "normalize_corpus.tsv:" << number << ": " << line.substr(0, tab)
                    << ": threw " << e.what();
    }
  }
  EXPECT_GE(cases, 80);
}

}  // namespace
}  // namespace voxd::text
