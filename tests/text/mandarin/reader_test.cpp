#include "text/mandarin/reader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/mandarin/lexicon.h"
#include "text/mandarin/segmenter.h"

namespace voxd::text::mandarin {
namespace {

std::shared_ptr<const MandarinLexicon> lexicon() {
  return MandarinLexicon::shared(std::filesystem::path(VOXD_SOURCE_DIR) / "data" / "zh", {});
}

const MandarinReader& reader() {
  static const MandarinReader shared(lexicon());
  return shared;
}

// The sentence's pinyin and Latin words, space-separated.
std::string spoken(const MandarinReading& reading) {
  std::string out;
  auto add = [&out](const std::string& token) {
    if (!out.empty()) out.push_back(' ');
    out.append(token);
  };
  for (const ReadSentence& sentence : reading.sentences) {
    for (const ReadWord& word : sentence.words) {
      if (word.latin()) add(word.text);
      for (const Syllable& syllable : word.syllables) add(syllable.text());
    }
  }
  return out;
}

std::string spoken(std::string_view text) {
  return spoken(reader().read(text));
}

using Cases = std::vector<std::pair<std::string, std::string>>;

// Each text read as its pinyin.
void expect_spoken(const Cases& cases) {
  for (const auto& [text, pinyin] : cases) EXPECT_EQ(spoken(text), pinyin) << text;
}

std::vector<std::string> words_of(std::string_view hanzi) {
  std::vector<std::string> out;
  for (std::string_view word : segment(hanzi, *lexicon())) out.emplace_back(word);
  return out;
}

TEST(MandarinLexicon, ReadsWordsCharactersAndPhrases) {
  const std::shared_ptr<const MandarinLexicon> kept = lexicon();
  const MandarinLexicon& words = *kept;
  ASSERT_NE(words.word("银行"), nullptr);
  EXPECT_GT(words.word("银行")->count, 0u);
  EXPECT_EQ(words.word("银行")->tag, "n");
  ASSERT_NE(words.reading("银行"), nullptr);
  EXPECT_EQ((*words.reading("银行"))[1].text(), "hang2");
  ASSERT_NE(words.char_readings("行"), nullptr);
  EXPECT_EQ(words.char_readings("行")->front().text(), "xing2");
  EXPECT_TRUE(words.is_syllable("lv"));
  EXPECT_TRUE(words.is_syllable("huar"));
  EXPECT_FALSE(words.is_syllable("hangg"));
  EXPECT_EQ(words.word("没有这个词"), nullptr);
}

TEST(MandarinLexicon, AMissingFolderIsNamed) {
  try {
    MandarinLexicon::load("/nonexistent/zh");
    FAIL() << "loaded a lexicon from a folder that does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/zh/chars.tsv"), std::string::npos)
        << e.what();
  }
}

