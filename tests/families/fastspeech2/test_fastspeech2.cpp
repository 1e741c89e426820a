// Parity of FastSpeech2 with ming024/FastSpeech2 on the fixtures tools/reference/
// fastspeech2_fixtures.py writes, on the reference and cpu backends; config, weight and input
// errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "backends/registry.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "families/fastspeech2/fastspeech2.h"

namespace voxd {
namespace {

using nlohmann::json;

const std::string kFixtures = std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/fastspeech2/";
const std::vector<std::string> kCases = {"single_phoneme_linear", "multi_frame_log", "controls",
                                         "batch", "long_input"};
constexpr float kTolerance = 1e-4f;

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  return json::parse(in);
}

FastSpeech2Config read_config(const std::string& fixture) {
  return FastSpeech2Config::from_json(read_json(kFixtures + fixture + "/config.json"), fixture);
}

std::map<std::string, Tensor> read_state(const std::string& fixture) {
  auto file = SafetensorsFile::open(kFixtures + fixture + "/acoustic.safetensors");
  std::map<std::string, Tensor> state;
  for (const std::string& name : file->names()) state[name] = file->get(name);
  return state;
}

// Largest |a − b|; the shapes must match.
float max_abs_diff(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.shape(), expected.shape());
  if (actual.shape() != expected.shape()) return INFINITY;
  const std::vector<float> a = actual.to_float_vector();
  const std::vector<float> b = expected.to_float_vector();
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// One backend with a context on it.
struct Runner {
  std::unique_ptr<Backend> backend;
  Context ctx;
  explicit Runner(const std::string& name)
      : backend(make_backend(name, 2)), ctx(*backend, host_allocator()) {}
};

// A fixture's inputs as forward takes them.
struct Inputs {
  std::vector<std::vector<int64_t>> ids;
  std::vector<int64_t> speakers;
  SynthesisControls controls;
};

Inputs read_inputs(const SafetensorsFile& io) {
  Inputs in;
  const Tensor ids = io.get("ids");
  const std::vector<int64_t> flat = ids.to_int_vector();
  const std::vector<int64_t> lens = io.get("src_lens").to_int_vector();
  for (size_t b = 0; b < lens.size(); ++b) {
    const auto row = flat.begin() + static_cast<int64_t>(b) * ids.size(1);
    in.ids.emplace_back(row, row + lens[b]);
  }
  in.speakers = io.get("speakers").to_int_vector();
  const std::vector<float> controls = io.get("controls").to_float_vector();
  in.controls = {controls[0], controls[1], controls[2]};
  return in;
}

// A batch of several lengths: the inputs' first sequence cut to each of `lengths` symbols, all
// with its first speaker.
struct PrefixBatch {
  std::vector<std::vector<int64_t>> ids;
  std::vector<int64_t> speakers;
};

PrefixBatch prefix_batch(const Inputs& in, std::initializer_list<size_t> lengths) {
  const std::vector<int64_t>& first = in.ids.front();
  PrefixBatch out;
  for (const size_t length : lengths) {
    out.ids.emplace_back(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(length));
  }
  out.speakers.assign(out.ids.size(), in.speakers.front());
  return out;
}

// A fixture's acoustic model loaded on a runner's context, and its inputs.
struct LoadedFixture {
  std::shared_ptr<SafetensorsFile> weights;  // made first, gone last: the model may view it
  FastSpeech2 model;
  Inputs in;
};

LoadedFixture load_fixture(Runner& dev, const std::string& fixture) {
  std::shared_ptr<SafetensorsFile> weights =
      SafetensorsFile::open(kFixtures + fixture + "/acoustic.safetensors");
  const SafetensorsFile& file = *weights;
  const auto io = SafetensorsFile::open(kFixtures + fixture + "/io.safetensors");
  return {std::move(weights), FastSpeech2::load(dev.ctx, read_config(fixture), file),
          read_inputs(*io)};
}

class FastSpeech2Parity : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(FastSpeech2Parity, MatchesReference) {
  const auto& [fixture, backend] = GetParam();
  Runner dev(backend);
  auto weights = SafetensorsFile::open(kFixtures + fixture + "/acoustic.safetensors");
  auto io = SafetensorsFile::open(kFixtures + fixture + "/io.safetensors");
  const FastSpeech2 model = FastSpeech2::load(dev.ctx, read_config(fixture), *weights);
  const Inputs in = read_inputs(*io);

  FastSpeech2Debug debug;
  const AcousticOutput out = model.forward(dev.ctx, in.ids, in.speakers, in.controls, &debug);

  EXPECT_EQ(out.mel_lengths, io->get("mel_lens").to_int_vector());
  const Tensor durations = io->get("durations");
  const std::vector<int64_t> expected_durations = durations.to_int_vector();
  const std::vector<float> expected_rounded = io->get("d_rounded").to_float_vector();
  ASSERT_EQ(out.durations.size(), in.ids.size());
  for (size_t b = 0; b < in.ids.size(); ++b) {
    ASSERT_EQ(out.durations[b].size(), in.ids[b].size());
    for (size_t t = 0; t < in.ids[b].size(); ++t) {
      const size_t at = b * static_cast<size_t>(durations.size(1)) + t;
      EXPECT_EQ(out.durations[b][t], expected_durations[at]) << "sequence " << b << " row " << t;
      EXPECT_EQ(debug.rounded_durations[b][t], expected_rounded[at])
          << "sequence " << b << " row " << t;
    }
  }

