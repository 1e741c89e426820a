// The weight order both implicit-GEMM convolution kernels read: groups of input channels, each
// group's weights for every tap and output channel contiguous, so that a block loads a stage's
// weights with wide copies. Internal to the CUDA backend.
#pragma once

#include <cstdint>

#include "backends/cuda/device_types.cuh"

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

}  // namespace voxd::cuda
