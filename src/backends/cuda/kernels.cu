// Straightforward, correct kernels first: one grid-stride loop per elementwise op, a block per
// row for layer_norm and attention. bench/NOTES.md lists what to measure before making any of
// them faster.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/kernels.h"
#include "core/error.h"

namespace voxd::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

int blocks_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

void check_launch(const char* op) {
  check(cudaGetLastError(), "kernel launch", op);
}

__device__ __forceinline__ float value_of(const RopeFrequencies& f, int64_t j) {
  return f.device != nullptr ? f.device[j] : f.values[j];
}

__device__ __forceinline__ int64_t global_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__device__ int64_t offset_of(int64_t i, const Layout& layout) {
  int64_t offset = 0;
  for (int d = layout.rank - 1; d >= 0; --d) {
    const int64_t size = layout.sizes[d];
    offset += (i % size) * layout.strides[d];
    i /= size;
  }
  return offset;
}

// Element conversion with convert_elements' rules: through double, floats to ints saturating
// with NaN -> 0, I64 <-> I32 by plain cast.
__device__ double load_double(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(p)[i];
    case DType::F16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case DType::BF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::I32:
      return static_cast<const int32_t*>(p)[i];
    case DType::I64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  }
  return 0;
}

__device__ int32_t saturate_i32(double v) {
  if (isnan(v)) return 0;
  if (v <= -2147483648.0) return INT32_MIN;
  if (v >= 2147483647.0) return INT32_MAX;
  return static_cast<int32_t>(v);
}

__device__ int64_t saturate_i64(double v) {
  if (isnan(v)) return 0;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  if (v >= 9223372036854775807.0) return INT64_MAX;  // the bound rounds to 2^63, as on the host
  return static_cast<int64_t>(v);
}

__device__ void store_double(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::F32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::F16:
      static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v));
      break;
    case DType::BF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v));
      break;
    case DType::I32:
      static_cast<int32_t*>(p)[i] = saturate_i32(v);
      break;
    case DType::I64:
      static_cast<int64_t*>(p)[i] = saturate_i64(v);
      break;
  }
}

__global__ void copy_kernel(const void* src, DType from, Layout layout, void* dst, DType to,
                            int64_t n) {
  const bool ints =
      (from == DType::I32 || from == DType::I64) && (to == DType::I32 || to == DType::I64);
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t s = offset_of(i, layout);
    if (ints) {
      const int64_t v = from == DType::I64 ? static_cast<const int64_t*>(src)[s]
                                           : static_cast<const int32_t*>(src)[s];
      if (to == DType::I64) {
        static_cast<int64_t*>(dst)[i] = v;
      } else {
        static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v);
      }
    } else {
      store_double(dst, to, i, load_double(src, from, s));
    }
  }
}

template <typename U>
__global__ void fill_kernel(U* dst, U value, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) dst[i] = value;
}

__device__ __forceinline__ float unary_value(float v, UnaryOp kind, float alpha) {
  float r = 0;
  switch (kind) {
    case UnaryOp::Relu:
      r = v > 0 ? v : 0.0f;
      break;
    case UnaryOp::LeakyRelu:
      r = v >= 0 ? v : alpha * v;
      break;
    case UnaryOp::Tanh:
      r = tanhf(v);
      break;
    case UnaryOp::Exp:
      r = expf(v);
      break;
    case UnaryOp::Scale:
      r = alpha * v;
      break;
    case UnaryOp::Silu:
      r = v / (1.0f + expf(-v));
      break;
    case UnaryOp::Gelu:
      r = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
      break;
    case UnaryOp::Sin:
      r = sinf(v);
      break;
    case UnaryOp::Cos:
      r = cosf(v);
      break;
    case UnaryOp::ClampMax:
      r = v > alpha ? alpha : v;
      break;
  }
  return r;
}

template <typename T>
__global__ void unary_kernel(const T* x, T* out, int64_t n, UnaryOp kind, float alpha) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    out[i] = from_float<T>(unary_value(to_float(x[i]), kind, alpha));
  }
}

// The same over 16-byte vectors of T: a thread loads, computes and stores 16 / sizeof(T)
// elements at a time (a 2-byte load a thread left a large elementwise pass at about half of
// what the memory moves: a ReLU over 13,824 × 1,024 F16 values took 39 µs on an H100).
template <typename T>
__global__ void unary_vector_kernel(const uint4* x, uint4* out, int64_t vectors, UnaryOp kind,
                                    float alpha) {
  constexpr int kPerVector = 16 / sizeof(T);
  for (int64_t i = global_index(); i < vectors; i += grid_stride()) {
    uint4 v = x[i];
    T* elements = reinterpret_cast<T*>(&v);
#pragma unroll
    for (int j = 0; j < kPerVector; ++j) {
      elements[j] = from_float<T>(unary_value(to_float(elements[j]), kind, alpha));
    }
    out[i] = v;
  }
}

template <typename T>
__global__ void binary_kernel(const T* a, const T* b, Layout layout, T* out, int64_t n,
                              BinaryOp kind, bool same_shape) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const float x = to_float(a[i]);
    const float y = to_float(b[same_shape ? i : offset_of(i, layout)]);
    out[i] = from_float<T>(kind == BinaryOp::Add ? x + y : x * y);
  }
}

// One column row (b, c, tap) per blockIdx.y step, its time steps across x: the row's index
// arithmetic is done once per row, in 32 bits (the caller checks the sizes fit), so the inner
// loop is one add, one compare and a coalesced load and store. (The first version decomposed a
// flat 64-bit index per element: four 64-bit divisions each, 39 % of a B=1 LJSpeech pass.)
template <typename T>
__global__ void im2col_kernel(const T* x, int batch, int channels, int t_in, int c0, int cin_g,
                              int k, int stride, int padding, int dilation, int t0, int tc,
                              T* cols) {
  const int rows = batch * cin_g * k;
  for (int row = static_cast<int>(blockIdx.y); row < rows; row += static_cast<int>(gridDim.y)) {
    const int tap = row % k;
    const int c = (row / k) % cin_g;
    const int b = row / (k * cin_g);
    const T* x_row = x + (static_cast<int64_t>(b) * channels + c0 + c) * t_in;
    T* out = cols + static_cast<int64_t>(row) * tc;
    const int shift = t0 * stride - padding + tap * dilation;
    for (int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); t < tc;
         t += static_cast<int>(gridDim.x * blockDim.x)) {
      const int pos = t * stride + shift;
      out[t] = pos >= 0 && pos < t_in ? x_row[pos] : from_float<T>(0);
    }
  }
}

// cols [rows, k·units] for output rows r0 .. r0 + rows of the flattened [batch, t_out]: the
// units (16-byte vectors or single elements) of x [batch, t_in, units] (time-major) at step
// t − padding + tap·dilation for each tap in turn, zero outside [0, t_in), for output row r
// (sequence b, step t). Each thread copies one unit, so that reads and writes are both along
// the rows. All counts fit 32 bits (im2col_rows checks).
template <typename U>
__global__ void im2col_rows_kernel(const U* x, unsigned t_in, unsigned units, unsigned k,
                                   int padding, int dilation, unsigned t_out, unsigned r0,
                                   unsigned rows, U* cols) {
  const unsigned row_units = k * units;
  const unsigned total = rows * row_units;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const unsigned row = i / row_units;
    const unsigned rest = i - row * row_units;
    const unsigned tap = rest / units;
    const unsigned unit = rest - tap * units;
    const unsigned flat = r0 + row;
    const unsigned b = flat / t_out;
    const int step =
        static_cast<int>(flat - b * t_out) - padding + static_cast<int>(tap) * dilation;
    cols[i] = step >= 0 && static_cast<unsigned>(step) < t_in
                  ? x[(static_cast<size_t>(b) * t_in + static_cast<unsigned>(step)) * units + unit]
                  : U{};
  }
}

