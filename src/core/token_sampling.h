// How a GPT's next token is drawn from one row of logits, transformers' way (the logits
// processors and warpers ChatTTS's gpt.py runs), on the host: the plain definition that
// Backend::sample_tokens computes on every backend. Temperature, a repetition penalty over the
// row's recent tokens, the top-P and top-K warpers, one banned token, a softmax, and a draw by
// voxd's own rule (inverse CDF, one uniform number per row) fed by a counter-based generator, so
// that a row's token depends on its logits, its history and its (seed, step, row) alone, not on
// what it was batched with.
#pragma once

#include <cstdint>
#include <span>

namespace voxd {

// One row's draw.
struct TokenDraw {
  float temperature = 1.0f;         // > 0: every logit is divided by it first
  float repetition_penalty = 1.0f;  // > 0; 1: off
  double top_p = 0.0;               // in (0, 1]; 0: no top-P
  int64_t top_k = 0;                // >= 1; 0: no top-K
  int64_t min_keep = 1;             // neither warper keeps fewer tokens
  int64_t banned = -1;              // a token made impossible (ChatTTS: eos before min_new_token)
  // The draw's uniform number is uniform_draw(seed, step, row).
  uint64_t seed = 0;
  uint64_t step = 0;
  uint64_t row = 0;
};

// Turns `logits` (one row, F32) into the distribution draws are made from, in place: ÷
// temperature; the repetition penalty (the logit of a token seen c times in `history` is ×
// penalty^c when negative, ÷ penalty^c otherwise; ids outside the row, such as −1 padding,
// count for nothing); top-P (in ascending order of logit, ties by id, the tokens whose cumulative
// probability is at most float(1 − top_p) go, but for the last min_keep); top-K (logits below
// the k-th largest, k = max(top_k, min_keep), go); the banned token. Removed tokens become −inf;
// a NaN left by the penalty (an infinite logit) removes every token.
void process_logits(std::span<float> logits, const TokenDraw& draw,
                    std::span<const int64_t> history);

// softmax(logits) into `probs` (same size); −inf logits get 0, and a row without a finite
// logit gets 0 everywhere.
void softmax(std::span<const float> logits, std::span<float> probs);

// The draw rule: the smallest id whose running sum of `probs` (accumulated in double, in id
// order) exceeds u · the total; when rounding leaves none, the largest id of nonzero probability;
// −1 when every probability is 0. A token of probability 0 is never drawn. u in [0, 1).
int64_t draw_token(std::span<const float> probs, double u);

// Uniform numbers in [0, 1) from (seed, step, row) alone (SplitMix64 over the three).
double uniform_draw(uint64_t seed, uint64_t step, uint64_t row);

// The whole draw of one row: process_logits, softmax, draw_token with draw's uniform number.
// −1 when no token can be drawn: a NaN among the logits, or every logit removed or −inf.
int64_t sample_token(std::span<const float> logits, const TokenDraw& draw,
                     std::span<const int64_t> history);

}  // namespace voxd
