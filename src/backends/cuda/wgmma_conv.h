// conv1d's implicit GEMM on Hopper's own instructions (sm_90a). The tensor memory accelerator
// (TMA) copies each stage's weights and time-major input window into shared memory, one producer
// thread keeping up to eight stages ahead; one or two consumer warpgroups multiply them with wgmma
// (64 output channels × 256 steps each, F32 accumulators in registers, every tap a shifted view
// of the same window) and add the bias and residual in the epilogue. Runs on compute capability
// 9.0 only. Internal to the CUDA backend: implicit_gemm_conv1d() calls it after writing the
// time-major input.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/implicit_gemm_conv.h"

namespace voxd::cuda {

// Whether this build has the sm_90a kernel and the current device runs it (compute capability
// 9.0).
bool wgmma_conv_available();
// Whether wgmma_conv1d() takes `a` over a time-major input of `channels` padded channels: F16 or
// BF16, at least 64 output channels, 3, 5, 7 or 11 taps (the kernels built), nothing after the
// residual (no addend, scale or activation), a stage of its tile that fits shared memory twice,
// and at least `min_blocks` tiles (fewer, smaller tiles fill the device better).
bool wgmma_conv_fits(const ImplicitGemmConv& a, int64_t channels, int64_t min_blocks);
// Queues the convolution over a.transposed_input, group-major: [batch][channels / 8][rows][8]
// (implicit_gemm_conv1d writes it so for this kernel), first arranging the weights into
// a.arranged_weight in this kernel's order (implicit_gemm_arranged_weight_elements() of them).
void wgmma_conv1d(const ImplicitGemmConv& a, int64_t rows, int64_t channels, cudaStream_t stream,
                  const char* op);

}  // namespace voxd::cuda
