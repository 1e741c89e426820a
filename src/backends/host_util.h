// Helpers shared by the host backends (reference and cpu): the generic strided copy with dtype
// conversion, and the scalar rules both backends must agree on (how ids are read, how bucketize
// picks a bucket). Argument checks are core/ops.h's, not these.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace voxd::host {

// dst (contiguous, host) = src (host, any strides), converting element types.
void strided_copy(const Tensor& src, Tensor& dst);
// Every element of dst (host, contiguous, any dtype) = value converted to dst's dtype.
void fill(Tensor& dst, float value);
// Element i of a contiguous host I32 or I64 tensor.
int64_t load_id(const Tensor& ids, int64_t i);
// Throws the voxd::Error of an embedding id outside the table's `vocab` rows.
[[noreturn]] void throw_bad_id(int64_t id, int64_t position, int64_t vocab);
// Index of the first boundary >= value among n ascending boundaries (torch.bucketize with
// right=False; NaN goes to n, as in PyTorch).
int64_t bucket_index(float value, const float* boundaries, int64_t n);
// Bytes of one row of cache [B, Tmax, ...]: the product of the trailing sizes times the dtype.
size_t row_bytes(const Tensor& cache);

}  // namespace voxd::host
