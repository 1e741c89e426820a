// spk_emb strings against what ChatTTS's Speaker._encode makes (tests/fixtures/chattts/
// speakers.json, from tools/reference/chattts_speaker_fixtures.py: Python's lzma and the
// base16384 C code pybase16384 wraps), and hostile strings.
#include "families/chattts/speaker_code.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"

namespace voxd::chattts {
namespace {

using nlohmann::json;

const json& fixtures() {
  static const json j = [] {
    std::ifstream in(VOXD_SOURCE_DIR "/tests/fixtures/chattts/speakers.json");
    std::stringstream text;
    text << in.rdbuf();
    return json::parse(text.str());
  }();
  return j;
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// A raw LZMA2 stream holding `data` as one uncompressed chunk (control byte 0x01: uncompressed,
// dictionary reset; then the size - 1, big-endian), then the end marker.
std::vector<uint8_t> stored_lzma2(const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(data.size() + 4, 0x00);
  out[0] = 0x01;
  out[1] = static_cast<uint8_t>((data.size() - 1) >> 8);
  out[2] = static_cast<uint8_t>((data.size() - 1) & 0xFF);
  std::copy(data.begin(), data.end(), out.begin() + 3);
  return out;
}

// The float16 little-endian bytes of `halves`.
std::vector<uint8_t> half_bytes(const std::vector<uint16_t>& halves) {
  std::vector<uint8_t> out;
  for (const uint16_t h : halves) {
    out.push_back(static_cast<uint8_t>(h & 0xFF));
    out.push_back(static_cast<uint8_t>(h >> 8));
  }
  return out;
}

// The message of the InputError `f` throws ("" when it throws none).
template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Base16384, KnownAnswers) {
  ASSERT_FALSE(fixtures()["base16384"].empty());
  for (const json& v : fixtures()["base16384"]) {
    const std::vector<uint8_t> bytes = from_hex(v["hex"]);
    const std::string text = v["text"];
    EXPECT_EQ(base16384_encode(bytes), text) << v["hex"];
    EXPECT_EQ(base16384_decode(text), bytes) << v["hex"];
  }
}

TEST(Base16384, ReadmeExamples) {
  const std::string digits = "1234567";
  EXPECT_EQ(base16384_encode({reinterpret_cast<const uint8_t*>(digits.data()), digits.size()}),
            "婌焳廔萷");
  const std::vector<uint8_t> hello = base16384_decode("栙擆羼漡");
  EXPECT_EQ(std::string(hello.begin(), hello.end()), "hello!!");
}

TEST(Base16384, SkipsALeadingByteOrderMark) {
  EXPECT_EQ(base16384_decode("\xEF\xBB\xBF栙擆羼漡"), base16384_decode("栙擆羼漡"));
}

TEST(Base16384, RejectsWhatItNeverWrites) {
  EXPECT_NE(input_error([] { base16384_decode("hello"); }).find("outside base16384"),
            std::string::npos);
  EXPECT_NE(input_error([] { base16384_decode("栙擆羼"); }).find("no tail marker"),
            std::string::npos);
  EXPECT_NE(input_error([] { base16384_decode("㴁"); }).find("tail marker"), std::string::npos);
  EXPECT_NE(input_error([] { base16384_decode("栙擆羼漡㴂"); }).find("tail marker"),
            std::string::npos);
  EXPECT_NE(input_error([] { base16384_decode("栙\xFF"); }).find("not valid UTF-8"),
            std::string::npos);
  EXPECT_NE(input_error([] { base16384_decode("栙擆㴁羼"); }).find("outside base16384"),
            std::string::npos);
}

TEST(SpeakerCode, DecodesChatTtsStrings) {
  for (const json& s : fixtures()["speakers"]) {
    const std::vector<float> want = s["values"].get<std::vector<float>>();
    EXPECT_EQ(decode_speaker(s["spk_emb"].get<std::string>(), s["dim"].get<int64_t>()), want)
        << s["name"];
  }
}

TEST(SpeakerCode, EncodesAsChatTtsDoes) {
  // Byte-equal to Python's lzma (liblzma) at preset 9 | extreme.
  for (const json& s : fixtures()["speakers"]) {
    const std::vector<float> values = s["values"].get<std::vector<float>>();
    EXPECT_EQ(encode_speaker(values), s["spk_emb"].get<std::string>()) << s["name"];
  }
}

TEST(SpeakerCode, A768ValueStringStartsWithItsChunkHeader) {
  for (const json& s : fixtures()["speakers"]) {
    if (s["dim"] == 768) {
      EXPECT_EQ(s["spk_emb"].get<std::string>().rfind("蘁淰", 0), 0u);
    }
  }
}

TEST(SpeakerCode, RoundTripsFloat16Values) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const int64_t dim : {1, 2, 3, 5, 8, 100, 768}) {
    std::vector<float> values(static_cast<size_t>(dim));
    for (float& v : values) v = normal(rng);
    const std::vector<float> back = decode_speaker(encode_speaker(values), dim);
    ASSERT_EQ(back.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_NEAR(back[i], values[i], std::abs(values[i]) / 1024 + 6e-8f) << dim << " " << i;
    }
    EXPECT_EQ(decode_speaker(encode_speaker(back), dim), back);  // float16 values are exact
  }
}

