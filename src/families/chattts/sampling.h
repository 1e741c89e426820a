// How ChatTTS picks each next token (ChatTTS/model/gpt.py's generate and processors.py): a
// stage's settings, and the TokenDraw (core/token_sampling.h) of each row of its steps, which
// ops::sample_tokens draws on the device.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/ops.h"
#include "core/token_sampling.h"

namespace voxd::chattts {

// One stage's settings (the original's RefineTextParams / InferCodeParams).
struct SamplingParams {
  float repetition_penalty = 1.0f;  // 1: off
  std::optional<double> top_p;      // keep the most likely tokens up to this probability
  std::optional<int64_t> top_k;     // keep the k most likely tokens
  int64_t eos = 0;                  // the stage's end token
  int64_t min_new_token = 0;        // eos is impossible before this many tokens
  int64_t repetition_window = 16;   // the penalty counts the row's last this many tokens
  int64_t min_tokens_to_keep = 3;   // neither warper keeps fewer
};

// The draw of row `row` at step `step` (tokens made so far) of a stage with these settings:
// ÷ temperature, the penalty, top-P, top-K, eos banned while step < min_new_token, the uniform
// number from (seed, step, row).
TokenDraw token_draw(const SamplingParams& params, float temperature, int64_t step, uint64_t seed,
                     uint64_t row);

// The row's history as the penalty counts it: the last `window` tokens of `history` (oldest
// first), −1 in front where it has fewer.
std::vector<int64_t> recent_tokens(std::span<const int64_t> history, int64_t window);

// One token per draw from `logits` (on ctx's device, a row of V per draw, any shape of that
// many elements) through ops::sample_tokens, each row with its `window` tokens of `history`:
// the tokens on the host, −1 where a row drew nothing.
std::vector<int64_t> sample_rows(Context& ctx, const Tensor& logits,
                                 const std::vector<TokenDraw>& draws,
                                 const std::vector<int64_t>& history, int64_t window);

}  // namespace voxd::chattts
