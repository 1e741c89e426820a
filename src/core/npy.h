// Reading and writing NumPy .npy files, the format reference features and test fixtures are
// exchanged in between voxd and the Python tools.
#pragma once

#include <string>

#include "core/tensor.h"

namespace voxd {

// Reads a .npy file (format versions 1, 2 and 3, any rank) into a contiguous host tensor.
// Supported element types, all little-endian: float32 → F32, float16 → F16, float64 → F32
// (converted), int32 → I32, int64 → I64. Fortran-order arrays are transposed into C order, so
// the tensor always has the array's logical shape and row-major layout. Throws voxd::Error
// naming the file on bad magic, an unsupported version or dtype, big-endian data, a malformed
// header, truncated data or trailing bytes.
Tensor read_npy(const std::string& path);

// Writes a host F32 or I64 tensor (any strides) to `path` as a version 1 .npy file in C order
// (version 2 when the shape does not fit a version 1 header), replacing the file atomically.
// Throws voxd::Error for other dtypes, device tensors or I/O failures.
void write_npy(const std::string& path, const Tensor& tensor);

}  // namespace voxd
