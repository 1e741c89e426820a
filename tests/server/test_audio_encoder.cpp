// Audio encoders: what each format writes decodes (through libsndfile, aac through libavcodec)
// to the input — exactly after 16-bit quantisation for pcm, wav and flac, in duration and shape
// for opus, mp3 and aac — in streaming and whole-file mode, for audio fed in uneven chunks, for no
// audio at all, and for long audio in many pieces with the encoder's memory bounded; encoding at
// another output rate. Also the resampler behind opus, aac and the output rate. The aac cases
// need libavcodec; a build without it (VOXD_WITH_LIBAV=OFF) checks instead that aac is refused.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#ifdef VOXD_HAVE_LIBAV
#include "aac_decode.h"
#endif
#include "audio_decode.h"
#include "core/error.h"
#include "server/audio_encoder.h"
#include "server/resampler.h"

namespace voxd::server {
namespace {

using test::decode;
using test::Decoded;
#ifdef VOXD_HAVE_LIBAV
using test::decode_aac;
using test::DecodedAac;
#endif

constexpr int64_t kRate = 22050;

// A speech-like test signal: a few partials under a slow amplitude envelope.
std::vector<float> test_signal(size_t n, int64_t rate = kRate) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / static_cast<double>(rate);
    const double envelope = 0.55 + 0.35 * std::sin(2 * M_PI * 3 * t);
    const double tone = 0.5 * std::sin(2 * M_PI * 220 * t) + 0.3 * std::sin(2 * M_PI * 440 * t) +
                        0.15 * std::sin(2 * M_PI * 1250 * t) + 0.05 * std::sin(2 * M_PI * 3100 * t);
    x[i] = static_cast<float>(0.9 * envelope * tone);
  }
  return x;
}

// Feeds `samples` to `encoder` in chunks of random sizes (some empty) and returns every byte
// it hands out, finish() included.
std::string encode_in_chunks(AudioEncoder& encoder, const std::vector<float>& samples,
                             uint32_t seed, size_t max_chunk = 5000) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> size(0, max_chunk);
  std::string out;
  for (size_t start = 0; start < samples.size();) {
    const size_t n = std::min(size(rng), samples.size() - start);
    encoder.write(std::span(samples).subspan(start, n), out);
    start += n;
  }
  encoder.finish(out);
  return out;
}

std::vector<short> quantized(const std::vector<float>& x) {
  std::vector<short> q(x.size());
  std::transform(x.begin(), x.end(), q.begin(), quantize_pcm16);
  return q;
}

// The best normalised correlation of `decoded` against `reference` over lags within
// +-max_lag, computed on the middle of the reference; also returns that lag.
double best_correlation(const std::vector<float>& reference, const std::vector<float>& decoded,
                        int max_lag, int* lag_out = nullptr) {
  const size_t n = reference.size();
  const size_t begin = n / 4;
  const size_t end = n - n / 4;
  double best = -1;
  for (int lag = -max_lag; lag <= max_lag; ++lag) {
    double xy = 0, xx = 0, yy = 0;
    for (size_t i = begin; i < end; ++i) {
      const auto j = static_cast<int64_t>(i) + lag;
      const double y = j >= 0 && j < static_cast<int64_t>(decoded.size())
                           ? decoded[static_cast<size_t>(j)]
                           : 0.0;
      xy += reference[i] * y;
      xx += reference[i] * reference[i];
      yy += y * y;
    }
    const double c = xy / std::sqrt(xx * yy + 1e-30);
    if (c > best) {
      best = c;
      if (lag_out != nullptr) *lag_out = lag;
    }
  }
  return best;
}

TEST(AudioEncoder, QuantisationRoundsAndClips) {
  EXPECT_EQ(quantize_pcm16(0.0f), 0);
  EXPECT_EQ(quantize_pcm16(1.0f), 32767);
  EXPECT_EQ(quantize_pcm16(-1.0f), -32767);
  EXPECT_EQ(quantize_pcm16(3.5f), 32767);
  EXPECT_EQ(quantize_pcm16(-7.0f), -32767);
  EXPECT_EQ(quantize_pcm16(std::nanf("")), 0);
  EXPECT_EQ(quantize_pcm16(0.5f), 16384);  // 16383.5 rounds to even
  EXPECT_EQ(quantize_pcm16(1.0f / 32767), 1);
}

