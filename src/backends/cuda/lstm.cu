#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/lstm.h"

namespace voxd::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// Block (u, b): warps w = 0..3 take hidden unit j = 4u + w of batch item b at step `step`.
template <typename T>
__global__ void lstm_step_kernel(const T* x_gates, const T* w_hh, const float* h_in, float* h_out,
                                 float* c, T* out, const int64_t* lengths, int64_t steps,
                                 int64_t hidden, int64_t step, bool reverse) {
  extern __shared__ float h_prev[];  // [hidden]
  const int64_t b = blockIdx.y;
  for (int64_t k = threadIdx.x; k < hidden; k += blockDim.x) h_prev[k] = h_in[b * hidden + k];
  __syncthreads();
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (j >= hidden) return;
  const int64_t length = lengths[b];
  if (step >= length) {  // this sequence has ended: its state carries over
    if (lane == 0) h_out[b * hidden + j] = h_prev[j];
    return;
  }
  const int64_t t = reverse ? length - 1 - step : step;
  float sums[4];
  for (int gate = 0; gate < 4; ++gate) {
    const T* row = w_hh + (gate * hidden + j) * hidden;
    float dot = 0.0f;
    for (int64_t k = lane; k < hidden; k += 32) dot += to_float(row[k]) * h_prev[k];
    for (int offset = 16; offset > 0; offset >>= 1) {
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    }
    sums[gate] = dot;
  }
  if (lane != 0) return;
  const T* xg = x_gates + (b * steps + t) * 4 * hidden;
  const float in = sigmoid(to_float(xg[j]) + sums[0]);
  const float forget = sigmoid(to_float(xg[hidden + j]) + sums[1]);
  const float cell = tanhf(to_float(xg[2 * hidden + j]) + sums[2]);
  const float output = sigmoid(to_float(xg[3 * hidden + j]) + sums[3]);
  const float next_c = forget * c[b * hidden + j] + in * cell;
  c[b * hidden + j] = next_c;
  const float next_h = output * tanhf(next_c);
  h_out[b * hidden + j] = next_h;
  out[(b * steps + t) * hidden + j] = from_float<T>(next_h);
}

}  // namespace

void lstm(const LstmLayer& layer, cudaStream_t stream, const char* op) {
  const size_t out_bytes =
      static_cast<size_t>(layer.batch * layer.steps * layer.hidden) * dtype_size(layer.dtype);
  VOXD_CUDA_CHECK(op, cudaMemsetAsync(layer.out, 0, out_bytes, stream));
  if (layer.longest == 0 || layer.hidden == 0) return;
  const dim3 grid(static_cast<unsigned>((layer.hidden + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>(layer.batch));
  const size_t shared = static_cast<size_t>(layer.hidden) * sizeof(float);
  dispatch_float(layer.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t step = 0; step < layer.longest; ++step) {
      const bool from_state = step % 2 == 0;
      lstm_step_kernel<T><<<grid, kWarpsPerBlock * 32, shared, stream>>>(
          static_cast<const T*>(layer.x_gates), static_cast<const T*>(layer.w_hh),
          from_state ? layer.h : layer.h_scratch, from_state ? layer.h_scratch : layer.h, layer.c,
          static_cast<T*>(layer.out), layer.lengths, layer.steps, layer.hidden, step,
          layer.reverse);
      VOXD_CUDA_CHECK(op, cudaGetLastError());
    }
  });
  if (layer.longest % 2 == 1) {  // the last step wrote the scratch copy
    VOXD_CUDA_CHECK(op,
                    cudaMemcpyAsync(layer.h, layer.h_scratch,
                                    static_cast<size_t>(layer.batch * layer.hidden) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream));
  }
}

}  // namespace voxd::cuda
