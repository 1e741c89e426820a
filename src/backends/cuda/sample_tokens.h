// Backend::sample_tokens on the device: one block per row of logits runs the whole draw of
// core/token_sampling.h. The row (divided by its temperature, penalised) sits in shared memory,
// or in global scratch for vocabularies past kSharedRowTokens. top-P's cut and top-K's k-th
// largest are found by radix selection over (logit, id) keys, 8 bits per pass, with the
// probability mass of each bin summed as fixed-point integers (2^-56 per unit), so that sums do
// not depend on the order threads add them: the same row draws the same token every run. The
// draw takes the first id whose running fixed-point mass passes u · the total. Internal to the
// CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/token_sampling.h"

namespace voxd::cuda {

// The largest vocabulary whose rows sit in shared memory; longer rows use global scratch.
constexpr int64_t kSharedRowTokens = 40 * 1024;

struct SampleTokens {
  const float* logits = nullptr;     // [rows, vocab]
  const int64_t* history = nullptr;  // [rows, window]
  const TokenDraw* draws = nullptr;  // [rows], device memory
  float* rows_scratch = nullptr;     // [rows, vocab] when vocab > kSharedRowTokens, else null
  int64_t* tokens = nullptr;         // [rows]
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t window = 0;
};

void sample_tokens(const SampleTokens& args, cudaStream_t stream, const char* op);

}  // namespace voxd::cuda