TEST(AudioEncoder, PcmIsRawLittleEndianInBothModes) {
  const std::vector<float> x = {0.0f, 1.0f, -1.0f, 0.25f, 2.0f, -0.5f};
  for (EncoderMode mode : {EncoderMode::kStream, EncoderMode::kWholeFile}) {
    auto encoder = make_audio_encoder(AudioFormat::kPcm, kRate, mode);
    const std::string bytes = encode_in_chunks(*encoder, x, 1, 3);
    ASSERT_EQ(bytes.size(), 2 * x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const auto lo = static_cast<uint8_t>(bytes[2 * i]);
      const auto hi = static_cast<uint8_t>(bytes[2 * i + 1]);
      EXPECT_EQ(static_cast<int16_t>(lo | hi << 8), quantize_pcm16(x[i])) << i;
    }
  }
}

TEST(AudioEncoder, StreamingPcmHandsOutBytesAsTheyCome) {
  auto encoder = make_audio_encoder(AudioFormat::kPcm, kRate, EncoderMode::kStream);
  std::string out;
  const std::vector<float> x(1000, 0.1f);
  encoder->write(x, out);
  EXPECT_EQ(out.size(), 2000u);
  EXPECT_EQ(encoder->buffered_bytes(), 0u);
}

uint32_t le32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (int k = 3; k >= 0; --k)
    v = v << 8 | static_cast<uint8_t>(bytes[at + static_cast<size_t>(k)]);
  return v;
}

TEST(AudioEncoder, WholeWavHasExactSizesAndSamples) {
  const std::vector<float> x = test_signal(12345);
  auto encoder = make_audio_encoder(AudioFormat::kWav, kRate, EncoderMode::kWholeFile);
  const std::string bytes = encode_in_chunks(*encoder, x, 2);
  ASSERT_EQ(bytes.size(), 44 + 2 * x.size());
  EXPECT_EQ(bytes.substr(0, 4), "RIFF");
  EXPECT_EQ(le32(bytes, 4), bytes.size() - 8);
  EXPECT_EQ(bytes.substr(36, 4), "data");
  EXPECT_EQ(le32(bytes, 40), 2 * x.size());
  const Decoded d = decode(bytes, true);
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_EQ(d.rate, kRate);
  EXPECT_EQ(d.channels, 1);
  EXPECT_EQ(d.shorts, quantized(x));
}

TEST(AudioEncoder, StreamedWavSaysToTheEndAndDecodes) {
  const std::vector<float> x = test_signal(23456);
  auto encoder = make_audio_encoder(AudioFormat::kWav, kRate, EncoderMode::kStream);
  const std::string bytes = encode_in_chunks(*encoder, x, 3);
  ASSERT_EQ(bytes.size(), 44 + 2 * x.size());
  EXPECT_EQ(le32(bytes, 4), 0xFFFFFFFFu);
  EXPECT_EQ(le32(bytes, 40), 0xFFFFFFFFu);
  // Apart from the two sizes it is the whole file.
  std::string whole = encode_audio(AudioFormat::kWav, x, kRate);
  whole.replace(4, 4, bytes.substr(4, 4));
  whole.replace(40, 4, bytes.substr(40, 4));
  EXPECT_EQ(bytes, whole);
  const Decoded d = decode(bytes, true);
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_EQ(d.rate, kRate);
  EXPECT_EQ(d.shorts, quantized(x));
}

TEST(AudioEncoder, FlacIsLosslessInBothModes) {
  const std::vector<float> x = test_signal(3 * kRate + 17);
  for (EncoderMode mode : {EncoderMode::kStream, EncoderMode::kWholeFile}) {
    SCOPED_TRACE(mode == EncoderMode::kStream ? "stream" : "whole file");
    auto encoder = make_audio_encoder(AudioFormat::kFlac, kRate, mode);
    const std::string bytes = encode_in_chunks(*encoder, x, 4);
    EXPECT_EQ(bytes.substr(0, 4), "fLaC");
    EXPECT_LT(bytes.size(), 2 * x.size());  // it compresses
    const Decoded d = decode(bytes, true);
    ASSERT_TRUE(d.ok) << d.error;
    EXPECT_EQ(d.rate, kRate);
    EXPECT_EQ(d.shorts, quantized(x));
  }
}

