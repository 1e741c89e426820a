// How ChatTTS picks each next token (ChatTTS/model/gpt.py's generate and processors.py), on the
// host, one row of logits at a time: temperature, the repetition penalty over the row's recent
// tokens, transformers' top-P and top-K warpers, EOS masked before min_new_token, a softmax, and
// a draw. The draw is voxd's own rule (inverse CDF, one uniform number per row) fed by a
// counter-based generator, so a stream's tokens depend on its seed alone, not on what it was
// batched with.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

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

// Turns `logits` (one row, float32) into the distribution the original samples from, in place:
// ÷ temperature; the repetition penalty (a logit of a token seen c times among the last
// repetition_window of `history`, oldest first, is × penalty^c when negative, ÷ otherwise);
// top-P; top-K; eos → −inf while `step` (tokens made so far) < min_new_token. Removed tokens
// become −inf. Ids in `history` outside the row are ignored.
void process_logits(std::span<float> logits, float temperature, std::span<const int64_t> history,
                    int64_t step, const SamplingParams& params);

// softmax(logits) into `probs` (same size); −inf logits get 0.
void softmax(std::span<const float> logits, std::span<float> probs);

// voxd's draw rule: the smallest id whose running sum of `probs` (accumulated in double, in id
// order) exceeds u · the total; when rounding leaves none, the largest id of nonzero probability.
// A token of probability 0 is never drawn. u in [0, 1).
int64_t draw_token(std::span<const float> probs, double u);

// Uniform numbers in [0, 1) from (seed, step, row) alone (SplitMix64 over the three): the same
// seed makes the same tokens whatever else runs beside it.
double uniform_draw(uint64_t seed, uint64_t step, uint64_t row);

}  // namespace voxd::chattts