  const std::vector<std::pair<std::string, Tensor>> compared = {{"log_d", debug.log_durations},
                                                                {"pitch", debug.pitch},
                                                                {"energy", debug.energy},
                                                                {"mel", debug.mel_before_postnet},
                                                                {"postnet_mel", out.mel}};
  std::string report = fixture + " on " + backend + ": max abs error";
  for (const auto& [name, actual] : compared) {
    const float err = max_abs_diff(ops::to_host(dev.ctx, actual), io->get(name));
    EXPECT_LE(err, kTolerance) << name;
    char value[32];
    std::snprintf(value, sizeof(value), " %s %.1e", name.c_str(), static_cast<double>(err));
    report += value;
  }
  std::cout << report << "\n";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FastSpeech2Parity,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values("reference", "cpu")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

// ming024 scales the energy prediction by p_control: e_control changes nothing.
TEST(FastSpeech2, EnergyScaleIsIgnoredAsInTheOriginal) {
  Runner dev("reference");
  auto weights = SafetensorsFile::open(kFixtures + "controls/acoustic.safetensors");
  auto io = SafetensorsFile::open(kFixtures + "controls/io.safetensors");
  const FastSpeech2 model = FastSpeech2::load(dev.ctx, read_config("controls"), *weights);
  Inputs in = read_inputs(*io);
  in.controls.energy_scale = 3.0f;
  const AcousticOutput out = model.forward(dev.ctx, in.ids, in.speakers, in.controls);
  EXPECT_LE(max_abs_diff(ops::to_host(dev.ctx, out.mel), io->get("postnet_mel")), kTolerance);
}

// --- config errors ---------------------------------------------------------------------------

void expect_config_error(const json& config, const std::string& needle) {
  try {
    FastSpeech2Config::from_json(config, "voice/config.json: acoustic");
    FAIL() << "expected an InputError mentioning " << needle;
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("voice/config.json: acoustic"), std::string::npos) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  }
}

TEST(FastSpeech2Config, ParsesTheAcousticSection) {
  const FastSpeech2Config c = read_config("batch");
  EXPECT_EQ(c.encoder_hidden, 32);
  EXPECT_EQ(c.decoder_layers, 2);
  EXPECT_EQ(c.conv_kernel_size[0], 9);
  EXPECT_EQ(c.n_bins, 16);
  EXPECT_TRUE(c.multi_speaker);
  EXPECT_EQ(c.pitch_feature_level, FeatureLevel::Phoneme);
  EXPECT_EQ(c.energy_feature_level, FeatureLevel::Frame);
  EXPECT_EQ(c.energy_quantization, Quantization::Log);
  ASSERT_TRUE(c.energy_stats.has_value());
  EXPECT_DOUBLE_EQ((*c.energy_stats)[1], 20.0);
  EXPECT_EQ(c.n_mels, 80);
}

TEST(FastSpeech2Config, ErrorsNameTheField) {
  const json base = read_json(kFixtures + "single_phoneme_linear/config.json");
  json c = base;
  c["model"]["transformer"].erase("encoder_hidden");
  expect_config_error(c, "model.transformer.encoder_hidden");
  c = base;
  c["model"]["transformer"]["decoder_head"] = "two";
  expect_config_error(c, "model.transformer.decoder_head");
  c = base;
  c["model"]["transformer"]["conv_kernel_size"] = {9};
  expect_config_error(c, "conv_kernel_size");
  c = base;
  c["model"]["transformer"]["conv_kernel_size"] = {8, 1};
  expect_config_error(c, "conv_kernel_size[0]");
  c = base;
  c["model"]["variance_predictor"]["kernel_size"] = 5;
  expect_config_error(c, "model.variance_predictor.kernel_size");
  c = base;
  c["model"]["variance_embedding"]["pitch_quantization"] = "cubic";
  expect_config_error(c, "model.variance_embedding.pitch_quantization");
  c = base;
  c["pitch_feature_level"] = "word_level";
  expect_config_error(c, "pitch_feature_level");
  c = base;
  c.erase("energy_feature_level");
  expect_config_error(c, "energy_feature_level");
  c = base;
  c["model"]["multi_speaker"] = 1;
  expect_config_error(c, "model.multi_speaker");
  c = base;
  c["model"]["transformer"]["decoder_hidden"] = 64;
  expect_config_error(c, "decoder_hidden");
  c = base;
  c["model"]["variance_embedding"]["energy_quantization"] = "log";
  expect_config_error(c, "stats.energy");  // min -1.431 cannot be log-quantized
  c = base;
  c["stats"]["pitch"] = {1.0};
  expect_config_error(c, "stats.pitch");
}

// --- weight errors ---------------------------------------------------------------------------

std::string load_error(const std::map<std::string, Tensor>& state,
                       const FastSpeech2Config& config) {
  Runner dev("reference");
  try {
    FastSpeech2::load(dev.ctx, config, TensorMapSource(state, "test weights"));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FastSpeech2Weights, MissingTensorIsNamed) {
  const FastSpeech2Config config = read_config("batch");
  for (const std::string name :
       {"encoder.layer_stack.1.slf_attn.w_ks.bias", "variance_adaptor.energy_bins",
        "decoder.position_enc", "postnet.convolutions.2.1.running_var", "speaker_emb.weight",
        "variance_adaptor.pitch_predictor.conv_layer.conv1d_2.conv.weight"}) {
    auto state = read_state("batch");
    ASSERT_EQ(state.erase(name), 1u) << name;
    const std::string message = load_error(state, config);
    EXPECT_NE(message.find("'" + name + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("test weights"), std::string::npos) << message;
  }
}

TEST(FastSpeech2Weights, WrongShapeIsNamed) {
  FastSpeech2Config config = read_config("single_phoneme_linear");
  auto state = read_state("single_phoneme_linear");
  state["decoder.layer_stack.0.pos_ffn.w_1.weight"] = Tensor::zeros({64, 32, 3}, DType::F32);
  std::string message = load_error(state, config);
  EXPECT_NE(message.find("'decoder.layer_stack.0.pos_ffn.w_1.weight'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("[64, 32, 3]"), std::string::npos) << message;
  EXPECT_NE(message.find("[64, 32, 9]"), std::string::npos) << message;

  // A config that disagrees with the checkpoint's mel channels.
  config.n_mels = 40;
  message = load_error(read_state("single_phoneme_linear"), config);
  EXPECT_NE(message.find("'mel_linear.weight'"), std::string::npos) << message;

  // Bins that torch.bucketize could not use.
  state = read_state("single_phoneme_linear");
  std::vector<float> bins = state["variance_adaptor.pitch_bins"].to_float_vector();
  std::swap(bins[3], bins[4]);
  state["variance_adaptor.pitch_bins"] = Tensor::from_vector({15}, bins);
  message = load_error(state, read_config("single_phoneme_linear"));
  EXPECT_NE(message.find("'variance_adaptor.pitch_bins'"), std::string::npos) << message;
}

TEST(FastSpeech2Weights, SpeakerCountComesFromWeightsOrConfig) {
  Runner dev("reference");
  auto weights = SafetensorsFile::open(kFixtures + "batch/acoustic.safetensors");
  FastSpeech2Config config = read_config("batch");
  EXPECT_EQ(FastSpeech2::load(dev.ctx, config, *weights).n_speakers(), 3);
  EXPECT_EQ(FastSpeech2::load(dev.ctx, config, *weights).n_symbols(), 48);
  config.n_speakers = 5;
  EXPECT_THROW(FastSpeech2::load(dev.ctx, config, *weights), Error);
}

// --- input errors ----------------------------------------------------------------------------

void expect_input_error(const FastSpeech2& model, Context& ctx,
                        const std::vector<std::vector<int64_t>>& ids,
                        const std::vector<int64_t>& speakers, const std::string& needle) {
  try {
    model.forward(ctx, ids, speakers, {});
    FAIL() << "expected an InputError mentioning " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(FastSpeech2Inputs, OutOfRangeIdsAndSpeakersThrowInputError) {
  Runner dev("reference");
  auto weights = SafetensorsFile::open(kFixtures + "batch/acoustic.safetensors");
  const FastSpeech2 multi = FastSpeech2::load(dev.ctx, read_config("batch"), *weights);
  expect_input_error(multi, dev.ctx, {{3, 4, 48, 5}}, {0}, "symbol id 48");
  expect_input_error(multi, dev.ctx, {{3, 4}, {-1}}, {0, 1}, "symbol id -1");
  expect_input_error(multi, dev.ctx, {{3, 4}}, {3}, "speaker id 3");
  expect_input_error(multi, dev.ctx, {{3, 4}}, {-2}, "speaker id -2");
  expect_input_error(multi, dev.ctx, {{3, 4}, {5}}, {0}, "1 speakers for 2 sequences");
  expect_input_error(multi, dev.ctx, {{3, 4}, {}}, {}, "sequence 1 is empty");
  expect_input_error(multi, dev.ctx, {}, {}, "no sequences");

  auto single_weights = SafetensorsFile::open(kFixtures + "controls/acoustic.safetensors");
  const FastSpeech2 single = FastSpeech2::load(dev.ctx, read_config("controls"), *single_weights);
  EXPECT_EQ(single.n_speakers(), 1);
  expect_input_error(single, dev.ctx, {{3, 4}}, {1}, "speaker id 1");
}

// Durations that all truncate to zero give an empty mel (the original fails in its postnet).
TEST(FastSpeech2Inputs, ZeroFramesGiveAnEmptyMel) {
  Runner dev("reference");
  auto weights = SafetensorsFile::open(kFixtures + "single_phoneme_linear/acoustic.safetensors");
  const FastSpeech2 model =
      FastSpeech2::load(dev.ctx, read_config("single_phoneme_linear"), *weights);
  SynthesisControls controls;
  controls.duration_scale = 0.01f;
  const AcousticOutput out = model.forward(dev.ctx, {{5, 6, 7}}, {}, controls);
  EXPECT_EQ(out.mel_lengths, std::vector<int64_t>{0});
  EXPECT_EQ(out.mel.shape(), (Shape{1, 0, 80}));
  EXPECT_EQ(out.durations, (std::vector<std::vector<int64_t>>{{0, 0, 0}}));
}

// Forced durations: the fixture's own durations give the fixture's outputs (on both backends);
// others drive the length regulator as given, with duration_scale not applied, while debug keeps
// the predicted durations.
TEST(FastSpeech2ForcedDurations, ReplaceThePrediction) {
  for (const std::string backend : {"reference", "cpu"}) {
    Runner dev(backend);
    auto weights = SafetensorsFile::open(kFixtures + "batch/acoustic.safetensors");
    auto io = SafetensorsFile::open(kFixtures + "batch/io.safetensors");
    const FastSpeech2 model = FastSpeech2::load(dev.ctx, read_config("batch"), *weights);
    const Inputs in = read_inputs(*io);
    const Tensor durations = io->get("durations");
    const std::vector<int64_t> flat = durations.to_int_vector();
    const std::vector<float> expected_rounded = io->get("d_rounded").to_float_vector();
    std::vector<std::vector<int64_t>> forced;
    for (size_t b = 0; b < in.ids.size(); ++b) {
      const auto row = flat.begin() + static_cast<int64_t>(b) * durations.size(1);
      forced.emplace_back(row, row + static_cast<int64_t>(in.ids[b].size()));
    }
    FastSpeech2Debug debug;
    const AcousticOutput same =
        model.forward(dev.ctx, in.ids, in.speakers, in.controls, &debug, forced);
    EXPECT_EQ(same.durations, forced) << backend;
    EXPECT_EQ(same.mel_lengths, io->get("mel_lens").to_int_vector()) << backend;
    EXPECT_LE(max_abs_diff(ops::to_host(dev.ctx, same.mel), io->get("postnet_mel")), kTolerance)
        << backend;
    EXPECT_LE(max_abs_diff(ops::to_host(dev.ctx, debug.pitch), io->get("pitch")), kTolerance);
    EXPECT_LE(max_abs_diff(ops::to_host(dev.ctx, debug.energy), io->get("energy")), kTolerance);

    // Two frames per symbol, and a duration_scale that would change predicted durations.
    SynthesisControls controls = in.controls;
    controls.duration_scale = 3.0f;
    std::vector<std::vector<int64_t>> twos;
    for (const auto& seq : in.ids) twos.emplace_back(seq.size(), 2);
    FastSpeech2Debug twos_debug;
    const AcousticOutput out =
        model.forward(dev.ctx, in.ids, in.speakers, controls, &twos_debug, twos);
    EXPECT_EQ(out.durations, twos) << backend;
    const std::vector<int64_t> lens = {2 * static_cast<int64_t>(in.ids[0].size()),
                                       2 * static_cast<int64_t>(in.ids[1].size())};
    EXPECT_EQ(out.mel_lengths, lens) << backend;
    EXPECT_EQ(out.mel.shape(), (Shape{2, lens[0], 80})) << backend;
    // The predicted durations are still reported (the second time scaled by 3).
    const std::vector<float> log_d =
        ops::to_host(dev.ctx, twos_debug.log_durations).to_float_vector();
    for (size_t b = 0; b < in.ids.size(); ++b) {
      for (size_t t = 0; t < in.ids[b].size(); ++t) {
        const size_t at = b * static_cast<size_t>(durations.size(1)) + t;
        EXPECT_EQ(debug.rounded_durations[b][t], expected_rounded[at]);
        EXPECT_EQ(twos_debug.rounded_durations[b][t],
                  std::max(std::nearbyint(std::exp(log_d[at]) - 1.0f) * 3.0f, 0.0f))
            << "sequence " << b << " row " << t;
      }
    }
  }
}

TEST(FastSpeech2ForcedDurations, BadListsThrowInputError) {
  Runner dev("reference");
  auto weights = SafetensorsFile::open(kFixtures + "single_phoneme_linear/acoustic.safetensors");
  const FastSpeech2 model =
      FastSpeech2::load(dev.ctx, read_config("single_phoneme_linear"), *weights);
  const auto expect_error = [&](const std::vector<std::vector<int64_t>>& ids,
                                const std::vector<std::vector<int64_t>>& forced,
                                const std::string& needle) {
    try {
      model.forward(dev.ctx, ids, {}, {}, nullptr, forced);
      FAIL() << "expected an InputError mentioning " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({{5, 6}}, {{1, 1}, {1}}, "2 forced duration lists for 1 sequences");
  expect_error({{5, 6}, {7}}, {{1, 1}, {1, 2}}, "2 forced durations for sequence 1 of 1 symbols");
  expect_error({{5, 6}}, {{1, -1}}, "forced duration -1 at position 1 of sequence 0");
  // All zero: an empty mel, as with predicted durations that truncate to zero.
  const AcousticOutput out = model.forward(dev.ctx, {{5, 6, 7}}, {}, {}, nullptr, {{0, 0, 0}});
  EXPECT_EQ(out.mel.shape(), (Shape{1, 0, 80}));
}

// --- forced pitch and energy -------------------------------------------------------------------

// Rows [b, 0, lengths[b]) of a padded [B, R] host tensor, one list per sequence.
std::vector<std::vector<float>> unpad(const Tensor& padded, const std::vector<int64_t>& lengths) {
  const std::vector<float> flat = padded.to_float_vector();
  std::vector<std::vector<float>> rows;
  for (size_t b = 0; b < lengths.size(); ++b) {
    const auto row = flat.begin() + static_cast<int64_t>(b) * padded.size(1);
    rows.emplace_back(row, row + lengths[b]);
  }
  return rows;
}

// The sequences' lengths at a feature's level: symbols or frames.
std::vector<int64_t> feature_lengths(FeatureLevel level, const Inputs& in,
                                     const AcousticOutput& out) {
  if (level == FeatureLevel::Frame) return out.mel_lengths;
  std::vector<int64_t> lengths;
  for (const auto& seq : in.ids) lengths.push_back(static_cast<int64_t>(seq.size()));
  return lengths;
}

// A value torch.bucketize(·, bins) puts into `bucket` (0 .. bins.size()): below the first
// boundary, between two, or above the last.
float value_in_bucket(const std::vector<float>& bins, int64_t bucket) {
  const auto i = static_cast<size_t>(bucket);
  if (i == 0) return bins.front() - 1.0f;
  if (i == bins.size()) return bins.back() + 1.0f;
  return 0.5f * (bins[i - 1] + bins[i]);
}

// `buckets` (I64 [B, R]) unpadded, each index replaced by value_in_bucket(bins, f(index)).
std::vector<std::vector<float>> values_in_buckets(const Tensor& buckets,
                                                  const std::vector<int64_t>& lengths,
                                                  const std::vector<float>& bins,
                                                  const std::function<int64_t(int64_t)>& f) {
  const std::vector<int64_t> flat = buckets.to_int_vector();
  std::vector<std::vector<float>> rows(lengths.size());
  for (size_t b = 0; b < lengths.size(); ++b) {
    for (int64_t t = 0; t < lengths[b]; ++t) {
      const int64_t index =
          flat[static_cast<size_t>(static_cast<int64_t>(b) * buckets.size(1) + t)];
      rows[b].push_back(value_in_bucket(bins, f(index)));
    }
  }
  return rows;
}

// One fixture's model, inputs and unforced forward on the reference backend.
struct ForcingCase {
  Runner dev{"reference"};
  FastSpeech2Config config;
  std::map<std::string, Tensor> state;
  FastSpeech2 model;
  Inputs in;
  FastSpeech2Debug debug;
  AcousticOutput out;

  explicit ForcingCase(const std::string& fixture)
      : config(read_config(fixture)),
        state(read_state(fixture)),
        model(FastSpeech2::load(dev.ctx, config, TensorMapSource(state, fixture))),
        in(read_inputs(*SafetensorsFile::open(kFixtures + fixture + "/io.safetensors"))),
        out(model.forward(dev.ctx, in.ids, in.speakers, in.controls, &debug)) {}

  std::vector<float> bins(const std::string& feature) const {
    return state.at("variance_adaptor." + feature + "_bins").to_float_vector();
  }
  std::vector<int64_t> pitch_lengths() const {
    return feature_lengths(config.pitch_feature_level, in, out);
  }
  std::vector<int64_t> energy_lengths() const {
    return feature_lengths(config.energy_feature_level, in, out);
  }
  AcousticOutput forward(const ForcedFeatures& forced, FastSpeech2Debug* forced_debug) const {
    Context ctx = dev.ctx;
    return model.forward(ctx, in.ids, in.speakers, in.controls, forced_debug, {}, forced);
  }
};

// Forcing the values the model predicts itself, or any values in the same bins, gives the
// unforced output to the bit: the forced values reach the model only through bucketize. Every
// fixture: phoneme- and frame-level features, linear and log bins, controls, a batch.
TEST(FastSpeech2ForcedFeatures, ValuesInThePredictedBinsGiveTheSameOutput) {
  for (const std::string& fixture : kCases) {
    const ForcingCase c(fixture);
    const std::vector<ForcedFeatures> same_bins = {
        {unpad(c.debug.pitch, c.pitch_lengths()), unpad(c.debug.energy, c.energy_lengths())},
        {values_in_buckets(c.debug.pitch_buckets, c.pitch_lengths(), c.bins("pitch"),
                           [](int64_t i) { return i; }),
         values_in_buckets(c.debug.energy_buckets, c.energy_lengths(), c.bins("energy"),
                           [](int64_t i) { return i; })}};
    EXPECT_NE(same_bins[1].pitch, same_bins[0].pitch) << fixture;
    EXPECT_NE(same_bins[1].energy, same_bins[0].energy) << fixture;
    for (const ForcedFeatures& forced : same_bins) {
      FastSpeech2Debug debug;
      const AcousticOutput out = c.forward(forced, &debug);
      EXPECT_EQ(out.durations, c.out.durations) << fixture;
      EXPECT_EQ(out.mel.to_float_vector(), c.out.mel.to_float_vector()) << fixture;
      EXPECT_EQ(debug.pitch.to_float_vector(), c.debug.pitch.to_float_vector()) << fixture;
      EXPECT_EQ(debug.energy.to_float_vector(), c.debug.energy.to_float_vector()) << fixture;
      EXPECT_EQ(debug.pitch_buckets.to_int_vector(), c.debug.pitch_buckets.to_int_vector());
      EXPECT_EQ(debug.energy_buckets.to_int_vector(), c.debug.energy_buckets.to_int_vector());
    }
  }
}

// Forcing values in other bins changes exactly the embedding rows: the forced feature's buckets
// are those of the forced values, its prediction (and, for energy, pitch's) is unchanged, and the
// mel changes. In these fixtures pitch is added before energy, so forcing pitch may move the
// energy prediction, while forcing energy leaves both predictions as they were.
TEST(FastSpeech2ForcedFeatures, ValuesInOtherBinsChangeTheEmbeddingRows) {
  for (const std::string fixture : {"batch", "multi_frame_log"}) {
    const ForcingCase c(fixture);
    for (const std::string feature : {"pitch", "energy"}) {
      const bool pitch = feature == "pitch";
      const std::vector<float> bins = c.bins(feature);
      const auto next_bin = [&](int64_t i) {
        return (i + 1) % static_cast<int64_t>(bins.size() + 1);
      };
      const std::vector<int64_t> lengths = pitch ? c.pitch_lengths() : c.energy_lengths();
      const Tensor& own_buckets = pitch ? c.debug.pitch_buckets : c.debug.energy_buckets;
      ForcedFeatures forced;
      (pitch ? forced.pitch : forced.energy) =
          values_in_buckets(own_buckets, lengths, bins, next_bin);
      FastSpeech2Debug debug;
      const AcousticOutput out = c.forward(forced, &debug);
      const Tensor& buckets = pitch ? debug.pitch_buckets : debug.energy_buckets;
      const std::vector<int64_t> want = own_buckets.to_int_vector();
      const std::vector<int64_t> got = buckets.to_int_vector();
      ASSERT_EQ(got.size(), want.size()) << fixture << " " << feature;
      for (size_t b = 0; b < lengths.size(); ++b) {
        for (int64_t t = 0; t < lengths[b]; ++t) {
          const auto at = static_cast<size_t>(static_cast<int64_t>(b) * buckets.size(1) + t);
          EXPECT_EQ(got[at], next_bin(want[at])) << fixture << " " << feature << " " << b;
        }
      }
      EXPECT_EQ(debug.pitch.to_float_vector(), c.debug.pitch.to_float_vector()) << fixture;
      if (!pitch) {
        EXPECT_EQ(debug.energy.to_float_vector(), c.debug.energy.to_float_vector()) << fixture;
      }
      EXPECT_EQ(out.durations, c.out.durations) << fixture;
      EXPECT_GT(max_abs_diff(out.mel, c.out.mel), 1e-3f) << fixture << " " << feature;
    }
  }
}

TEST(FastSpeech2ForcedFeatures, BadListsThrowInputError) {
  const ForcingCase c("batch");  // pitch per symbol, energy per frame; two sequences
  const std::vector<std::vector<float>> pitch = unpad(c.debug.pitch, c.pitch_lengths());
  const std::vector<std::vector<float>> energy = unpad(c.debug.energy, c.energy_lengths());
  const auto expect_error = [&](const ForcedFeatures& forced, const std::string& needle) {
    try {
      c.forward(forced, nullptr);
      FAIL() << "expected an InputError mentioning " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({{pitch[0]}, {}}, "1 forced pitch lists for 2 sequences");
  std::vector<std::vector<float>> short_pitch = pitch;
  short_pitch[1].pop_back();
  expect_error({short_pitch, {}}, std::to_string(pitch[1].size() - 1) +
                                      " forced pitch values for sequence 1 of " +
                                      std::to_string(pitch[1].size()) + " symbols");
  std::vector<std::vector<float>> long_energy = energy;
  long_energy[0].push_back(1.0f);
  expect_error({{}, long_energy}, std::to_string(energy[0].size() + 1) +
                                      " forced energy values for sequence 0 of " +
                                      std::to_string(energy[0].size()) + " frames");
  std::vector<std::vector<float>> nan_pitch = pitch;
  nan_pitch[1][0] = NAN;
  expect_error({nan_pitch, {}}, "forced pitch value nan at position 0 of sequence 1");
}

// With mask_padding, each sequence of a batch of several lengths gets the mel (and durations)
// it gets alone; without it (the original's behaviour) padding reaches a shorter sequence's
// output, so the masks are what makes ragged batches safe for a server.
TEST(FastSpeech2Batching, MaskedPaddingGivesEachSequenceItsOwnOutput) {
  Runner dev("cpu");
  for (const std::string fixture : {"batch", "multi_frame_log", "controls"}) {
    SCOPED_TRACE(fixture);
    LoadedFixture loaded = load_fixture(dev, fixture);
    const FastSpeech2& model = loaded.model;
    Inputs& in = loaded.in;
    const std::vector<int64_t>& longest = in.ids.front();
    ASSERT_GE(longest.size(), 8u);
    const PrefixBatch prefixed =
        prefix_batch(in, {longest.size(), longest.size() * 3 / 4, longest.size() / 2});
    const auto& [ids, speakers] = prefixed;
    float unmasked_worst = 0.0f;
    for (const bool mask : {true, false}) {
      in.controls.mask_padding = mask;
      const AcousticOutput batch = model.forward(dev.ctx, ids, speakers, in.controls);
      for (size_t b = 0; b < ids.size(); ++b) {
        const AcousticOutput alone = model.forward(dev.ctx, {ids[b]}, {speakers[b]}, in.controls);
        const int64_t frames = alone.mel_lengths.front();
        if (mask) {
          EXPECT_EQ(batch.durations[b], alone.durations.front()) << "sequence " << b;
          ASSERT_EQ(batch.mel_lengths[b], frames) << "sequence " << b;
        }
        if (batch.mel_lengths[b] != frames) {
          unmasked_worst = INFINITY;
          continue;
        }
        const float worst =
            max_abs_diff(batch.mel.select(0, static_cast<int64_t>(b)).narrow(0, 0, frames),
                         alone.mel.select(0, 0).narrow(0, 0, frames));
        if (mask) {
          EXPECT_LE(worst, 1e-5f) << "sequence " << b;
        } else {
          unmasked_worst = std::max(unmasked_worst, worst);
        }
      }
    }
    EXPECT_GT(unmasked_worst, 1e-3f) << "padding no longer reaches the unmasked outputs";
  }
}

// Padding the whole batch past its longest sequence (pad_to_phonemes, pad_to_frames: how a server
// makes steps of nearby lengths share one shape) changes no sequence's durations or mel; the
// output has the padded frame count; padding without the masks is refused.
TEST(FastSpeech2Batching, PaddingToFixedLengthsChangesNoOutput) {
  Runner dev("cpu");
  for (const std::string fixture : {"batch", "multi_frame_log", "controls"}) {
    SCOPED_TRACE(fixture);
    LoadedFixture loaded = load_fixture(dev, fixture);
    const FastSpeech2& model = loaded.model;
    Inputs& in = loaded.in;
    const std::vector<int64_t>& longest = in.ids.front();
    const PrefixBatch prefixed = prefix_batch(in, {longest.size(), longest.size() / 2});
    const auto& [ids, speakers] = prefixed;
    in.controls.mask_padding = true;
    const AcousticOutput tight = model.forward(dev.ctx, ids, speakers, in.controls);
    const int64_t tight_frames = tight.mel.size(1);
    SynthesisControls padded_controls = in.controls;
    padded_controls.pad_to_phonemes = static_cast<int64_t>(longest.size()) + 7;
    padded_controls.pad_to_frames = tight_frames + 29;
    const AcousticOutput padded = model.forward(dev.ctx, ids, speakers, padded_controls);
    EXPECT_EQ(padded.mel.size(1), tight_frames + 29);
    EXPECT_EQ(padded.durations, tight.durations);
    ASSERT_EQ(padded.mel_lengths, tight.mel_lengths);
    for (size_t b = 0; b < ids.size(); ++b) {
      const int64_t frames = tight.mel_lengths[b];
      EXPECT_LE(max_abs_diff(padded.mel.select(0, static_cast<int64_t>(b)).narrow(0, 0, frames),
                             tight.mel.select(0, static_cast<int64_t>(b)).narrow(0, 0, frames)),
                1e-5f)
          << "sequence " << b;
    }
    SynthesisControls unmasked = padded_controls;
    unmasked.mask_padding = false;
    EXPECT_THROW((void)model.forward(dev.ctx, ids, speakers, unmasked), InputError);
    SynthesisControls negative = in.controls;
    negative.pad_to_frames = -1;
    EXPECT_THROW((void)model.forward(dev.ctx, ids, speakers, negative), InputError);
  }
}

// encode then decode is forward, to the bit, on every fixture (frame- and phoneme-level
// features, one and several speakers), with the encoder's hidden states handed over through
// another allocator; decode names a malformed encoding.
TEST(FastSpeech2Steps, EncodeThenDecodeIsForward) {
  Runner dev("cpu");
  for (const std::string& fixture : kCases) {
    const LoadedFixture loaded = load_fixture(dev, fixture);
    const FastSpeech2& model = loaded.model;
    const Inputs& in = loaded.in;
    FastSpeech2Debug whole_debug;
    const AcousticOutput whole =
        model.forward(dev.ctx, in.ids, in.speakers, in.controls, &whole_debug);

    FastSpeech2Debug debug;
    AcousticEncoding encoding = model.encode(dev.ctx, in.ids, in.speakers, in.controls, &debug);
    EXPECT_EQ(encoding.durations, whole.durations) << fixture;
    EXPECT_EQ(encoding.mel_lengths, whole.mel_lengths) << fixture;
    EXPECT_EQ(encoding.src_lengths.size(), in.ids.size()) << fixture;
    const int64_t longest = static_cast<int64_t>(
        std::max_element(in.ids.begin(), in.ids.end(), [](const auto& a, const auto& b) {
          return a.size() < b.size();
        })->size());
    EXPECT_EQ(encoding.hidden.shape(),
              (Shape{static_cast<int64_t>(in.ids.size()), longest, model.config().encoder_hidden}))
        << fixture;
    encoding.hidden = ops::to_device(dev.ctx, encoding.hidden);  // a copy elsewhere does too
    const AcousticOutput split = model.decode(dev.ctx, encoding, in.controls, &debug);
    EXPECT_EQ(split.durations, whole.durations) << fixture;
    EXPECT_EQ(split.mel_lengths, whole.mel_lengths) << fixture;
    EXPECT_EQ(split.mel.to_float_vector(), whole.mel.to_float_vector()) << fixture;
    EXPECT_EQ(debug.pitch.to_float_vector(), whole_debug.pitch.to_float_vector()) << fixture;
    EXPECT_EQ(debug.energy.to_float_vector(), whole_debug.energy.to_float_vector()) << fixture;
    EXPECT_EQ(debug.mel_before_postnet.to_float_vector(),
              whole_debug.mel_before_postnet.to_float_vector())
        << fixture;
    EXPECT_EQ(debug.rounded_durations, whole_debug.rounded_durations) << fixture;
  }
}

// The parts a recorded step runs (encode_on_device, durations_from, decode_on_device), on inputs
// padded to fixed lengths and handed over as tensors, give forward's durations and mel with the
// same padding, to the bit, on every fixture that fits max_seq_len, and refuse the others.
TEST(FastSpeech2Steps, OnDevicePartsGiveForwardsOutput) {
  for (const std::string backend : {"cpu", "reference"}) {
    Runner dev(backend);
    for (const std::string& fixture : kCases) {
      SCOPED_TRACE(backend + " " + fixture);
      LoadedFixture loaded = load_fixture(dev, fixture);
      const FastSpeech2& model = loaded.model;
      Inputs& in = loaded.in;
      in.controls.mask_padding = true;
      const std::vector<int64_t> lengths = model.check_sequences(in.ids, in.speakers);
      const auto batch = static_cast<int64_t>(in.ids.size());
      const int64_t symbols = *std::max_element(lengths.begin(), lengths.end()) + 5;
      std::vector<int64_t> padded(static_cast<size_t>(batch * symbols), 0);
      for (size_t b = 0; b < in.ids.size(); ++b) {
        std::copy(in.ids[b].begin(), in.ids[b].end(),
                  padded.begin() + static_cast<int64_t>(b) * symbols);
      }
      std::vector<int64_t> speakers = in.speakers;
      speakers.resize(in.ids.size(), 0);
      const auto on_device = [&](const Tensor& values) {
        return ops::to_device(dev.ctx, values, DType::I64);
      };
      const Tensor ids_tensor = on_device(Tensor::from_vector({batch, symbols}, padded));
      const Tensor length_tensor = on_device(Tensor::from_vector({batch}, lengths));
      const Tensor speaker_tensor = on_device(Tensor::from_vector({batch}, speakers));
      if (symbols > model.config().max_seq_len) {
        EXPECT_THROW((void)model.encode_on_device(dev.ctx, ids_tensor, length_tensor,
                                                  speaker_tensor, in.controls),
                     InputError);
        continue;
      }
      const DeviceEncoding encoded =
          model.encode_on_device(dev.ctx, ids_tensor, length_tensor, speaker_tensor, in.controls);
      std::vector<std::vector<float>> rounded;
      const AcousticEncoding encoding = model.durations_from(
          ops::to_host(dev.ctx, encoded.log_durations), lengths, in.controls, &rounded);
      const int64_t frames =
          *std::max_element(encoding.mel_lengths.begin(), encoding.mel_lengths.end()) + 11;

      SynthesisControls padding = in.controls;
      padding.pad_to_phonemes = symbols;
      padding.pad_to_frames = frames;
      FastSpeech2Debug debug;
      const AcousticOutput whole = model.forward(dev.ctx, in.ids, in.speakers, padding, &debug);
      EXPECT_EQ(encoding.durations, whole.durations);
      EXPECT_EQ(encoding.mel_lengths, whole.mel_lengths);
      EXPECT_EQ(rounded, debug.rounded_durations);
      EXPECT_EQ(ops::to_host(dev.ctx, encoded.log_durations).to_float_vector(),
                ops::to_host(dev.ctx, debug.log_durations).to_float_vector());

      const Tensor rows = Tensor::from_vector(
          {batch, frames}, ops::length_regulation_rows(encoding.durations, symbols, frames));
      const Tensor mel_lengths = Tensor::from_vector({batch}, encoding.mel_lengths);
      if (frames > model.config().max_seq_len) {
        EXPECT_THROW(
            (void)model.decode_on_device(dev.ctx, encoded.hidden, rows, mel_lengths, in.controls),
            InputError);
        continue;
      }
      const Tensor mel = model.decode_on_device(dev.ctx, encoded.hidden, on_device(rows),
                                                on_device(mel_lengths), in.controls);
      EXPECT_EQ(mel.shape(), whole.mel.shape());
      EXPECT_EQ(ops::to_host(dev.ctx, mel).to_float_vector(), whole.mel.to_float_vector());
    }
  }
}

TEST(FastSpeech2Steps, OnDevicePartsNameWhatIsWrong) {
  Runner dev("reference");
  auto weights = SafetensorsFile::open(kFixtures + "single_phoneme_linear/acoustic.safetensors");
  const FastSpeech2 model =
      FastSpeech2::load(dev.ctx, read_config("single_phoneme_linear"), *weights);
  const auto i64 = [](const Shape& shape) {
    return Tensor::from_vector(shape,
                               std::vector<int64_t>(static_cast<size_t>(shape_numel(shape))));
  };
  SynthesisControls masked;
  masked.mask_padding = true;
  const auto expect_error = [](const std::function<void()>& call, const std::string& needle) {
    try {
      call();
      FAIL() << "expected an InputError mentioning " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { model.encode_on_device(dev.ctx, i64({2}), i64({2}), i64({2}), masked); },
               "ids must be contiguous I64 [B, T]");
  expect_error(
      [&] {
        model.encode_on_device(dev.ctx, i64({2, 3}), i64({3}), i64({2}), masked);
      },
      "lengths must be contiguous I64 [2]");
  expect_error(
      [&] {
        model.decode_on_device(dev.ctx, ops::zeros(dev.ctx, {1, 3, 5}), i64({1, 4}), i64({1}),
                               masked);
      },
      "hidden must be contiguous [B, T, " + std::to_string(model.config().encoder_hidden) + "]");
  const Tensor hidden = ops::zeros(dev.ctx, {1, 3, model.config().encoder_hidden});
  expect_error(
      [&] {
        model.decode_on_device(dev.ctx, hidden, i64({1, 0}), i64({1}), masked);
      },
      "frame_rows must be contiguous I64 [1, F >= 1]");
  expect_error(
      [&] {
        model.decode_on_device(dev.ctx, hidden, i64({1, 4}), i64({2}), masked);
      },
      "mel_lengths must be contiguous I64 [1]");
  EXPECT_THROW((void)model.durations_from(Tensor::from_vector({1, 2}, std::vector<float>{0, 0}),
                                          {3}, masked),
               Error);
}

TEST(FastSpeech2Steps, DecodeRejectsAMalformedEncoding) {
  Runner dev("reference");
  auto weights = SafetensorsFile::open(kFixtures + "single_phoneme_linear/acoustic.safetensors");
  const FastSpeech2 model =
      FastSpeech2::load(dev.ctx, read_config("single_phoneme_linear"), *weights);
  const AcousticEncoding good = model.encode(dev.ctx, {{5, 6, 7}}, {}, {});
  const auto expect_error = [&](const AcousticEncoding& encoding, const std::string& needle) {
    try {
      model.decode(dev.ctx, encoding, {});
      FAIL() << "expected an Error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(AcousticEncoding{}, "undefined");
  AcousticEncoding narrow = good;
  narrow.hidden = ops::zeros(dev.ctx, {1, 3, 5});
  expect_error(narrow, "expected [B, T, " + std::to_string(model.config().encoder_hidden) + "]");
  AcousticEncoding short_lists = good;
  short_lists.mel_lengths.push_back(4);
  expect_error(short_lists, "2 entries in a per-sequence list");
}

}  // namespace
}  // namespace voxd
