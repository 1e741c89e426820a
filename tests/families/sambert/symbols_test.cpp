// SambertSymbols against KAN-TTS's own KanTtsLinguisticUnit. tests/fixtures/sambert_symbols/
// (written by tools/reference/sambert_symbol_fixtures.py) holds a made-up language inventory,
// symbols.json (the lists tools/kantts_symbols.py builds from it, checked there to equal the
// original's) and cases.json: the ids the original gave for each case's symbol string, less the
// "~" column its inference drops, and the inputs voxd refuses with a substring of the message.
#include "families/sambert/symbols.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/error.h"

namespace voxd {
namespace {

using nlohmann::json;

const std::string kDir = VOXD_SOURCE_DIR "/tests/fixtures/sambert_symbols/";

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

const json& lists() {
  static const json j = read_json(kDir + "symbols.json");
  return j;
}

const json& fixture() {
  static const json j = read_json(kDir + "cases.json");
  return j;
}

const SambertSymbols& table() {
  static const SambertSymbols t = SambertSymbols::from_json(lists(), "symbols.json");
  return t;
}

const json& find_case(const std::string& name) {
  for (const json& c : fixture()["cases"]) {
    if (c["name"].get<std::string>() == name) return c;
  }
  throw std::runtime_error("no case " + name);
}

// The id of `value` in channel list `channel` of symbols.json.
int64_t index_of(const std::string& channel, const std::string& value) {
  const json& list = lists()[channel];
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].get<std::string>() == value) return static_cast<int64_t>(i);
  }
  throw std::runtime_error("no " + value + " in " + channel);
}

std::vector<int64_t> column(const SambertTokens& tokens, size_t channel) {
  std::vector<int64_t> out;
  for (const auto& ids : tokens.linguistic) out.push_back(ids[channel]);
  return out;
}

void expect_ids(const SambertTokens& tokens, const json& ids, const std::string& name) {
  const char* const channels[4] = {"sy", "tone", "syllable_flag", "word_segment"};
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_EQ(column(tokens, c), ids[channels[c]].get<std::vector<int64_t>>())
        << name << ": " << channels[c];
  }
  EXPECT_EQ(tokens.emotion, ids["emotion"].get<std::vector<int64_t>>()) << name << ": emotion";
  EXPECT_EQ(tokens.speaker, ids["speaker"].get<std::vector<int64_t>>()) << name << ": speaker";
}

// The message of the InputError `f` throws ("" and a failure when it throws none).
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return "";
}

std::string with_spaces_replaced(const std::string& text, const std::string& by) {
  std::string out;
  for (const char ch : text) {
    if (ch == ' ') {
      out += by;
    } else {
      out += ch;
    }
  }
  return out;
}

const std::string kToken = "{a_c$tone1$s_both$word_both$emotion_neutral$F7}";

TEST(SambertSymbols, MatchesKanTts) {
  ASSERT_GE(fixture()["cases"].size(), 10u);
  for (const json& c : fixture()["cases"]) {
    expect_ids(table().parse(c["symbols"].get<std::string>()), c["ids"],
               c["name"].get<std::string>());
  }
}

TEST(SambertSymbols, WhitespaceRunsSeparateTokens) {
  for (const json& c : fixture()["cases"]) {
    const std::string spaced =
        "\r\n " + with_spaces_replaced(c["symbols"].get<std::string>(), " \t\n  ") + " \t\v\f";
    expect_ids(table().parse(spaced), c["ids"], c["name"].get<std::string>() + " (respaced)");
  }
}

TEST(SambertSymbols, RefusesWhatKanTtsGetsWrong) {
  ASSERT_FALSE(fixture()["refused"].empty());
  for (const json& r : fixture()["refused"]) {
    const std::string symbols = r["symbols"].get<std::string>();
    const std::string message = message_of([&] { (void)table().parse(symbols); });
    EXPECT_NE(message.find(r["error"].get<std::string>()), std::string::npos)
        << r["name"].get<std::string>() << ": " << message;
  }
}

