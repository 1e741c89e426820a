#include "text/phonemizer.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace voxd::text {
namespace {

using Tokens = std::vector<std::string>;

std::string join(const Tokens& tokens) {
  std::string out;
  for (const std::string& t : tokens) out += (out.empty() ? "" : "|") + t;
  return out;
}

Tokens split(const std::string& s) {
  std::istringstream in(s);
  Tokens out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

// Word → CMUdict pronunciation (first variant).
const std::vector<std::pair<std::string, std::string>> kCmudict = {
    {"hello", "HH AH0 L OW1"},
    {"world", "W ER1 L D"},
    {"speech", "S P IY1 CH"},
    {"the", "DH AH0"},
    {"cat", "K AE1 T"},
    {"about", "AH0 B AW1 T"},
    {"voice", "V OY1 S"},
    {"thing", "TH IH1 NG"},
    {"measure", "M EH1 ZH ER0"},
    {"judge", "JH AH1 JH"},
    {"yes", "Y EH1 S"},
    {"no", "N OW1"},
    {"water", "W AO1 T ER0"},
    {"computer", "K AH0 M P Y UW1 T ER0"},
    {"music", "M Y UW1 Z IH0 K"},
    {"father", "F AA1 DH ER0"},
    {"mother", "M AH1 DH ER0"},
    {"house", "HH AW1 S"},
    {"book", "B UH1 K"},
    {"food", "F UW1 D"},
    {"red", "R EH1 D"},
    {"green", "G R IY1 N"},
    {"blue", "B L UW1"},
    {"sing", "S IH1 NG"},
    {"ship", "SH IH1 P"},
    {"chair", "CH EH1 R"},
    {"she", "SH IY1"},
    {"zoo", "Z UW1"},
    {"vision", "V IH1 ZH AH0 N"},
    {"boy", "B OY1"},
    {"time", "T AY1 M"},
    {"go", "G OW1"},
    {"car", "K AA1 R"},
    {"bird", "B ER1 D"},
    {"four", "F AO1 R"},
    {"happy", "HH AE1 P IY0"},
    {"table", "T EY1 B AH0 L"},
    {"button", "B AH1 T AH0 N"},
    {"garden", "G AA1 R D AH0 N"},
    {"little", "L IH1 T AH0 L"},
    {"china", "CH AY1 N AH0"},
    {"seven", "S EH1 V AH0 N"},
    {"yellow", "Y EH1 L OW0"},
    {"question", "K W EH1 S CH AH0 N"},
    {"nation", "N EY1 SH AH0 N"},
    {"beautiful", "B Y UW1 T AH0 F AH0 L"},
    {"important", "IH0 M P AO1 R T AH0 N T"},
    {"people", "P IY1 P AH0 L"},
    {"because", "B IH0 K AO1 Z"},
    {"zero", "Z IY1 R OW0"},
    {"hurry", "HH ER1 IY0"},
    {"idea", "AY0 D IY1 AH0"},
    {"tour", "T UH1 R"},
    {"fire", "F AY1 ER0"},
    {"hour", "AW1 ER0"},
    {"air", "EH1 R"},
    {"near", "N IH1 R"},
    {"sure", "SH UH1 R"},
    {"thought", "TH AO1 T"},
    {"dog", "D AO1 G"},
    {"cot", "K AA1 T"},
    {"put", "P UH1 T"},
    {"but", "B AH1 T"},
    {"bath", "B AE1 TH"},
    {"this", "DH IH1 S"},
    {"of", "AH1 V"},
    {"to", "T UW1"},
    {"and", "AH0 N D"},
    {"is", "IH1 Z"},
    {"it", "IH1 T"},
};

// Words where the eSpeak-derived ARPAbet differs from CMUdict (see docs/text-frontend.md).
const std::set<std::string> kKnownDifferences = {"beautiful", "because", "zero", "dog", "and"};

class PhonemizerTest : public ::testing::Test {
 protected:
  Phonemizer phonemizer;
};

TEST_F(PhonemizerTest, IpaOfKnownWords) {
  EXPECT_EQ(join(phonemizer.phonemize_ipa("hello world", "en-us")),
            "h|\xC9\x99|l|\xCB\x88|o\xCA\x8A| |w|\xCB\x88|\xC9\x9C\xCB\x90|l|d");
  EXPECT_EQ(join(phonemizer.phonemize_ipa("speech", "en-us")), "s|p|\xCB\x88|i\xCB\x90|t\xCA\x83");
  EXPECT_EQ(join(phonemizer.phonemize_ipa("judge", "en-us")),
            "d\xCA\x92|\xCB\x88|\xCA\x8C|d\xCA\x92");
}

TEST_F(PhonemizerTest, IpaKeepsPunctuationAndSpacing) {
  const Tokens tokens =
      phonemizer.phonemize_ipa("\"Hello,\" she said; yes: no - maybe? Sure!", "en-us");
  Tokens punctuation;
  for (const std::string& t : tokens) {
    ASSERT_FALSE(t.empty());
    if (t.size() == 1 && std::string("\",;:-?!.").find(t) != std::string::npos) {
      punctuation.push_back(t);
    }
  }
  EXPECT_EQ(punctuation, (Tokens{"\"", ",", "\"", ";", ":", "-", "?", "!"}));
  EXPECT_EQ(tokens.front(), "\"");  // no boundary between the quote and its word
  EXPECT_EQ(tokens[1], "h");
  EXPECT_NE(tokens.back(), std::string(kWordBoundary));
  EXPECT_EQ(tokens.back(), "!");
  for (size_t i = 1; i < tokens.size(); ++i) {
    EXPECT_FALSE(tokens[i] == " " && tokens[i - 1] == " ") << "double boundary at " << i;
  }
  EXPECT_EQ(join(phonemizer.phonemize_ipa("Hello... world", "en-us")),
            "h|\xC9\x99|l|\xCB\x88|o\xCA\x8A|.| |w|\xCB\x88|\xC9\x9C\xCB\x90|l|d");
}

TEST_F(PhonemizerTest, MnemonicsOfPinyinKeepTheToneOnTheVowel) {
  // eSpeak's IPA writes tones 1 (55) and 4 (51) alike; its mnemonics keep them apart.
  EXPECT_EQ(join(phonemizer.phonemize_mnemonic("ma1 ma4", "cmn-latn-pinyin")),
            "m|\xCB\x88|A55| |m|\xCB\x88|A51");
  // Its pauses ("_|" after every syllable) are left out, punctuation kept, erhua one vowel.
  EXPECT_EQ(join(phonemizer.phonemize_mnemonic("ni3 hao3, huar1.", "cmn-latn-pinyin")),
            "n|\xCB\x88|i214| |X|\xCB\x88|Au214|,| |X|w|A|\xCB\x88|@r55|.");
  // The glide before ü is eSpeak's phoneme ";", not a semicolon.
  EXPECT_EQ(join(phonemizer.phonemize_mnemonic("yu2", "cmn-latn-pinyin")), "#;|\xCB\x88|y35");
  EXPECT_EQ(mnemonic_phoneme(";"), "#;");
  EXPECT_EQ(mnemonic_phoneme("tS;"), "tS;");
  EXPECT_THROW(phonemizer.phonemize_mnemonic("ma1", "no-such-voice"), voxd::InputError);
}

TEST(WithoutTone, StripsOnlyARunOfTwoOrMoreDigits) {
  EXPECT_EQ(without_tone("i214"), "i");
  EXPECT_EQ(without_tone("iE55"), "iE");
  EXPECT_EQ(without_tone("@2"), "@2");  // an English mnemonic, not a tone
  EXPECT_EQ(without_tone("a\xC9\xAA"), "a\xC9\xAA");
  EXPECT_EQ(without_tone("55"), "55");
  EXPECT_EQ(without_tone(""), "");
}

TEST_F(PhonemizerTest, ArpabetOfKnownWords) {
  EXPECT_EQ(phonemizer.phonemize_arpabet("hello", "en-us"), split("HH AH0 L OW1"));
  std::set<std::string> differences;
  for (const auto& [word, cmu] : kCmudict) {
    const Tokens got = phonemizer.phonemize_arpabet(word, "en-us");
    if (got != split(cmu)) {
      differences.insert(word);
      if (!kKnownDifferences.contains(word)) {
        ADD_FAILURE() << word << ": got " << join(got) << ", CMUdict " << cmu;
      }
    }
  }
  for (const std::string& word : kKnownDifferences) {
    EXPECT_TRUE(differences.contains(word)) << word << " now matches CMUdict: update the list";
  }
}

TEST_F(PhonemizerTest, ArpabetPunctuationBecomesSp) {
  EXPECT_EQ(phonemizer.phonemize_arpabet("Hello, world.", "en-us"),
            split("HH AH0 L OW1 sp W ER1 L D sp"));
  EXPECT_EQ(phonemizer.phonemize_arpabet("\"Yes\" (no) - maybe?!", "en-us"),
            split("Y EH1 S N OW1 sp M EY1 B IY0 sp"));
}

TEST_F(PhonemizerTest, ArpabetUsesOnlyCmudictSymbols) {
  const std::set<std::string> vowels = {"AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER",
                                        "EY", "IH", "IY", "OW", "OY", "UH", "UW"};
  const std::set<std::string> consonants = {"B",  "CH", "D",  "DH", "F",  "G", "HH", "JH",
                                            "K",  "L",  "M",  "N",  "NG", "P", "R",  "S",
                                            "SH", "T",  "TH", "V",  "W",  "Y", "Z",  "ZH"};
  const Tokens phones = phonemizer.phonemize_arpabet(
      "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs! "
      "Sphinx of black quartz, judge my vow. Anchorage, Worcester and Saskatchewan; "
      "a rhythm of azure bourgeois genre, naive cafe fiance. Mirror, error, hurry.",
      "en-us");
  ASSERT_GT(phones.size(), 100u);
  for (const std::string& p : phones) {
    if (p == kArpabetPause || consonants.contains(p)) continue;
    ASSERT_EQ(p.size(), 3u) << p;
    EXPECT_TRUE(vowels.contains(p.substr(0, 2))) << p;
    EXPECT_TRUE(p[2] == '0' || p[2] == '1' || p[2] == '2') << p;
  }
}

TEST(EspeakWordToArpabet, MapsMnemonics) {
  EXPECT_EQ(espeak_word_to_arpabet({"h", "@", "l", "'oU"}), split("HH AH0 L OW1"));
  EXPECT_EQ(espeak_word_to_arpabet({"D", "@2"}), split("DH AH0"));
  EXPECT_EQ(espeak_word_to_arpabet({"f", "O@"}), split("F AO1 R"));
  EXPECT_EQ(espeak_word_to_arpabet({"h", "'3:", "r", "i"}), split("HH ER1 IY0"));
  EXPECT_EQ(espeak_word_to_arpabet({"f", "'aI3"}), split("F AY1 ER0"));
  EXPECT_EQ(espeak_word_to_arpabet({"a#", "b", ",aU", "t"}), split("AH0 B AW1 T"));
  EXPECT_EQ(espeak_word_to_arpabet({"'E", "v", ",@", "r"}), split("EH1 V AH2 R"));
  EXPECT_EQ(espeak_word_to_arpabet({"_:", ";", "unknown!"}), Tokens{});
}

TEST(IsPhoneme, PausesAndPunctuationAreNot) {
  for (const char* token : {" ", "sp", ",", ".", "?", "!", "-", "\""}) {
    EXPECT_FALSE(is_phoneme(token)) << token;
  }
  for (const char* token : {"a", "AH0", "\xC9\x99", "\xCB\x88"}) EXPECT_TRUE(is_phoneme(token));
}

TEST_F(PhonemizerTest, UnknownLanguage) {
  EXPECT_THROW(phonemizer.phonemize_ipa("hello", "xx-nonexistent"), InputError);
  EXPECT_FALSE(phonemizer.phonemize_ipa("hello", "en-us").empty());
}

TEST_F(PhonemizerTest, ConcurrentCallsGiveTheSameResult) {
  const std::string english = "The quick brown fox jumps over the lazy dog, twice.";
  const std::string german = "Der schnelle braune Fuchs springt.";
  const Tokens ipa_en = phonemizer.phonemize_ipa(english, "en-us");
  const Tokens ipa_de = phonemizer.phonemize_ipa(german, "de");
  const Tokens arpabet = phonemizer.phonemize_arpabet(english, "en-us");
  ASSERT_NE(ipa_en, ipa_de);
  std::vector<std::thread> threads;
  std::vector<int> failures(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        if (t % 3 == 0 && phonemizer.phonemize_ipa(english, "en-us") != ipa_en) ++failures[t];
        if (t % 3 == 1 && phonemizer.phonemize_ipa(german, "de") != ipa_de) ++failures[t];
        if (t % 3 == 2 && phonemizer.phonemize_arpabet(english, "en-us") != arpabet) {
          ++failures[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

}  // namespace
}  // namespace voxd::text
