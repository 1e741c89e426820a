// Helpers shared by the host backends (reference and cpu): argument checks for kernels, the
// generic strided copy with dtype conversion, and the scalar rules both backends must agree on
// (how ids are read, how bucketize picks a bucket).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace voxd::host {

// Throws voxd::Error unless t is defined, on the host, contiguous and F32.
void require_f32(const char* kernel, const char* name, const Tensor& t);
// Throws voxd::Error unless t has exactly `shape`.
void require_shape(const char* kernel, const char* name, const Tensor& t, const Shape& shape);
// dst (contiguous, host) = src (host, any strides), converting element types.
void strided_copy(const Tensor& src, Tensor& dst);
// Every element of dst (host, contiguous, any dtype) = value converted to dst's dtype.
void fill(Tensor& dst, float value);
// Argument checks of the kernels both host backends implement the same way; each throws
// voxd::Error naming the kernel and what is wrong.
// ids contiguous host I32/I64, table and out F32, out [ids.numel(), table columns].
void check_embedding(const Tensor& ids, const Tensor& table, const Tensor& out);
// x [B, T, C] and out [B, frames, C] F32, one duration per row of x for every batch.
void check_length_regulate(const Tensor& x, const std::vector<std::vector<int64_t>>& durations,
                           const Tensor& out);
// x and boundaries F32, out a contiguous I64 tensor shaped like x.
void check_bucketize(const Tensor& x, const Tensor& boundaries, const Tensor& out);
// Throws voxd::Error when batch `b`'s durations need more than `frames` output rows.
[[noreturn]] void throw_durations_exceed(int64_t b, int64_t frames);
// Element i of a contiguous host I32 or I64 tensor.
int64_t load_id(const Tensor& ids, int64_t i);
// Index of the first boundary >= value among n ascending boundaries (torch.bucketize with
// right=False; NaN goes to n, as in PyTorch).
int64_t bucket_index(float value, const float* boundaries, int64_t n);

}  // namespace voxd::host
