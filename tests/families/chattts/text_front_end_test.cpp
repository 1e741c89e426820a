// ChatTTS's front end on the tiny voice's tokenizer: control tokens in brackets survive the
// markup pass and the splitting, Chinese splits at 。！？, prompt-only tokens are dropped, and
// text with nothing else to say is refused.
#include "families/chattts/text_front_end.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace voxd::chattts {
namespace {

const std::string kTokenizer =
    std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/voices/tiny-chattts/tokenizer/tokenizer.json";

TextFrontEnd front_end() {
  return TextFrontEnd(Tokenizer::from_file(kTokenizer), "zh");
}

TEST(ChatTtsFrontEnd, AdjacentControlTokensAreKept) {
  const TextFrontEnd fe = front_end();
  const Tokenizer& tokenizer = fe.tokenizer();
  const std::vector<text::Sentence> sentences = fe.process("hello [laugh][uv_break] world");
  ASSERT_EQ(sentences.size(), 1u);
  const std::vector<int64_t>& ids = sentences[0].ids;
  const auto has = [&](const char* token) {
    const int64_t id = tokenizer.require_token_id(token);
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  EXPECT_TRUE(has("[laugh]"));
  EXPECT_TRUE(has("[uv_break]"));
  EXPECT_EQ(sentences[0].text, "hello [laugh][uv_break] world");
}

TEST(ChatTtsFrontEnd, ChineseSplitsAtFullWidthTerminals) {
  const std::vector<text::Sentence> sentences =
      front_end().process("你好。今天我们说话！[laugh][uv_break]");
  ASSERT_EQ(sentences.size(), 2u);
  EXPECT_EQ(sentences[0].text, "你好。");
  // Control tokens after a sentence's end stay with it.
  EXPECT_EQ(sentences[1].text, "今天我们说话！[laugh][uv_break]");
}

TEST(ChatTtsFrontEnd, PromptOnlyTokensAreDroppedAndNothingElseIsRefused) {
  const TextFrontEnd fe = front_end();
  const int64_t stts = fe.tokenizer().require_token_id("[Stts]");
  const std::vector<text::Sentence> sentences = fe.process("[Stts]hello");
  ASSERT_EQ(sentences.size(), 1u);
  EXPECT_EQ(std::count(sentences[0].ids.begin(), sentences[0].ids.end(), stts), 0);
  EXPECT_THROW(fe.process("[Stts][spk_emb][empty_spk]"), InputError);
  EXPECT_THROW(fe.process("   \n "), InputError);
  EXPECT_THROW(fe.process(std::string("\xff\xfe", 2)), InputError);
  EXPECT_THROW(fe.process("<speak><prosody rate=\"2\">hello</prosody></speak>"), InputError);
}

TEST(ChatTtsFrontEnd, LongTextIsCutBetweenTokensNotInsideThem) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "hello[uv_break]";
  for (const text::Sentence& sentence : front_end().process(text)) {
    EXPECT_LE(sentence.ids.size(), TextFrontEnd::kMaxSentenceBytes / 3);
    EXPECT_EQ(sentence.text.find("[uv_"), sentence.text.find("[uv_break]")) << sentence.text;
    EXPECT_EQ(std::count(sentence.text.begin(), sentence.text.end(), '['),
              std::count(sentence.text.begin(), sentence.text.end(), ']'))
        << sentence.text;
  }
}

}  // namespace
}  // namespace voxd::chattts
