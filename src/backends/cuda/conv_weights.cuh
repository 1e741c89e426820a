// The weight order both implicit-GEMM convolution kernels read: groups of input channels, each
// group's weights for every tap and output channel contiguous, so that a block loads a stage's
// weights with wide copies. Internal to the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/implicit_gemm_conv.h"

namespace voxd::cuda {

// arranged[((g·kernel + k)·out_channels + co)·kGroup + e] = weight[co, kGroup·g + e, k] for the
// n elements of arranged, zero past the last input channel.
template <int kGroup, typename T>
__global__ void arrange_weights_kernel(const T* weight, T* arranged, int64_t out_channels,
                                       int64_t in_channels, int64_t kernel, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i % kGroup;
    const int64_t co = (i / kGroup) % out_channels;
    const int64_t k = (i / (kGroup * out_channels)) % kernel;
    const int64_t group = i / (kGroup * out_channels * kernel);
    const int64_t ci = group * kGroup + e;
    arranged[i] =
        ci < in_channels ? weight[(co * in_channels + ci) * kernel + k] : from_float<T>(0.0f);
  }
}

// Queues the arrangement of a.weight into a.arranged_weight in groups of kGroup input channels;
// throws voxd::Error naming `op` when the launch fails.
template <int kGroup, typename T>
void arrange_weights(const ImplicitGemmConv& a, cudaStream_t stream, const char* op) {
  const int64_t n = implicit_gemm_arranged_weight_elements(a.out_channels, a.in_channels, a.kernel);
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  arrange_weights_kernel<kGroup, T><<<blocks, 256, 0, stream>>>(
      static_cast<const T*>(a.weight), static_cast<T*>(a.arranged_weight), a.out_channels,
      a.in_channels, a.kernel, n);
  check(cudaGetLastError(), "arrange_weights_kernel launch", op);
}

}  // namespace voxd::cuda
