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
using sambert_testing::max_error;
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
// frame limit and an infinite one are refused, as are too many tokens; none at all makes no mel.
TEST(SambertInput, UtterancesPastTheLimitsAreRefused) {
  Runner run("cpu");
  const auto io = SafetensorsFile::open(kFixtures + "basic/io.safetensors");
  const SambertTokens tokens = read_tokens(*io);
  const auto with_duration_bias = [&](float bias) {
    std::map<std::string, Tensor> state = read_state("basic");
    state["variance_adaptor.duration_predictor.fc.bias"] =
        Tensor::from_vector({1}, std::vector<float>{bias});
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
  const SambertOutput none = with_duration_bias(-1e4f).synthesize(run.ctx, tokens);
  EXPECT_FALSE(none.mel.defined());
  EXPECT_EQ(none.durations, std::vector<int64_t>(tokens.linguistic.size(), 0));
}

// The parts a server batches: utterances of several lengths encoded as one padded batch get each
// the durations and text they get alone, and their decoder steps, taken together at different
// steps over pages of one cache, make each the frames it makes alone; the postnet over chunks
// with its state carried makes the frames of one run.
TEST(SambertServedParts, ABatchGivesEachUtteranceWhatItGetsAlone) {
  Runner run("cpu");
  const Sambert model =
      Sambert::load(run.ctx, read_config("mixed"), TensorMapSource(read_state("mixed"), "mixed"));
  std::vector<SambertTokens> utterances;
  for (const char* fixture : {"mixed", "basic", "aligned"}) {
    utterances.push_back(
        read_tokens(*SafetensorsFile::open(kFixtures + fixture + "/io.safetensors")));
  }
  // Ids within the mixed fixture's tables.
  const std::array<int64_t, 4> vocabulary = model.linguistic_vocabulary();
  for (SambertTokens& tokens : utterances) {
    for (auto& ids : tokens.linguistic) {
      for (size_t ch = 0; ch < 4; ++ch) ids[ch] %= vocabulary[ch];
    }
    for (int64_t& id : tokens.emotion) id %= model.n_emotions();
    for (int64_t& id : tokens.speaker) id %= model.n_speakers();
  }
  std::vector<const SambertTokens*> batch;
  int64_t longest = 0;
  for (const SambertTokens& tokens : utterances) {
    batch.push_back(&tokens);
    longest = std::max(longest, static_cast<int64_t>(tokens.linguistic.size()));
  }
  const std::vector<SambertEncoding> together = model.encode(run.ctx, batch, longest + 3, true);
  std::vector<SambertAlignment> alignments;
  std::vector<SambertMemory> memories;
  for (size_t i = 0; i < utterances.size(); ++i) {
    const auto n = static_cast<int64_t>(utterances[i].linguistic.size());
    const SambertEncoding alone = model.encode(run.ctx, {&utterances[i]}, n, false)[0];
    EXPECT_LE(max_error(together[i].text, alone.text), 1e-5f) << i;
    alignments.push_back(model.align(together[i].log_durations));
    EXPECT_EQ(alignments.back().durations, model.align(alone.log_durations).durations) << i;
    memories.push_back(model.memory(utterances[i], together[i], alignments.back()));
  }

  // Decoder steps: each utterance alone, then all three together, starting at different steps.
  const auto decode = [&](const std::vector<size_t>& items, const std::vector<int64_t>& delays) {
    constexpr int64_t kPage = 4;
    PagedKvCache cache = model.make_cache(run.ctx, 64, kPage);
    std::vector<std::vector<int64_t>> memory_pages(items.size()), step_pages(items.size());
    int64_t next = 0;
    std::vector<std::vector<float>> frames(items.size()), previous(items.size());
    std::vector<Tensor> inputs;
    for (size_t k = 0; k < items.size(); ++k) {
      const int64_t pages = (alignments[items[k]].steps + kPage - 1) / kPage;
      for (int64_t p = 0; p < pages; ++p) memory_pages[k].push_back(next++);
      for (int64_t p = 0; p < pages; ++p) step_pages[k].push_back(next++);
      inputs.push_back(model.prefill(run.ctx, cache, {&memories[items[k]]}, {&memory_pages[k]},
                                     alignments[items[k]].steps));
      previous[k].assign(static_cast<size_t>(model.config().num_mels), 0.0f);
    }
    const int64_t d = model.config().decoder_units;
    for (int64_t tick = 0;; ++tick) {
      std::vector<size_t> active;
      for (size_t k = 0; k < items.size(); ++k) {
        const int64_t s = tick - delays[k];
        if (s >= 0 && s < alignments[items[k]].steps) active.push_back(k);
      }
      if (active.empty() && tick > 0) {
        bool done = true;
        for (size_t k = 0; k < items.size(); ++k)
          done &= tick - delays[k] >= alignments[items[k]].steps;
        if (done) break;
        continue;
      }
      std::vector<float> prev, rows;
      std::vector<const std::vector<int64_t>*> steps_of, memory_of;
      std::vector<int64_t> steps, starts, ends;
      for (size_t k : active) {
        const SambertAlignment& a = alignments[items[k]];
        const int64_t s = tick - delays[k];
        prev.insert(prev.end(), previous[k].begin(), previous[k].end());
        const float* row = inputs[k].data<float>() + s * d;
        rows.insert(rows.end(), row, row + d);
        steps_of.push_back(&step_pages[k]);
        memory_of.push_back(&memory_pages[k]);
        steps.push_back(s);
        starts.push_back(std::max<int64_t>(0, s - a.band_width));
        ends.push_back(std::min(s + a.band_width, a.steps - 1));
      }
      const auto b = static_cast<int64_t>(active.size());
      SambertStepInputs in;
      in.previous_frame = Tensor::from_vector({b, 1, model.config().num_mels}, prev);
      in.memory_input = Tensor::from_vector({b, 1, d}, rows);
      in.step_table = page_table(steps_of, 8);
      in.steps = Tensor::from_vector({b}, steps);
      in.step_starts = Tensor::from_vector({b}, starts);
      in.memory_table = page_table(memory_of, 8);
      in.memory_ends = Tensor::from_vector({b}, ends);
      const std::vector<float> out =
          ops::to_host(run.ctx, model.decode(run.ctx, cache, in)).to_float_vector();
      const size_t width = out.size() / active.size();
      for (size_t j = 0; j < active.size(); ++j) {
        const size_t k = active[j];
        frames[k].insert(frames[k].end(), out.begin() + j * width, out.begin() + (j + 1) * width);
        previous[k].assign(out.begin() + (j + 1) * width - model.config().num_mels,
                           out.begin() + (j + 1) * width);
      }
    }
    return frames;
  };
  std::vector<std::vector<float>> alone;
  for (size_t i = 0; i < utterances.size(); ++i) alone.push_back(decode({i}, {0})[0]);
  const std::vector<std::vector<float>> batched = decode({0, 1, 2}, {0, 3, 7});
  for (size_t i = 0; i < utterances.size(); ++i) {
    ASSERT_EQ(batched[i].size(), alone[i].size());
    float worst = 0.0f;
    for (size_t j = 0; j < alone[i].size(); ++j) {
      worst = std::max(worst, std::abs(batched[i][j] - alone[i][j]));
    }
    EXPECT_LE(worst, 1e-5f) << "utterance " << i;
  }

  // The postnet over chunks of 5 frames, its LSTM state carried, equals one run over the
  // utterance's decoder frames (the offline synthesize's postnet).
  const int64_t mels = model.config().num_mels;
  const int64_t t = alignments[0].frames;
  const std::vector<float> decoder(alone[0].begin(), alone[0].begin() + t * mels);
  const Tensor decoder_mel = Tensor::from_vector({1, t, mels}, decoder);
  const int64_t hidden = model.config().postnet.lstm_units;
  SambertPostnetInputs whole;
  whole.window = decoder_mel;
  whole.counts = {t};
  whole.rows = t;
  whole.h = ops::zeros(run.ctx, {1, hidden});
  whole.c = ops::zeros(run.ctx, {1, hidden});
  const std::vector<float> expected = model.postnet(run.ctx, whole).to_float_vector();
  const int64_t context = model.config().postnet_context();
  const int64_t ahead = model.config().postnet_lookahead();
  constexpr int64_t kChunk = 5;
  Tensor h = ops::zeros(run.ctx, {1, hidden});
  Tensor c = ops::zeros(run.ctx, {1, hidden});
  std::vector<float> chunked;
  for (int64_t p = 0; p < t; p += kChunk) {
    const int64_t count = std::min(kChunk, t - p);
    const int64_t width = context + kChunk + ahead;
    std::vector<float> window(static_cast<size_t>(width * mels), 0.0f);
    std::vector<float> mask(static_cast<size_t>(width), 0.0f);
    for (int64_t row = 0; row < width; ++row) {
      const int64_t frame = p - context + row;
      if (frame < 0 || frame >= t) continue;
      std::copy_n(decoder.begin() + frame * mels, mels, window.begin() + row * mels);
      mask[static_cast<size_t>(row)] = 1.0f;
    }
    SambertPostnetInputs part;
    part.window = Tensor::from_vector({1, width, mels}, window);
    part.mask = Tensor::from_vector({1, width, 1}, mask);
    part.first = context;
    part.counts = {count};
    part.rows = kChunk;
    part.h = h;
    part.c = c;
    const std::vector<float> made = model.postnet(run.ctx, part).to_float_vector();
    chunked.insert(chunked.end(), made.begin(), made.begin() + count * mels);
  }
  ASSERT_EQ(chunked.size(), expected.size());
  float worst = 0.0f;
  for (size_t j = 0; j < expected.size(); ++j)
    worst = std::max(worst, std::abs(chunked[j] - expected[j]));
  EXPECT_LE(worst, 1e-5f);
}

TEST(SambertConfig, VariantsAndUnbuildableSizesAreRefused) {
  json params = read_json(kFixtures + "basic/config.json")["params"];
  json fp = params;
  fp["FP"] = true;
  EXPECT_NE(error_of([&] {
              SambertConfig::from_json(fp, "am/config.yaml");
            }).find("am/config.yaml: field 'FP' is true"),
            std::string::npos);
  // SE and NSF are taken: a personal voice's speaker embedding and f0 normalisation.
  json personal = params;
  personal["SE"] = true;
  personal["NSF"] = true;
  personal["nsf_norm_type"] = "global";
  personal["nsf_f0_global_maximum"] = 600.0;
  const SambertConfig read = SambertConfig::from_json(personal, "c");
  EXPECT_TRUE(read.nsf && read.f0_global_norm);
  EXPECT_EQ(read.f0_global_minimum, 30.0);
  EXPECT_EQ(read.f0_global_maximum, 600.0);
  personal["nsf_norm_type"] = "minmax";
  EXPECT_NE(error_of([&] { SambertConfig::from_json(personal, "c"); }).find("'minmax'"),
            std::string::npos);
  personal["nsf_norm_type"] = "mean_std";
  personal["SE"] = "yes";
  EXPECT_NE(
      error_of([&] { SambertConfig::from_json(personal, "c"); }).find("'SE' must be true or false"),
      std::string::npos);
  personal["SE"] = true;
  personal["NSF"] = "yes";
  EXPECT_NE(error_of([&] { SambertConfig::from_json(personal, "c"); }).find("true or false"),
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