// out[b, c0 + c, t] += Σ cols[b, c, tap, t_in − t0] over the taps that reach output step t from
// an input step t_in in [t0, t0 + tc): with num = t + padding − tap·dilation, those where num is a
// multiple of stride (t_in = num / stride). One (b, c) row per grid row, steps along x; with
// dilation 1 only the taps ≡ t + padding (mod stride) are visited.
template <typename T>
__global__ void col2im_kernel(const float* cols, int64_t batch, int64_t cout_g, int64_t k,
                              int64_t t0, int64_t tc, int64_t stride, int64_t padding,
                              int64_t dilation, T* out, int64_t out_channels, int64_t c0,
                              int64_t t_out, int64_t t_lo, int64_t t_len) {
  for (int64_t row = blockIdx.y; row < batch * cout_g; row += gridDim.y) {
    const int64_t b = row / cout_g;
    const int64_t c = row % cout_g;
    const float* col = cols + row * k * tc;
    T* o = out + (b * out_channels + c0 + c) * t_out;
    for (int64_t t = t_lo + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         t < t_lo + t_len; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float acc = 0;
      const int64_t num = t + padding;
      if (dilation == 1) {
        int64_t tin = num / stride - t0;
        for (int64_t tap = num % stride; tap < k; tap += stride, --tin) {
          if (tin >= 0 && tin < tc) acc += col[tap * tc + tin];
        }
      } else {
        for (int64_t tap = 0; tap < k; ++tap) {
          const int64_t shifted = num - tap * dilation;
          if (shifted < 0 || shifted % stride != 0) continue;
          const int64_t tin = shifted / stride - t0;
          if (tin >= 0 && tin < tc) acc += col[tap * tc + tin];
        }
      }
      o[t] = from_float<T>(to_float(o[t]) + acc);
    }
  }
}

// Sum (or max) of `v` over the block; every thread gets the result. `shared` holds 32 floats.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  __syncthreads();  // `shared` may still be read from the previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = lane < warps ? shared[lane] : (kMax ? -INFINITY : 0.0f);
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  return v;
}

// One block per row; with `residual`, the row is x + residual rounded to T (an add kernel's
// output) wherever it is read.
template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* residual, const T* gamma, const T* beta,
                                  T* out, int64_t rows, int64_t c, float eps) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * c;
    const T* added = residual ? residual + r * c : nullptr;
    auto value = [&](int64_t j) {
      return added ? to_float(from_float<T>(to_float(in[j]) + to_float(added[j])))
                   : to_float(in[j]);
    };
    float sum = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) sum += value(j);
    const float mean = block_reduce<false>(sum, shared) / static_cast<float>(c);
    float sq = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float d = value(j) - mean;
      sq += d * d;
    }
    const float var = block_reduce<false>(sq, shared) / static_cast<float>(c);
    const float inv = rsqrtf(var + eps);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float y = (value(j) - mean) * inv * to_float(gamma[j]) + to_float(beta[j]);
      out[r * c + j] = from_float<T>(y);
    }
  }
}

// Sum of `v` over the warp; every lane gets it.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// layer_norm_kernel for rows of at most 32 * kPerLane values: one warp per row, the row (x +
// residual rounded to T, as there) read once into registers, mean and variance from them.
template <typename T, int kPerLane>
__global__ void layer_norm_warp_kernel(const T* x, const T* residual, const T* gamma, const T* beta,
                                       T* out, int64_t rows, int64_t c, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       r < rows; r += warps) {
    const T* in = x + r * c;
    const T* added = residual ? residual + r * c : nullptr;
    float v[kPerLane];
    float sum = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t j = lane + 32 * i;
      v[i] = 0;
      if (j < c) {
        v[i] =
            added ? to_float(from_float<T>(to_float(in[j]) + to_float(added[j]))) : to_float(in[j]);
      }
      sum += v[i];
    }
    const float mean = warp_sum(sum) / static_cast<float>(c);
    float sq = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const float d = lane + 32 * i < c ? v[i] - mean : 0.0f;
      sq += d * d;
    }
    const float inv = rsqrtf(warp_sum(sq) / static_cast<float>(c) + eps);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t j = lane + 32 * i;
      if (j < c) {
        out[r * c + j] =
            from_float<T>((v[i] - mean) * inv * to_float(gamma[j]) + to_float(beta[j]));
      }
    }
  }
}

// One block per row: the F32 normalised value rounded to T, then times the weight, rounded again
// (transformers' LlamaRMSNorm in half precision).
template <typename T>
__global__ void rms_norm_kernel(const T* x, const T* weight, T* out, int64_t rows, int64_t c,
                                float eps) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * c;
    float sq = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float v = to_float(in[j]);
      sq += v * v;
    }
    const float inv = rsqrtf(block_reduce<false>(sq, shared) / static_cast<float>(c) + eps);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const T normalised = from_float<T>(to_float(in[j]) * inv);
      out[r * c + j] = from_float<T>(to_float(weight[j]) * to_float(normalised));
    }
  }
}

// rms_norm_kernel after a residual add, one block per row: sum = x + delta (delta rounded to T
// first) is written and normalised as rms_norm_kernel does, the result converted to O. The sum is
// formed again in the second pass (the same rounding) instead of being kept.
template <typename T, typename D, typename O>
__global__ void add_rms_norm_kernel(const T* x, const D* delta, const T* weight, T* sum, O* normed,
                                    int64_t rows, int64_t c, float eps) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto added = [&](int64_t j) {
      return to_float(from_float<T>(to_float(x[r * c + j]) +
                                    to_float(from_float<T>(to_float(delta[r * c + j])))));
    };
    float sq = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float v = added(j);
      sq += v * v;
    }
    const float inv = rsqrtf(block_reduce<false>(sq, shared) / static_cast<float>(c) + eps);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float v = added(j);
      const T normalised = from_float<T>(v * inv);
      normed[r * c + j] =
          from_float<O>(to_float(from_float<T>(to_float(weight[j]) * to_float(normalised))));
      sum[r * c + j] = from_float<T>(v);
    }
  }
}

// out [rows, width] = silu(gate) rounded to T, times up, of gate_up [rows, 2·width].
template <typename T>
__global__ void swiglu_kernel(const T* gate_up, T* out, int64_t width, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t r = i / width;
    const int64_t j = i % width;
    const float g = to_float(gate_up[r * 2 * width + j]);
    const T silu = from_float<T>(g / (1.0f + expf(-g)));
    out[i] = from_float<T>(to_float(silu) * to_float(gate_up[r * 2 * width + width + j]));
  }
}

// One thread per rotated pair (dimension j and j + half of one head at one step).
template <typename T>
__global__ void rope_kernel(const T* x, T* out, SequenceValues start_positions,
                            RopeFrequencies inv_freq, int64_t steps, int64_t heads, int64_t half,
                            int64_t pairs) {
  for (int64_t i = global_index(); i < pairs; i += grid_stride()) {
    const int64_t j = i % half;
    const int64_t head_row = i / half;          // (batch, step, head)
    const int64_t step_row = head_row / heads;  // (batch, step)
    const auto position =
        static_cast<float>(value_of(start_positions, step_row / steps) + step_row % steps);
    float s = 0;
    float c = 0;
    sincosf(__fmul_rn(position, value_of(inv_freq, j)), &s, &c);
    const int64_t base = head_row * 2 * half + j;
    const float x1 = to_float(x[base]);
    const float x2 = to_float(x[base + half]);
    out[base] = from_float<T>(x1 * c - x2 * s);
    out[base + half] = from_float<T>(x2 * c + x1 * s);
  }
}

// cache [batch, tmax, inner] rows offsets[b] + t = rows [batch, t, inner] (elements of U).
template <typename U>
__global__ void write_rows_kernel(U* cache, const U* rows, SequenceValues offsets, int64_t steps,
                                  int64_t tmax, int64_t inner, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t b = i / (steps * inner);
    const int64_t rest = i % (steps * inner);
    cache[(b * tmax + value_of(offsets, b)) * inner + rest] = rows[i];
  }
}

