// Device-side helpers the CUDA backend's kernel files share: F32 <-> F16 / BF16 conversion and
// the dispatch from a DType to its device type. Internal to the CUDA backend.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"

namespace voxd::cuda {

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// The shared-memory address of `p` (a pointer into shared memory), as PTX's shared-space
// instructions (ldmatrix, cp.async, mbarrier, TMA) take it.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Sixteen bytes of T: what one thread of the attention kernels loads at a time.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kSize = 16 / static_cast<int>(sizeof(T));
  T v[kSize];
};

// Whether `p` may be read and written sixteen bytes at a time.
inline bool sixteen_byte_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The threads that share a row of `dim` elements of `bytes` each when each loads sixteen bytes
// (2 to 32 of them, a power of two), or 0 when the row is not such a multiple.
inline int sixteen_byte_lanes(int64_t dim, size_t bytes) {
  const int64_t row_bytes = dim * static_cast<int64_t>(bytes);
  if (row_bytes % 16 != 0) return 0;
  const int64_t lanes = row_bytes / 16;
  return lanes == 2 || lanes == 4 || lanes == 8 || lanes == 16 || lanes == 32
             ? static_cast<int>(lanes)
             : 0;
}

// Calls f(std::integral_constant<int, lanes>{}) for lanes one of sixteen_byte_lanes' non-zero
// results; returns false (calling nothing) for any other.
template <typename F>
bool dispatch_lanes(int lanes, F&& f) {
  switch (lanes) {
    case 2:
      f(std::integral_constant<int, 2>{});
      return true;
    case 4:
      f(std::integral_constant<int, 4>{});
      return true;
    case 8:
      f(std::integral_constant<int, 8>{});
      return true;
    case 16:
      f(std::integral_constant<int, 16>{});
      return true;
    case 32:
      f(std::integral_constant<int, 32>{});
      return true;
    default:
      return false;
  }
}

// Calls f(T{}) with T the device type of the floating dtype.
template <typename F>
void dispatch_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32:
      f(float{});
      return;
    case DType::F16:
      f(__half{});
      return;
    case DType::BF16:
      f(__nv_bfloat16{});
      return;
    default:
      throw Error(std::string(op) + ": dtype " + std::string(dtype_name(dtype)) +
                  " is not F32, F16 or BF16");
  }
}

}  // namespace voxd::cuda
