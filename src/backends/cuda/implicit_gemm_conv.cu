#include <mma.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/implicit_gemm_conv.h"

namespace voxd::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 16;         // wmma's m = n = k
constexpr int kBlockSteps = 256;  // output time steps per block, 32 per warp
constexpr size_t kMaxSharedBytes = 48 << 10;

// Shared memory of one block: the input window [rows][16 channels], every tap's weights
// [kernel][block_channels][16 channels] and one 16 × 16 F32 staging tile per warp.
size_t shared_bytes(int64_t kernel, int64_t halo, int block_channels) {
  return static_cast<size_t>(kBlockSteps + halo) * kTile * 2 +
         static_cast<size_t>(kernel) * block_channels * kTile * 2 +
         static_cast<size_t>(kWarps) * kTile * kTile * sizeof(float);
}

// Block (t tile, channel tile, sequence): out[b, co, t] = bias[co] + residual[b, co, t] +
// Σ_ci Σ_k w[co, ci, k] · f(x[b, ci, t + k·dilation − padding]), f the optional leaky ReLU.
// Warp w owns time steps [32w, 32w + 32) of the tile for all of its channels.
template <typename T, int kBlockChannels>
__global__ void __launch_bounds__(kThreads)
    implicit_gemm_conv_kernel(ImplicitGemmConv a, int halo) {
  constexpr int kChannelFrags = kBlockChannels / kTile;
  constexpr int kStepFrags = kBlockSteps / kTile / kWarps;
  extern __shared__ __align__(128) unsigned char shared[];
  const int rows = kBlockSteps + halo;
  const int kernel = static_cast<int>(a.kernel);
  const int dilation = static_cast<int>(a.dilation);
  T* window = reinterpret_cast<T*>(shared);  // [rows][16]: input step t0 − padding + row
  T* taps = window + rows * kTile;           // [kernel][kBlockChannels][16]
  float* staging = reinterpret_cast<float*>(taps + kernel * kBlockChannels * kTile);

  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kBlockSteps;
  const int64_t co0 = static_cast<int64_t>(blockIdx.y) * kBlockChannels;
  const int64_t b = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const T* x = static_cast<const T*>(a.x) + b * a.in_channels * a.in_steps;
  const T* w = static_cast<const T*>(a.arranged_weight);

  wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float> acc[kChannelFrags][kStepFrags];
  for (auto& row : acc) {
    for (auto& f : row) wmma::fill_fragment(f, 0.0f);
  }

  for (int64_t ci0 = 0; ci0 < a.in_channels; ci0 += kTile) {
    // Time-fastest reads (coalesced); zeros outside the sequence and past the last channel.
    for (int i = threadIdx.x; i < rows * kTile; i += kThreads) {
      const int row = i % rows;
      const int c = i / rows;
      const int64_t step = t0 - a.padding + row;
      const int64_t ci = ci0 + c;
      float v = 0.0f;
      if (step >= 0 && step < a.in_steps && ci < a.in_channels) {
        v = to_float(x[ci * a.in_steps + step]);
        if (a.input_leaky_relu && v < 0.0f) v *= a.input_slope;
      }
      window[row * kTile + c] = from_float<T>(v);
    }
    // The arranged weights hold each tap's rows [co][16 channels] of this channel step
    // contiguously: 16-byte loads, zeros past the last output channel.
    const T* step_taps = w + (ci0 / kTile) * kernel * a.out_channels * kTile;
    constexpr int kVector = 16 / sizeof(T);  // elements per 16-byte load
    for (int i = threadIdx.x; i < kernel * kBlockChannels * kTile / kVector; i += kThreads) {
      const int e = i * kVector;
      const int k = e / (kBlockChannels * kTile);
      const int m = (e / kTile) % kBlockChannels;
      const int c = e % kTile;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (co0 + m < a.out_channels) {
        v = *reinterpret_cast<const uint4*>(step_taps + (k * a.out_channels + co0 + m) * kTile + c);
      }
      *reinterpret_cast<uint4*>(taps + (k * kBlockChannels + m) * kTile + c) = v;
    }
    __syncthreads();
    for (int k = 0; k < kernel; ++k) {
      wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, T, wmma::row_major>
          weights[kChannelFrags];
      for (int mi = 0; mi < kChannelFrags; ++mi) {
        wmma::load_matrix_sync(weights[mi], taps + (k * kBlockChannels + mi * kTile) * kTile,
                               kTile);
      }
      for (int ni = 0; ni < kStepFrags; ++ni) {
        const int n0 = (warp * kStepFrags + ni) * kTile;
        // Column n of this 16 × 16 input block is window row n0 + n + k·dilation: column-major
        // with leading dimension 16, 32-byte aligned whatever the shift.
        wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, T, wmma::col_major> inputs;
        wmma::load_matrix_sync(inputs, window + (n0 + k * dilation) * kTile, kTile);
        for (int mi = 0; mi < kChannelFrags; ++mi) {
          wmma::mma_sync(acc[mi][ni], weights[mi], inputs, acc[mi][ni]);
        }
      }
    }
    __syncthreads();
  }

  const T* bias = static_cast<const T*>(a.bias);
  const T* residual = static_cast<const T*>(a.residual);
  T* out = static_cast<T*>(a.out);
  float* tile = staging + warp * kTile * kTile;
  for (int mi = 0; mi < kChannelFrags; ++mi) {
    for (int ni = 0; ni < kStepFrags; ++ni) {
      wmma::store_matrix_sync(tile, acc[mi][ni], kTile, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < kTile * kTile; e += 32) {
        const int64_t co = co0 + mi * kTile + e / kTile;
        const int64_t t = t0 + (warp * kStepFrags + ni) * kTile + e % kTile;
        if (co < a.out_channels && t < a.out_steps) {
          const int64_t index = (b * a.out_channels + co) * a.out_steps + t;
          float v = tile[e];
          if (bias) v += to_float(bias[co]);
          if (residual) v += to_float(residual[index]);
          out[index] = from_float<T>(v);
        }
      }
      __syncwarp();
    }
  }
}