TEST(AudioEncoder, WholeFlacStatesItsLengthAndStreamedFlacDoesNot) {
  const std::vector<float> x = test_signal(kRate);
  // STREAMINFO's 36-bit total-samples field: the low 4 bits of byte 21 and bytes 22-25.
  const auto total_samples = [](const std::string& f) {
    uint64_t v = static_cast<uint8_t>(f[21]) & 0x0F;
    for (size_t i = 22; i < 26; ++i) v = v << 8 | static_cast<uint8_t>(f[i]);
    return v;
  };
  EXPECT_EQ(total_samples(encode_audio(AudioFormat::kFlac, x, kRate)), x.size());
  auto encoder = make_audio_encoder(AudioFormat::kFlac, kRate, EncoderMode::kStream);
  EXPECT_EQ(total_samples(encode_in_chunks(*encoder, x, 5)), 0u);  // 0: unknown
}

struct LossyCase {
  AudioFormat format;
  int decoded_rate;
  std::string magic;  // how the file starts
};

class LossyEncoder : public ::testing::TestWithParam<std::tuple<LossyCase, EncoderMode>> {};

TEST_P(LossyEncoder, DecodesToTheSameSoundAndDuration) {
  const auto [c, mode] = GetParam();
  const std::vector<float> x = test_signal(3 * kRate);
  auto encoder = make_audio_encoder(c.format, kRate, mode);
  EXPECT_EQ(encoder->output_sample_rate(), c.decoded_rate);
  const std::string bytes = encode_in_chunks(*encoder, x, 6);
  ASSERT_GT(bytes.size(), 4u);
  EXPECT_EQ(bytes.substr(0, c.magic.size()), c.magic);
  const Decoded d = decode(bytes, false);
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_EQ(d.rate, c.decoded_rate);
  EXPECT_EQ(d.channels, 1);

  // The reference at the decoded rate.
  std::vector<float> reference;
  if (c.decoded_rate != kRate) {
    Resampler resampler(kRate, c.decoded_rate);
    resampler.process(x, reference);
    resampler.flush(reference);
  } else {
    reference = x;
  }
  // Within two codec frames plus MP3's encoder delay (which a streamed MP3 cannot announce).
  const double seconds = static_cast<double>(d.floats.size()) / d.rate;
  EXPECT_NEAR(seconds, 3.0, 0.15);
  int lag = 0;
  EXPECT_GT(best_correlation(reference, d.floats, 3000, &lag), 0.95) << "lag " << lag;
  // Energy within 2 dB of the reference (over the same middle stretch).
  double e_ref = 0, e_dec = 0;
  for (size_t i = reference.size() / 4; i < reference.size() * 3 / 4; ++i) {
    e_ref += reference[i] * reference[i];
    const auto j = static_cast<int64_t>(i) + lag;
    if (j >= 0 && j < static_cast<int64_t>(d.floats.size()))
      e_dec += d.floats[static_cast<size_t>(j)] * d.floats[static_cast<size_t>(j)];
  }
  EXPECT_NEAR(10 * std::log10(e_dec / e_ref), 0.0, 2.0);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, LossyEncoder,
    ::testing::Combine(::testing::Values(LossyCase{AudioFormat::kOpus, 24000, "OggS"},
                                         LossyCase{AudioFormat::kMp3, 22050, "\xFF\xF3"}),
                       ::testing::Values(EncoderMode::kStream, EncoderMode::kWholeFile)));

