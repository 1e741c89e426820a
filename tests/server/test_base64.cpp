// append_base64 against RFC 4648's test vectors (section 10) and bytes with the high bit set,
// appended after what `out` holds; and the tests' base64_decode (audio_decode.h) back to the bytes.

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "audio_decode.h"
#include "server/base64.h"

namespace voxd::server {
namespace {

std::string base64(const std::string& bytes) {
  std::string out;
  append_base64(bytes, out);
  return out;
}

const std::vector<std::pair<std::string, std::string>> kVectors = {
    // RFC 4648, section 10.
    {"", ""},
    {"f", "Zg=="},
    {"fo", "Zm8="},
    {"foo", "Zm9v"},
    {"foob", "Zm9vYg=="},
    {"fooba", "Zm9vYmE="},
    {"foobar", "Zm9vYmFy"},
    // The last two letters of the alphabet, and bytes that are negative as char.
    {"\xfb\xff", "+/8="},
    {"\xff\xff\xff", "////"},
    {std::string("\x00\x00\x00\x80", 4), "AAAAgA=="},
};

TEST(Base64, EncodesRfc4648sTestVectors) {
  for (const auto& [bytes, text] : kVectors) EXPECT_EQ(base64(bytes), text) << text;
}

TEST(Base64, AppendsToWhatIsThere) {
  std::string out = "data: ";
  append_base64("foob", out);
  append_base64("ar", out);
  EXPECT_EQ(out, "data: Zm9vYg==YXI=");
}

TEST(Base64, EveryByteValueRoundTripsThroughTheTestsDecoder) {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  for (size_t n = 0; n <= bytes.size(); n += 37) {
    const std::string part = bytes.substr(bytes.size() - n);
    EXPECT_EQ(test::base64_decode(base64(part)), part) << n;
  }
  EXPECT_EQ(test::base64_decode(base64(bytes)), bytes);
}

TEST(Base64, TheTestsDecoderReadsTheVectorsAndRefusesWhatIsNotBase64) {
  for (const auto& [bytes, text] : kVectors) EXPECT_EQ(test::base64_decode(text), bytes) << text;
  for (const char* bad : {"Zg=", "Zg", "Z===", "Zg=a", "Zm9v!A==", "====", "Zg==Zg=="}) {
    EXPECT_EQ(test::base64_decode(bad), "") << bad;
  }
}

}  // namespace
}  // namespace voxd::server