// One (batch, channel) row per grid row, output steps across x; the row's taps are read by every
// thread of the block (broadcast from the cache), the input window coalesced per tap.
template <typename T>
__global__ void depthwise_conv1d_kernel(const T* x, const T* weight, const T* bias, T* out,
                                        int64_t rows, int64_t channels, int64_t t_in, int64_t t_out,
                                        int64_t k, int64_t stride, int64_t padding,
                                        int64_t dilation) {
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const int64_t c = row % channels;
    const T* xr = x + row * t_in;
    const T* w = weight + c * k;
    const float b = bias != nullptr ? to_float(bias[c]) : 0.0f;
    for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < t_out;
         t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float acc = b;
      const int64_t start = t * stride - padding;
      for (int64_t tap = 0; tap < k; ++tap) {
        const int64_t pos = start + tap * dilation;
        if (pos >= 0 && pos < t_in) acc += to_float(w[tap]) * to_float(xr[pos]);
      }
      out[row * t_out + t] = from_float<T>(acc);
    }
  }
}

// conv1d_rows_few_outputs: a block computes kFewOutputSteps output steps of one sequence. It
// stages the input rows its steps read, [window][cin] as F32 with a row stride of an odd number
// of 16-byte vectors (a quarter-warp's vector reads of neighbouring rows fall in distinct banks),
// and the weights as [co][tap][cin]; each thread then sums one output step's cout values.
constexpr int kFewOutputSteps = 128;
constexpr int kMaxFewOutputs = 4;
constexpr size_t kFewOutputsShared = 48 << 10;

__host__ __device__ int64_t few_outputs_row_stride(int64_t cin) {
  const int64_t vectors = (cin + 3) / 4;
  return 4 * (vectors % 2 == 0 ? vectors + 1 : vectors);
}

size_t few_outputs_shared_bytes(int64_t cin, int64_t cout, int64_t k, int64_t dilation) {
  const int64_t window = kFewOutputSteps + (k - 1) * dilation;
  return static_cast<size_t>(window * few_outputs_row_stride(cin) + cout * k * cin) * sizeof(float);
}

// A vector's elements of x at p (16-byte aligned) as F32.
template <typename T>
__device__ __forceinline__ void load_vector(const T* p, float (&v)[16 / sizeof(T)]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < static_cast<int>(16 / sizeof(T)); ++i) v[i] = to_float(e[i]);
}

template <typename T>
__global__ void conv1d_rows_few_outputs_kernel(const T* x, const T* weight, const T* bias, T* out,
                                               int64_t t_in, int cin, int64_t t_out, int cout,
                                               int k, int64_t padding, int dilation,
                                               bool vector_rows) {
  extern __shared__ __align__(16) float staged[];
  const int stride = static_cast<int>(few_outputs_row_stride(cin));
  const int window = kFewOutputSteps + (k - 1) * dilation;
  float* rows = staged;
  float* taps = staged + window * stride;  // [co][tap][ci]
  const int64_t b = blockIdx.y;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kFewOutputSteps;
  const int64_t first_row = t0 - padding;
  const T* xb = x + b * t_in * cin;
  if (vector_rows) {
    // Rows of whole 16-byte vectors: the window's rows are one contiguous run of x.
    constexpr int kVector = 16 / sizeof(T);
    const int vectors = window * cin / kVector;
#pragma unroll 4
    for (int i = threadIdx.x; i < vectors; i += blockDim.x) {
      const int r = i * kVector / cin;
      const int ci = i * kVector - r * cin;
      const int64_t row = first_row + r;
      float v[kVector];
      if (row >= 0 && row < t_in) {
        load_vector(xb + row * cin + ci, v);
      } else {
#pragma unroll
        for (int e = 0; e < kVector; ++e) v[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < kVector; e += 4) {
        *reinterpret_cast<float4*>(rows + r * stride + ci + e) =
            make_float4(v[e], v[e + 1], v[e + 2], v[e + 3]);
      }
    }
  } else {
    for (int i = threadIdx.x; i < window * cin; i += blockDim.x) {
      const int r = i / cin;
      const int ci = i - r * cin;
      const int64_t row = first_row + r;
      rows[r * stride + ci] = row >= 0 && row < t_in ? to_float(xb[row * cin + ci]) : 0.0f;
    }
  }
  for (int i = threadIdx.x; i < cout * k * cin; i += blockDim.x) {
    const int ci = i % cin;
    const int tap = (i / cin) % k;
    const int co = i / (cin * k);
    taps[i] = to_float(weight[(co * cin + ci) * k + tap]);
  }
  __syncthreads();
  const int64_t t = t0 + threadIdx.x;
  if (t >= t_out) return;
  float acc[kMaxFewOutputs];
#pragma unroll
  for (int co = 0; co < kMaxFewOutputs; ++co) {
    acc[co] = co < cout && bias != nullptr ? to_float(bias[co]) : 0.0f;
  }
  const bool vectors = cin % 4 == 0;
  for (int tap = 0; tap < k; ++tap) {
    const float* row = rows + (threadIdx.x + tap * dilation) * stride;
    if (vectors) {
      for (int ci = 0; ci < cin; ci += 4) {
        const float4 v = *reinterpret_cast<const float4*>(row + ci);
#pragma unroll
        for (int co = 0; co < kMaxFewOutputs; ++co) {
          if (co >= cout) break;
          const float4 w = *reinterpret_cast<const float4*>(taps + (co * k + tap) * cin + ci);
          acc[co] += w.x * v.x + w.y * v.y + w.z * v.z + w.w * v.w;
        }
      }
    } else {
      for (int ci = 0; ci < cin; ++ci) {
#pragma unroll
        for (int co = 0; co < kMaxFewOutputs; ++co) {
          if (co >= cout) break;
          acc[co] += taps[(co * k + tap) * cin + ci] * row[ci];
        }
      }
    }
  }
  T* o = out + (b * t_out + t) * cout;
#pragma unroll
  for (int co = 0; co < kMaxFewOutputs; ++co) {
    if (co < cout) o[co] = from_float<T>(acc[co]);
  }
}

// spectrum [frames_total, bins] (complex) = (real, imag) [items, bins, frames] of items
// [item0, item0 + frames_total / frames), with the imaginary parts of the DC bin and (even n_fft)
// the Nyquist bin zeroed, which an inverse real FFT ignores.
__global__ void pack_spectrum_kernel(const float* real, const float* imag, float2* spectrum,
                                     int64_t item0, int64_t bins, int64_t frames, int64_t n_fft,
                                     int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t k = i % bins;
    const int64_t g = i / bins;  // frame within the chunk
    const int64_t src = ((item0 + g / frames) * bins + k) * frames + g % frames;
    const bool real_only = k == 0 || (n_fft % 2 == 0 && k == n_fft / 2);
    spectrum[i] = make_float2(real[src], real_only ? 0.0f : imag[src]);
  }
}

// out [items, length] = overlap-add of the window-weighted inverse FFTs signal [items · frames,
// n_fft] (unscaled: ·scale), sample n_fft/2 + i of each item, divided by Σ window² there.
__global__ void overlap_add_kernel(const float* signal, const float* window, float* out,
                                   int64_t frames, int64_t n_fft, int64_t hop, int64_t length,
                                   float scale, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t item = i / length;
    const int64_t pos = n_fft / 2 + i % length;
    const int64_t first = pos < n_fft ? 0 : (pos - n_fft) / hop + 1;
    const int64_t last = min(frames - 1, pos / hop);
    float sum = 0;
    float envelope = 0;
    for (int64_t f = first; f <= last; ++f) {
      const int64_t m = pos - f * hop;
      const float w = window[m];
      sum += signal[(item * frames + f) * n_fft + m] * scale * w;
      envelope += w * w;
    }
    out[i] = sum / envelope;
  }
}

