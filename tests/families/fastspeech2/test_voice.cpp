// Voice directories: config validation errors, and parity of the bundled voices in the engine
// with the training code's PyTorch forward (tests/fixtures/NAME/parity.safetensors, written by
// training/export.py from the same weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "families/fastspeech2/voice.h"
#include "support/edited_voice.h"

namespace voxd {
namespace {

using nlohmann::json;

const std::string kSource = VOXD_SOURCE_DIR;
const std::string kTinyVoice = kSource + "/tests/fixtures/voices/tiny-arpabet";

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
  }
  return worst;
}

float max_abs(const std::vector<float>& a) {
  float m = 0.0f;
  for (float v : a) m = std::max(m, std::abs(v));
  return m;
}

// A copy of the tiny test voice whose config.json `edit` changes.
class VoiceConfigTest : public ::testing::Test {
 protected:
  void edit(const std::function<void(json&)>& change) { voice_.edit(change); }
  std::string load_error() { return voice_.load_error<VoiceConfig>(); }
  std::string dir() const { return voice_.path(); }

 private:
  test_support::EditedVoice voice_{kTinyVoice};
};

TEST_F(VoiceConfigTest, LoadsTheTestVoice) {
  const VoiceConfig config = VoiceConfig::load(dir());
  EXPECT_EQ(config.sample_rate, 22050);
  EXPECT_EQ(config.hop_length, 256);
  EXPECT_EQ(config.phonemes, "arpabet");
  EXPECT_EQ(config.vocoder.hop_length(), 256);
}

TEST_F(VoiceConfigTest, NamesTheMissingField) {
  edit([](json& c) { c.erase("phonemes"); });
  EXPECT_NE(load_error().find("missing field 'phonemes'"), std::string::npos);
}

TEST_F(VoiceConfigTest, RejectsUnknownPhonemeSet) {
  edit([](json& c) { c["phonemes"] = "pinyin"; });
  EXPECT_NE(load_error().find("\"pinyin\""), std::string::npos);
}

TEST_F(VoiceConfigTest, RejectsHopThatTheVocoderDoesNotMake) {
  edit([](json& c) { c["hop_length"] = 300; });
  const std::string message = load_error();
  EXPECT_NE(message.find("multiply to 256"), std::string::npos) << message;
  EXPECT_NE(message.find("300"), std::string::npos) << message;
}

TEST_F(VoiceConfigTest, RejectsMissingWeightsFile) {
  edit([](json& c) { c["acoustic"]["weights"] = "nope.safetensors"; });
  EXPECT_NE(load_error().find("nope.safetensors"), std::string::npos);
}

TEST_F(VoiceConfigTest, RejectsNonPositiveSampleRate) {
  edit([](json& c) { c["sample_rate"] = -5; });
  EXPECT_NE(load_error().find("sample_rate"), std::string::npos);
}

TEST_F(VoiceConfigTest, NamedAndNumericSpeakers) {
  edit([](json& c) { c["speakers"] = {{"alice", 0}}; });
  auto backend = make_backend("reference");
  Context ctx(*backend, host_allocator());
  auto voice = Voice::load(ctx, dir());
  EXPECT_EQ(voice->speaker_id("alice"), 0);
  EXPECT_EQ(voice->speaker_id("0"), 0);
  try {
    voice->speaker_id("bob");
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("alice"), std::string::npos);
  }
}

// A bundled voice (voices/NAME) against the training forward of its checkpoints
// (tests/fixtures/NAME/parity.safetensors, written by training/export.py), on a backend.
class BundledVoiceParity : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(BundledVoiceParity, EngineMatchesTrainingForward) {
  const auto& [name, backend_name] = GetParam();
  auto backend = make_backend(backend_name);
  Context ctx(*backend, host_allocator());
  auto voice = Voice::load(ctx, kSource + "/voices/" + name);
  auto fixture = SafetensorsFile::open(kSource + "/tests/fixtures/" + name + "/parity.safetensors");
  int checked = 0;
  for (int k = 0; fixture->contains("ids_" + std::to_string(k)); ++k, ++checked) {
    const std::string key = std::to_string(k);
    const std::vector<int64_t> ids = fixture->get("ids_" + key).to_int_vector();
    AcousticOutput acoustic = voice->acoustic().forward(ctx, {ids}, {0}, {});
    const Tensor expected_mel = fixture->get("mel_" + key);  // [80, frames]
    ASSERT_EQ(acoustic.mel_lengths[0], expected_mel.size(1)) << "sentence " << k;
    Tensor mel = ops::transpose(ctx, acoustic.mel, 1, 2);  // [1, 80, frames]
    const std::vector<float> expected_mel_values = expected_mel.to_float_vector();
    const float mel_scale = std::max(1.0f, max_abs(expected_mel_values));
    EXPECT_LE(max_abs_diff(ops::to_host(ctx, mel).to_float_vector(), expected_mel_values),
              1e-4f * mel_scale)
        << "mel of sentence " << k;
    const std::vector<float> audio =
        ops::to_host(ctx, voice->vocoder().forward(ctx, mel)).to_float_vector();
    EXPECT_LE(max_abs_diff(audio, fixture->get("audio_" + key).to_float_vector()), 1e-4f)
        << "audio of sentence " << k;
  }
  EXPECT_GE(checked, 3);
}

// en-slt and zh-demo are the same model code as en-demo: the CPU backend checks their exports.
INSTANTIATE_TEST_SUITE_P(
    Voices, BundledVoiceParity,
    ::testing::Values(std::make_tuple("en-demo", "reference"), std::make_tuple("en-demo", "cpu"),
                      std::make_tuple("en-slt", "cpu"), std::make_tuple("zh-demo", "cpu")),
    [](const auto& info) {
      std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param);
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

}  // namespace
}  // namespace voxd
