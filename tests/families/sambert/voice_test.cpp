// Sambert-HiFiGAN voice directories: the personal voice fixture tiny-sambert-nsf (a speaker
// embedding, f0 and voicing after the mel, a HiFiGAN-NSF vocoder) loads with its f0
// normalisation; KAN-TTS's denorm_f0 on its postnet output (restore_f0); the refusals of voices
// whose parts do not fit together, each naming the field.
#include "families/sambert/voice.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "families/sambert/voice_config.h"
#include "support/edited_voice.h"

namespace voxd::sambert {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kNsfVoice = fs::path(VOXD_SOURCE_DIR) / "tests/fixtures/voices/tiny-sambert-nsf";

// A copy of tiny-sambert-nsf whose config.json `edit` changes.
class SambertVoiceConfig : public ::testing::Test {
 protected:
  void edit(const std::function<void(json&)>& change) { voice_.edit(change); }
  std::string load_error() { return voice_.load_error<VoiceConfig>(); }
  std::string dir() const { return voice_.path(); }

 private:
  test_support::EditedVoice voice_{kNsfVoice};
};

TEST_F(SambertVoiceConfig, APersonalVoiceReadsItsF0Normalisation) {
  const VoiceConfig config = VoiceConfig::load(dir());
  EXPECT_TRUE(config.acoustic.nsf);
  EXPECT_EQ(config.mel_channels(), config.acoustic.num_mels - 2);
  ASSERT_TRUE(config.vocoder.nsf.has_value());
  EXPECT_EQ(config.vocoder.nsf->harmonics, 7);
  // The fixture's am/mvn.npy: mean 180 Hz, std 40 Hz.
  EXPECT_EQ(config.f0_offset, 180.0);
  EXPECT_EQ(config.f0_scale, 40.0);
  edit([](json& c) {
    c["acoustic"]["model"]["nsf_norm_type"] = "global";
    c["acoustic"]["model"]["nsf_f0_global_maximum"] = 500.0;
    c["acoustic"].erase("f0_mean_std");
  });
  const VoiceConfig global = VoiceConfig::load(dir());
  // KAN-TTS's default minimum, 30 Hz: f0 · (500 − 30) + 30.
  EXPECT_EQ(global.f0_offset, 30.0);
  EXPECT_EQ(global.f0_scale, 470.0);
}

// Two frames of the fixture's num_mels channels (the mel's, then f0 and voicing): voicing is 1
// from 0.6 up, f0 goes back to Hz by the voice's mean and std and is at least 30 Hz; the mel's
// channels are left as they were.
TEST_F(SambertVoiceConfig, RestoreF0IsKanTtsDenormF0) {
  const VoiceConfig config = VoiceConfig::load(dir());
  const auto channels = static_cast<size_t>(config.acoustic.num_mels);
  std::vector<float> frames(2 * channels, 0.25f);
  frames[channels - 2] = 0.5f;       // 0.5 · 40 + 180 = 200 Hz
  frames[channels - 1] = 0.6f;       // voiced
  frames[2 * channels - 2] = -5.0f;  // −20 Hz: 30 Hz
  frames[2 * channels - 1] = 0.59f;  // unvoiced
  restore_f0(config, frames.data(), 2);
  EXPECT_FLOAT_EQ(frames[channels - 2], 200.0f);
  EXPECT_EQ(frames[channels - 1], 1.0f);
  EXPECT_FLOAT_EQ(frames[2 * channels - 2], 30.0f);
  EXPECT_EQ(frames[2 * channels - 1], 0.0f);
  for (size_t t = 0; t < 2; ++t) {
    for (size_t m = 0; m + 2 < channels; ++m) EXPECT_EQ(frames[t * channels + m], 0.25f);
  }
}

TEST_F(SambertVoiceConfig, PartsThatDoNotFitAreRefusedByField) {
  edit([](json& c) { c["acoustic"].erase("f0_mean_std"); });
  EXPECT_NE(load_error().find("acoustic: missing field 'f0_mean_std'"), std::string::npos);
  edit([](json& c) { c["acoustic"]["f0_mean_std"] = {180.0}; });
  EXPECT_NE(load_error().find("'f0_mean_std' must be [mean, std]"), std::string::npos);
  edit([](json& c) {
    c["acoustic"]["f0_mean_std"] = {180.0, 40.0};
    c["vocoder"]["model"].erase("nsf_params");
  });
  EXPECT_NE(load_error().find("this one has no nsf_params"), std::string::npos);
  edit([](json& c) {
    c["vocoder"]["model"]["nsf_params"] = {{"nb_harmonics", 7}, {"sampling_rate", 16000}};
    c["acoustic"]["model"]["NSF"] = false;
  });
  EXPECT_NE(load_error().find("makes no f0 (its NSF is false)"), std::string::npos);
  edit([](json& c) {
    c["acoustic"]["model"]["NSF"] = true;
    c["vocoder"]["model"]["in_channels"] = c["acoustic"]["model"]["num_mels"];
  });
  EXPECT_NE(load_error().find("field 'in_channels' is 12, the acoustic model makes 10"),
            std::string::npos);
}

}  // namespace
}  // namespace voxd::sambert