template <typename T>
__global__ void gather_rows_kernel(const T* src, int64_t src_rows, const int64_t* rows, T* out,
                                   int64_t n, int64_t c) {
  for (int64_t i = global_index(); i < n * c; i += grid_stride()) {
    const int64_t row = rows[i / c];
    out[i] = row >= 0 && row < src_rows ? src[row * c + i % c] : from_float<T>(0);
  }
}

template <typename T>
__global__ void zero_beyond_kernel(T* x, const int64_t* lengths, int64_t batch, int64_t t,
                                   int64_t c) {
  for (int64_t i = global_index(); i < batch * t * c; i += grid_stride()) {
    const int64_t row = (i / c) % t;
    if (row >= lengths[i / (c * t)]) x[i] = from_float<T>(0);
  }
}

__global__ void bucketize_kernel(const float* x, int64_t count, const float* boundaries, int64_t n,
                                 int64_t* out) {
  for (int64_t i = global_index(); i < count; i += grid_stride()) {
    const float value = x[i];
    int64_t start = 0;
    int64_t end = n;
    while (start < end) {  // host::bucket_index's loop, so NaN lands at n
      const int64_t mid = start + ((end - start) >> 1);
      if (!(boundaries[mid] >= value)) {
        start = mid + 1;
      } else {
        end = mid;
      }
    }
    out[i] = start;
  }
}

// One block per (batch, query, head) row of scores, softmax in F32 over its visible keys.
// Row r of scores [rows, tk] (query r % rows_per_head, i.e. first_query + that in the
// sequence): probs = softmax over the visible keys (from key_start, below key_length, and with
// `causal` at most the query's own position), zeros for the other keys below tk, NaN everywhere
// when no key is visible. probs may be scores (T = float).
template <typename T>
__global__ void masked_softmax_kernel(const float* scores, T* probs, int64_t rows,
                                      int64_t rows_per_sequence, int64_t rows_per_head, int64_t tk,
                                      const int64_t* key_lengths, const int64_t* key_starts,
                                      const int64_t* offsets, bool causal, int64_t first_query) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t sequence = r / rows_per_sequence;
    const int64_t key_length = key_lengths[sequence];
    const int64_t first = key_starts[sequence];
    int64_t limit = key_length;
    if (causal) {  // the last visible key
      const int64_t last = first_query + offsets[sequence] + r % rows_per_head;
      limit = last < 0 ? 0 : (last + 1 < limit ? last + 1 : limit);
    }
    const float* s = scores + r * tk;
    T* p = probs + r * tk;
    if (limit <= first) {
      for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) p[j] = from_float<T>(NAN);
      continue;
    }
    float local_max = -INFINITY;
    for (int64_t j = first + threadIdx.x; j < limit; j += blockDim.x) {
      local_max = fmaxf(local_max, s[j]);
    }
    const float max_score = block_reduce<true>(local_max, shared);
    float local_sum = 0;
    for (int64_t j = first + threadIdx.x; j < limit; j += blockDim.x) {
      local_sum += __expf(s[j] - max_score);
    }
    const float inv_sum = 1.0f / block_reduce<false>(local_sum, shared);
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) {
      p[j] = from_float<T>(j >= first && j < limit ? __expf(s[j] - max_score) * inv_sum : 0.0f);
    }
  }
}

// Where attention_over_rows finds sequence b's keys: a contiguous cache [B, rows, H, D] with
// key lengths, key starts and query offsets (causal or not), ...
struct ContiguousKeys {
  int64_t rows;
  SequenceValues key_lengths;
  SequenceValues key_starts;
  SequenceValues offsets;
  bool causal;
  // Keys from first to below visible may be seen by query i.
  __device__ int64_t first(int64_t b) const {
    const int64_t start = value_of(key_starts, b);
    return start < 0 ? 0 : start;
  }
  __device__ int64_t visible(int64_t b, int64_t i) const {
    const int64_t length = value_of(key_lengths, b);
    if (!causal) return length;
    const int64_t last = value_of(offsets, b) + i;
    return last < 0 ? 0 : (last + 1 < length ? last + 1 : length);
  }
  // The row (in units of heads · dim elements) of key j (from first on; never masked).
  __device__ int64_t row_of(int64_t b, int64_t j) const { return b * rows + j; }
};

// Kernel parameters are limited (4 KB before CUDA 12.1): three SequenceValues fit, a fourth would
// not.
static_assert(sizeof(ContiguousKeys) <= 3584);

// ... or pages [N, S, H, D] through a page table [B, P] (device memory), causal from each
// sequence's position, from its key start (none: 0).
struct PagedKeys {
  const int64_t* page_table;
  const int64_t* positions;
  const int64_t* key_starts;
  int64_t pages_per_sequence;
  int64_t page_size;
  int64_t pages;
  __device__ int64_t first(int64_t b) const { return key_starts == nullptr ? 0 : key_starts[b]; }
  __device__ int64_t visible(int64_t b, int64_t i) const {
    const int64_t last = positions[b] + i;
    const int64_t capacity = pages_per_sequence * page_size;
    return last < 0 ? 0 : (last + 1 < capacity ? last + 1 : capacity);
  }
  __device__ int64_t row_of(int64_t b, int64_t j) const {
    const int64_t page = page_table[b * pages_per_sequence + j / page_size];
    return page < 0 || page >= pages ? -1 : page * page_size + j % page_size;
  }
};

// The block's softmax over the scores probabilities[first, limit) (in shared memory), in place,
// each probability rounded to T once (the gemm path's numbers). When no key is visible (every
// score −inf) it writes NaN to the query's dim outputs `o`, as the host backends give, and
// returns false for the whole block.
template <typename T>
__device__ bool softmax_of_scores(float* probabilities, int64_t first, int64_t limit, float* reduce,
                                  T* o, int64_t dim) {
  float local_max = -INFINITY;
  for (int64_t j = first + threadIdx.x; j < limit; j += blockDim.x) {
    local_max = fmaxf(local_max, probabilities[j]);
  }
  const float max_score = block_reduce<true>(local_max, reduce);
  if (max_score == -INFINITY) {
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) o[d] = from_float<T>(NAN);
    return false;
  }
  float local_sum = 0.0f;
  for (int64_t j = first + threadIdx.x; j < limit; j += blockDim.x) {
    local_sum += __expf(probabilities[j] - max_score);
  }
  const float inv_sum = 1.0f / block_reduce<false>(local_sum, reduce);
  for (int64_t j = first + threadIdx.x; j < limit; j += blockDim.x) {
    probabilities[j] = to_float(from_float<T>(__expf(probabilities[j] - max_score) * inv_sum));
  }
  return true;
}

