#include "text/sentences.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "text/normalize.h"

namespace voxd::text {
namespace {

using Strings = std::vector<std::string>;

TEST(SplitSentences, OnTerminalPunctuation) {
  EXPECT_EQ(split_sentences("Hello world. How are you? Fine!"),
            (Strings{"Hello world.", "How are you?", "Fine!"}));
  EXPECT_EQ(split_sentences("Wait... what?! Yes."), (Strings{"Wait...", "what?!", "Yes."}));
  EXPECT_EQ(split_sentences("He said \"Stop.\" Then he left."),
            (Strings{"He said \"Stop.\"", "Then he left."}));
  EXPECT_EQ(split_sentences("no final punctuation"), (Strings{"no final punctuation"}));
  EXPECT_EQ(split_sentences("version 3.14 is out. ok"), (Strings{"version 3.14 is out.", "ok"}));
}

TEST(SplitSentences, OnFullWidthTerminalsWithoutSpaces) {
  EXPECT_EQ(split_sentences("你好。今天天气很好！你呢？"),
            (Strings{"你好。", "今天天气很好！", "你呢？"}));
  EXPECT_EQ(split_sentences("他说：“走吧。”然后走了。"), (Strings{"他说：“走吧。”", "然后走了。"}));
  EXPECT_EQ(split_sentences("真的？！是的。"), (Strings{"真的？！", "是的。"}));
}

TEST(SplitSentences, LongChineseIsCutAtAFullWidthComma) {
  std::string text;
  for (int i = 0; i < 20; ++i) text += "我们今天去公园散步，";  // 30 bytes a clause
  const Strings pieces = split_sentences(text, 100);
  ASSERT_GT(pieces.size(), 1u);
  for (const std::string& piece : pieces) {
    EXPECT_LE(piece.size(), 100u);
    EXPECT_EQ(piece.substr(piece.size() - 3), "，") << piece;
  }
}

TEST(SplitSentences, OnLineBreaks) {
  EXPECT_EQ(split_sentences("line one\nline two\n\n  line three  "),
            (Strings{"line one", "line two", "line three"}));
}

TEST(SplitSentences, EmptyInput) {
  EXPECT_TRUE(split_sentences("").empty());
  EXPECT_TRUE(split_sentences("  \n \n").empty());
  EXPECT_THROW(split_sentences("a", 0), Error);
}

TEST(SplitSentences, AbbreviationsDoNotSplitAfterNormalize) {
  EXPECT_EQ(
      split_sentences(normalize("Dr. Smith paid $3.50 to Mr. Jones. Then he left.")),
      (Strings{"doctor Smith paid three dollars fifty cents to mister Jones.", "Then he left."}));
}

std::string joined_words(const Strings& pieces) {
  std::string out;
  for (const std::string& piece : pieces) out += piece + " ";
  return out;
}

TEST(SplitSentences, LongSentencesAreCutAtClausesThenSpaces) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "this is clause number " + std::to_string(i) + ", ";
  text += "end";
  const Strings pieces = split_sentences(text, 100);
  ASSERT_GT(pieces.size(), 1u);
  for (const std::string& piece : pieces) {
    EXPECT_LE(piece.size(), 100u);
    EXPECT_FALSE(piece.empty());
    if (&piece != &pieces.back()) {
      EXPECT_EQ(piece.back(), ',') << piece;
    }
  }
  EXPECT_EQ(joined_words(pieces), text + " ");

  std::string words;
  for (int i = 0; i < 300; ++i) words += "word ";
  for (const std::string& piece : split_sentences(words, 50)) {
    EXPECT_LE(piece.size(), 50u);
    EXPECT_EQ(piece.front(), 'w');
    EXPECT_EQ(piece.back(), 'd');
  }
}

TEST(SplitSentences, UnbreakableTextIsCutBetweenCharacters) {
  const Strings pieces = split_sentences(std::string(1000, 'a'), 64);
  size_t total = 0;
  for (const std::string& piece : pieces) {
    EXPECT_LE(piece.size(), 64u);
    total += piece.size();
  }
  EXPECT_EQ(total, 1000u);

  std::string cyrillic;
  for (int i = 0; i < 200; ++i) cyrillic += "\u043C\u0438\u0440";
  for (const std::string& piece : split_sentences(cyrillic, 33)) {
    EXPECT_LE(piece.size(), 33u);
    EXPECT_NO_THROW(clean_unicode(piece)) << "piece is not valid UTF-8";
  }
}

TEST(SplitSentences, HundredKilobytes) {
  const std::string paragraph =
      "The quick brown fox jumps over the lazy dog, again and again; nobody knows why. "
      "Is it hungry? Perhaps! A very long sentence follows that goes on and on without any "
      "punctuation at all because some writers simply never stop to breathe and keep adding "
      "more and more words to the same sentence until it becomes far too long to be spoken "
      "in a single breath by anyone who is not a trained opera singer or an auctioneer\n";
  std::string text;
  while (text.size() < 100 * 1024) text += paragraph;
  const Strings sentences = split_sentences(text);
  EXPECT_GT(sentences.size(), 900u);
  for (const std::string& s : sentences) {
    EXPECT_FALSE(s.empty());
    EXPECT_LE(s.size(), 400u);
  }
  std::string one_line(100 * 1024, 'x');
  for (size_t i = 7; i < one_line.size(); i += 8) one_line[i] = ' ';
  for (const std::string& s : split_sentences(one_line)) EXPECT_LE(s.size(), 400u);
}

}  // namespace
}  // namespace voxd::text
