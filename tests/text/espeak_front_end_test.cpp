#include "text/espeak_front_end.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "text/markup.h"

namespace voxd::text {
namespace {

SymbolTable ipa_symbols() {
  return SymbolTable::load(std::string(VOXD_SOURCE_DIR) + "/data/symbols/espeak-ipa-en.txt");
}

// ming024/FastSpeech2's text/symbols.py for LJSpeech: pad, special, punctuation, letters, "@"
// + CMUdict's symbols, silences (pinyin left out).
SymbolTable ming024_symbols() {
  std::vector<std::string> symbols = {"_", "-"};
  for (char c : std::string("!'(),.:;? ")) symbols.emplace_back(1, c);
  for (char c = 'A'; c <= 'Z'; ++c) symbols.emplace_back(1, c);
  for (char c = 'a'; c <= 'z'; ++c) symbols.emplace_back(1, c);
  for (const char* vowel :
       {"AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW"}) {
    symbols.push_back(std::string("@") + vowel);
    for (char stress : {'0', '1', '2'}) symbols.push_back(std::string("@") + vowel + stress);
  }
  for (const char* consonant :
       {"B",  "CH", "D", "DH", "F",  "G", "HH", "JH", "K", "L", "M", "N",
        "NG", "P",  "R", "S",  "SH", "T", "TH", "V",  "W", "Y", "Z", "ZH"}) {
    symbols.push_back(std::string("@") + consonant);
  }
  for (const char* silence : {"@sp", "@spn", "@sil"}) symbols.emplace_back(silence);
  return SymbolTable(std::move(symbols));
}

const char* kVariedText =
    "Dr. Smith paid $5.50 for 3 apples on May 21st, 1984 at 10:30 a.m. \"Really?\" she asked; "
    "he said yes - twice! The temperature was -5 degrees, i.e. cold, and 50% of people (mostly "
    "children) stayed home.\n"
    "Quantum physics, philosophy, rhythm, psychology and onomatopoeia are hard words. "
    "Judge the measure of a thing by its voice: the cat sat about the speech... "
    "Schenectady, Worcester, Massachusetts and Albuquerque are places in the U.S.A. "
    "Zebras, yachts, jewels, xylophones, quizzes, bourgeois genres, and naive fiances in "
    "cafes; whispering, hurrying, thoroughly exhausted, unbelievable, 1,234,567 times.";

std::string error_of(const EspeakFrontEnd& frontend, std::string_view text) {
  try {
    frontend.process(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(EspeakFrontEnd, IpaEndToEnd) {
  const EspeakFrontEnd frontend(PhonemeSet::EspeakIpa, ipa_symbols());
  const std::vector<Sentence> sentences = frontend.process("Hello, world. How are you?");
  ASSERT_EQ(sentences.size(), 2u);
  EXPECT_EQ(sentences[0].text, "Hello, world.");
  EXPECT_EQ(sentences[1].text, "How are you?");
  for (const Sentence& s : sentences) {
    EXPECT_EQ(s.dropped, 0u);
    ASSERT_EQ(s.ids.size(), s.phonemes.size());
    for (size_t i = 0; i < s.ids.size(); ++i) {
      EXPECT_EQ(frontend.symbols().symbol(s.ids[i]), s.phonemes[i]);
    }
  }
  EXPECT_EQ(sentences[0].phonemes[5], ",");
  EXPECT_EQ(sentences[1].phonemes.back(), "?");
}

TEST(EspeakFrontEnd, VariedEnglishHasNoUnknownIpaSymbols) {
  const EspeakFrontEnd frontend(PhonemeSet::EspeakIpa, ipa_symbols());
  const std::vector<Sentence> sentences = frontend.process(kVariedText);
  EXPECT_GE(sentences.size(), 5u);
  for (const Sentence& s : sentences) {
    EXPECT_EQ(s.dropped, 0u) << s.text;
    EXPECT_FALSE(s.ids.empty());
  }
}

TEST(EspeakFrontEnd, ArpabetEndToEnd) {
  const EspeakFrontEnd frontend(PhonemeSet::Arpabet, ming024_symbols());
  const std::vector<Sentence> sentences = frontend.process("Hello, world.");
  ASSERT_EQ(sentences.size(), 1u);
  std::vector<std::string> symbols;
  for (int64_t id : sentences[0].ids) symbols.push_back(frontend.symbols().symbol(id));
  EXPECT_EQ(symbols, (std::vector<std::string>{"@HH", "@AH0", "@L", "@OW1", "@sp", "@W", "@ER1",
                                               "@L", "@D", "@sp"}));
  for (const Sentence& s : frontend.process(kVariedText)) EXPECT_EQ(s.dropped, 0u) << s.text;
}

TEST(EspeakFrontEnd, EmptyAndUnpronounceableText) {
  const EspeakFrontEnd frontend(PhonemeSet::EspeakIpa, ipa_symbols());
  EXPECT_EQ(error_of(frontend, ""), "text is empty");
  EXPECT_EQ(error_of(frontend, " \n\t  "), "text is empty");
  EXPECT_EQ(error_of(frontend, "\U0001F600\U0001F44D\U0001F3FD \u2764\uFE0F"),
            "text has nothing to pronounce");
  EXPECT_EQ(error_of(frontend, "... !!! ???"), "text has nothing to pronounce");
  EXPECT_NE(error_of(frontend, "bad \xff byte").find("offset 4"), std::string::npos);
}

TEST(EspeakFrontEnd, UnknownSymbolsAreDroppedAndCounted) {
  const EspeakFrontEnd partial(PhonemeSet::EspeakIpa, SymbolTable({"_", "h", "l"}));
  const std::vector<Sentence> sentences = partial.process("Hello");
  ASSERT_EQ(sentences.size(), 1u);
  EXPECT_EQ(sentences[0].ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(sentences[0].dropped, sentences[0].phonemes.size() - 2);

  const EspeakFrontEnd none(PhonemeSet::EspeakIpa, SymbolTable({"_"}));
  EXPECT_NE(error_of(none, "Hello").find("text has nothing to pronounce"), std::string::npos);
}

TEST(EspeakFrontEnd, TextInAScriptTheVoiceCannotSpeakIsRefused) {
  const EspeakFrontEnd frontend(PhonemeSet::EspeakIpa, ipa_symbols(), "en-us");
  EXPECT_EQ(error_of(frontend, "\u4F60\u597D\uFF0C\u4E16\u754C"),
            "the text is in Han script (\u4F60), which voice language 'en-us' cannot speak");
  EXPECT_EQ(error_of(frontend, "\u041F\u0440\u0438\u0432\u0435\u0442, \u043C\u0438\u0440!"),
            "the text is in Cyrillic script (\u041F), which voice language 'en-us' cannot speak");
  for (const auto& [text, script] : std::vector<std::pair<std::string, std::string>>{
           {"\u3053\u3093\u306B\u3061\u306F", "Hiragana script (\u3053)"},
           {"\u30AB\u30BF\u30AB\u30CA", "Katakana script (\u30AB)"},
           {"\uC548\uB155\uD558\uC138\uC694", "Hangul script (\uC548)"},
           {"\u0645\u0631\u062D\u0628\u0627", "Arabic script (\u0645)"},
           {"\u05E9\u05DC\u05D5\u05DD", "Hebrew script (\u05E9)"},
           {"\u0E2A\u0E27\u0E31\u0E2A\u0E14\u0E35", "Thai script (\u0E2A)"}}) {
    EXPECT_NE(error_of(frontend, text).find("the text is in " + script), std::string::npos)
        << error_of(frontend, text);
  }
  // A few foreign letters in English text are refused too, counted, with what to do.
  const std::string mixed = error_of(frontend, "Tokyo (\u6771\u4EAC) is the capital of Japan.");
  EXPECT_NE(mixed.find("the text has 2 letters in Han script (\u6771)"), std::string::npos)
      << mixed;
  EXPECT_NE(mixed.find("<sub alias="), std::string::npos) << mixed;
  // ... and a reading given with <sub> is spoken instead.
  EXPECT_EQ(frontend.analyze("Tokyo (<sub alias=\"Tokyo\">\u6771\u4EAC</sub>) is big.").normalized,
            "Tokyo (Tokyo) is big.");
  // Latin letters beyond ASCII, and digits and symbols of no script, are fine.
  EXPECT_EQ(frontend.process("Caf\u00E9 na\u00EFve \u00C6r\u00F8, 50 \u00B0C.").size(), 1u);
  // A voice for another language takes its own script (and Latin).
  const EspeakFrontEnd russian(PhonemeSet::EspeakIpa, ipa_symbols(), "ru");
  EXPECT_EQ(russian.analyze("\u041F\u0440\u0438\u0432\u0435\u0442").normalized,
            "\u041F\u0440\u0438\u0432\u0435\u0442");
  EXPECT_NE(error_of(russian, "\u4F60\u597D").find("Han script"), std::string::npos);
}

TEST(EspeakFrontEnd, BreaksAndRatesReachTheSentences) {
  const EspeakFrontEnd frontend(PhonemeSet::EspeakIpa, ipa_symbols());
  const std::vector<Sentence> sentences = frontend.process(
      "<speak>One two <break time=\"750ms\"/> three. <prosody rate=\"slow\">Four five.</prosody>"
      " Six.<break strength=\"strong\"/><break time=\"1s\"/></speak>");
  ASSERT_EQ(sentences.size(), 4u);
  EXPECT_EQ(sentences[0].text, "One two");  // the break ends the sentence there
  EXPECT_EQ(sentences[0].pause_after_ms, 750);
  EXPECT_EQ(sentences[1].text, "three.");
  EXPECT_EQ(sentences[1].pause_after_ms, 0);
  EXPECT_FLOAT_EQ(sentences[1].rate, 1.0f);
  EXPECT_EQ(sentences[2].text, "Four five.");
  EXPECT_FLOAT_EQ(sentences[2].rate, 0.75f);
  EXPECT_EQ(sentences[3].text, "Six.");
  EXPECT_FLOAT_EQ(sentences[3].rate, 1.0f);
  EXPECT_EQ(sentences[3].pause_after_ms, 800 + 1000);  // breaks in a row add up
  // A pause after a sentence that is skipped (nothing to pronounce) goes to the one before.
  const std::vector<Sentence> skipped =
      frontend.process("Hello. \U0001F600 <break time=\"300ms\"/>");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].pause_after_ms, 300);
  // Pauses that come together after one sentence make at most kMaxBreakMs of silence.
  const std::vector<Sentence> long_pause = frontend.process(
      "Hello. <break time=\"9s\"/> \U0001F600 <break time=\"9s\"/> \U0001F600 <break "
      "time=\"9s\"/>");
  ASSERT_EQ(long_pause.size(), 1u);
  EXPECT_EQ(long_pause[0].pause_after_ms, kMaxBreakMs);
}

TEST(EspeakFrontEnd, AnalyzeShowsTheNormalisedText) {
  const EspeakFrontEnd frontend(PhonemeSet::EspeakIpa, ipa_symbols());
  const Analysis analysis = frontend.analyze("**Note:** call 555-123-4567 on 2024-03-05.");
  EXPECT_EQ(analysis.normalized,
            "Note: call five five five, one two three, four five six seven on March fifth, "
            "twenty twenty-four.");
  ASSERT_EQ(analysis.sentences.size(), 1u);
  EXPECT_EQ(analysis.sentences[0].text, analysis.normalized);
}

TEST(EspeakFrontEnd, HundredKilobytesOfText) {
  const EspeakFrontEnd frontend(PhonemeSet::EspeakIpa, ipa_symbols());
  std::string text;
  while (text.size() < 100 * 1024) text += std::string(kVariedText) + "\n";
  const std::vector<Sentence> sentences = frontend.process(text);
  EXPECT_GT(sentences.size(), 500u);
  for (const Sentence& s : sentences) {
    EXPECT_LE(s.text.size(), EspeakFrontEnd::kMaxSentenceBytes);
    EXPECT_FALSE(s.ids.empty());
  }
}

// Runs of hostile text (a hang would be ctest's timeout; linear time is Markup's test).
TEST(EspeakFrontEnd, HostileTextGivesSentencesOrAnInputError) {
  const EspeakFrontEnd frontend(PhonemeSet::EspeakIpa, ipa_symbols());
  for (const std::string unit :
       {"a.", "1-", "+1 ", "a@", "http://", "x.com/", "(5) ", "555-", "2024-03-", "<b>", "*_",
        "&amp;", "<say-as interpret-as=\"date\">1/1/1</say-as>", "[x](y) "}) {
    std::string text;
    while (text.size() < 20 * 1024) text += unit;
    try {
      for (const Sentence& s : frontend.process(text)) EXPECT_FALSE(s.ids.empty()) << unit;
    } catch (const InputError&) {
      // nothing to pronounce is a fair answer for some of these
    }
  }
}

// Random soup of markup, numbers, addresses and scripts: the front end either gives sentences or
// an InputError, never another exception.
TEST(EspeakFrontEnd, RandomMarkupSoupGivesSentencesOrAnInputError) {
  const EspeakFrontEnd frontend(PhonemeSet::EspeakIpa, ipa_symbols());
  const std::vector<std::string> pieces = {"<",
                                           ">",
                                           "/",
                                           "&",
                                           "&amp;",
                                           "&#",
                                           ";",
                                           "\"",
                                           "'",
                                           "=",
                                           "#",
                                           "*",
                                           "**",
                                           "_",
                                           "`",
                                           "```",
                                           "~~",
                                           "[",
                                           "]",
                                           "(",
                                           ")",
                                           "!",
                                           ":",
                                           "@",
                                           ".",
                                           ",",
                                           "-",
                                           "+",
                                           "%",
                                           "\n",
                                           " ",
                                           "  ",
                                           "|",
                                           "0",
                                           "1",
                                           "12",
                                           "2024",
                                           "555",
                                           "a",
                                           "Hello",
                                           "ms",
                                           "km",
                                           "\u00B0C",
                                           "\u00E9",
                                           "\u4F60",
                                           "<break time=\"",
                                           "<break/>",
                                           "500ms\"/>",
                                           "<prosody rate=\"",
                                           "slow\">",
                                           "</prosody>",
                                           "<say-as interpret-as=\"",
                                           "date\">",
                                           "characters\">",
                                           "</say-as>",
                                           "<sub alias=\"",
                                           "</sub>",
                                           "<speak>",
                                           "</speak>",
                                           "<!--",
                                           "-->",
                                           "<![CDATA[",
                                           "]]>",
                                           "https://",
                                           "www.",
                                           ".com",
                                           "x@y.org",
                                           "+1 ",
                                           "(555) ",
                                           "123-4567",
                                           "2024-03-05",
                                           "03/05/2024",
                                           "$",
                                           "\u20AC",
                                           "<script>",
                                           "</script>",
                                           "<p>",
                                           "- ",
                                           "1. ",
                                           "> ",
                                           "\\"};
  std::mt19937 rng(12);
  int sentences = 0;
  for (int round = 0; round < 1500; ++round) {
    std::string text;
    const int length = std::uniform_int_distribution<int>(1, 40)(rng);
    for (int k = 0; k < length; ++k) {
      text += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    }
    const bool code =
        text.find("<![CDATA[") != std::string::npos || text.find('`') != std::string::npos;
    try {
      for (const Sentence& s : frontend.process(text)) {
        ++sentences;
        EXPECT_FALSE(s.ids.empty()) << text;
        EXPECT_GE(s.pause_after_ms, 0) << text;
        EXPECT_GE(s.rate, 0.25f) << text;
        EXPECT_LE(s.rate, 4.0f) << text;
        // A tag is never read (inline code and CDATA are text, so they may hold one).
        for (const char* attribute : {"time=", "interpret-as", "rate=", "alias="}) {
          EXPECT_TRUE(code || s.text.find(attribute) == std::string::npos)
              << s.text << " from: " << text;
        }
      }
    } catch (const InputError&) {
      // bad SSML values, foreign scripts, nothing to pronounce
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not an InputError: " << e.what() << " for: " << text;
    }
  }
  EXPECT_GT(sentences, 500);
}

TEST(EspeakFrontEnd, ConcurrentUse) {
  const EspeakFrontEnd ipa(PhonemeSet::EspeakIpa, ipa_symbols());
  const EspeakFrontEnd arpabet(PhonemeSet::Arpabet, ming024_symbols());
  auto ids_of = [](const EspeakFrontEnd& frontend) {
    std::vector<std::vector<int64_t>> out;
    for (const Sentence& s : frontend.process(kVariedText)) out.push_back(s.ids);
    return out;
  };
  const auto expected_ipa = ids_of(ipa);
  const auto expected_arpabet = ids_of(arpabet);
  std::vector<int> mismatches(6, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 3; ++i) {
        const bool use_ipa = t % 2 == 0;
        if (ids_of(use_ipa ? ipa : arpabet) != (use_ipa ? expected_ipa : expected_arpabet)) {
          ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace voxd::text