// Attention of one query per block over its sequence's keys, wherever Keys keeps them: block
// (b·heads + h, i) computes query i of head h of sequence b. Scores scale·q·k (F32, a warp per
// key; a masked key scores −inf), the softmax over the visible keys, each probability rounded to
// T once, then out = Σ p·v accumulated in F32 and rounded once (the gemm path's numbers), NaN
// when the query sees no key.
template <typename T, typename Keys>
__global__ void attention_over_rows_kernel(const T* q, const T* k, const T* v, T* out, int64_t tq,
                                           int64_t heads, int64_t dim, float scale, Keys keys) {
  extern __shared__ float shared_memory[];
  float* query = shared_memory;          // [dim]
  float* partial = query + dim;          // [blockDim.x]
  float* reduce = partial + blockDim.x;  // [32]
  float* probabilities = reduce + 32;    // [visible keys]
  const int64_t sequence = blockIdx.x / heads;
  const int64_t head = blockIdx.x % heads;
  const int64_t i = blockIdx.y;
  const int64_t row = heads * dim;  // elements between key rows
  const int64_t first = keys.first(sequence);
  const int64_t limit = keys.visible(sequence, i);
  T* o = out + ((sequence * tq + i) * heads + head) * dim;
  const T* qrow = q + ((sequence * tq + i) * heads + head) * dim;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) query[d] = to_float(qrow[d]);
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  for (int64_t j = first + threadIdx.x / 32; j < limit; j += warps) {
    const int64_t key_row = keys.row_of(sequence, j);
    if (key_row < 0) {
      if (lane == 0) probabilities[j] = -INFINITY;
      continue;
    }
    const T* key = k + key_row * row + head * dim;
    float dot = 0.0f;
    for (int64_t d = lane; d < dim; d += 32) dot += query[d] * to_float(key[d]);
    for (int offset = 16; offset > 0; offset >>= 1) {
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    }
    if (lane == 0) probabilities[j] = scale * dot;
  }
  __syncthreads();
  if (!softmax_of_scores(probabilities, first, limit, reduce, o, dim)) return;
  __syncthreads();
  // Thread t sums the keys j ≡ t / dim (mod groups) for element t % dim, the groups added after;
  // with dim past the block, each thread sums every key for elements t, t + blockDim.x, ...
  const int64_t groups = blockDim.x / dim;
  if (groups == 0) {
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = first; j < limit; ++j) {
        const int64_t key_row = keys.row_of(sequence, j);
        if (key_row >= 0) acc += probabilities[j] * to_float(v[key_row * row + head * dim + d]);
      }
      o[d] = from_float<T>(acc);
    }
    return;
  }
  if (threadIdx.x < groups * dim) {
    const int64_t d = threadIdx.x % dim;
    float acc = 0.0f;
    for (int64_t j = first + threadIdx.x / dim; j < limit; j += groups) {
      const int64_t key_row = keys.row_of(sequence, j);
      if (key_row >= 0) acc += probabilities[j] * to_float(v[key_row * row + head * dim + d]);
    }
    partial[threadIdx.x] = acc;
  }
  __syncthreads();
  if (threadIdx.x < dim) {
    float sum = 0.0f;
    for (int64_t g = 0; g < groups; ++g) sum += partial[g * dim + threadIdx.x];
    o[threadIdx.x] = from_float<T>(sum);
  }
}

// out [B, T, ...] row t of b: pages [N, S, ...] row of position positions[b] + t, unless missing.
template <typename U>
__global__ void write_pages_kernel(U* pages, const U* rows, PagedKeys where, int64_t steps,
                                   int64_t inner, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t b = i / (steps * inner);
    const int64_t t = i / inner % steps;
    const int64_t position = where.positions[b] + t;
    if (position < 0 || position >= where.pages_per_sequence * where.page_size) continue;
    const int64_t page_row = where.row_of(b, position);
    if (page_row >= 0) pages[page_row * inner + i % inner] = rows[i];
  }
}

// qkv [B, T, 3, H, D] -> q_out [B, T, H, D] rotated, and the rotated keys and the values into
// their page rows, one thread per (b, t, h, j < D/2) pair; rope_kernel's and
// write_pages_kernel's rules.
template <typename T>
__global__ void qkv_to_pages_kernel(const T* qkv, T* k_pages, T* v_pages, T* q_out, PagedKeys where,
                                    RopeFrequencies inv_freq, int64_t steps, int64_t heads,
                                    int64_t half, int64_t pairs) {
  const int64_t dim = 2 * half;
  const int64_t row = heads * dim;
  for (int64_t i = global_index(); i < pairs; i += grid_stride()) {
    const int64_t j = i % half;
    const int64_t h = i / half % heads;
    const int64_t step_row = i / (half * heads);  // (b, t)
    const int64_t b = step_row / steps;
    const int64_t position = where.positions[b] + step_row % steps;
    float s = 0;
    float c = 0;
    sincosf(__fmul_rn(static_cast<float>(position), value_of(inv_freq, j)), &s, &c);
    const T* q = qkv + step_row * 3 * row + h * dim + j;
    const float q1 = to_float(q[0]);
    const float q2 = to_float(q[half]);
    T* qo = q_out + step_row * row + h * dim + j;
    qo[0] = from_float<T>(q1 * c - q2 * s);
    qo[half] = from_float<T>(q2 * c + q1 * s);
    if (position < 0 || position >= where.pages_per_sequence * where.page_size) continue;
    const int64_t page_row = where.row_of(b, position);
    if (page_row < 0) continue;
    const T* k = q + row;
    const T* v = k + row;
    const float k1 = to_float(k[0]);
    const float k2 = to_float(k[half]);
    T* ko = k_pages + page_row * row + h * dim + j;
    ko[0] = from_float<T>(k1 * c - k2 * s);
    ko[half] = from_float<T>(k2 * c + k1 * s);
    T* vo = v_pages + page_row * row + h * dim + j;
    vo[0] = v[0];
    vo[half] = v[half];
  }
}

// attention_over_rows_kernel's numbers with its memory traffic spread over the block: each key
// is read by kLanes threads, sixteen bytes each (dim = kLanes · 16 / sizeof(T)), so a block of
// kAttentionVecThreads threads scores and sums blockDim.x / kLanes keys at a time where the
// plain kernel has a warp per key for the scores and a thread per element for the sums
// (bench/NOTES.md, session 15). Shared memory holds the scores and the groups' partial sums
// only, so that eight blocks fit on a multiprocessor over a 4,096-position table.
template <typename T, typename Keys, int kLanes>
__global__ void attention_over_rows_vec_kernel(const T* q, const T* k, const T* v, T* out,
                                               int64_t tq, int64_t heads, float scale,
                                               int64_t capacity, Keys keys) {
  using V = Vec16<T>;
  constexpr int kVec = V::kSize;
  constexpr int64_t dim = static_cast<int64_t>(kLanes) * kVec;
  extern __shared__ float shared_memory[];
  const int groups = static_cast<int>(blockDim.x) / kLanes;
  float* reduce = shared_memory;                  // [32]
  float* partial = reduce + 32;                   // [groups · dim]
  float* probabilities = partial + groups * dim;  // [capacity]
  const int64_t sequence = blockIdx.x / heads;
  const int64_t head = blockIdx.x % heads;
  const int64_t i = blockIdx.y;
  const int64_t row = heads * dim;
  const int64_t first = keys.first(sequence);
  const int64_t limit = keys.visible(sequence, i);
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const int group = static_cast<int>(threadIdx.x) / kLanes;
  T* o = out + ((sequence * tq + i) * heads + head) * dim;
  const V query =
      *reinterpret_cast<const V*>(q + ((sequence * tq + i) * heads + head) * dim + lane * kVec);
  // Every lane of a warp runs the same number of passes: the shuffles need them all.
  for (int64_t base = first; base < limit; base += groups) {
    const int64_t j = base + group;
    const int64_t key_row = j < limit ? keys.row_of(sequence, j) : -1;
    float dot = 0.0f;
    if (key_row >= 0) {
      const V key = *reinterpret_cast<const V*>(k + key_row * row + head * dim + lane * kVec);
#pragma unroll
      for (int e = 0; e < kVec; ++e) dot += to_float(query.v[e]) * to_float(key.v[e]);
    }
#pragma unroll
    for (int offset = kLanes / 2; offset > 0; offset >>= 1) {
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    }
    if (lane == 0 && j < limit) probabilities[j] = key_row >= 0 ? scale * dot : -INFINITY;
  }
  __syncthreads();
  if (!softmax_of_scores(probabilities, first, limit, reduce, o, dim)) return;
  __syncthreads();
  float acc[kVec] = {};
  for (int64_t j = first + group; j < limit; j += groups) {
    const int64_t key_row = keys.row_of(sequence, j);
    if (key_row < 0) continue;
    const float p = probabilities[j];
    const V value = *reinterpret_cast<const V*>(v + key_row * row + head * dim + lane * kVec);
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[e] += p * to_float(value.v[e]);
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) partial[group * dim + lane * kVec + e] = acc[e];
  __syncthreads();
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float sum = 0.0f;
    for (int g = 0; g < groups; ++g) sum += partial[g * dim + d];
    o[d] = from_float<T>(sum);
  }
}

