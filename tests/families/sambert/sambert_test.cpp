// Parity of Sambert with KAN-TTS's KanTtsSAMBERT (parity.h) on the reference and cpu backends;
// config, weight and input errors.
#include "families/sambert/sambert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
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

using sambert_testing::check_sambert_fixture;
using sambert_testing::error_of;
using sambert_testing::kSambertCases;
using sambert_testing::read_json;
using sambert_testing::read_tokens;
using sambert_testing::Runner;

const std::string& kFixtures = sambert_testing::kSambertFixtures;

SambertConfig read_config(const std::string& fixture) {
  return sambert_testing::read_sambert_config(fixture);
}

std::map<std::string, Tensor> read_state(const std::string& fixture) {
  const TensorMapSource source =
      sambert_testing::read_weights(kFixtures + fixture + "/model.safetensors");
  std::map<std::string, Tensor> state;
  for (const std::string& name : source.names()) state[name] = source.get(name);
  return state;
}

class SambertParity : public ::testing::TestWithParam<std::string> {};

TEST_P(SambertParity, MatchesKanTtsOnEveryFixture) {
  Runner run(GetParam());
  float worst = 0.0f;
  for (const std::string& fixture : kSambertCases) {
    worst = std::max(worst, check_sambert_fixture(run.ctx, fixture));
  }
  std::cout << "[ sambert ] " << GetParam() << ": worst mel error " << worst << " over "
            << kSambertCases.size() << " fixtures\n";
}

INSTANTIATE_TEST_SUITE_P(Backends, SambertParity, ::testing::Values("reference", "cpu"));

TEST(SambertInput, BadTokensAreRefusedByName) {
  Runner run("cpu");
  const TensorMapSource weights(read_state("basic"), "basic");
  const Sambert model = Sambert::load(run.ctx, read_config("basic"), weights);
  const auto io = SafetensorsFile::open(kFixtures + "basic/io.safetensors");
  const SambertTokens good = read_tokens(*io);
  SambertTokens bad_tone = good;
  bad_tone.linguistic[3][1] = model.linguistic_vocabulary()[1];
  EXPECT_NE(error_of([&] {
              model.synthesize(run.ctx, bad_tone);
            }).find("token 3 has tone id " + std::to_string(model.linguistic_vocabulary()[1])),
            std::string::npos);
  SambertTokens bad_speaker = good;
  bad_speaker.speaker[0] = -1;
  EXPECT_NE(
      error_of([&] { model.synthesize(run.ctx, bad_speaker); }).find("token 0 has speaker id -1"),
      std::string::npos);
  SambertTokens short_emotions = good;
  short_emotions.emotion.pop_back();
  EXPECT_NE(
      error_of([&] { model.synthesize(run.ctx, short_emotions); }).find("one of each per token"),
      std::string::npos);
  EXPECT_NE(error_of([&] { model.synthesize(run.ctx, SambertTokens{}); }).find("no token"),
            std::string::npos);
}

// What a model predicts is checked before anything is sized by it: durations that sum past the
// frame limit, an infinite one, and none at all; and too many tokens.
TEST(SambertInput, UtterancesPastTheLimitsAreRefused) {
  Runner run("cpu");
  const auto io = SafetensorsFile::open(kFixtures + "basic/io.safetensors");
  const SambertTokens tokens = read_tokens(*io);
  const auto with_duration_bias = [&](float bias) {
    std::map<std::string, Tensor> state = read_state("basic");
    state["variance_adaptor.duration_predictor.fc.bias"] = Tensor::from_vector({1}, std::vector<float>{bias});
    return Sambert::load(run.ctx, read_config("basic"), TensorMapSource(state, "basic"));
  };
  const Sambert model = with_duration_bias(0.0f);
  SambertLimits limits;
  limits.max_frames = 10;
  EXPECT_NE(error_of([&] {
              model.synthesize(run.ctx, tokens, nullptr, limits);
            }).find("past the 10 frames an utterance may have"),
            std::string::npos);
  limits = {};
  limits.max_tokens = static_cast<int64_t>(tokens.linguistic.size()) - 1;
  EXPECT_NE(error_of([&] {
              model.synthesize(run.ctx, tokens, nullptr, limits);
            }).find("tokens, more than the"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              with_duration_bias(1e4f).synthesize(run.ctx, tokens);
            }).find("would take inf frames"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              with_duration_bias(-1e4f).synthesize(run.ctx, tokens);
            }).find("tokens got 0 frames"),
            std::string::npos);
}

TEST(SambertConfig, VariantsAndUnbuildableSizesAreRefused) {
  json params = read_json(kFixtures + "basic/config.json")["params"];
  json se = params;
  se["SE"] = true;
  EXPECT_NE(error_of([&] {
              SambertConfig::from_json(se, "am/config.yaml");
            }).find("am/config.yaml: field 'SE' is true"),
            std::string::npos);
  json even = params;
  even["postnet_filter_size"] = 6;
  EXPECT_NE(error_of([&] {
              SambertConfig::from_json(even, "c");
            }).find("field 'postnet_filter_size' is 6"),
            std::string::npos);
  json heads = params;
  heads["decoder_num_heads"] = 3;
  EXPECT_NE(error_of([&] { SambertConfig::from_json(heads, "c"); }).find("decoder_num_heads"),
            std::string::npos);
  json missing = params;
  missing.erase("num_mels");
  EXPECT_NE(error_of([&] { SambertConfig::from_json(missing, "c"); }).find("num_mels"),
            std::string::npos);
  // The original moves the FSMN window only for a positive shift.
  json negative = params;
  negative["predictor_shift"] = -2;
  const SambertConfig c = SambertConfig::from_json(negative, "c");
  EXPECT_EQ(c.predictor.left_padding(), c.predictor.right_padding());
}

TEST(SambertWeights, AMisshapenTensorIsNamed) {
  Runner run("cpu");
  std::map<std::string, Tensor> state = read_state("basic");
  const std::string name = "mel_decoder.mel_dec.pnca.1.pnca_attn.w_h_kv.weight";
  state[name] = Tensor::zeros({3, 3}, DType::F32);
  const TensorMapSource weights(state, "am/ckpt");
  const std::string message =
      error_of([&] { Sambert::load(run.ctx, read_config("basic"), weights); });
  EXPECT_NE(message.find(name), std::string::npos) << message;
  state = read_state("basic");
  state.erase("mel_postnet.fc.bias");
  const TensorMapSource missing(state, "am/ckpt");
  EXPECT_NE(error_of([&] {
              Sambert::load(run.ctx, read_config("basic"), missing);
            }).find("mel_postnet.fc.bias"),
            std::string::npos);
}

}  // namespace
}  // namespace voxd
