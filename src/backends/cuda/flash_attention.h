// Attention of many queries per sequence in one kernel, FlashAttention-2's way on mma.sync: a
// block takes 64 queries of one (sequence, head) and walks the keys they may see 64 at a time,
// the scores summed in F32 on the tensor cores and kept in registers with a running softmax,
// the values weighed by the probabilities rounded to the dtype. No scores in memory, no upload
// of the lengths (up to SequenceValues::kInline sequences) and no cuBLAS: one launch whatever
// the shape, and no host time at a shape met for the first time (cuBLAS's batched gemms cost
// milliseconds there). Internal to the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels.h"
#include "core/dtype.h"

namespace voxd::cuda {

// Whether flash_attention takes this shape: F16 or BF16 heads of 32, 64 or 128 elements, batch
// and heads within a grid's dimensions.
bool flash_attention_fits(DType dtype, int64_t batch, int64_t heads, int64_t dim);

// out [batch, tq, heads, dim] = softmax(scale · q·kᵀ) · v for q [batch, tq, heads, dim] and k, v
// [batch, rows, heads, dim], all contiguous: query i of sequence b sees the keys j with
// key_starts[b] <= j < key_lengths[b] (both within [0, rows]) and, when causal, j <= offsets[b] +
// i; it is NaN where it sees none. Scores, softmax and sums in F32; the probabilities are rounded
// to the dtype before they weigh the values, the result once at the end. Any alignment (sixteen
// bytes takes the fast copies).
void flash_attention(const void* q, const void* k, const void* v, void* out, DType dtype,
                     int64_t batch, int64_t tq, int64_t rows, int64_t heads, int64_t dim,
                     float scale, const SequenceValues& key_lengths,
                     const SequenceValues& key_starts, const SequenceValues& offsets, bool causal,
                     cudaStream_t stream, const char* op);

}  // namespace voxd::cuda