constexpr int kAttentionVecThreads = 256;

size_t attention_vec_shared_bytes(int lanes, int64_t dim, int64_t capacity) {
  const auto groups = static_cast<int64_t>(kAttentionVecThreads / lanes);
  return static_cast<size_t>(32 + groups * dim + capacity) * sizeof(float);
}

// Launches attention_over_rows_kernel for every sequence, head and query.
template <typename Keys>
void launch_attention_over_rows(const void* q, const void* k, const void* v, void* out, DType dtype,
                                int64_t batch, int64_t tq, int64_t heads, int64_t dim,
                                int64_t max_keys, float scale, const Keys& keys,
                                cudaStream_t stream, const char* op) {
  if (batch * tq * heads * dim == 0) return;
  const dim3 grid(static_cast<unsigned>(batch * heads), static_cast<unsigned>(tq));
  const size_t shared = attention_over_rows_shared_bytes(dim, max_keys);
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    const int lanes = sixteen_byte_lanes(dim, sizeof(T));
    const size_t vec_shared = attention_vec_shared_bytes(lanes == 0 ? 1 : lanes, dim, max_keys);
    if (lanes != 0 && vec_shared <= kAttentionOverRowsMaxSharedBytes) {
      const auto launch = [&](auto lanes_constant) {
        const auto kernel =
            attention_over_rows_vec_kernel<T, Keys, decltype(lanes_constant)::value>;
        if (vec_shared > 48 * 1024) {
          check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kAttentionOverRowsMaxSharedBytes)),
                "cudaFuncSetAttribute", op);
        }
        kernel<<<grid, kAttentionVecThreads, vec_shared, stream>>>(
            static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
            static_cast<T*>(out), tq, heads, scale, max_keys, keys);
      };
      dispatch_lanes(lanes, launch);
      return;
    }
    const auto kernel = attention_over_rows_kernel<T, Keys>;
    if (shared > 48 * 1024) {
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(kAttentionOverRowsMaxSharedBytes)),
            "cudaFuncSetAttribute", op);
    }
    kernel<<<grid, kAttentionOverRowsThreads, shared, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
        static_cast<T*>(out), tq, heads, dim, scale, keys);
  });
  check_launch(op);
}

// dst [z][c][r] = src [z][r][c] for one 32 × 32 tile of matrix z, through shared memory (a
// column of padding so that the transposed reads fall in distinct banks).
template <typename U>
__global__ void transpose_matrices_kernel(const U* src, U* dst, int64_t rows, int64_t cols) {
  __shared__ U tile[32][33];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 32;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32;
  const int64_t offset = static_cast<int64_t>(blockIdx.z) * rows * cols;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t r = r0 + i;
    const int64_t c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = src[offset + r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t c = c0 + i;
    const int64_t r = r0 + threadIdx.x;
    if (c < cols && r < rows) dst[offset + c * rows + r] = tile[threadIdx.x][i];
  }
}

}  // namespace

void transpose_matrices(const void* src, void* dst, int element_bytes, int64_t batch, int64_t rows,
                        int64_t cols, cudaStream_t stream, const char* op) {
  if (batch == 0 || rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32),
                  static_cast<unsigned>(batch));
  const dim3 block(32, 8);
  if (element_bytes == 2) {
    transpose_matrices_kernel<<<grid, block, 0, stream>>>(static_cast<const uint16_t*>(src),
                                                          static_cast<uint16_t*>(dst), rows, cols);
  } else if (element_bytes == 4) {
    transpose_matrices_kernel<<<grid, block, 0, stream>>>(static_cast<const uint32_t*>(src),
                                                          static_cast<uint32_t*>(dst), rows, cols);
  } else {
    transpose_matrices_kernel<<<grid, block, 0, stream>>>(static_cast<const uint64_t*>(src),
                                                          static_cast<uint64_t*>(dst), rows, cols);
  }
  check_launch(op);
}

void copy_strided(const void* src, DType src_dtype, const Layout& src_layout, void* dst,
                  DType dst_dtype, int64_t n, cudaStream_t stream, const char* op) {
  if (n == 0) return;
  copy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, src_dtype, src_layout, dst, dst_dtype,
                                                      n);
  check_launch(op);
}

void fill_pattern(void* dst, int element_bytes, uint64_t bits, int64_t n, cudaStream_t stream,
                  const char* op) {
  if (n == 0) return;
  if (element_bytes == 2) {
    fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint16_t*>(dst),
                                                        static_cast<uint16_t>(bits), n);
  } else if (element_bytes == 4) {
    fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint32_t*>(dst),
                                                        static_cast<uint32_t>(bits), n);
  } else {
    fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint64_t*>(dst), bits, n);
  }
  check_launch(op);
}

void unary(const void* x, void* out, DType dtype, int64_t n, UnaryOp kind, float alpha,
           cudaStream_t stream, const char* op) {
  if (n == 0) return;
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    constexpr int64_t kPerVector = 16 / sizeof(T);
    // 16-byte vectors where both sides allow them, the elements past the last vector one by one.
    const int64_t vectors =
        sixteen_byte_aligned(x) && sixteen_byte_aligned(out) ? n / kPerVector : 0;
    if (vectors > 0) {
      unary_vector_kernel<T><<<blocks_for(vectors), kThreads, 0, stream>>>(
          static_cast<const uint4*>(x), static_cast<uint4*>(out), vectors, kind, alpha);
    }
    const int64_t done = vectors * kPerVector;
    if (done < n) {
      unary_kernel<<<blocks_for(n - done), kThreads, 0, stream>>>(
          static_cast<const T*>(x) + done, static_cast<T*>(out) + done, n - done, kind, alpha);
    }
  });
  check_launch(op);
}

void binary(const void* a, const void* b, const Layout& b_layout, void* out, DType dtype, int64_t n,
            BinaryOp kind, cudaStream_t stream, const char* op) {
  if (n == 0) return;
  bool same_shape = true;  // b is a's shape, contiguous
  int64_t expected = 1;
  for (int d = b_layout.rank - 1; d >= 0; --d) {
    if (b_layout.sizes[d] != 1 && b_layout.strides[d] != expected) same_shape = false;
    expected *= b_layout.sizes[d];
  }
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    binary_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), b_layout, static_cast<T*>(out), n, kind,
        same_shape);
  });
  check_launch(op);
}

void im2col(const void* x, DType dtype, int64_t batch, int64_t channels, int64_t t_in, int64_t c0,
            int64_t cin_g, int64_t k, int64_t stride, int64_t padding, int64_t dilation, int64_t t0,
            int64_t tc, void* cols, cudaStream_t stream, const char* op) {
  const int64_t rows = batch * cin_g * k;
  if (rows == 0 || tc == 0) return;
  // 32-bit index arithmetic in the kernel: every position it forms must fit.
  const int64_t reach = std::max(t_in, (t0 + tc) * stride + (k - 1) * dilation + padding);
  constexpr int64_t kLimit = std::numeric_limits<int>::max();
  if (rows > kLimit || reach > kLimit || batch * channels > kLimit) {
    throw Error(std::string(op) + ": im2col sizes exceed 32-bit indexing (rows " +
                std::to_string(rows) + ", time steps " + std::to_string(reach) + ")");
  }
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((tc + kThreads - 1) / kThreads, 64)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    im2col_kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<int>(batch), static_cast<int>(channels),
        static_cast<int>(t_in), static_cast<int>(c0), static_cast<int>(cin_g), static_cast<int>(k),
        static_cast<int>(stride), static_cast<int>(padding), static_cast<int>(dilation),
        static_cast<int>(t0), static_cast<int>(tc), static_cast<T*>(cols));
  });
  check_launch(op);
}

