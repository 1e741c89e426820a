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

// A causal generator: chunks of frames vocoded with left_context_frames() before them, the
// context's samples dropped, give the samples of one piece.
TEST(KanTtsHifiGanStreaming, ChunksWithLeftContextEqualOnePiece) {
  Runner run("cpu");
  const KanTtsHifiGanConfig config = read_config("v1_16k");
  const KanTtsHifiGan vocoder = KanTtsHifiGan::load(run.ctx, config, read_weights("v1_16k"));
  const auto io = SafetensorsFile::open(kFixtures + "v1_16k/io.safetensors");
  const Tensor mel = io->get("mel").narrow(0, 0, 1);
  const int64_t frames = mel.size(2);
  const int64_t hop = config.hop_length();
  const int64_t context = config.left_context_frames();
  const std::vector<float> whole =
      ops::to_host(run.ctx, vocoder.forward(run.ctx, ops::to_device(run.ctx, mel)))
          .to_float_vector();
  std::vector<float> pieces;
  const int64_t chunk = 5;
  for (int64_t start = 0; start < frames; start += chunk) {
    const int64_t from = std::max<int64_t>(0, start - context);
    const int64_t end = std::min(frames, start + chunk);
    const Tensor part = ops::to_device(run.ctx, mel.narrow(2, from, end - from));
    const std::vector<float> audio =
        ops::to_host(run.ctx, vocoder.forward(run.ctx, part)).to_float_vector();
    pieces.insert(pieces.end(), audio.begin() + (start - from) * hop, audio.end());
  }
  EXPECT_LE(max_abs_diff(pieces, whole), 1e-5f);
  // Twenty frames less context is not enough: the chunks then differ from the whole.
  std::vector<float> short_pieces;
  for (int64_t start = 0; start < frames; start += chunk) {
    const int64_t from = std::max<int64_t>(0, start - context + 20);
    const int64_t end = std::min(frames, start + chunk);
    const Tensor part = ops::to_device(run.ctx, mel.narrow(2, from, end - from));
    const std::vector<float> audio =
        ops::to_host(run.ctx, vocoder.forward(run.ctx, part)).to_float_vector();
    short_pieces.insert(short_pieces.end(), audio.begin() + (start - from) * hop, audio.end());
  }
  EXPECT_GT(max_abs_diff(short_pieces, whole), 1e-4f);
}

TEST(KanTtsHifiGanConfig, WhatVoxdDoesNotRunIsRefusedByField) {
  const json params = read_json(kFixtures + "v1_16k/config.json")["params"];
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& p) {
         p["nsf_params"] = {{"nb_harmonics", 7}};
       },
       "field 'nsf_params'"},
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
