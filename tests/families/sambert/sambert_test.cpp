// Parity of Sambert with KAN-TTS's KanTtsSAMBERT on the fixtures tools/reference/
// sambert_fixtures.py writes (checked there against the original), on the reference and cpu
// backends; config, weight and input errors.
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

namespace voxd {
namespace {

using nlohmann::json;

const std::string kFixtures = std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/sambert/";
const std::vector<std::string> kCases = {"basic",     "mixed",          "aligned",
                                         "one_token", "negative_shift", "equal_widths"};
constexpr float kTolerance = 1e-4f;

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  return json::parse(in);
}

SambertConfig read_config(const std::string& fixture) {
  return SambertConfig::from_json(read_json(kFixtures + fixture + "/config.json")["params"],
                                  fixture);
}

std::map<std::string, Tensor> read_state(const std::string& fixture) {
  auto file = SafetensorsFile::open(kFixtures + fixture + "/model.safetensors");
  std::map<std::string, Tensor> state;
  for (const std::string& name : file->names()) state[name] = file->get(name);
  return state;
}

SambertTokens read_tokens(const SafetensorsFile& io) {
  const std::vector<int64_t> ling = io.get("ling").to_int_vector();
  SambertTokens tokens;
  for (size_t i = 0; i + 3 < ling.size(); i += 4) {
    tokens.linguistic.push_back({ling[i], ling[i + 1], ling[i + 2], ling[i + 3]});
  }
  tokens.emotion = io.get("emotion").to_int_vector();
  tokens.speaker = io.get("speaker").to_int_vector();
  return tokens;
}

// Largest |a − e| / max(1, |e|); the shapes must match.
float max_error(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.shape(), expected.shape());
  if (actual.shape() != expected.shape()) return INFINITY;
  const std::vector<float> a = actual.to_float_vector();
  const std::vector<float> e = expected.to_float_vector();
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - e[i]) / std::max(1.0f, std::abs(e[i])));
  }
  return worst;
}

struct Runner {
  std::unique_ptr<Backend> backend;
  Context ctx;
  explicit Runner(const std::string& name)
      : backend(make_backend(name, 2)), ctx(*backend, host_allocator()) {}
};

class SambertParity : public ::testing::TestWithParam<std::string> {};

TEST_P(SambertParity, MatchesKanTtsOnEveryFixture) {
  Runner run(GetParam());
  float worst = 0.0f;
  for (const std::string& fixture : kCases) {
    SCOPED_TRACE(fixture + " on " + GetParam());
    const TensorMapSource weights(read_state(fixture), fixture);
    const Sambert model = Sambert::load(run.ctx, read_config(fixture), weights);
    const auto io = SafetensorsFile::open(kFixtures + fixture + "/io.safetensors");
    SambertDebug debug;
    const SambertOutput out = model.synthesize(run.ctx, read_tokens(*io), &debug);
    EXPECT_EQ(out.durations, io->get("durations").to_int_vector());
    EXPECT_EQ(out.band_width, io->get("band_width").to_int_vector()[0]);
    EXPECT_LE(max_error(debug.text_hidden, io->get("text_hid")), kTolerance) << "text_hid";
    EXPECT_LE(max_error(debug.pitch, io->get("pitch")), kTolerance) << "pitch";
    EXPECT_LE(max_error(debug.energy, io->get("energy")), kTolerance) << "energy";
    EXPECT_LE(max_error(debug.log_durations, io->get("log_duration")), kTolerance);
    EXPECT_LE(max_error(debug.memory, io->get("memory")), kTolerance) << "memory";
    EXPECT_LE(max_error(debug.decoder_mel, io->get("decoder_mel")), kTolerance) << "decoder";
    const float mel_error = max_error(ops::to_host(run.ctx, out.mel), io->get("mel"));
    EXPECT_LE(mel_error, kTolerance) << "mel";
    worst = std::max(worst, mel_error);
  }
  std::cout << "[ sambert ] " << GetParam() << ": worst mel error " << worst << " over "
            << kCases.size() << " fixtures\n";
}

INSTANTIATE_TEST_SUITE_P(Backends, SambertParity, ::testing::Values("reference", "cpu"));

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

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