void im2col_rows(const void* x, DType dtype, int64_t t_in, int64_t cin, int64_t k, int64_t padding,
                 int64_t dilation, int64_t t_out, int64_t r0, int64_t rows, void* cols,
                 cudaStream_t stream, const char* op) {
  const int64_t width = cin * k;
  if (rows == 0 || width == 0) return;
  // 32-bit counts in the kernel: every one it forms must fit.
  const int64_t reach = std::max(t_in, t_out + padding + (k - 1) * dilation);
  constexpr int64_t kLimit = std::numeric_limits<int>::max();
  if (rows * width > kLimit || reach > kLimit || r0 + rows > kLimit) {
    throw Error(std::string(op) + ": im2col_rows sizes exceed 32-bit indexing (" +
                std::to_string(rows) + " rows of " + std::to_string(width) +
                " columns, time steps " + std::to_string(reach) + ")");
  }
  const int64_t element_bytes = static_cast<int64_t>(dtype_size(dtype));
  const int64_t row_bytes = cin * element_bytes;
  const auto launch = [&](auto unit) {
    using U = decltype(unit);
    const int64_t units = row_bytes / static_cast<int64_t>(sizeof(U));
    im2col_rows_kernel<<<blocks_for(rows * k * units), kThreads, 0, stream>>>(
        static_cast<const U*>(x), static_cast<unsigned>(t_in), static_cast<unsigned>(units),
        static_cast<unsigned>(k), static_cast<int>(padding), static_cast<int>(dilation),
        static_cast<unsigned>(t_out), static_cast<unsigned>(r0), static_cast<unsigned>(rows),
        static_cast<U*>(cols));
  };
  if (row_bytes % 16 == 0 && sixteen_byte_aligned(x) && sixteen_byte_aligned(cols)) {
    launch(uint4{});
  } else if (element_bytes == 2) {
    launch(uint16_t{});
  } else if (element_bytes == 4) {
    launch(uint32_t{});
  } else {
    throw Error(std::string(op) + ": im2col_rows takes 2- or 4-byte elements, got " +
                std::string(dtype_name(dtype)));
  }
  check_launch(op);
}

void col2im_add(const float* cols, int64_t batch, int64_t cout_g, int64_t k, int64_t t0, int64_t tc,
                int64_t stride, int64_t padding, int64_t dilation, void* out, DType dtype,
                int64_t out_channels, int64_t c0, int64_t t_out, cudaStream_t stream,
                const char* op) {
  // Output steps the input steps [t0, t0 + tc) reach.
  const int64_t t_lo = std::max<int64_t>(0, t0 * stride - padding);
  const int64_t t_hi = std::min(t_out, (t0 + tc - 1) * stride - padding + (k - 1) * dilation + 1);
  if (t_hi <= t_lo) return;
  const int64_t rows = batch * cout_g;
  if (rows == 0) return;
  const dim3 grid(
      static_cast<unsigned>(std::min<int64_t>((t_hi - t_lo + kThreads - 1) / kThreads, 1 << 20)),
      static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    col2im_kernel<<<grid, kThreads, 0, stream>>>(cols, batch, cout_g, k, t0, tc, stride, padding,
                                                 dilation, static_cast<T*>(out), out_channels, c0,
                                                 t_out, t_lo, t_hi - t_lo);
  });
  check_launch(op);
}

void layer_norm(const void* x, const void* gamma, const void* beta, void* out, DType dtype,
                int64_t rows, int64_t c, float eps, cudaStream_t stream, const char* op,
                const void* residual) {
  if (rows == 0 || c == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>(rows, 65535));
  // Rows of up to 1,024 values (FastSpeech2's 256, Vocos' 512) a warp each, held in registers;
  // longer ones a block each.
  constexpr int kRowsPerBlock = kThreads / 32;
  const int warp_blocks =
      static_cast<int>(std::min<int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, 65535));
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    const auto warp_rows = [&](auto per_lane) {
      layer_norm_warp_kernel<T, decltype(per_lane)::value><<<warp_blocks, kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(residual), static_cast<const T*>(gamma),
          static_cast<const T*>(beta), static_cast<T*>(out), rows, c, eps);
    };
    if (c <= 32 * 8) {
      warp_rows(std::integral_constant<int, 8>{});
    } else if (c <= 32 * 16) {
      warp_rows(std::integral_constant<int, 16>{});
    } else if (c <= 32 * 32) {
      warp_rows(std::integral_constant<int, 32>{});
    } else {
      layer_norm_kernel<<<blocks, kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(residual), static_cast<const T*>(gamma),
          static_cast<const T*>(beta), static_cast<T*>(out), rows, c, eps);
    }
  });
  check_launch(op);
}

void rms_norm(const void* x, const void* weight, void* out, DType dtype, int64_t rows, int64_t c,
              float eps, cudaStream_t stream, const char* op) {
  if (rows == 0 || c == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>(rows, 65535));
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    rms_norm_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                     static_cast<const T*>(weight),
                                                     static_cast<T*>(out), rows, c, eps);
  });
  check_launch(op);
}

void add_rms_norm(const void* x, DType x_dtype, const void* delta, DType delta_dtype,
                  const void* weight, void* sum, void* normed, DType normed_dtype, int64_t rows,
                  int64_t c, float eps, cudaStream_t stream, const char* op) {
  if (rows == 0 || c == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>(rows, 65535));
  dispatch_float(x_dtype, op, [&](auto t) {
    dispatch_float(delta_dtype, op, [&](auto d) {
      dispatch_float(normed_dtype, op, [&](auto o) {
        using T = decltype(t);
        using D = decltype(d);
        using O = decltype(o);
        add_rms_norm_kernel<<<blocks, kThreads, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const D*>(delta), static_cast<const T*>(weight),
            static_cast<T*>(sum), static_cast<O*>(normed), rows, c, eps);
      });
    });
  });
  check_launch(op);
}

void swiglu(const void* gate_up, void* out, DType dtype, int64_t rows, int64_t width,
            cudaStream_t stream, const char* op) {
  const int64_t n = rows * width;
  if (n == 0) return;
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    swiglu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(gate_up),
                                                          static_cast<T*>(out), width, n);
  });
  check_launch(op);
}

void rope(const void* x, void* out, DType dtype, const SequenceValues& start_positions,
          const RopeFrequencies& inv_freq, int64_t batch, int64_t steps, int64_t heads, int64_t dim,
          cudaStream_t stream, const char* op) {
  const int64_t pairs = batch * steps * heads * (dim / 2);
  if (pairs == 0) return;
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    rope_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                            static_cast<T*>(out), start_positions,
                                                            inv_freq, steps, heads, dim / 2, pairs);
  });
  check_launch(op);
}

void write_rows(void* cache, const void* rows, int element_bytes, const SequenceValues& offsets,
                int64_t batch, int64_t steps, int64_t tmax, int64_t inner, cudaStream_t stream,
                const char* op) {
  const int64_t n = batch * steps * inner;
  if (n == 0) return;
  if (element_bytes == 2) {
    write_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint16_t*>(cache),
                                                              static_cast<const uint16_t*>(rows),
                                                              offsets, steps, tmax, inner, n);
  } else {
    write_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint32_t*>(cache),
                                                              static_cast<const uint32_t*>(rows),
                                                              offsets, steps, tmax, inner, n);
  }
  check_launch(op);
}

void depthwise_conv1d(const void* x, const void* weight, const void* bias, void* out, DType dtype,
                      int64_t batch, int64_t channels, int64_t t_in, int64_t t_out, int64_t k,
                      int64_t stride, int64_t padding, int64_t dilation, cudaStream_t stream,
                      const char* op) {
  const int64_t rows = batch * channels;
  if (rows == 0 || t_out == 0) return;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((t_out + kThreads - 1) / kThreads, 1024)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    depthwise_conv1d_kernel<<<grid, kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias),
        static_cast<T*>(out), rows, channels, t_in, t_out, k, stride, padding, dilation);
  });
  check_launch(op);
}

