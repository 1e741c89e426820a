// Parity of KanTtsHifiGan with KAN-TTS's HiFiGAN Generator and its receptive field against the
// one measured by gradients (parity.h), on the reference and cpu backends; chunked causal
// vocoding against one piece; config errors.
#include "families/sambert/hifigan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "parity.h"

namespace voxd {
namespace {

using nlohmann::json;

using sambert_testing::error_of;
using sambert_testing::kHifiGanCases;
using sambert_testing::read_json;
using sambert_testing::Runner;

const std::string& kFixtures = sambert_testing::kHifiGanFixtures;

KanTtsHifiGanConfig read_config(const std::string& fixture) {
  return sambert_testing::read_hifigan_config(fixture);
}

TensorMapSource read_weights(const std::string& fixture) {
  return sambert_testing::read_weights(kFixtures + fixture + "/generator.safetensors");
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size()) return INFINITY;
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

class KanTtsHifiGanParity : public ::testing::TestWithParam<std::string> {};

TEST_P(KanTtsHifiGanParity, MatchesKanTtsOnEveryFixture) {
  Runner run(GetParam());
  for (const std::string& fixture : kHifiGanCases)
    sambert_testing::check_hifigan_fixture(run.ctx, fixture);
}

INSTANTIATE_TEST_SUITE_P(Backends, KanTtsHifiGanParity, ::testing::Values("reference", "cpu"));

class KanTtsHifiGanStreaming : public ::testing::TestWithParam<std::string> {};

// Chunks of frames vocoded with left_context_frames() before them and lookahead_frames() after
// (and for NSF the source's excitation of those frames, its phase carried in from the f0 before
// them), the context's samples dropped, give the samples of one piece; a third of the context on
// either side does not.
TEST_P(KanTtsHifiGanStreaming, ChunksWithTheirContextEqualOnePiece) {
  Runner run("cpu");
  const std::string fixture = GetParam();
  const KanTtsHifiGanConfig config = read_config(fixture);
  const KanTtsHifiGan vocoder = KanTtsHifiGan::load(run.ctx, config, read_weights(fixture));
  const auto io = SafetensorsFile::open(kFixtures + fixture + "/io.safetensors");
  const Tensor mel = sambert_testing::fixture_mel(config, *io).narrow(0, 0, 1);
  const int64_t frames = mel.size(2);
  const int64_t hop = config.hop_length();
  const auto vocode = [&](int64_t from, int64_t count) {
    Tensor excitation;
    if (config.nsf) {
      excitation = sambert_testing::fixture_excitation(config, *io, from, count).narrow(0, 0, 1);
    }
    return ops::to_host(run.ctx, vocoder.forward(
                                     run.ctx, ops::to_device(run.ctx, mel.narrow(2, from, count)),
                                     excitation))
        .to_float_vector();
  };
  const std::vector<float> whole = vocode(0, frames);
  const auto chunked = [&](int64_t left, int64_t right) {
    std::vector<float> pieces;
    constexpr int64_t kChunk = 5;
    for (int64_t start = 0; start < frames; start += kChunk) {
      const int64_t from = std::max<int64_t>(0, start - left);
      const int64_t end = std::min(frames, start + kChunk);
      const int64_t to = std::min(frames, end + right);
      const std::vector<float> audio = vocode(from, to - from);
      pieces.insert(pieces.end(), audio.begin() + (start - from) * hop,
                    audio.begin() + (end - from) * hop);
    }
    return pieces;
  };
  const int64_t left = config.left_context_frames();
  const int64_t right = config.lookahead_frames();
  EXPECT_LE(max_abs_diff(chunked(left, right), whole), 1e-5f);
  EXPECT_GT(max_abs_diff(chunked(left / 3, right), whole), 1e-4f);
  if (right > 0) {
    EXPECT_GT(max_abs_diff(chunked(left, right / 3), whole), 1e-4f);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KanTtsHifiGanStreaming, ::testing::ValuesIn(kHifiGanCases));

// The NSF source made in pieces, each with the f0 before it, is the source made whole: its
// phase carries over and its noise is the samples' own, for given noise and for a seed; two
// seeds give two sources.
TEST(NsfSource, APieceAtATimeIsTheWhole) {
  json params = read_json(kFixtures + "v1_16k/config.json")["params"];
  params["nsf_params"] = {{"nb_harmonics", 3}, {"sampling_rate", 16000}};
  const KanTtsHifiGanConfig config = KanTtsHifiGanConfig::from_json(params, "c");
  const int64_t frames = 12;
  const int64_t hop = config.hop_length();
  std::vector<float> f0, voiced;
  for (int64_t t = 0; t < frames; ++t) {
    f0.push_back(110.0f + 13.0f * static_cast<float>(t));
    voiced.push_back(t % 5 == 3 ? 0.0f : 1.0f);
  }
  const auto pieces = [&](const NsfSource& source) {
    std::vector<std::vector<float>> parts;
    double before = 0.0;
    for (int64_t first = 0; first < frames; first += 5) {
      const int64_t count = std::min<int64_t>(5, frames - first);
      parts.push_back(
          source.excitation(f0.data() + first, voiced.data() + first, first, count, before));
      for (int64_t t = first; t < first + count; ++t) before += f0[static_cast<size_t>(t)];
    }
    return parts;
  };
  std::vector<float> noise(static_cast<size_t>(4 * frames * hop));
  for (size_t i = 0; i < noise.size(); ++i)
    noise[i] = 0.003f * std::sin(0.37f * static_cast<float>(i));
  const NsfSource given(config, {0.0f, 0.5f, -1.0f, 2.0f},
                        Tensor::from_vector({4, frames * hop}, noise));
  for (const NsfSource& source : {given, NsfSource(config, 7)}) {
    const std::vector<float> whole = source.excitation(f0.data(), voiced.data(), 0, frames, 0.0);
    const std::vector<std::vector<float>> parts = pieces(source);
    std::vector<float> joined(whole.size());
    int64_t first = 0;
    for (const std::vector<float>& part : parts) {
      const int64_t count = static_cast<int64_t>(part.size()) / (4 * hop);
      for (int64_t h = 0; h < 4; ++h) {
        std::copy_n(part.begin() + h * count * hop, count * hop,
                    joined.begin() + h * frames * hop + first * hop);
      }
      first += count;
    }
    EXPECT_LE(max_abs_diff(joined, whole), 1e-5f);
  }
  const std::vector<float> seven =
      NsfSource(config, 7).excitation(f0.data(), voiced.data(), 0, frames, 0.0);
  const std::vector<float> eight =
      NsfSource(config, 8).excitation(f0.data(), voiced.data(), 0, frames, 0.0);
  EXPECT_GT(max_abs_diff(seven, eight), 1e-3f);
  EXPECT_EQ(seven, NsfSource(config, 7).excitation(f0.data(), voiced.data(), 0, frames, 0.0));
}

TEST(KanTtsHifiGanConfig, WhatVoxdDoesNotRunIsRefusedByField) {
  const json params = read_json(kFixtures + "v1_16k/config.json")["params"];
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& p) {
         p["nsf_params"] = {{"nb_harmonics", 7}};
       },
       "nsf_params: missing field 'sampling_rate'"},
      {[](json& p) {
         p["nsf_params"] = {{"nb_harmonics", 7}, {"sampling_rate", 24000}};
         p["causal"] = false;
         p["upsample_scales"] = json::array({8, 2, 5, 3});  // the second stage's source: 15
         p["upsample_kernal_sizes"] = json::array({16, 4, 10, 6});
       },
       "field 'upsample_scales'"},
      {[](json& p) { p["out_channels"] = 4; }, "field 'out_channels'"},
      {[](json& p) { p["nonlinear_activation"] = "ELU"; }, "field 'nonlinear_activation'"},
      {[](json& p) { p["repeat_upsample"] = false; }, "field 'repeat_upsample'"},
      {[](json& p) { p["kernel_size"] = 6; }, "field 'kernel_size'"},
      {[](json& p) {
         p["upsample_kernal_sizes"] = json::array({20, 10, 4});
       },
       "field 'upsample_kernal_sizes'"},
      {[](json& p) { p.erase("channels"); }, "channels"},
      {[](json& p) { p["causal"] = "yes"; }, "field 'causal' must be true or false"},
  };
  for (const auto& [edit, expected] : cases) {
    json p = params;
    edit(p);
    const std::string message =
        error_of([&] { KanTtsHifiGanConfig::from_json(p, "voc/config.yaml"); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_EQ(message.rfind("voc/config.yaml", 0), 0u) << message;
  }
}

// The Generator's own default activation block is LeakyReLU(0.1); a block without the slope
// gets torch's LeakyReLU default, 0.01.
TEST(KanTtsHifiGanConfig, TheSlopeDefaultsAsTheOriginals) {
  json params = read_json(kFixtures + "v1_16k/config.json")["params"];
  EXPECT_EQ(KanTtsHifiGanConfig::from_json(params, "c").negative_slope, 0.1f);
  params["nonlinear_activation_params"] = {{"negative_slope", 0.2}};
  EXPECT_EQ(KanTtsHifiGanConfig::from_json(params, "c").negative_slope, 0.2f);
  params["nonlinear_activation_params"] = json::object();
  EXPECT_EQ(KanTtsHifiGanConfig::from_json(params, "c").negative_slope, 0.01f);
  params.erase("nonlinear_activation_params");
  EXPECT_EQ(KanTtsHifiGanConfig::from_json(params, "c").negative_slope, 0.1f);
}

}  // namespace
}  // namespace voxd
