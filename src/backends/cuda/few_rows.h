// Kernels for steps of a few rows, where cuBLAS and the one-block-per-query attention leave most
// of the chip idle: a decode step of one or a few streams. A linear over a few rows reads each
// weight row once with every warp of the grid (memory-bound at any batch this small), and a
// query's attention over a paged cache is split over blocks by key ranges, each with an online
// softmax, then combined. Internal to the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels.h"
#include "core/dtype.h"

namespace voxd::cuda {

// The most rows few_rows_linear takes.
constexpr int64_t kFewRowsMax = 8;

// Whether few_rows_linear takes x [rows, in] · weight [features, in]ᵀ in `dtype` at these
// addresses: a half dtype, at most kFewRowsMax rows, `in` a multiple of eight elements and every
// pointer 16-byte aligned.
bool few_rows_linear_fits(DType dtype, int64_t rows, int64_t in, const void* x, const void* weight,
                          const void* out);
// out [rows, features] = x · weightᵀ (+ bias [features] when not null), summed in F32 and rounded
// to the dtype once. x and weight contiguous.
void few_rows_linear(const void* x, const void* weight, const void* bias, void* out, DType dtype,
                     int64_t rows, int64_t in, int64_t features, cudaStream_t stream,
                     const char* op);

// How many key ranges split_decode_attention gives each (sequence, head) of a batch: enough blocks
// for a whole chip at small batches, one (no combine) from kSplitDecodeTargetBlocks blocks on.
constexpr int64_t kSplitDecodeTargetBlocks = 264;
constexpr int64_t kSplitDecodeMaxSplits = 32;
int64_t split_decode_splits(int64_t batch, int64_t heads);
// Whether split_decode_attention takes heads of `dim` elements of `dtype`.
bool split_decode_attention_fits(DType dtype, int64_t dim);
// The F32 scratch split_decode_attention needs for the partial results of `splits` ranges.
size_t split_decode_scratch_bytes(int64_t batch, int64_t heads, int64_t dim, int64_t splits);
// Backend::paged_attention for one query per sequence (q [batch, 1, heads, dim]): each of the
// (sequence, head)'s `splits` blocks takes a contiguous range of the keys it sees, scores them,
// and keeps a running maximum, sum of exponentials and weighted sum of values (F32); a second
// kernel combines the ranges (with one range the first writes out itself). Softmax and sums in
// F32, the result rounded once; NaN when the query sees no key. `partials` holds
// split_decode_scratch_bytes.
void split_decode_attention(const void* q, const void* k_pages, const void* v_pages, void* out,
                            DType dtype, int64_t batch, int64_t heads, int64_t dim,
                            const PageTable& table, float scale, int64_t splits, float* partials,
                            cudaStream_t stream, const char* op);

}  // namespace voxd::cuda