bool conv1d_rows_few_outputs_fits(int64_t batch, int64_t cin, int64_t cout, int64_t k,
                                  int64_t dilation) {
  return batch <= 65535 && cin > 0 && cout > 0 && cout <= kMaxFewOutputs && k > 0 && dilation > 0 &&
         few_outputs_shared_bytes(cin, cout, k, dilation) <= kFewOutputsShared;
}

void conv1d_rows_few_outputs(const void* x, const void* weight, const void* bias, void* out,
                             DType dtype, int64_t batch, int64_t t_in, int64_t cin, int64_t t_out,
                             int64_t cout, int64_t k, int64_t padding, int64_t dilation,
                             cudaStream_t stream, const char* op) {
  if (batch == 0 || t_out == 0) return;
  if (!conv1d_rows_few_outputs_fits(batch, cin, cout, k, dilation)) {
    throw Error(std::string("cuda: ") + op + ": " + std::to_string(cin) + " → " +
                std::to_string(cout) + " channels, kernel " + std::to_string(k) + " dilation " +
                std::to_string(dilation) + ", batch " + std::to_string(batch) +
                " is no shape for the few-outputs convolution");
  }
  const dim3 grid(static_cast<unsigned>((t_out + kFewOutputSteps - 1) / kFewOutputSteps),
                  static_cast<unsigned>(batch));
  const size_t shared = few_outputs_shared_bytes(cin, cout, k, dilation);
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    const bool vector_rows = aligned && cin % static_cast<int64_t>(16 / sizeof(T)) == 0;
    conv1d_rows_few_outputs_kernel<<<grid, kFewOutputSteps, shared, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias),
        static_cast<T*>(out), t_in, static_cast<int>(cin), t_out, static_cast<int>(cout),
        static_cast<int>(k), padding, static_cast<int>(dilation), vector_rows);
  });
  check_launch(op);
}

void pack_spectrum(const float* real, const float* imag, void* spectrum, int64_t item0,
                   int64_t items, int64_t bins, int64_t frames, int64_t n_fft, cudaStream_t stream,
                   const char* op) {
  const int64_t n = items * frames * bins;
  if (n == 0) return;
  pack_spectrum_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      real, imag, static_cast<float2*>(spectrum), item0, bins, frames, n_fft, n);
  check_launch(op);
}

void overlap_add(const float* signal, const float* window, float* out, int64_t items,
                 int64_t frames, int64_t n_fft, int64_t hop, int64_t length, cudaStream_t stream,
                 const char* op) {
  const int64_t n = items * length;
  if (n == 0) return;
  overlap_add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      signal, window, out, frames, n_fft, hop, length, 1.0f / static_cast<float>(n_fft), n);
  check_launch(op);
}

void gather_rows(const void* src, int64_t src_rows, const int64_t* rows, void* out, DType dtype,
                 int64_t n, int64_t c, cudaStream_t stream, const char* op) {
  if (n * c == 0) return;
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    gather_rows_kernel<<<blocks_for(n * c), kThreads, 0, stream>>>(
        static_cast<const T*>(src), src_rows, rows, static_cast<T*>(out), n, c);
  });
  check_launch(op);
}

void zero_beyond_lengths(void* x, DType dtype, const int64_t* lengths, int64_t batch, int64_t t,
                         int64_t c, cudaStream_t stream, const char* op) {
  const int64_t n = batch * t * c;
  if (n == 0) return;
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    zero_beyond_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(x), lengths, batch,
                                                               t, c);
  });
  check_launch(op);
}

void bucketize(const float* x, int64_t count, const float* boundaries, int64_t n, int64_t* out,
               cudaStream_t stream, const char* op) {
  if (count == 0) return;
  bucketize_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, count, boundaries, n, out);
  check_launch(op);
}

void masked_softmax(const float* scores, void* probs, DType dtype, int64_t rows,
                    int64_t rows_per_sequence, int64_t rows_per_head, int64_t tk,
                    const int64_t* key_lengths, const int64_t* key_starts, const int64_t* offsets,
                    bool causal, int64_t first_query, cudaStream_t stream, const char* op) {
  if (rows == 0 || tk == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>(rows, kMaxBlocks));
  const int threads = tk >= 256 ? 256 : (tk >= 128 ? 128 : 64);
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    masked_softmax_kernel<T><<<blocks, threads, 0, stream>>>(
        scores, static_cast<T*>(probs), rows, rows_per_sequence, rows_per_head, tk, key_lengths,
        key_starts, offsets, causal, first_query);
  });
  check_launch(op);
}

bool decode_attention_fits(int64_t batch, int64_t tq, int64_t keys, int64_t dim) {
  return batch <= SequenceValues::kInline && tq <= kDecodeAttentionMaxQueries &&
         attention_over_rows_shared_bytes(dim, keys) <= kAttentionOverRowsMaxSharedBytes;
}

void decode_attention(const void* q, const void* k, const void* v, void* out, DType dtype,
                      int64_t batch, int64_t tq, int64_t rows, int64_t heads, int64_t dim,
                      int64_t keys, float scale, const SequenceValues& key_lengths,
                      const SequenceValues& key_starts, const SequenceValues& offsets, bool causal,
                      cudaStream_t stream, const char* op) {
  launch_attention_over_rows(q, k, v, out, dtype, batch, tq, heads, dim, keys, scale,
                             ContiguousKeys{rows, key_lengths, key_starts, offsets, causal}, stream,
                             op);
}

bool paged_attention_fits(int64_t capacity, int64_t dim) {
  return attention_over_rows_shared_bytes(dim, capacity) <= kAttentionOverRowsMaxSharedBytes;
}

void paged_attention(const void* q, const void* k_pages, const void* v_pages, void* out,
                     DType dtype, int64_t batch, int64_t tq, int64_t heads, int64_t dim,
                     const PageTable& table, float scale, cudaStream_t stream, const char* op) {
  launch_attention_over_rows(q, k_pages, v_pages, out, dtype, batch, tq, heads, dim,
                             table.pages_per_sequence * table.page_size, scale,
                             PagedKeys{table.entries, table.positions, table.key_starts,
                                       table.pages_per_sequence, table.page_size, table.pages},
                             stream, op);
}

void qkv_to_pages(const void* qkv, void* k_pages, void* v_pages, void* q_out, DType dtype,
                  int64_t batch, int64_t steps, int64_t heads, int64_t dim,
                  const RopeFrequencies& inv_freq, const PageTable& table, cudaStream_t stream,
                  const char* op) {
  const int64_t pairs = batch * steps * heads * (dim / 2);
  if (pairs == 0) return;
  const PagedKeys where{table.entries,   table.positions, nullptr, table.pages_per_sequence,
                        table.page_size, table.pages};
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    qkv_to_pages_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(
        static_cast<const T*>(qkv), static_cast<T*>(k_pages), static_cast<T*>(v_pages),
        static_cast<T*>(q_out), where, inv_freq, steps, heads, dim / 2, pairs);
  });
  check_launch(op);
}

void write_pages(void* pages, const void* rows, int element_bytes, int64_t batch, int64_t steps,
                 int64_t inner, const PageTable& table, cudaStream_t stream, const char* op) {
  const int64_t n = batch * steps * inner;
  if (n == 0) return;
  const PagedKeys where{table.entries,   table.positions, nullptr, table.pages_per_sequence,
                        table.page_size, table.pages};
  if (element_bytes == 2) {
    write_pages_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<uint16_t*>(pages), static_cast<const uint16_t*>(rows), where, steps, inner, n);
  } else {
    write_pages_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<uint32_t*>(pages), static_cast<const uint32_t*>(rows), where, steps, inner, n);
  }
  check_launch(op);
}

}  // namespace voxd::cuda
