#include "core/token_sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

namespace voxd {
namespace {

constexpr float kRemoved = -std::numeric_limits<float>::infinity();

void apply_repetition_penalty(std::span<float> logits, std::span<const int64_t> history,
                              float penalty) {
  if (penalty == 1.0f || history.empty()) return;
  std::vector<int64_t> recent(history.begin(), history.end());
  std::sort(recent.begin(), recent.end());
  const auto vocab = static_cast<int64_t>(logits.size());
  for (size_t i = 0; i < recent.size();) {
    size_t j = i;
    while (j < recent.size() && recent[j] == recent[i]) ++j;
    const int64_t id = recent[i];
    if (id >= 0 && id < vocab) {
      const float alpha = std::pow(penalty, static_cast<float>(j - i));
      float& logit = logits[static_cast<size_t>(id)];
      logit = logit < 0.0f ? logit * alpha : logit / alpha;
    }
    i = j;
  }
}

// transformers' TopPLogitsWarper: in ascending order of logit (ties by id), the tokens whose
// cumulative probability is at most 1 − top_p go, except the last min_keep.
void apply_top_p(std::span<float> logits, double top_p, int64_t min_keep) {
  const size_t n = logits.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return logits[a] < logits[b]; });
  std::vector<float> probs(n);
  softmax(logits, probs);
  // As transformers compares: float32 probabilities against float32(1 − top_p in double).
  const auto threshold = static_cast<float>(1.0 - top_p);
  const size_t keep_from =
      n > static_cast<size_t>(min_keep) ? n - static_cast<size_t>(min_keep) : 0;
  double cumulative = 0.0;
  std::vector<size_t> removed;
  for (size_t rank = 0; rank < keep_from; ++rank) {
    cumulative += probs[order[rank]];
    if (cumulative <= threshold) removed.push_back(order[rank]);
  }
  for (size_t id : removed) logits[id] = kRemoved;
}

// transformers' TopKLogitsWarper: logits below the k-th largest go.
void apply_top_k(std::span<float> logits, int64_t top_k, int64_t min_keep) {
  const size_t k = std::min(static_cast<size_t>(std::max(top_k, min_keep)), logits.size());
  if (k == 0) return;
  std::vector<float> sorted(logits.begin(), logits.end());
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k - 1),
                   sorted.end(), std::greater<>());
  const float kth = sorted[k - 1];
  for (float& logit : logits) {
    if (logit < kth) logit = kRemoved;
  }
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

void process_logits(std::span<float> logits, const TokenDraw& draw,
                    std::span<const int64_t> history) {
  for (float& logit : logits) logit /= draw.temperature;
  apply_repetition_penalty(logits, history, draw.repetition_penalty);
  // An infinite logit penalised by an infinite or vanishing factor is NaN: every token goes.
  if (std::any_of(logits.begin(), logits.end(), [](float v) { return std::isnan(v); })) {
    std::fill(logits.begin(), logits.end(), kRemoved);
    return;
  }
  if (draw.top_p > 0.0) apply_top_p(logits, draw.top_p, draw.min_keep);
  if (draw.top_k > 0) apply_top_k(logits, draw.top_k, draw.min_keep);
  if (draw.banned >= 0 && draw.banned < static_cast<int64_t>(logits.size())) {
    logits[static_cast<size_t>(draw.banned)] = kRemoved;
  }
}

void softmax(std::span<const float> logits, std::span<float> probs) {
  const float top = logits.empty() ? kRemoved : *std::max_element(logits.begin(), logits.end());
  if (!std::isfinite(top)) {
    std::fill(probs.begin(), probs.end(), 0.0f);
    return;
  }
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double e = std::exp(static_cast<double>(logits[i]) - static_cast<double>(top));
    probs[i] = static_cast<float>(e);
    total += e;
  }
  for (float& p : probs) p = static_cast<float>(static_cast<double>(p) / total);
}

int64_t draw_token(std::span<const float> probs, double u) {
  double total = 0.0;
  for (float p : probs) total += p;
  const double target = u * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cumulative += probs[i];
    if (cumulative > target) return static_cast<int64_t>(i);
  }
  for (size_t i = probs.size(); i-- > 0;) {
    if (probs[i] > 0.0f) return static_cast<int64_t>(i);
  }
  return -1;
}

double uniform_draw(uint64_t seed, uint64_t step, uint64_t row) {
  const uint64_t bits = splitmix64(splitmix64(splitmix64(seed) ^ step) ^ row);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

int64_t sample_token(std::span<const float> logits, const TokenDraw& draw,
                     std::span<const int64_t> history) {
  if (std::any_of(logits.begin(), logits.end(), [](float v) { return std::isnan(v); })) return -1;
  std::vector<float> row(logits.begin(), logits.end());
  process_logits(row, draw, history);
  std::vector<float> probs(row.size());
  softmax(row, probs);
  return draw_token(probs, uniform_draw(draw.seed, draw.step, draw.row));
}

}  // namespace voxd