TEST(SambertSymbols, UnknownSyNamesTokenChannelAndExamples) {
  const std::string message = message_of(
      [] { (void)table().parse(kToken + " {xx$tone1$s_both$word_both$emotion_neutral$F7}"); });
  EXPECT_NE(message.find("token 1 ("), std::string::npos) << message;
  EXPECT_NE(message.find("sy 'xx' is not in the voice's inventory"), std::string::npos) << message;
  EXPECT_NE(message.find("21 in all, e.g. a_c, ao_c, e_c, en_c, g_c, h_c, i_c, n_c)"),
            std::string::npos)
      << message;
}

TEST(SambertSymbols, LongTokenIsCutInMessages) {
  std::string value;
  for (int i = 0; i < 100; ++i) value += "\xc3\xa9";  // é
  const std::string message = message_of(
      [&] { (void)table().parse("{" + value + "$tone1$s_both$word_both$emotion_neutral$F7}"); });
  EXPECT_NE(message.find("...)"), std::string::npos) << message;
  EXPECT_LT(message.size(), 500u) << message;
  EXPECT_NO_THROW((void)json(message).dump());  // still valid UTF-8
}

TEST(SambertSymbols, OverridesEmotionAndSpeaker) {
  const json& c = find_case("breaks");
  const std::string symbols = c["symbols"].get<std::string>();
  const size_t n = c["ids"]["sy"].size();
  const int64_t sad = index_of("emo_category", "emotion_sad");
  const int64_t m7 = index_of("speaker_category", "M7");

  const SambertTokens both = table().parse(symbols, "emotion_sad", "M7");
  const SambertTokens plain = table().parse(symbols);
  EXPECT_EQ(both.linguistic, plain.linguistic);
  EXPECT_EQ(both.emotion, std::vector<int64_t>(n, sad));
  EXPECT_EQ(both.speaker, std::vector<int64_t>(n, m7));

  const SambertTokens emotion_only = table().parse(symbols, "emotion_sad");
  EXPECT_EQ(emotion_only.emotion, std::vector<int64_t>(n, sad));
  EXPECT_EQ(emotion_only.speaker, plain.speaker);

  const SambertTokens speaker_only = table().parse(symbols, std::nullopt, "M7");
  EXPECT_EQ(speaker_only.emotion, plain.emotion);
  EXPECT_EQ(speaker_only.speaker, std::vector<int64_t>(n, m7));

  // An overridden field is not read, but must be there.
  const std::string foreign = "{a_c$tone1$s_both$word_both$emotion_joy$Z9}";
  EXPECT_THROW((void)table().parse(foreign), InputError);
  EXPECT_THROW((void)table().parse(foreign, "emotion_sad"), InputError);
  const SambertTokens overridden = table().parse(foreign, "emotion_sad", "xiaoyu");
  EXPECT_EQ(overridden.emotion, std::vector<int64_t>{sad});
  EXPECT_EQ(overridden.speaker, std::vector<int64_t>{index_of("speaker_category", "xiaoyu")});
  EXPECT_THROW((void)table().parse("{a_c$tone1$s_both$word_both$emotion_joy}", "emotion_sad", "M7"),
               InputError);
}

