#include "families/chattts/sampling.h"

#include <algorithm>

namespace voxd::chattts {

TokenDraw token_draw(const SamplingParams& params, float temperature, int64_t step, uint64_t seed,
                     uint64_t row) {
  return {.temperature = temperature,
          .repetition_penalty = params.repetition_penalty,
          .top_p = params.top_p.value_or(0.0),
          .top_k = params.top_k.value_or(0),
          .min_keep = params.min_tokens_to_keep,
          .banned = step < params.min_new_token ? params.eos : -1,
          .seed = seed,
          .step = static_cast<uint64_t>(step),
          .row = row};
}

std::vector<int64_t> recent_tokens(std::span<const int64_t> history, int64_t window) {
  std::vector<int64_t> recent(static_cast<size_t>(std::max<int64_t>(window, 0)), -1);
  const size_t kept = std::min(history.size(), recent.size());
  std::copy(history.end() - static_cast<std::ptrdiff_t>(kept), history.end(),
            recent.end() - static_cast<std::ptrdiff_t>(kept));
  return recent;
}

std::vector<int64_t> sample_rows(Context& ctx, const Tensor& logits,
                                 const std::vector<TokenDraw>& draws,
                                 const std::vector<int64_t>& history, int64_t window) {
  const auto rows = static_cast<int64_t>(draws.size());
  const Tensor tokens =
      ops::to_host(ctx,
                   ops::sample_tokens(ctx, logits.reshape({rows, logits.numel() / rows}),
                                      Tensor::from_vector({rows, window}, history), draws),
                   DType::I64);
  return tokens.to_int_vector();
}

}  // namespace voxd::chattts
