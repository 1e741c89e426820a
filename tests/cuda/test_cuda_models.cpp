// HiFiGAN and FastSpeech2 on the CUDA backend against the fixtures the reference tests use
// (tools/reference/*_fixtures.py): F32 to 1e-4 absolute, F16 and BF16 to 1e-2 relative L2 (BF16
// under the models' mixed-precision policy: matrix work in BF16, the rest in F32).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "cuda_test_util.h"
#include "families/fastspeech2/fastspeech2.h"
#include "families/fastspeech2/hifigan.h"

namespace voxd {
namespace {

using nlohmann::json;
using testing::cuda_backend;
using testing::relative_l2;
using testing::source_dir;

using Case = std::tuple<std::string, DType>;

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  return json::parse(in);
}

float max_abs_diff(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.shape(), expected.shape());
  if (actual.shape() != expected.shape()) return INFINITY;
  const std::vector<float> a = actual.to_float_vector();
  const std::vector<float> e = expected.to_float_vector();
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - e[i]));
  return worst;
}

// F32: max abs error <= 1e-4; F16/BF16: relative L2 error <= 1e-2. Returns the error for the log.
double expect_matches(const Tensor& actual, const Tensor& expected, DType dtype,
                      const std::string& what) {
  if (dtype == DType::F32) {
    const float err = max_abs_diff(actual, expected);
    EXPECT_LE(err, 1e-4f) << what << " (max abs error)";
    return err;
  }
  const double err = relative_l2(actual, expected);
  EXPECT_LE(err, 1e-2) << what << " (relative L2 error)";
  return err;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param)));
}

class HifiGanOnCuda : public ::testing::TestWithParam<Case> {};

TEST_P(HifiGanOnCuda, MatchesFixtureAudio) {
  const auto& [fixture, dtype] = GetParam();
  const std::string dir = source_dir() + "/tests/fixtures/hifigan/" + fixture + "/";
  const HifiGanConfig config = HifiGanConfig::from_json(read_json(dir + "config.json"), dir);
  CudaDeviceAllocator allocator(0);
  Context ctx(cuda_backend(), allocator);
  const HifiGan model =
      HifiGan::load(ctx, config, *SafetensorsFile::open(dir + "generator.safetensors"), dtype);
  auto io = SafetensorsFile::open(dir + "io.safetensors");
  const Tensor mel = io->get("mel");
  const Tensor want = io->get("audio");
  const Tensor audio = ops::to_host(ctx, model.forward(ctx, ops::to_device(ctx, mel, dtype)));
  const double err =
      expect_matches(audio, want.reshape({want.size(0), want.size(2)}), dtype, "audio");
  std::cout << fixture << " " << dtype_name(dtype) << ": error " << err << ", peak device memory "
            << allocator.stats().peak_allocated_bytes << " bytes\n";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HifiGanOnCuda,
                         ::testing::Combine(::testing::Values("v1", "v2", "v3", "hop300",
                                                              "odd_kernels", "folded"),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16)),
                         case_name);

class FastSpeech2OnCuda : public ::testing::TestWithParam<Case> {};

// Rows [b, 0, lengths[b]) of a padded [B, R] tensor, one list per sequence.
template <typename T>
std::vector<std::vector<T>> unpad(const std::vector<T>& flat, int64_t row_size,
                                  const std::vector<int64_t>& lengths) {
  std::vector<std::vector<T>> rows;
  for (size_t b = 0; b < lengths.size(); ++b) {
    const auto row = flat.begin() + static_cast<int64_t>(b) * row_size;
    rows.emplace_back(row, row + lengths[b]);
  }
  return rows;
}

// torch.bucketize(x, bins, right=False): the index of the first boundary >= x.
int64_t bucket_of(const std::vector<float>& bins, float x) {
  return std::lower_bound(bins.begin(), bins.end(), x) - bins.begin();
}