TEST(AudioEncoder, NoAudioGivesAValidEmptyResult) {
  for (AudioFormat format : {AudioFormat::kPcm, AudioFormat::kWav, AudioFormat::kFlac,
                             AudioFormat::kOpus, AudioFormat::kMp3}) {
    for (EncoderMode mode : {EncoderMode::kStream, EncoderMode::kWholeFile}) {
      SCOPED_TRACE(std::string(format_name(format)) +
                   (mode == EncoderMode::kStream ? " stream" : " whole file"));
      auto encoder = make_audio_encoder(format, kRate, mode);
      std::string out;
      encoder->finish(out);
      if (format == AudioFormat::kPcm) {
        EXPECT_TRUE(out.empty());
        continue;
      }
      const Decoded d = decode(out, false);
      ASSERT_TRUE(d.ok) << d.error;
      EXPECT_LE(d.floats.size(), 2304u);  // at most MP3's priming frames, silent
      for (float v : d.floats) EXPECT_LT(std::abs(v), 1e-4f);
    }
  }
}

TEST(AudioEncoder, LongStreamsKeepMemoryBounded) {
  // Ten minutes for the lossless formats, two for the slower lossy ones, in pieces of up to
  // 0.1 s; the encoder may hold back only a bounded number of bytes at any point.
  for (AudioFormat format : {AudioFormat::kPcm, AudioFormat::kWav, AudioFormat::kFlac,
                             AudioFormat::kOpus, AudioFormat::kMp3}) {
    SCOPED_TRACE(format_name(format));
    const bool lossless = format != AudioFormat::kOpus && format != AudioFormat::kMp3;
    const size_t total = static_cast<size_t>((lossless ? 600 : 120) * kRate);
    const std::vector<float> piece = test_signal(kRate / 10);
    auto encoder = make_audio_encoder(format, kRate, EncoderMode::kStream);
    std::mt19937 rng(7);
    std::uniform_int_distribution<size_t> size(1, piece.size());
    std::string bytes;
    size_t fed = 0;
    size_t max_buffered = 0;
    std::string chunk;
    while (fed < total) {
      const size_t n = std::min(size(rng), total - fed);
      chunk.clear();
      encoder->write(std::span(piece).first(n), chunk);
      bytes += chunk;
      fed += n;
      max_buffered = std::max(max_buffered, encoder->buffered_bytes());
    }
    encoder->finish(bytes);
    EXPECT_LT(max_buffered, 64u * 1024);
    const Decoded d = decode(bytes, false, format == AudioFormat::kPcm ? kRate : 0);
    ASSERT_TRUE(d.ok) << d.error;
    const double seconds = static_cast<double>(d.floats.size()) / d.rate;
    EXPECT_NEAR(seconds, static_cast<double>(total) / kRate, lossless ? 0.0 : 0.15);
  }
}

TEST(AudioEncoder, WholeFileModeHoldsEverythingUntilTheEnd) {
  auto encoder = make_audio_encoder(AudioFormat::kFlac, kRate, EncoderMode::kWholeFile);
  std::string out;
  encoder->write(test_signal(kRate), out);
  EXPECT_TRUE(out.empty());
  EXPECT_GT(encoder->buffered_bytes(), 0u);
  encoder->finish(out);
  EXPECT_FALSE(out.empty());
}

TEST(AudioEncoder, UnusableSampleRatesAreRefused) {
  for (AudioFormat format : {AudioFormat::kPcm, AudioFormat::kWav, AudioFormat::kFlac,
                             AudioFormat::kOpus, AudioFormat::kMp3, AudioFormat::kAac}) {
    EXPECT_THROW(make_audio_encoder(format, 0, EncoderMode::kStream), Error);
    EXPECT_THROW(make_audio_encoder(format, -22050, EncoderMode::kStream), Error);
  }
  EXPECT_THROW(make_audio_encoder(AudioFormat::kMp3, 7000, EncoderMode::kStream), Error);
  EXPECT_THROW(make_audio_encoder(AudioFormat::kWav, 500000, EncoderMode::kStream), Error);
  EXPECT_NO_THROW(make_audio_encoder(AudioFormat::kMp3, 11025, EncoderMode::kStream));
}

std::vector<float> sine(size_t n, double frequency, int64_t rate, double amplitude = 0.5) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(amplitude * std::sin(2 * M_PI * frequency * static_cast<double>(i) /
                                                   static_cast<double>(rate)));
  }
  return x;
}

