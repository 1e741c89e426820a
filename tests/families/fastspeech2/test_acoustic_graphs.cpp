// AcousticGraphs on backends that cannot record graphs (cpu, reference): run() gives forward's
// durations and mel with the graphs' padding, bit for bit, forced durations included, holds no
// memory, and refuses bad input as forward does. The recorded path itself is tested on the GPU
// (tests/cuda/test_cuda_graphs.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "families/fastspeech2/acoustic_graphs.h"
#include "families/fastspeech2/fastspeech2.h"

namespace voxd {
namespace {

const std::string kFixtures = std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/fastspeech2/";

// The "batch" fixture (two speakers, sequences of several lengths) on one backend.
struct Fixture {
  explicit Fixture(const std::string& backend_name)
      : backend(make_backend(backend_name, 1)),
        ctx(*backend, host_allocator()),
        weights(SafetensorsFile::open(kFixtures + "batch/acoustic.safetensors")),
        model(FastSpeech2::load(ctx, config(), *weights)) {
    const auto io = SafetensorsFile::open(kFixtures + "batch/io.safetensors");
    const Tensor padded = io->get("ids");
    const std::vector<int64_t> flat = padded.to_int_vector();
    const std::vector<int64_t> lengths = io->get("src_lens").to_int_vector();
    for (size_t b = 0; b < lengths.size(); ++b) {
      const auto row = flat.begin() + static_cast<int64_t>(b) * padded.size(1);
      ids.emplace_back(row, row + lengths[b]);
    }
    speakers = io->get("speakers").to_int_vector();
  }

  static FastSpeech2Config config() {
    std::ifstream in(kFixtures + "batch/config.json");
    return FastSpeech2Config::from_json(nlohmann::json::parse(in), "batch");
  }

  // forward with the padding `graphs` gives a batch: padded() of the longest sequence and of the
  // longest mel.
  AcousticOutput padded_forward(const AcousticGraphs& graphs, const SynthesisControls& controls,
                                const std::vector<std::vector<int64_t>>& durations = {}) {
    SynthesisControls padded = controls;
    padded.mask_padding = true;
    size_t longest = 0;
    for (const auto& sequence : ids) longest = std::max(longest, sequence.size());
    padded.pad_to_phonemes = graphs.padded(static_cast<int64_t>(longest));
    const AcousticEncoding encoding = model.encode(ctx, ids, speakers, padded, nullptr, durations);
    padded.pad_to_frames =
        graphs.padded(*std::max_element(encoding.mel_lengths.begin(), encoding.mel_lengths.end()));
    return model.decode(ctx, encoding, padded);
  }

  std::unique_ptr<Backend> backend;
  Context ctx;
  std::shared_ptr<SafetensorsFile> weights;
  FastSpeech2 model;
  std::vector<std::vector<int64_t>> ids;
  std::vector<int64_t> speakers;
};

void expect_same(const AcousticOutput& got, const AcousticOutput& want) {
  EXPECT_EQ(got.durations, want.durations);
  EXPECT_EQ(got.mel_lengths, want.mel_lengths);
  ASSERT_EQ(got.mel.shape(), want.mel.shape());
  EXPECT_EQ(got.mel.to_float_vector(), want.mel.to_float_vector());
}

class AcousticGraphsWithoutCapture : public ::testing::TestWithParam<const char*> {};

TEST_P(AcousticGraphsWithoutCapture, RunIsThePaddedForwardAndHoldsNothing) {
  Fixture f(GetParam());
  AcousticGraphs graphs(f.ctx, f.model, uint64_t{1} << 30);
  EXPECT_FALSE(graphs.enabled());
  SynthesisControls controls;
  controls.pitch_scale = 1.1f;
  controls.duration_scale = 0.9f;
  const AcousticOutput out = graphs.run(f.ids, f.speakers, controls);
  expect_same(out, f.padded_forward(graphs, controls));
  const int64_t longest = *std::max_element(out.mel_lengths.begin(), out.mel_lengths.end());
  EXPECT_EQ(out.mel.size(1), graphs.padded(longest));

  // Forced durations are used as they are, as forward uses them.
  std::vector<std::vector<int64_t>> durations;
  for (const auto& sequence : f.ids) durations.emplace_back(sequence.size(), 3);
  const AcousticOutput forced = graphs.run(f.ids, f.speakers, controls, durations);
  EXPECT_EQ(forced.durations, durations);
  expect_same(forced, f.padded_forward(graphs, controls, durations));

  EXPECT_EQ(graphs.graphs(), 0u);
  EXPECT_EQ(graphs.bytes(), 0u);
}

// encode() leaves the step to the caller (nothing recorded, nothing run) where nothing can be
// recorded, without asking the budget; bad input is still refused.
TEST_P(AcousticGraphsWithoutCapture, EncodeLeavesTheStepToTheCaller) {
  Fixture f(GetParam());
  AcousticGraphs graphs(f.ctx, f.model, uint64_t{1} << 30);
  int asked = 0;
  const AcousticGraphs::Admission admit = [&asked](uint64_t) { return ++asked > 0; };
  EXPECT_FALSE(graphs.encode(f.ids, f.speakers, {}, admit).has_value());
  EXPECT_EQ(asked, 0);
  EXPECT_FALSE(graphs.recorded(static_cast<int64_t>(f.ids.size()), 1, {}));
  EXPECT_THROW((void)graphs.encode({{1, f.model.n_symbols()}}, {}, {}, admit), InputError);
  EXPECT_EQ(graphs.graphs(), 0u);
}

// Eight sizes an octave, but never past max_seq_len (1000 here) for a batch that fits it: a
// recorded step cannot upload the positions a longer one needs.
TEST(AcousticGraphsPadding, PadsWithinMaxSeqLen) {
  Fixture f("reference");
  ASSERT_EQ(f.model.config().max_seq_len, 1000);
  const AcousticGraphs graphs(f.ctx, f.model, 0);
  EXPECT_EQ(graphs.padded(10), 10);
  EXPECT_EQ(graphs.padded(200), 208);
  EXPECT_EQ(graphs.padded(900), 960);
  EXPECT_EQ(graphs.padded(970), 1000);
  EXPECT_EQ(graphs.padded(1000), 1000);
  EXPECT_EQ(graphs.padded(1001), 1024);
}

TEST_P(AcousticGraphsWithoutCapture, BadInputIsRefusedAsForwardRefusesIt) {
  Fixture f(GetParam());
  AcousticGraphs graphs(f.ctx, f.model, uint64_t{1} << 30);
  EXPECT_THROW(graphs.run({}, {}, {}), InputError);
  EXPECT_THROW(graphs.run({{1, f.model.n_symbols()}}, {}, {}), InputError);
  EXPECT_THROW(graphs.run(f.ids, {f.model.n_speakers(), 0}, {}), InputError);
  EXPECT_THROW(graphs.run(f.ids, f.speakers, {}, {{1}}), InputError);
}

INSTANTIATE_TEST_SUITE_P(Backends, AcousticGraphsWithoutCapture,
                         ::testing::Values("cpu", "reference"));

}  // namespace
}  // namespace voxd
