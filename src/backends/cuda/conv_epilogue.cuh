// The output stores of the implicit-GEMM convolution kernels: neighbouring steps of one output
// row, the bias already in them, plus the residual (and for the mma.sync kernel the rest of its
// OutputTerms), written as one vector store where they can be: two steps (the wgmma kernel, from
// its accumulators), four (the mma.sync kernel, from its tile staged in shared memory) or eight
// channels of one step (its time-major rows). Internal to
// the CUDA backend.
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

// What the mma.sync kernel's epilogue does with a convolution's values (bias already in them)
// before rounding them to Out: + residual + addend (each where set), × scale, then leaky ReLU with
// `slope` where leaky_relu.
template <typename Out>
struct OutputTerms {
  const Out* residual = nullptr;
  const Out* addend = nullptr;
  float scale = 1.0f;
  bool leaky_relu = false;
  float slope = 0.0f;
};

// out[index .. index + N − 1] = the N F32 values at `values` (16-byte aligned) with `terms`
// applied, each rounded once to Out; only the first `valid` (≤ N) are written (the rest lie past
// the row). One N-element vector load per term and one store (8 or 16 bytes) where all N are
// valid and aligned, else element by element.
template <int N, typename Out>
__device__ __forceinline__ void store_output_vector(Out* out, const OutputTerms<Out>& terms,
                                                    int64_t index, int valid, const float* values) {
  constexpr uintptr_t kBytes = N * sizeof(Out);
  static_assert(N % 4 == 0 && (kBytes == 8 || kBytes == 16), "a vector of 8 or 16 bytes");
  float f[N];
#pragma unroll
  for (int e = 0; e < N; e += 4) {
    const float4 v = *reinterpret_cast<const float4*>(values + e);
    f[e] = v.x;
    f[e + 1] = v.y;
    f[e + 2] = v.z;
    f[e + 3] = v.w;
  }
  const auto aligned = [&](const Out* p) {
    return !p || reinterpret_cast<uintptr_t>(p + index) % kBytes == 0;
  };
  const bool vector =
      valid == N && aligned(out) && aligned(terms.residual) && aligned(terms.addend);
  union Vector {
    std::conditional_t<kBytes == 16, uint4, uint2> bits;
    Out e[N];
  };
  // f += p's N elements (a constant bound: f stays in registers).
  const auto add = [&](const Out* p) {
    if (vector) {
      Vector v;
      v.bits = *reinterpret_cast<const decltype(v.bits)*>(p + index);
#pragma unroll
      for (int e = 0; e < N; ++e) f[e] += to_float(v.e[e]);
      return;
    }
#pragma unroll
    for (int e = 0; e < N; ++e) {
      if (e < valid) f[e] += to_float(p[index + e]);
    }
  };
  if (terms.residual) add(terms.residual);
  if (terms.addend) add(terms.addend);
  if (terms.scale != 1.0f) {
#pragma unroll
    for (int e = 0; e < N; ++e) f[e] *= terms.scale;
  }
  if (terms.leaky_relu) {
#pragma unroll
    for (int e = 0; e < N; ++e) f[e] = f[e] < 0.0f ? f[e] * terms.slope : f[e];
  }
  if (!vector) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      if (e < valid) out[index + e] = from_float<Out>(f[e]);
    }
    return;
  }
  Vector q;
#pragma unroll
  for (int e = 0; e < N; ++e) q.e[e] = from_float<Out>(f[e]);
  *reinterpret_cast<decltype(q.bits)*>(out + index) = q.bits;
}

}  // namespace voxd::cuda