// The frequency of a sine, from its zero crossings upwards over [begin, end).
double sine_frequency(const std::vector<float>& x, size_t begin, size_t end, int64_t rate) {
  std::vector<size_t> crossings;
  for (size_t i = std::max<size_t>(begin, 1); i < end && i < x.size(); ++i) {
    if (x[i - 1] < 0 && x[i] >= 0) crossings.push_back(i);
  }
  if (crossings.size() < 2) return 0;
  return static_cast<double>(crossings.size() - 1) * static_cast<double>(rate) /
         static_cast<double>(crossings.back() - crossings.front());
}

// The signal-to-noise ratio in dB of `decoded` against `reference` moved by `lag`, over the
// middle half of the reference.
double snr_db(const std::vector<float>& reference, const std::vector<float>& decoded, int lag) {
  double signal = 0, noise = 0;
  for (size_t i = reference.size() / 4; i < reference.size() * 3 / 4; ++i) {
    const auto j = static_cast<int64_t>(i) + lag;
    const double y =
        j >= 0 && j < static_cast<int64_t>(decoded.size()) ? decoded[static_cast<size_t>(j)] : 0.0;
    signal += reference[i] * reference[i];
    noise += (y - reference[i]) * (y - reference[i]);
  }
  return 10 * std::log10(signal / (noise + 1e-30));
}

#ifdef VOXD_HAVE_LIBAV
// libavcodec's AAC encoder starts with one frame of priming samples, which ADTS cannot mark, so
// decoders play them: the audio comes 1024 samples late and ends in a padded last frame.
constexpr int kAacDelay = 1024;
constexpr size_t kAacFrame = 1024;

class AacEncoder : public ::testing::TestWithParam<EncoderMode> {};

TEST_P(AacEncoder, SineDecodesBackAtItsFrequencyAndLength) {
  const std::vector<float> x = sine(kRate * 2, 1000.0, kRate);
  auto encoder = make_audio_encoder(AudioFormat::kAac, kRate, GetParam());
  EXPECT_EQ(encoder->output_sample_rate(), kRate);  // 22.05 kHz is one of AAC's rates
  const std::string bytes = encode_in_chunks(*encoder, x, 11);
  const DecodedAac d = decode_aac(bytes);
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_EQ(d.rate, kRate);
  EXPECT_EQ(d.channels, 1);
  EXPECT_EQ(d.profile, FF_PROFILE_AAC_LOW);
  EXPECT_GE(d.floats.size(), x.size() + kAacDelay);
  EXPECT_LE(d.floats.size(), x.size() + kAacDelay + kAacFrame);
  int lag = 0;
  EXPECT_GT(best_correlation(x, d.floats, 1200, &lag), 0.99);
  EXPECT_EQ(lag, kAacDelay);
  EXPECT_NEAR(
      sine_frequency(d.floats, kAacDelay + x.size() / 4, kAacDelay + x.size() * 3 / 4, kRate),
      1000.0, 1.0);
  EXPECT_GT(snr_db(x, d.floats, lag), 20.0);
}

