// The Sambert-HiFiGAN family's parity checks against the fixtures tools/reference/
// sambert_fixtures.py and kantts_hifigan_fixtures.py write (each checked there against KAN-TTS
// itself), run on any backend: by sambert_test.cpp and hifigan_test.cpp on the host backends,
// by tests/cuda/test_cuda_sambert.cpp on CUDA.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
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
#include "families/sambert/hifigan.h"
#include "families/sambert/sambert.h"

namespace voxd::sambert_testing {

// The repository: VOXD_SOURCE_DIR from the environment (the GPU machine's copy of the tree), or
// where the tests were built.
inline std::string source_root() {
  const char* env = std::getenv("VOXD_SOURCE_DIR");
  return env != nullptr ? env : VOXD_SOURCE_DIR;
}

inline const std::string kSambertFixtures = source_root() + "/tests/fixtures/sambert/";
inline const std::string kHifiGanFixtures = source_root() + "/tests/fixtures/kantts_hifigan/";
inline const std::vector<std::string> kSambertCases = {
    "basic", "mixed", "aligned", "one_token", "negative_shift", "equal_widths"};
inline const std::vector<std::string> kHifiGanCases = {"v1_16k", "v1_24k", "noncausal_v1_16k",
                                                       "nsf_v1_24k", "noncausal_nsf_v1_16k"};
constexpr float kTolerance = 1e-4f;

// One host backend with a context on it.
struct Runner {
  std::unique_ptr<Backend> backend;
  Context ctx;
  explicit Runner(const std::string& name)
      : backend(make_backend(name, 2)), ctx(*backend, host_allocator()) {}
};

// The voxd::Error message `f` throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  return nlohmann::json::parse(in);
}

inline TensorMapSource read_weights(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  std::map<std::string, Tensor> state;
  for (const std::string& name : file->names()) state[name] = file->get(name);
  return TensorMapSource(state, path);
}

inline SambertConfig read_sambert_config(const std::string& fixture) {
  return SambertConfig::from_json(read_json(kSambertFixtures + fixture + "/config.json")["params"],
                                  fixture);
}

inline KanTtsHifiGanConfig read_hifigan_config(const std::string& fixture) {
  return KanTtsHifiGanConfig::from_json(
      read_json(kHifiGanFixtures + fixture + "/config.json")["params"], fixture);
}

inline SambertTokens read_tokens(const SafetensorsFile& io) {
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
inline float max_error(const Tensor& actual, const Tensor& expected) {
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

// Runs Sambert fixture `fixture` on ctx: durations and band exact, every intermediate and the
// mel within kTolerance. Returns the mel's error.
inline float check_sambert_fixture(Context& ctx, const std::string& fixture) {
  SCOPED_TRACE(fixture);
  const TensorMapSource weights = read_weights(kSambertFixtures + fixture + "/model.safetensors");
  const Sambert model = Sambert::load(ctx, read_sambert_config(fixture), weights);
  const auto io = SafetensorsFile::open(kSambertFixtures + fixture + "/io.safetensors");
  SambertDebug debug;
  const SambertOutput out = model.synthesize(ctx, read_tokens(*io), &debug);
  EXPECT_EQ(out.durations, io->get("durations").to_int_vector());
  EXPECT_EQ(out.band_width, io->get("band_width").to_int_vector()[0]);
  EXPECT_LE(max_error(debug.text_hidden, io->get("text_hid")), kTolerance) << "text_hid";
  EXPECT_LE(max_error(debug.pitch, io->get("pitch")), kTolerance) << "pitch";
  EXPECT_LE(max_error(debug.energy, io->get("energy")), kTolerance) << "energy";
  EXPECT_LE(max_error(debug.log_durations, io->get("log_duration")), kTolerance);
  EXPECT_LE(max_error(debug.memory, io->get("memory")), kTolerance) << "memory";
  EXPECT_LE(max_error(debug.decoder_mel, io->get("decoder_mel")), kTolerance) << "decoder";
  const float mel_error = max_error(ops::to_host(ctx, out.mel), io->get("mel"));
  EXPECT_LE(mel_error, kTolerance) << "mel";
  return mel_error;
}

// A fixture's vocoder input: the mel channels of io's "mel" [B, in_channels (+ 2 for NSF), T].
inline Tensor fixture_mel(const KanTtsHifiGanConfig& config, const SafetensorsFile& io) {
  const Tensor mel = io.get("mel");
  return mel.narrow(1, 0, config.in_channels).to_host_contiguous(DType::F32);
}

// An NSF fixture's excitation [B, harmonics + 1, T · hop] of frames [first, first + frames):
// NsfSource with io's phases and noise over the f0 and voicing of "mel"'s last two channels.
inline Tensor fixture_excitation(const KanTtsHifiGanConfig& config, const SafetensorsFile& io,
                                 int64_t first, int64_t frames) {
  const Tensor mel = io.get("mel");
  const Tensor phases = io.get("phase");
  const Tensor noise = io.get("noise");
  const int64_t harmonics = config.nsf->harmonics + 1;
  const int64_t t = mel.size(2);
  std::vector<float> out;
  for (int64_t b = 0; b < mel.size(0); ++b) {
    const std::vector<float> f0 = mel.select(0, b).select(0, config.in_channels).to_float_vector();
    const std::vector<float> voiced =
        mel.select(0, b).select(0, config.in_channels + 1).to_float_vector();
    double before = 0.0;
    for (int64_t f = 0; f < first; ++f) before += f0[static_cast<size_t>(f)];
    const NsfSource source(config, phases.select(0, b).to_float_vector(),
                           noise.select(0, b).to_host_contiguous(DType::F32));
    const std::vector<float> e =
        source.excitation(f0.data() + first, voiced.data() + first, first, frames, before);
    out.insert(out.end(), e.begin(), e.end());
  }
  EXPECT_LE(first + frames, t);
  return Tensor::from_vector({mel.size(0), harmonics, frames * config.hop_length()}, out);
}

// Runs HiFiGAN fixture `fixture` on ctx: hop, context and lookahead as measured by gradients,
// the audio within kTolerance (an NSF fixture with its recorded phases and noise). Returns the
// audio's error.
inline float check_hifigan_fixture(Context& ctx, const std::string& fixture) {
  SCOPED_TRACE(fixture);
  const KanTtsHifiGanConfig config = read_hifigan_config(fixture);
  const nlohmann::json expected = read_json(kHifiGanFixtures + fixture + "/expected.json");
  EXPECT_EQ(config.hop_length(), expected["hop_length"].get<int64_t>());
  EXPECT_EQ(config.left_context_frames(), expected["receptive_field_frames"].get<int64_t>());
  EXPECT_EQ(config.lookahead_frames(), expected["lookahead_frames"].get<int64_t>());
  const KanTtsHifiGan vocoder = KanTtsHifiGan::load(
      ctx, config, read_weights(kHifiGanFixtures + fixture + "/generator.safetensors"));
  const auto io = SafetensorsFile::open(kHifiGanFixtures + fixture + "/io.safetensors");
  const Tensor mel = fixture_mel(config, *io);
  const Tensor audio =
      vocoder.forward(ctx, ops::to_device(ctx, mel),
                      config.nsf ? fixture_excitation(config, *io, 0, mel.size(2)) : Tensor{});
  const Tensor reference = io->get("audio");
  const Tensor expected_audio = reference.reshape({reference.size(0), reference.size(2)});
  const float error = max_error(ops::to_host(ctx, audio), expected_audio);
  EXPECT_LE(error, kTolerance) << "audio";
  return error;
}

}  // namespace voxd::sambert_testing
