// ChatTTS's logits processors and voxd's draw rule (core/token_sampling.h with the draws
// chattts/sampling.h makes of a stage's settings) against tests/fixtures/chattts/sampling (from
// tools/reference/chattts_fixtures.py, which follows the original's processors.py and gpt.py):
// every intermediate of every case, and the tokens each fixed draw picks.
#include "families/chattts/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"

namespace voxd::chattts {
namespace {

const std::string kFixtures = std::string(VOXD_SOURCE_DIR) + "/tests/fixtures/chattts/sampling/";

struct Case {
  nlohmann::json config;
  std::shared_ptr<SafetensorsFile> io;

  SamplingParams params() const {
    SamplingParams p;
    p.repetition_penalty = config.at("repetition_penalty").get<double>();
    if (!config.at("top_P").is_null()) p.top_p = config.at("top_P").get<double>();
    if (!config.at("top_K").is_null()) p.top_k = config.at("top_K").get<int64_t>();
    p.eos = config.at("eos").get<int64_t>();
    p.min_new_token = config.at("min_new_token").get<int64_t>();
    p.repetition_window = config.at("repetition_window").get<int64_t>();
    p.min_tokens_to_keep = config.at("min_tokens_to_keep").get<int64_t>();
    return p;
  }
  // Row `row` of the [R, N] tensor `name`.
  template <typename T>
  std::vector<T> row(const std::string& name, int64_t row) const {
    const Tensor t = io->get(name);
    const int64_t n = t.size(1);
    const T* data = t.data<T>() + row * n;
    return std::vector<T>(data, data + n);
  }
};

Case load_case(const std::string& name) {
  Case c;
  std::ifstream in(kFixtures + name + "/config.json");
  c.config = nlohmann::json::parse(in);
  c.io = SafetensorsFile::open(kFixtures + name + "/io.safetensors");
  return c;
}

// process_logits with a stage's settings, as the stage's draws make them.
void process(std::vector<float>& logits, float temperature, const std::vector<int64_t>& history,
             int64_t step, const SamplingParams& params) {
  process_logits(logits, token_draw(params, temperature, step, 0, 0),
                 recent_tokens(history, params.repetition_window));
}

// Equal, or both removed (−inf).
void expect_logits(const std::vector<float>& got, const std::vector<float>& expected,
                   const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(expected[i])) {
      EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << what << " id " << i << ": " << got[i];
    } else {
      EXPECT_NEAR(got[i], expected[i], 1e-5f * std::max(1.0f, std::fabs(expected[i])))
          << what << " id " << i;
    }
  }
}

class Sampling : public ::testing::TestWithParam<std::string> {};

