// PinyinEspeakFrontEnd: Chinese text → the pinyin eSpeak NG's cmn-latn-pinyin voice reads → its
// phoneme mnemonics → ids of data/symbols/espeak-mnemonic-zh.txt; and make_phoneme_front_end's
// choice by language.
#include "text/mandarin/espeak_front_end.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "text/espeak_front_end.h"

namespace voxd::text::mandarin {
namespace {

SymbolTable zh_symbols() {
  return SymbolTable::load(std::string(VOXD_SOURCE_DIR) + "/data/symbols/espeak-mnemonic-zh.txt");
}

const PinyinEspeakFrontEnd& front_end() {
  static const PinyinEspeakFrontEnd made(zh_symbols(), "zh-test");
  return made;
}

std::string message_of(std::string_view text) {
  try {
    front_end().analyze(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PinyinEspeakFrontEnd, ReadsTheSandhiPinyinThroughEspeak) {
  const Analysis analysis = front_end().analyze("今天天气真好。你好吗？");
  ASSERT_EQ(analysis.sentences.size(), 2u);
  EXPECT_EQ(analysis.sentences[0].text, "jin1 tian1 tian1 qi4 zhen1 hao3.");
  EXPECT_EQ(analysis.sentences[1].text, "ni2 hao3 ma5?");  // 3-3 sandhi, the question kept
  const Sentence& first = analysis.sentences[0];
  EXPECT_EQ(first.dropped, 0u);
  EXPECT_EQ(first.ids.size(), first.phonemes.size());
  // Tone 1 (55) and tone 4 (51) are different symbols.
  EXPECT_EQ(std::count(first.phonemes.begin(), first.phonemes.end(), "iE55"), 2);
  EXPECT_EQ(std::count(first.phonemes.begin(), first.phonemes.end(), "i51"), 1);
  const SymbolTable symbols = zh_symbols();
  for (size_t i = 0; i < first.ids.size(); ++i) {
    EXPECT_EQ(symbols.symbol(first.ids[i]), first.phonemes[i]);
  }
  EXPECT_EQ(analysis.normalized, "今天天气真好\n你好吗");
}

TEST(PinyinEspeakFrontEnd, BreaksNumbersAndLatinWords) {
  const Analysis analysis = front_end().analyze("我有3个苹果，用iPad看。");
  ASSERT_EQ(analysis.sentences.size(), 1u);
  EXPECT_EQ(analysis.sentences[0].text, "wo2 you3 san1 ge4 ping2 guo3, yong4 i p a d kan4.");
  EXPECT_EQ(analysis.sentences[0].dropped, 0u);
}

TEST(PinyinEspeakFrontEnd, OverridesAndErhuaReachEspeak) {
  EXPECT_EQ(front_end().analyze("行[hang2]。").sentences.at(0).text, "hang2.");
  const Sentence sentence = front_end().analyze("一点儿。").sentences.at(0);
  EXPECT_NE(sentence.text.find("dianr3"), std::string::npos) << sentence.text;
}

TEST(PinyinEspeakFrontEnd, RefusesTextWithoutChineseNamingTheLanguage) {
  EXPECT_NE(message_of("Hello world.").find("zh-cn"), std::string::npos);
  EXPECT_EQ(message_of("  \n"), "text is empty");
  EXPECT_NE(message_of("行[xx2]").find("'xx2' is not a Mandarin syllable"), std::string::npos);
  EXPECT_NE(message_of("😀").find("no Chinese characters"), std::string::npos);
}

TEST(PinyinEspeakFrontEnd, AHanziWithoutAReadingIsLeftOutAndNamedWhenNothingIsLeft) {
  EXPECT_EQ(front_end().analyze("你𠀂好。").sentences.at(0).text, "ni2 hao3.");
  const std::string message = message_of("𠀂。");
  EXPECT_NE(message.find("nothing to pronounce"), std::string::npos) << message;
  EXPECT_NE(message.find("U+20002"), std::string::npos) << message;
}

// The eSpeak front end phonemizes each set as itself: mnemonics keep the tones IPA merges.
TEST(EspeakFrontEnd, PhonemizesMnemonics) {
  const EspeakFrontEnd mnemonics(PhonemeSet::EspeakMnemonic, zh_symbols(), "cmn-latn-pinyin");
  EXPECT_EQ(mnemonics.unit_name(), "espeak-mnemonic");
  const Sentence sentence = mnemonics.phonemize("ma1 ma4.");
  EXPECT_EQ(sentence.phonemes,
            (std::vector<std::string>{"m", "\xCB\x88", "A55", " ", "m", "\xCB\x88", "A51", "."}));
  EXPECT_EQ(sentence.ids.size(), sentence.phonemes.size());
  EXPECT_EQ(sentence.dropped, 0u);
  EXPECT_EQ(sentence.text, "ma1 ma4.");
}

TEST(MakePhonemeFrontEnd, PicksTheFrontEndByLanguage) {
  const auto english = make_phoneme_front_end(
      PhonemeSet::EspeakIpa,
      SymbolTable::load(std::string(VOXD_SOURCE_DIR) + "/data/symbols/espeak-ipa-en.txt"), "en-us",
      "en");
  EXPECT_NE(dynamic_cast<const EspeakFrontEnd*>(english.get()), nullptr);
  const auto mandarin =
      make_phoneme_front_end(PhonemeSet::EspeakMnemonic, zh_symbols(), "zh-cn", "zh");
  EXPECT_NE(dynamic_cast<const PinyinEspeakFrontEnd*>(mandarin.get()), nullptr);
  EXPECT_EQ(mandarin->unit_name(), "espeak-mnemonic");
  EXPECT_THROW(make_phoneme_front_end(PhonemeSet::EspeakIpa, zh_symbols(), "zh-cn", "zh"),
               InputError);
  EXPECT_EQ(teacher_voice("zh-cn"), "cmn-latn-pinyin");
  EXPECT_EQ(teacher_voice("en-us"), "en-us");
}

}  // namespace
}  // namespace voxd::text::mandarin
