// The output stores of the implicit-GEMM convolution kernels: neighbouring steps of one output
// row, the bias already in them, plus the residual, written as one vector store where they can
// be: two steps (the wgmma kernel, from its accumulators) or four (the mma.sync kernel, from its
// tile staged in shared memory). Internal to the CUDA backend.
#pragma once

#include <cstdint>
#include <type_traits>

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

// out[index .. index + 3] (steps t .. t + 3 of a row of out_steps) = v, plus residual's elements
// there when residual is set; steps past the row are not written. One vector load and store
// where all four are inside the row and aligned, else element by element.
template <typename Out>
__device__ __forceinline__ void store_output_quad(Out* out, const Out* residual, int64_t index,
                                                  int64_t t, int64_t out_steps, float4 v) {
  float f[4] = {v.x, v.y, v.z, v.w};
  constexpr uintptr_t kBytes = 4 * sizeof(Out);
  const bool vector = t + 3 < out_steps && reinterpret_cast<uintptr_t>(out + index) % kBytes == 0 &&
                      (!residual || reinterpret_cast<uintptr_t>(residual + index) % kBytes == 0);
  if (!vector) {
    for (int e = 0; e < 4 && t + e < out_steps; ++e) {
      if (residual) f[e] += to_float(residual[index + e]);
      out[index + e] = from_float<Out>(f[e]);
    }
    return;
  }
  union Quad {
    typename std::conditional<sizeof(Out) == 4, float4, uint2>::type vector;
    Out e[4];
  };
  if (residual) {
    Quad r;
    r.vector = *reinterpret_cast<const decltype(r.vector)*>(residual + index);
#pragma unroll
    for (int e = 0; e < 4; ++e) f[e] += to_float(r.e[e]);
  }
  Quad q;
#pragma unroll
  for (int e = 0; e < 4; ++e) q.e[e] = from_float<Out>(f[e]);
  *reinterpret_cast<decltype(q.vector)*>(out + index) = q.vector;
}

// out[index .. index + 7] = the eight F32 values at `values` (16-byte aligned), plus residual's
// elements there when residual is set, rounded once to T (F16 or BF16). One 16-byte load and
// store where out and residual are aligned, else element by element.
template <typename T>
__device__ __forceinline__ void store_output_eight(T* out, const T* residual, int64_t index,
                                                   const float* values) {
  const float4 lo = reinterpret_cast<const float4*>(values)[0];
  const float4 hi = reinterpret_cast<const float4*>(values)[1];
  float f[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const bool vector = reinterpret_cast<uintptr_t>(out + index) % 16 == 0 &&
                      (!residual || reinterpret_cast<uintptr_t>(residual + index) % 16 == 0);
  if (!vector) {
    for (int e = 0; e < 8; ++e) {
      if (residual) f[e] += to_float(residual[index + e]);
      out[index + e] = from_float<T>(f[e]);
    }
    return;
  }
  union Eight {
    uint4 vector;
    T e[8];
  };
  if (residual) {
    Eight r;
    r.vector = *reinterpret_cast<const uint4*>(residual + index);
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] += to_float(r.e[e]);
  }
  Eight q;
#pragma unroll
  for (int e = 0; e < 8; ++e) q.e[e] = from_float<T>(f[e]);
  *reinterpret_cast<uint4*>(out + index) = q.vector;
}

}  // namespace voxd::cuda
