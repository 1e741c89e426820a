// Device-side helpers the CUDA backend's kernel files share: F32 <-> F16 / BF16 conversion and
// the dispatch from a DType to its device type. Internal to the CUDA backend.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

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
