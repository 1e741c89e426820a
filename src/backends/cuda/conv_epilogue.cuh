// The epilogue the implicit-GEMM convolution kernels share: two neighbouring steps of one output
// row, the bias already in them, plus the residual, written as one paired store where they can
// be. Internal to the CUDA backend.
#pragma once

#include <cstdint>

#include "backends/cuda/device_types.cuh"

namespace voxd::cuda {

template <typename T>
struct DevicePair;
template <>
struct DevicePair<float> {
  using type = float2;
};
template <>
struct DevicePair<__half> {
  using type = __half2;
};
template <>
struct DevicePair<__nv_bfloat16> {
  using type = __nv_bfloat162;
};

// out[index] and out[index + 1] (steps t and t + 1 of a row of out_steps) = v0, v1, plus
// residual's elements there when residual is set; a step past the row is not written. Out is the
// weights' dtype, or F32 under mixed precision.
template <typename Out>
__device__ __forceinline__ void store_output_pair(Out* out, const Out* residual, int64_t index,
                                                  int64_t t, int64_t out_steps, float v0,
                                                  float v1) {
  using Pair = typename DevicePair<Out>::type;
  if (t + 1 < out_steps && index % 2 == 0) {
    if (residual) {
      const Pair r = *reinterpret_cast<const Pair*>(residual + index);
      v0 += to_float(r.x);
      v1 += to_float(r.y);
    }
    Pair pair;
    pair.x = from_float<Out>(v0);
    pair.y = from_float<Out>(v1);
    *reinterpret_cast<Pair*>(out + index) = pair;
    return;
  }
  if (t < out_steps) {
    if (residual) v0 += to_float(residual[index]);
    out[index] = from_float<Out>(v0);
  }
  if (t + 1 < out_steps) {
    if (residual) v1 += to_float(residual[index + 1]);
    out[index + 1] = from_float<Out>(v1);
  }
}

}  // namespace voxd::cuda