TEST(SambertSymbols, UnknownOverrideListsValidNames) {
  const std::string speaker =
      message_of([] { (void)table().parse(kToken, std::nullopt, std::string("f7")); });
  EXPECT_NE(speaker.find("unknown speaker 'f7'; this voice's speakers: F7, xiaoyu, M7"),
            std::string::npos)
      << speaker;
  EXPECT_EQ(speaker.find("@[MASK]"), std::string::npos) << speaker;

  const std::string emotion = message_of([] { (void)table().parse(kToken, std::string("happy")); });
  EXPECT_NE(emotion.find("unknown emotion 'happy'; this voice's emotions: emotion_none, "
                         "emotion_neutral, emotion_angry"),
            std::string::npos)
      << emotion;
  EXPECT_NE(emotion.find("emotion_placeholder9"), std::string::npos) << emotion;
  EXPECT_EQ(emotion.find("@[MASK]"), std::string::npos) << emotion;
  EXPECT_EQ(emotion.find(", _"), std::string::npos) << emotion;

  for (const char* reserved : {"_", "~", "@[MASK]"}) {
    EXPECT_THROW((void)table().speaker_id(reserved), InputError) << reserved;
    EXPECT_THROW((void)table().emotion_id(reserved), InputError) << reserved;
  }
  EXPECT_EQ(table().speaker_id("xiaoyu"), 1);
  EXPECT_EQ(table().emotion_id("emotion_neutral"), 1);
}

TEST(SambertSymbols, ListsAndSizes) {
  EXPECT_EQ(table().speakers(), (std::vector<std::string>{"F7", "xiaoyu", "M7"}));
  std::vector<std::string> emotions = lists()["emo_category"].get<std::vector<std::string>>();
  emotions.resize(emotions.size() - 3);
  EXPECT_EQ(table().emotions(), emotions);
  const char* const channels[SambertSymbols::kChannels] = {
      "sy", "tone", "syllable_flag", "word_segment", "emo_category", "speaker_category"};
  const std::array<int64_t, SambertSymbols::kChannels> sizes = table().sizes();
  for (size_t c = 0; c < SambertSymbols::kChannels; ++c) {
    EXPECT_EQ(sizes[c], static_cast<int64_t>(lists()[channels[c]].size())) << channels[c];
  }
}

TEST(SambertSymbols, ValueListedTwiceTakesItsLastId) {
  json j = lists();
  j["speaker_category"] = {"F7", "M7", "F7", "_", "~", "@[MASK]"};
  const SambertSymbols t = SambertSymbols::from_json(j, "voice");
  EXPECT_EQ(t.parse(kToken).speaker, std::vector<int64_t>{2});
}

TEST(SambertSymbols, FromJsonErrorsNameTheField) {
  const auto error = [](const json& j) {
    return message_of([&] { (void)SambertSymbols::from_json(j, "voice.json"); });
  };
  const auto expect_error = [&](const json& j, const std::string& part) {
    const std::string message = error(j);
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };

  expect_error(json::array(), "voice.json: the symbol lists must be a JSON object");

  json missing = lists();
  missing.erase("tone");
  expect_error(missing, "voice.json: missing field 'tone'");

  json byte = lists();
  byte["lfeat_type_list"] = {"byte_index", "emo_category", "speaker_category"};
  expect_error(byte, "voice.json: field 'lfeat_type_list' must be");
  json reordered = lists();
  std::swap(reordered["lfeat_type_list"][1], reordered["lfeat_type_list"][2]);
  expect_error(reordered, "voice.json: field 'lfeat_type_list' must be");

  json no_tail = lists();
  no_tail["tone"].erase(no_tail["tone"].size() - 1);
  expect_error(no_tail, "voice.json: field 'tone' must end in");

  json bare_sy = lists();
  bare_sy["sy"][0] = "a_c";
  expect_error(bare_sy, "voice.json: field 'sy' entry 0 ('a_c') must be \"@\"");

  json not_string = lists();
  not_string["speaker_category"][0] = 7;
  expect_error(not_string, "voice.json: field 'speaker_category' entry 0 is not a string");

  json only_tail = lists();
  only_tail["word_segment"] = {"_", "~", "@[MASK]"};
  expect_error(only_tail, "voice.json: field 'word_segment' must be a list of strings");

  json extra = lists();
  extra["language"] = "PinYin";
  EXPECT_NO_THROW((void)SambertSymbols::from_json(extra, "voice.json"));
}

}  // namespace
}  // namespace voxd