TEST_P(AacEncoder, OtherRatesMoveUpToAnAacRate) {
  for (auto [input, expected] : {std::pair<int64_t, int64_t>{16000, 16000},
                                 {23000, 24000},
                                 {44100, 44100},
                                 {100000, 96000}}) {
    SCOPED_TRACE(input);
    const std::vector<float> x = sine(static_cast<size_t>(input), 440.0, input);
    auto encoder = make_audio_encoder(AudioFormat::kAac, input, GetParam());
    EXPECT_EQ(encoder->output_sample_rate(), expected);
    const DecodedAac d = decode_aac(encode_in_chunks(*encoder, x, 3));
    ASSERT_TRUE(d.ok) << d.error;
    EXPECT_EQ(d.rate, expected);
    const size_t samples = static_cast<size_t>(expected);  // one second
    EXPECT_GE(d.floats.size(), samples + kAacDelay);
    EXPECT_LE(d.floats.size(), samples + kAacDelay + kAacFrame + 1);
    EXPECT_NEAR(sine_frequency(d.floats, samples / 4, samples * 3 / 4, expected), 440.0, 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, AacEncoder,
                         ::testing::Values(EncoderMode::kStream, EncoderMode::kWholeFile));

TEST(AacEncoderFrames, AdtsFramesChainToTheEndAndModesAgree) {
  const std::vector<float> x = test_signal(kRate * 3);
  const std::string streamed =
      encode_in_chunks(*make_audio_encoder(AudioFormat::kAac, kRate, EncoderMode::kStream), x, 5);
  EXPECT_EQ(streamed, encode_audio(AudioFormat::kAac, x, kRate));
  size_t frames = 0;
  for (size_t at = 0; at < streamed.size(); ++frames) {
    ASSERT_LE(at + 7, streamed.size());
    const auto byte = [&](size_t k) { return static_cast<uint8_t>(streamed[at + k]); };
    ASSERT_EQ(byte(0), 0xFF) << at;
    ASSERT_EQ(byte(1), 0xF1) << at;                   // MPEG-4, no CRC
    EXPECT_EQ(byte(2) >> 6, 1);                       // AAC-LC
    EXPECT_EQ(byte(2) >> 2 & 0xF, 7);                 // 22050 Hz
    EXPECT_EQ((byte(2) & 1) << 2 | byte(3) >> 6, 1);  // mono
    const size_t length = (byte(3) & 3u) << 11 | byte(4) << 3 | byte(5) >> 5;
    ASSERT_GT(length, 7u);
    at += length;
    ASSERT_LE(at, streamed.size());
  }
  EXPECT_EQ(frames, (x.size() + kAacDelay + kAacFrame - 1) / kAacFrame);
}

TEST(AacEncoderFrames, NoAudioGivesADecodableSilentStream) {
  for (EncoderMode mode : {EncoderMode::kStream, EncoderMode::kWholeFile}) {
    auto encoder = make_audio_encoder(AudioFormat::kAac, kRate, mode);
    std::string out;
    encoder->finish(out);
    const DecodedAac d = decode_aac(out);
    ASSERT_TRUE(d.ok) << d.error;
    EXPECT_GT(d.floats.size(), 0u);
    EXPECT_LE(d.floats.size(), 2 * kAacFrame);
    for (float v : d.floats) EXPECT_LT(std::abs(v), 1e-4f);
  }
}

TEST(AacEncoderFrames, LongStreamsKeepMemoryBounded) {
  const size_t total = static_cast<size_t>(120 * kRate);
  const std::vector<float> piece = test_signal(kRate / 10);
  auto encoder = make_audio_encoder(AudioFormat::kAac, kRate, EncoderMode::kStream);
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> size(1, piece.size());
  std::string bytes;
  std::string chunk;
  size_t max_buffered = 0;
  size_t max_chunk = 0;
  for (size_t fed = 0; fed < total;) {
    const size_t n = std::min(size(rng), total - fed);
    chunk.clear();
    encoder->write(std::span(piece).first(n), chunk);
    bytes += chunk;
    fed += n;
    max_buffered = std::max(max_buffered, encoder->buffered_bytes());
    max_chunk = std::max(max_chunk, chunk.size());
  }
  encoder->finish(bytes);
  EXPECT_EQ(max_buffered, 0u);
  EXPECT_LT(max_chunk, 16u * 1024);  // each write hands out what its samples made
  const DecodedAac d = decode_aac(bytes);
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_NEAR(static_cast<double>(d.floats.size()) / kRate, 120.0, 0.15);
}
#else
// Without libavcodec (VOXD_WITH_LIBAV=OFF) aac is refused, naming the missing library.
TEST(AacEncoder, IsRefusedWithoutLibavcodec) {
  EXPECT_EQ(missing_codec_library(AudioFormat::kAac), "libavcodec");
  for (EncoderMode mode : {EncoderMode::kStream, EncoderMode::kWholeFile}) {
    try {
      make_audio_encoder(AudioFormat::kAac, kRate, mode);
      ADD_FAILURE() << "aac encoded without libavcodec";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("without libavcodec"), std::string::npos) << e.what();
    }
  }
}
#endif  // VOXD_HAVE_LIBAV

TEST(AudioEncoder, OutputRateResamples) {
  const std::vector<float> x = sine(kRate, 1000.0, kRate);
  for (EncoderMode mode : {EncoderMode::kStream, EncoderMode::kWholeFile}) {
    auto pcm = make_audio_encoder(AudioFormat::kPcm, kRate, mode, 24000);
    EXPECT_EQ(pcm->output_sample_rate(), 24000);
    const std::string bytes = encode_in_chunks(*pcm, x, 2);
    EXPECT_EQ(bytes.size(), 2u * 24000);  // one second at 24 kHz
    const Decoded d = decode(bytes, false, 24000);
    ASSERT_TRUE(d.ok) << d.error;
    EXPECT_NEAR(sine_frequency(d.floats, 1000, 23000, 24000), 1000.0, 0.5);
    EXPECT_GT(snr_db(sine(24000, 1000.0, 24000), d.floats, 0), 40.0);

    auto wav = make_audio_encoder(AudioFormat::kWav, kRate, mode, 48000);
    EXPECT_EQ(wav->output_sample_rate(), 48000);
    const Decoded w = decode(encode_in_chunks(*wav, x, 4), false);
    ASSERT_TRUE(w.ok) << w.error;
    EXPECT_EQ(w.rate, 48000);
    EXPECT_EQ(w.floats.size(), 48000u);
  }
  // The input's own rate, or none given, encodes as it comes.
  EXPECT_EQ(make_audio_encoder(AudioFormat::kPcm, kRate, EncoderMode::kStream, kRate)
                ->output_sample_rate(),
            kRate);
  EXPECT_EQ(
      make_audio_encoder(AudioFormat::kPcm, kRate, EncoderMode::kStream)->output_sample_rate(),
      kRate);
  EXPECT_THROW(make_audio_encoder(AudioFormat::kPcm, kRate, EncoderMode::kStream, 0), Error);
}

TEST(Resampler, SineStaysASine) {
  const double f = 1000.0;
  std::vector<float> x(22050);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(std::sin(2 * M_PI * f * static_cast<double>(i) / 22050));
  Resampler resampler(22050, 24000);
  std::vector<float> y;
  resampler.process(x, y);
  resampler.flush(y);
  ASSERT_EQ(y.size(), 24000u);
  double max_error = 0;
  for (size_t n = 100; n + 100 < y.size(); ++n) {  // away from the edges, where input stops
    const double expected = std::sin(2 * M_PI * f * static_cast<double>(n) / 24000);
    max_error = std::max(max_error, std::abs(y[n] - expected));
  }
  EXPECT_LT(max_error, 2e-3);
}

TEST(Resampler, ChunkingDoesNotChangeTheOutput) {
  const std::vector<float> x = test_signal(30001);
  for (auto [from, to] :
       {std::pair<int64_t, int64_t>{22050, 24000}, {44100, 16000}, {16000, 16000}}) {
    Resampler whole(from, to);
    std::vector<float> a;
    whole.process(x, a);
    whole.flush(a);
    EXPECT_EQ(static_cast<int64_t>(a.size()),
              (static_cast<int64_t>(x.size()) * to + from - 1) / from);

    Resampler pieces(from, to);
    std::vector<float> b;
    std::mt19937 rng(9);
    std::uniform_int_distribution<size_t> size(0, 700);
    for (size_t start = 0; start < x.size();) {
      const size_t n = std::min(size(rng), x.size() - start);
      pieces.process(std::span(x).subspan(start, n), b);
      start += n;
    }
    pieces.flush(b);
    EXPECT_EQ(a, b);
  }
}

TEST(Resampler, RefusesUnusableRatios) {
  EXPECT_THROW(Resampler(0, 16000), Error);
  EXPECT_THROW(Resampler(22051, 24000), Error);  // 24000/22051 needs 24000 phases
  Resampler empty(22050, 24000);
  std::vector<float> out;
  empty.flush(out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace voxd::server
