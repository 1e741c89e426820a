// make_sse_encoder: the events parse as OpenAI's speech.audio.delta / speech.audio.done, the
// deltas' base64 joins to exactly the bytes the wrapped encoder makes, writes that make no bytes
// send no event, and the usage adds up.

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "audio_decode.h"
#include "server/audio_encoder.h"
#include "server/sse_encoder.h"

namespace voxd::server {
namespace {

using nlohmann::json;

constexpr int64_t kRate = 22050;

std::vector<float> signal(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = 0.5f * std::sin(0.05f * static_cast<float>(i));
  return x;
}

// The events in `stream`: each "data: <JSON>\n\n".
std::vector<json> events(const std::string& stream) {
  std::vector<json> out;
  size_t at = 0;
  while (at < stream.size()) {
    const size_t end = stream.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an event without its blank line";
    if (end == std::string::npos) break;
    const std::string event = stream.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event.substr(0, 80);
    EXPECT_EQ(event.find('\n'), std::string::npos) << "one line per event";
    out.push_back(json::parse(event.substr(6)));
    at = end + 2;
  }
  return out;
}

TEST(SseEncoder, DeltasCarryExactlyTheEncodedAudioThenDoneGivesTheUsage) {
  // Chunks of every remainder modulo base64's 3 bytes, of 48 KiB and more, and some that make
  // nothing; aac (when this build has libavcodec) holds samples back and makes bytes later.
  const std::vector<size_t> chunks = {0, 1, 4410, 0, 30000, 24576, 7};
  std::vector<AudioFormat> formats = {AudioFormat::kPcm, AudioFormat::kWav};
#ifdef VOXD_HAVE_LIBAV
  formats.push_back(AudioFormat::kAac);
#endif
  for (AudioFormat format : formats) {
    SCOPED_TRACE(format_name(format));
    auto plain = make_audio_encoder(format, kRate, EncoderMode::kStream);
    auto sse = make_sse_encoder(make_audio_encoder(format, kRate, EncoderMode::kStream), kRate, 12);
    EXPECT_EQ(sse->output_sample_rate(), plain->output_sample_rate());
    std::string expected;
    std::string stream;
    size_t samples = 0;
    size_t deltas_expected = 0;
    for (size_t n : chunks) {
      const std::vector<float> x = signal(n);
      std::string made;
      plain->write(x, made);
      std::string out;
      sse->write(x, out);
      EXPECT_EQ(out.empty(), made.empty()) << "an event exactly when there are bytes";
      deltas_expected += made.empty() ? 0 : 1;
      expected += made;
      stream += out;
      samples += n;
    }
    std::string made;
    plain->finish(made);
    deltas_expected += made.empty() ? 0 : 1;
    expected += made;
    sse->finish(stream);

    const std::vector<json> all = events(stream);
    ASSERT_EQ(all.size(), deltas_expected + 1);
    std::string audio;
    for (size_t i = 0; i + 1 < all.size(); ++i) {
      EXPECT_EQ(all[i].size(), 2u);
      EXPECT_EQ(all[i].at("type"), "speech.audio.delta");
      audio += test::base64_decode(all[i].at("audio").get<std::string>());
    }
    EXPECT_EQ(audio, expected);
    const json& done = all.back();
    EXPECT_EQ(done.at("type"), "speech.audio.done");
    const auto output_tokens = static_cast<int64_t>(
        std::ceil(static_cast<double>(samples) * kOutputTokensPerSecond / kRate));
    EXPECT_EQ(done.at("usage"), (json{{"input_tokens", 12},
                                      {"output_tokens", output_tokens},
                                      {"total_tokens", 12 + output_tokens}}));
  }
}

TEST(SseEncoder, NoAudioIsJustTheFormatsEmptyFileThenDone) {
  auto sse = make_sse_encoder(make_audio_encoder(AudioFormat::kWav, kRate, EncoderMode::kStream),
                              kRate, 3);
  std::string stream;
  sse->finish(stream);
  const std::vector<json> all = events(stream);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(test::base64_decode(all[0].at("audio")).substr(0, 4), "RIFF");
  EXPECT_EQ(all[1].at("usage").at("output_tokens"), 0);
  EXPECT_EQ(all[1].at("usage").at("total_tokens"), 3);
}

}  // namespace
}  // namespace voxd::server