TEST(SpeakerCode, IgnoresSurroundingWhitespace) {
  const json& s = fixtures()["speakers"][0];
  const std::string spk = s["spk_emb"];
  EXPECT_EQ(decode_speaker(" \n" + spk + "\r\n\t", s["dim"]),
            s["values"].get<std::vector<float>>());
}

TEST(SpeakerCode, NamesTheProblem) {
  const std::string spk = fixtures()["speakers"].back()["spk_emb"];  // 8 values
  auto error = [](const std::string& text, int64_t dim) {
    return input_error([&] { decode_speaker(text, dim); });
  };
  const std::string prefix = "spk_emb: not a ChatTTS speaker string (";
  EXPECT_EQ(error(spk, 9).rfind(prefix, 0), 0u);
  EXPECT_NE(error(spk, 9).find("holds 16 bytes, not the 18 of 9 float16 values"),
            std::string::npos);
  EXPECT_NE(error(spk, 7).find("more than 14 bytes"), std::string::npos);
  EXPECT_NE(error("", 8).find("empty"), std::string::npos);
  EXPECT_NE(error("   ", 8).find("empty"), std::string::npos);
  EXPECT_NE(error("hello", 8).find("outside base16384"), std::string::npos);
  EXPECT_NE(error("\xC3\x28", 8).find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(error("蘁淰攵欀", 8).find("cut short"), std::string::npos);
  std::string huge;
  for (int i = 0; i < 100000; ++i) huge += "一";
  EXPECT_NE(error(huge, 8).find("300000 bytes long"), std::string::npos);
  // Every string made of the alphabet is base16384; a random one is not LZMA2.
  EXPECT_FALSE(error("一二三四五六七八", 8).empty());
}

TEST(SpeakerCode, RejectsNonFiniteValues) {
  for (const uint16_t bad : {0x7C00, 0xFC00, 0x7E00}) {
    const std::string spk = base16384_encode(stored_lzma2(half_bytes({0x3C00, bad})));
    const std::string why = input_error([&] { decode_speaker(spk, 2); });
    EXPECT_NE(why.find("value 1 is"), std::string::npos) << why;
  }
  EXPECT_EQ(decode_speaker(base16384_encode(stored_lzma2(half_bytes({0x3C00, 0xC000}))), 2),
            (std::vector<float>{1.0f, -2.0f}));
}

TEST(SpeakerCode, RejectsDataAfterTheStream) {
  std::vector<uint8_t> packed = stored_lzma2(half_bytes({0x3C00}));
  packed.push_back(0x00);
  const std::string why = input_error([&] { decode_speaker(base16384_encode(packed), 1); });
  EXPECT_NE(why.find("1 bytes follow the end"), std::string::npos) << why;
}

TEST(SpeakerCode, StopsADecompressionBomb) {
  // 8 MiB of zeros in a few hundred characters: refused once past 2·dim bytes.
  const std::string why =
      input_error([] { decode_speaker(fixtures()["bomb"].get<std::string>(), 768); });
  EXPECT_NE(why.find("more than 1536 bytes"), std::string::npos) << why;
}

TEST(SpeakerCode, RandomStringsDecodeOrFailAsInputErrors) {
  std::mt19937 rng(16384);
  for (int round = 0; round < 3000; ++round) {
    std::vector<uint8_t> bytes(rng() % 24);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    if (round % 2 == 0 && !bytes.empty()) bytes[0] = 0x01;  // often an LZMA2 chunk start
    std::string text = base16384_encode(bytes);
    if (round % 3 == 0 && !text.empty()) text.pop_back();  // and some broken UTF-8
    try {
      decode_speaker(text, 4);
    } catch (const InputError&) {
    }
  }
}

TEST(SpeakerCode, EncodeRefusesWhatFloat16CannotHold) {
  EXPECT_FALSE(input_error([] { encode_speaker(std::vector<float>{}); }).empty());
  EXPECT_FALSE(input_error([] { encode_speaker(std::vector<float>{1.0f, 1e6f}); }).empty());
  EXPECT_FALSE(input_error([] {
                 encode_speaker(std::vector<float>{std::numeric_limits<float>::quiet_NaN()});
               }).empty());
  EXPECT_TRUE(input_error([] { encode_speaker(std::vector<float>{65504.0f}); }).empty());
}

}  // namespace
}  // namespace voxd::chattts
