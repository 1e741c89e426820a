// Helpers shared by the host backends (reference and cpu): argument checks for kernels, the
// generic strided copy with dtype conversion, and the scalar rules both backends must agree on
// (how ids are read, how bucketize picks a bucket).
#pragma once

#include <cstdint>

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
// Element i of a contiguous host I32 or I64 tensor.
int64_t load_id(const Tensor& ids, int64_t i);
// Index of the first boundary >= value among n ascending boundaries (torch.bucketize with
// right=False; NaN goes to n, as in PyTorch).
int64_t bucket_index(float value, const float* boundaries, int64_t n);

}  // namespace voxd::host