// arranged[((s·kernel + k)·out_channels + co)·16 + c] = weight[co, 16s + c, k], zero past the
// last input channel.
template <typename T>
__global__ void arrange_weights_kernel(const T* weight, T* arranged, int64_t out_channels,
                                       int64_t in_channels, int64_t kernel, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % kTile;
    const int64_t co = (i / kTile) % out_channels;
    const int64_t k = (i / (kTile * out_channels)) % kernel;
    const int64_t step = i / (kTile * out_channels * kernel);
    const int64_t ci = step * kTile + c;
    arranged[i] =
        ci < in_channels ? weight[(co * in_channels + ci) * kernel + k] : from_float<T>(0.0f);
  }
}

template <typename T, int kBlockChannels>
void launch(const ImplicitGemmConv& a, cudaStream_t stream, const char* op) {
  const int halo = static_cast<int>((a.kernel - 1) * a.dilation);
  const size_t bytes = shared_bytes(a.kernel, halo, kBlockChannels);
  const dim3 grid(static_cast<unsigned>((a.out_steps + kBlockSteps - 1) / kBlockSteps),
                  static_cast<unsigned>((a.out_channels + kBlockChannels - 1) / kBlockChannels),
                  static_cast<unsigned>(a.batch));
  implicit_gemm_conv_kernel<T, kBlockChannels><<<grid, kThreads, bytes, stream>>>(a, halo);
  check(cudaGetLastError(), "implicit_gemm_conv_kernel launch", op);
}

template <typename T>
void launch_for(const ImplicitGemmConv& a, cudaStream_t stream, const char* op) {
  const int64_t n = implicit_gemm_arranged_weight_elements(a.out_channels, a.in_channels, a.kernel);
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  arrange_weights_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<const T*>(a.weight),
                                                        static_cast<T*>(a.arranged_weight),
                                                        a.out_channels, a.in_channels, a.kernel, n);
  check(cudaGetLastError(), "arrange_weights_kernel launch", op);
  if (a.out_channels <= 32) {
    launch<T, 32>(a, stream, op);
  } else {
    launch<T, 64>(a, stream, op);
  }
}

}  // namespace

int64_t implicit_gemm_arranged_weight_elements(int64_t out_channels, int64_t in_channels,
                                               int64_t kernel) {
  return (in_channels + kTile - 1) / kTile * kernel * out_channels * kTile;
}

bool implicit_gemm_conv1d_supported(DType dtype, int64_t kernel, int64_t dilation, int64_t stride,
                                    int64_t groups) {
  if ((dtype != DType::F16 && dtype != DType::BF16) || stride != 1 || groups != 1 || kernel < 1 ||
      dilation < 1 || kernel > 64 || dilation > 64) {
    return false;
  }
  return shared_bytes(kernel, (kernel - 1) * dilation, 64) <= kMaxSharedBytes;
}

void implicit_gemm_conv1d(const ImplicitGemmConv& a, cudaStream_t stream, const char* op) {
  if (a.batch == 0 || a.out_channels == 0 || a.out_steps == 0) return;
  if (a.batch > 65535) {
    throw Error(std::string("cuda: ") + op + ": batch " + std::to_string(a.batch) +
                " exceeds the implicit-GEMM convolution's grid (65535)");
  }
  if (a.dtype == DType::F16) {
    launch_for<__half>(a, stream, op);
  } else if (a.dtype == DType::BF16) {
    launch_for<__nv_bfloat16>(a, stream, op);
  } else {
    throw Error(std::string("cuda: ") + op + ": the implicit-GEMM convolution takes F16 or BF16");
  }
}

}  // namespace voxd::cuda