TEST_P(Sampling, EveryStepAndEveryDrawAsTheOriginal) {
  const Case c = load_case(GetParam());
  const SamplingParams params = c.params();
  const int64_t rows = c.io->get("logits").size(0);
  const Tensor temperature = c.io->get("temperature");
  const int64_t step = c.config.at("step").get<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    std::vector<float> logits = c.row<float>("logits", r);
    const std::vector<int64_t> history = c.row<int64_t>("history", r);
    // The whole chain, then each stage alone from the fixture's previous one.
    process(logits, temperature.data<float>()[r], history, step, params);
    expect_logits(logits, c.row<float>("masked", r), "masked");

    std::vector<float> probs(logits.size());
    softmax(logits, probs);
    const std::vector<float> expected_probs = c.row<float>("probs", r);
    for (size_t i = 0; i < probs.size(); ++i) {
      EXPECT_NEAR(probs[i], expected_probs[i], 1e-6f) << "probs id " << i;
    }
    const std::vector<float> draws = c.row<float>("draws", r);
    const std::vector<int64_t> tokens = c.row<int64_t>("tokens", r);
    for (size_t d = 0; d < draws.size(); ++d) {
      EXPECT_EQ(draw_token(expected_probs, draws[d]), tokens[d]) << "draw " << draws[d];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ChatTTS, Sampling,
                         ::testing::Values("code_default", "code_min_keep", "code_min_new_token",
                                           "code_no_filter", "code_per_vq_temperature",
                                           "code_topk_binds", "text_default", "text_min_new_token",
                                           "text_penalty"));

// Each processor on its own, from the fixture's stage before it: a mistake in one cannot hide
// behind another.
TEST(Sampling, EachProcessorAlone) {
  const Case c = load_case("text_penalty");
  SamplingParams only_penalty = c.params();
  only_penalty.top_p.reset();
  only_penalty.top_k.reset();
  only_penalty.min_new_token = 0;
  std::vector<float> scaled = c.row<float>("scaled", 0);
  process(scaled, 1.0f, c.row<int64_t>("history", 0), 0, only_penalty);
  expect_logits(scaled, c.row<float>("penalized", 0), "penalized");

  SamplingParams only_top_p = c.params();
  only_top_p.repetition_penalty = 1.0f;
  only_top_p.top_k.reset();
  std::vector<float> penalized = c.row<float>("penalized", 0);
  process(penalized, 1.0f, {}, 1 << 20, only_top_p);
  expect_logits(penalized, c.row<float>("top_p", 0), "top_p");

  SamplingParams only_top_k = c.params();
  only_top_k.repetition_penalty = 1.0f;
  only_top_k.top_p.reset();
  std::vector<float> top_p = c.row<float>("top_p", 0);
  process(top_p, 1.0f, {}, 1 << 20, only_top_k);
  expect_logits(top_p, c.row<float>("top_k", 0), "top_k");
}

// processors.py's penalty by hand: a negative logit is multiplied by penalty^count, a positive
// one divided; only the last `repetition_window` tokens count.
TEST(Sampling, RepetitionPenaltyKnownAnswers) {
  SamplingParams params;
  params.repetition_penalty = 1.5f;
  params.repetition_window = 3;
  std::vector<float> logits = {-2.0f, 3.0f, 1.0f};
  const std::vector<int64_t> history = {2, 2, 0, 0, 1};  // the window holds 0, 0, 1
  process(logits, 1.0f, history, 0, params);
  EXPECT_FLOAT_EQ(logits[0], -2.0f * 1.5f * 1.5f);
  EXPECT_FLOAT_EQ(logits[1], 3.0f / 1.5f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
}

TEST(Sampling, DrawsNeverPickAZeroProbabilityToken) {
  const std::vector<float> probs = {0.0f, 0.5f, 0.0f, 0.5f, 0.0f};
  EXPECT_EQ(draw_token(probs, 0.0), 1);
  EXPECT_EQ(draw_token(probs, 0.49), 1);
  EXPECT_EQ(draw_token(probs, 0.5), 3);
  EXPECT_EQ(draw_token(probs, 0.999999999), 3);
  const std::vector<float> none = {0.0f, 0.0f};
  EXPECT_EQ(draw_token(none, 0.5), -1);
}

TEST(Sampling, DrawsDependOnSeedStepAndRowOnly) {
  std::set<double> seen;
  for (uint64_t step = 0; step < 100; ++step) {
    for (uint64_t row = 0; row < 4; ++row) {
      const double u = uniform_draw(7, step, row);
      EXPECT_GE(u, 0.0);
      EXPECT_LT(u, 1.0);
      EXPECT_EQ(u, uniform_draw(7, step, row));
      seen.insert(u);
    }
  }
  EXPECT_EQ(seen.size(), 400u);
  EXPECT_NE(uniform_draw(7, 3, 1), uniform_draw(8, 3, 1));
  // Roughly uniform: the mean of 10,000 draws is near 1/2.
  double sum = 0.0;
  for (uint64_t i = 0; i < 10000; ++i) sum += uniform_draw(42, i, 0);
  EXPECT_NEAR(sum / 10000.0, 0.5, 0.02);
}

// A row's history is its last repetition_window tokens, padded in front with −1 (which the
// penalty ignores): the same logits as the whole history.
TEST(Sampling, RecentTokensAreTheWindowPaddedInFront) {
  EXPECT_EQ(recent_tokens(std::vector<int64_t>{1, 2, 3}, 5),
            (std::vector<int64_t>{-1, -1, 1, 2, 3}));
  EXPECT_EQ(recent_tokens(std::vector<int64_t>{1, 2, 3, 4}, 2), (std::vector<int64_t>{3, 4}));
  EXPECT_TRUE(recent_tokens(std::vector<int64_t>{1}, 0).empty());
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  std::vector<float> padded = {1.0f, -1.0f, 3.0f};
  process_logits(padded, token_draw(params, 1.0f, 0, 0, 0), std::vector<int64_t>{-1, -1, 0, 1});
  EXPECT_EQ(padded, (std::vector<float>{0.5f, -2.0f, 3.0f}));
}

// The stage's settings become the draw's: eos is banned before min_new_token, the uniform number
// is the stage seed's at (step, row).
TEST(Sampling, StageSettingsBecomeTheDraw) {
  SamplingParams params;
  params.top_p = 0.7;
  params.top_k = 20;
  params.eos = 625;
  params.min_new_token = 2;
  const TokenDraw early = token_draw(params, 0.3f, 1, 9, 3);
  EXPECT_EQ(early.banned, 625);
  EXPECT_EQ(early.top_p, 0.7);
  EXPECT_EQ(early.top_k, 20);
  EXPECT_EQ(early.min_keep, 3);
  EXPECT_FLOAT_EQ(early.temperature, 0.3f);
  EXPECT_EQ(early.seed, 9u);
  EXPECT_EQ(early.step, 1u);
  EXPECT_EQ(early.row, 3u);
  EXPECT_EQ(token_draw(params, 0.3f, 2, 9, 3).banned, -1);
  params.top_p.reset();
  params.top_k.reset();
  EXPECT_EQ(token_draw(params, 0.3f, 2, 9, 3).top_p, 0.0);
  EXPECT_EQ(token_draw(params, 0.3f, 2, 9, 3).top_k, 0);
}

// A row with a NaN draws nothing, and neither does one whose every token is removed.
TEST(Sampling, RowsThatDrawNothing) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sample_token(std::vector<float>{0.0f, nan}, TokenDraw{}, {}), -1);
  EXPECT_EQ(sample_token(std::vector<float>{-inf, -inf}, TokenDraw{}, {}), -1);
  EXPECT_EQ(sample_token(std::vector<float>{-inf, 1.0f}, TokenDraw{.banned = 1}, {}), -1);
  EXPECT_EQ(sample_token(std::vector<float>{-inf, 1.0f}, TokenDraw{}, {}), 1);
}

}  // namespace
}  // namespace voxd::chattts