TEST_P(FastSpeech2OnCuda, MatchesFixture) {
  const auto& [fixture, dtype] = GetParam();
  const std::string dir = source_dir() + "/tests/fixtures/fastspeech2/" + fixture + "/";
  CudaDeviceAllocator allocator(0);
  Context ctx(cuda_backend(), allocator);
  const FastSpeech2Config config =
      FastSpeech2Config::from_json(read_json(dir + "config.json"), fixture);
  auto weights = SafetensorsFile::open(dir + "acoustic.safetensors");
  const FastSpeech2 model = FastSpeech2::load(ctx, config, *weights, dtype);
  auto io = SafetensorsFile::open(dir + "io.safetensors");

  const Tensor padded_ids = io->get("ids");
  const std::vector<int64_t> src_lens = io->get("src_lens").to_int_vector();
  const std::vector<int64_t> mel_lens = io->get("mel_lens").to_int_vector();
  const std::vector<std::vector<int64_t>> ids =
      unpad(padded_ids.to_int_vector(), padded_ids.size(1), src_lens);
  const std::vector<float> controls = io->get("controls").to_float_vector();
  const SynthesisControls synthesis{controls[0], controls[1], controls[2]};
  const std::vector<int64_t> speakers = io->get("speakers").to_int_vector();
  FastSpeech2Debug debug;
  AcousticOutput out = model.forward(ctx, ids, speakers, synthesis, &debug);

  // Durations are rounded from exp(log_d) and pitch and energy are bucketized against the bins:
  // in half precision a value near a rounding midpoint or a bin boundary may land on the other
  // side, which shifts every later frame or picks another embedding row. F32 must match them
  // all. In F16 and BF16 the differing durations are counted and reported, and the rest is
  // compared from a second forward with the fixture's durations, pitch and energy forced: its
  // continuous pitch and energy predictions then see the fixture's inputs and are compared
  // (their bucket flips counted and reported), and its mels are compared frame for frame.
  const Tensor durations = io->get("durations");
  const std::vector<std::vector<int64_t>> forced =
      unpad(durations.to_int_vector(), durations.size(1), src_lens);
  int64_t differing = 0;
  for (size_t b = 0; b < ids.size(); ++b) {
    for (size_t t = 0; t < ids[b].size(); ++t) differing += out.durations[b][t] != forced[b][t];
  }
  std::string report = fixture + " " + std::string(dtype_name(dtype)) + ":";
  const auto compare = [&](const std::string& name, const Tensor& actual) {
    const double err = expect_matches(ops::to_host(ctx, actual), io->get(name), dtype, name);
    report += " " + name + " " + std::to_string(err);
  };
  compare("log_d", debug.log_durations);
  const Tensor pitch = io->get("pitch");
  const Tensor energy = io->get("energy");
  const std::vector<int64_t>& pitch_lens =
      config.pitch_feature_level == FeatureLevel::Phoneme ? src_lens : mel_lens;
  const std::vector<int64_t>& energy_lens =
      config.energy_feature_level == FeatureLevel::Phoneme ? src_lens : mel_lens;
  if (dtype == DType::F32) {
    EXPECT_EQ(differing, 0);
  } else {
    ForcedFeatures features;
    features.pitch = unpad(pitch.to_float_vector(), pitch.size(1), pitch_lens);
    features.energy = unpad(energy.to_float_vector(), energy.size(1), energy_lens);
    out = model.forward(ctx, ids, speakers, synthesis, &debug, forced, features);
  }
  report += " (" + std::to_string(differing) + " durations differ";
  EXPECT_EQ(out.mel_lengths, mel_lens);
  compare("pitch", debug.pitch);
  compare("energy", debug.energy);
  // Bucket flips: predictions whose bin differs from the fixture's prediction's bin.
  const auto flips = [&](const char* name, const Tensor& actual, const Tensor& expected,
                         const std::vector<int64_t>& lengths) {
    const std::vector<float> bins =
        weights->get(std::string("variance_adaptor.") + name + "_bins").to_float_vector();
    const std::vector<std::vector<float>> got =
        unpad(ops::to_host(ctx, actual).to_float_vector(), actual.size(1), lengths);
    const std::vector<std::vector<float>> want =
        unpad(expected.to_float_vector(), expected.size(1), lengths);
    int64_t count = 0;
    for (size_t b = 0; b < got.size(); ++b) {
      for (size_t t = 0; t < got[b].size(); ++t) {
        count += bucket_of(bins, got[b][t]) != bucket_of(bins, want[b][t]);
      }
    }
    if (dtype == DType::F32) {
      EXPECT_EQ(count, 0) << name << " bucket flips";
    }
    report += ", " + std::to_string(count) + " " + name + " buckets differ";
  };
  flips("pitch", debug.pitch, pitch, pitch_lens);
  flips("energy", debug.energy, energy, energy_lens);
  report += dtype == DType::F32 ? ")" : "; compared under the fixture's durations, pitch, energy)";
  compare("mel", debug.mel_before_postnet);
  compare("postnet_mel", out.mel);
  std::cout << report << "\n";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FastSpeech2OnCuda,
                         ::testing::Combine(::testing::Values("single_phoneme_linear",
                                                              "multi_frame_log", "controls",
                                                              "batch", "long_input"),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16)),
                         case_name);

}  // namespace
}  // namespace voxd
