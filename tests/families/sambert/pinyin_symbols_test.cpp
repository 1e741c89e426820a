// Mandarin readings -> KAN-TTS symbol strings, against KAN-TTS's own converter on the same
// words, pinyin and breaks (tests/fixtures/sambert_symbols/text_cases.json, made by
// tools/reference/kantts_text_symbol_fixtures.py).
#include "families/sambert/pinyin_symbols.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace voxd::sambert {
namespace {

using text::mandarin::Break;
using text::mandarin::ReadSentence;
using text::mandarin::ReadWord;
using text::mandarin::Syllable;

Syllable syllable(const std::string& written) {
  return *text::mandarin::parse_syllable(written);
}

TEST(KanTtsPinyinSymbols, EqualKanTtsConvertersOnEveryCase) {
  std::ifstream in(std::filesystem::path(VOXD_SOURCE_DIR) /
                   "tests/fixtures/sambert_symbols/text_cases.json");
  ASSERT_TRUE(in) << "missing text_cases.json";
  const nlohmann::json fixture = nlohmann::json::parse(in);
  ASSERT_GE(fixture["cases"].size(), 10u);
  for (const nlohmann::json& item : fixture["cases"]) {
    ReadSentence sentence;
    for (const nlohmann::json& w : item["words"]) {
      ReadWord word;
      word.text = w["hanzi"].get<std::string>();
      for (const nlohmann::json& s : w["pinyin"]) {
        word.syllables.push_back(syllable(s.get<std::string>()));
        word.hanzi.push_back(word.text);
        word.given.push_back(false);
      }
      word.after = static_cast<Break>(w["break"].get<int>());
      sentence.text += word.text;
      sentence.words.push_back(std::move(word));
    }
    EXPECT_EQ(kantts_symbols(sentence, "emotion_neutral", "F7"), item["symbols"].get<std::string>())
        << sentence.text;
  }
}

TEST(KanTtsPinyinSymbols, PhonesOfSyllablesKanTtsHasNoKeyFor) {
  for (const auto& [written, initial, final_phone] :
       std::vector<std::tuple<std::string, std::string, std::string>>{{"ng2", "ge", "en_c"},
                                                                      {"n3", "ge", "en_c"},
                                                                      {"m2", "m_c", "u_c"},
                                                                      {"hm1", "m_c", "u_c"},
                                                                      {"yue4", "y_c", "ve_c"},
                                                                      {"juan3", "j_c", "van_c"},
                                                                      {"xi1", "xx_c", "i_c"},
                                                                      {"wengr1", "w_c", "engr_c"},
                                                                      {"zhir4", "zh_c", "ihr_c"}}) {
    const auto phones = kantts_phones(syllable(written));
    EXPECT_EQ(phones[0], initial) << written;
    EXPECT_EQ(phones[1], final_phone) << written;
  }
  EXPECT_THROW(kantts_phones(Syllable{.letters = "a1b", .tone = 1}), InputError);
}

// A ei1 (ge ei_c: ei has no initial), B bi4.
TEST(KanTtsPinyinSymbols, LatinWordsAreSpelledAndTheOverridesGoOnEveryToken) {
  ReadSentence sentence;
  ReadWord latin;
  latin.text = "AB";
  latin.tag = "eng";
  latin.after = Break::kSentence;
  sentence.words.push_back(latin);
  EXPECT_EQ(kantts_symbols(sentence, "emotion_happy", "M7"),
            "{ge$tone1$s_begin$word_begin$emotion_happy$M7} "
            "{ei_c$tone1$s_end$word_middle$emotion_happy$M7} "
            "{b_c$tone4$s_begin$word_middle$emotion_happy$M7} "
            "{i_c$tone4$s_end$word_end$emotion_happy$M7} "
            "{#4$tone_none$s_none$word_none$emotion_happy$M7}");
}

}  // namespace
}  // namespace voxd::sambert