TEST(MandarinLexicon, ABrokenCompressedTableIsNamed) {
  const std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("voxd_zh_broken_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  std::filesystem::copy_file(std::filesystem::path(VOXD_SOURCE_DIR) / "data" / "zh" / "chars.tsv",
                             directory / "chars.tsv",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(directory / "words.tsv.xz") << "this is not xz";
  try {
    MandarinLexicon::load(directory);
    ADD_FAILURE() << "loaded a lexicon whose words.tsv.xz is not xz";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("words.tsv.xz: not a whole .xz file"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(directory);
}

class UserLexicon : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& text) {
    const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                       ("voxd_zh_lexicon_" + std::to_string(::getpid()) + ".txt");
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path;
  }
  std::string error_of(const std::string& text) {
    MandarinLexicon words =
        MandarinLexicon::load(std::filesystem::path(VOXD_SOURCE_DIR) / "data" / "zh");
    try {
      words.add_user_entries(write(text));
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  void TearDown() override {
    for (const auto& path : paths_) std::filesystem::remove(path);
  }
  std::vector<std::filesystem::path> paths_;
};

TEST_F(UserLexicon, EntriesChangeTheReadingAndTheWords) {
  const auto words = MandarinLexicon::shared(
      std::filesystem::path(VOXD_SOURCE_DIR) / "data" / "zh",
      write("\xEF\xBB\xBF# a deployment's names\n\n重庆森林 chong2 qing4 sen1 lin2\n行 hang2\n"
            "长 zhang3\n𠮷野家 ji2 ye3 jia1\n"));
  const MandarinReader custom(words);
  EXPECT_EQ(spoken(custom.read("行")), "hang2");
  // Read as written: the context rules (长 alone: chang2) leave it alone.
  EXPECT_EQ(spoken(custom.read("又长又黑")), "you4 zhang3 you4 hei1");
  EXPECT_EQ(spoken(custom.read("𠮷野家")), "ji2 ye3 jia1");
  ASSERT_EQ(custom.read("重庆森林很好看").sentences.size(), 1u);
  EXPECT_EQ(custom.read("重庆森林很好看").sentences[0].words[0].text, "重庆森林");
}

TEST_F(UserLexicon, BadLinesAreNamed) {
  std::string error = error_of("银行 yin2 hang2\nabc a1 b2\n");
  EXPECT_NE(error.find(": line 2: 'abc' is not a word of Chinese characters"), std::string::npos)
      << error;
  error = error_of("银行 yin2 hangg2\n");
  EXPECT_NE(error.find(": line 1: 'hangg2' is not a Mandarin syllable"), std::string::npos)
      << error;
  error = error_of("银行 yin2\n");
  EXPECT_NE(error.find("line 1: '银行' has 2 characters and 1 syllables"), std::string::npos)
      << error;
  error = error_of("银行 yin7 hang2\n");
  EXPECT_NE(error.find("'yin7' is not a Mandarin syllable"), std::string::npos) << error;
}

TEST(MandarinReader, SentencesKeepHowTheyEnd) {
  const MandarinReading reading = reader().read("你好吗？真的！好。？走吧");
  ASSERT_EQ(reading.sentences.size(), 4u);
  EXPECT_EQ(reading.sentences[0].ending, '?');
  EXPECT_EQ(reading.sentences[1].ending, '!');
  EXPECT_EQ(reading.sentences[2].ending, '.');
  EXPECT_EQ(reading.sentences[3].ending, '.');  // the lone ？ asked nothing
}

TEST(MandarinSegmenter, FindsTheMostProbableWords) {
  EXPECT_EQ(words_of("我来到北京清华大学"),
            (std::vector<std::string>{"我", "来到", "北京", "清华大学"}));
  EXPECT_EQ(words_of("银行行长"), (std::vector<std::string>{"银行行长"}));
  EXPECT_EQ(words_of("乒乓球拍卖完了"), (std::vector<std::string>{"乒乓球", "拍卖", "完", "了"}));
  EXPECT_TRUE(words_of("").empty());
}

TEST(MandarinReader, PolyphonesFollowTheWord) {
  expect_spoken({
      {"银行", "yin2 hang2"},
      {"行走", "xing2 zou3"},
      {"长度", "chang2 du4"},
      {"重庆", "chong2 qing4"},
      {"重要", "zhong4 yao4"},
      {"银行行长", "yin2 hang2 hang2 zhang3"},
  });
}

TEST(MandarinReader, BracketsGiveTheReading) {
  // Brackets that are not pinyin ([见下文]) are punctuation.
  expect_spoken({
      {"他行[hang2]了", "ta1 hang2 le5"},
      {"银行行长[yin2 hang2 xing2 zhang3]", "yin2 hang2 xing2 zhang3"},
      {"绿[lü4]色", "lv4 se4"},
      // Brackets that only look like pinyin stay text (their digits read as numbers).
      {"下载[MP3]", "xia4 zai3 MP san1"},
      {"附表[A1]", "fu4 biao3 A yi1"},
      {"注[见下文]", "zhu4 jian4 xia4 wen2"},
  });
}

TEST(MandarinReader, ARareCharacterReadsAsTheUserGivesIt) {
  EXPECT_EQ(spoken("𠮷[ji2]野家"), "ji2 ye3 jia1");
  const MandarinReading reading = reader().read("𠮷野家");
  EXPECT_EQ(spoken(reading), "ye3 jia1");
  ASSERT_FALSE(reading.warnings.empty());
  EXPECT_NE(reading.warnings.front().find("has no reading"), std::string::npos);
}

TEST(MandarinReader, UnmatchedBracketsTakeLinearTime) {
  std::string text(200000, '[');
  text += "]好";
  EXPECT_EQ(spoken(text), "hao3");
}

TEST(MandarinReader, BadBracketsAreNamed) {
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"行[hangg2]", "the pinyin [hangg2]: 'hangg2' is not a Mandarin syllable"},
           {"行[hang2 hang2]", "gives 2 syllable(s) but follows 1 Chinese character(s)"},
           {"abc[hang2]", "follows 0 Chinese character(s)"}}) {
    try {
      reader().read(text);
      ADD_FAILURE() << text << " was read";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

TEST(MandarinReader, ToneSandhi) {
  expect_spoken({
      {"不是", "bu2 shi4"},
      {"不好", "bu4 hao3"},
      {"是不是", "shi4 bu5 shi4"},
      {"一个", "yi2 ge4"},
      {"一天", "yi4 tian1"},
      {"统一", "tong3 yi1"},
      {"第一", "di4 yi1"},
      {"看一看", "kan4 yi5 kan4"},
      {"你好", "ni2 hao3"},
      {"展览馆", "zhan2 lan2 guan3"},
      {"我很好", "wo2 hen2 hao3"},
      {"妈妈", "ma1 ma5"},
      {"我的", "wo3 de5"},
  });
}

TEST(MandarinReader, SentencesAndBreaks) {
  const MandarinReading reading = reader().read("今天天气真好，我们去公园吧。你去吗？");
  ASSERT_EQ(reading.sentences.size(), 2u);
  EXPECT_EQ(reading.normalized, "今天天气真好我们去公园吧\n你去吗");
  const std::vector<ReadWord>& words = reading.sentences[0].words;
  EXPECT_EQ(words.back().after, Break::kSentence);
  bool clause = false;
  for (const ReadWord& word : words) clause = clause || word.after == Break::kClause;
  EXPECT_TRUE(clause) << "the comma made no clause break";
}

TEST(MandarinReader, MarkupIsNotRead) {
  const MandarinReading reading =
      reader().read("<speak>你好<break time=\"500ms\"/>**银行**</speak>");
  ASSERT_EQ(reading.sentences.size(), 2u);
  EXPECT_EQ(spoken(reading), "ni2 hao3 yin2 hang2");
  EXPECT_EQ(spoken("<p>行[hang2]了</p>"), "hang2 le5");
}

TEST(MandarinReader, TraditionalAndFullWidthAreRead) {
  expect_spoken({
      {"銀行", "yin2 hang2"},
      {"２个", "liang3 ge4"},
  });
}

TEST(MandarinReader, WhatItCannotReadIsLeftOutWithAWarning) {
  const MandarinReading reading = reader().read("你好アリ😀안녕");
  EXPECT_EQ(spoken(reading), "ni2 hao3");
  auto warned = [&](const std::string& part) {
    for (const std::string& warning : reading.warnings) {
      if (warning.find(part) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(warned("'ア' (U+30A2) is not read")) << ::testing::PrintToString(reading.warnings);
  EXPECT_TRUE(warned("'안' (U+C548) is not read")) << ::testing::PrintToString(reading.warnings);
  EXPECT_TRUE(warned("(U+1F600) is not read")) << ::testing::PrintToString(reading.warnings);
  EXPECT_TRUE(reader().read("").sentences.empty());
  EXPECT_THROW(reader().read("\xff\xfe"), InputError);
}

TEST(MandarinReader, LongSentencesAreSplitAtABreak) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "我们，";
  const MandarinReading reading = reader().read(text + "好。");
  ASSERT_GT(reading.sentences.size(), 1u);
  for (const ReadSentence& sentence : reading.sentences) {
    size_t syllables = 0;
    for (const ReadWord& word : sentence.words) syllables += word.syllables.size();
    EXPECT_LE(syllables, MandarinReader::kMaxSentenceSyllables);
  }
}

TEST(MandarinReader, RandomTextNeverCrashes) {
  std::mt19937 random(11);
  const std::vector<std::string> parts = {"行",  "一", "不",   "好", "[", "]",  "hang2", "12",
                                          "3.5", "%",  "，",   "。", "a", "儿", "ア",    "😀",
                                          " ",   "\n", "银行", "-",  ":", "¥",  "第"};
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int count = static_cast<int>(random() % 12);
    for (int i = 0; i < count; ++i) text += parts[random() % parts.size()];
    try {
      reader().read(text);
    } catch (const InputError&) {
      // a bad override is refused, by name
    }
  }
}

}  // namespace
}  // namespace voxd::text::mandarin
