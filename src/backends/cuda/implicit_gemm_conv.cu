#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/conv_epilogue.cuh"
#include "backends/cuda/conv_weights.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/implicit_gemm_conv.h"
#include "backends/cuda/mma_sync.cuh"
#include "backends/cuda/wgmma_conv.h"

namespace voxd::cuda {
namespace {

// Tensor-core tiles through mma.sync (m16n8k16) with ldmatrix operands.
//
// The input is first written time-major ([batch][row][channel], row = step + padding, zero
// outside the sequence and past the last channel, leaky ReLU applied), so that a block's window
// of 16 channels is rows of 32 contiguous bytes that cp.async copies straight into shared memory.
// A block computes kBlockM output channels × kBlockSteps time steps of one sequence, in stages of
// 16 input channels, through a ring of kDepth stage buffers: while the warps multiply stage s,
// stages s + 1 .. s + kDepth − 1 are being copied into the others; one barrier per stage. The
// launch takes the deepest ring (up to 4) that keeps as many blocks on a multiprocessor as two
// buffers do, so that short convolutions, whose stages are little work, keep more copies in
// flight. Each warp owns 16·kWarpTilesM output channels × 8·kWarpTilesN steps.
// The two 16-byte halves of a shared row swap places every four rows, so the eight rows an
// ldmatrix phase reads fall in distinct banks wherever the dilated tap starts.

constexpr int kStageChannels = 16;
constexpr int kRowBytes = kStageChannels * 2;
constexpr int kBlockSteps = 128;
constexpr int kMaxHalo = 128;  // rows of the window beyond the block's steps
constexpr size_t kMaxDynamicShared = 200 << 10;

int64_t padded_channels(int64_t channels) {
  return (channels + kStageChannels - 1) / kStageChannels * kStageChannels;
}

// Rows of the time-major input: every row any block reads.
int64_t transposed_rows(int64_t out_steps, int64_t halo) {
  return (out_steps + kBlockSteps - 1) / kBlockSteps * kBlockSteps + halo;
}

// Bytes rounded up to whole 128-byte lines (a stage's window, the on-chip pair's regions).
__host__ __device__ constexpr int round_to_128(int bytes) {
  return (bytes + 127) / 128 * 128;
}

__device__ __forceinline__ int swizzled(int row, int half) {
  return row * kRowBytes + ((half ^ ((row >> 2) & 1)) << 4);
}

// Where element (row, c) of a sequence's time-major input sits: row-major [row][channels] for
// the mma.sync kernel, or group-major [c / 8][row][8] for the wgmma kernel (a group's rows
// contiguous, what its tensor-memory copies read).
__device__ __forceinline__ int64_t transposed_offset(int64_t row, int64_t c, int64_t rows,
                                                     int64_t channels, bool group_major) {
  return group_major ? ((c >> 3) * rows + row) * 8 + (c & 7) : row * channels + c;
}

// xt[b][row][c] = f(x[b][c][row − padding]) for every row and padded channel, zero outside the
// sequence and past the last channel; f the optional leaky ReLU, computed in F32 from x's dtype
// Tin and rounded to the weights' dtype T. 64 rows × 64 channels per block through shared
// memory: reads along time, writes along channels.
template <typename T, typename Tin>
__global__ void transpose_input_kernel(ImplicitGemmConv a, int64_t rows, int64_t channels,
                                       bool group_major) {
  __shared__ float tile[64][65];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 64;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * 64;
  const int64_t b = blockIdx.z;
  const Tin* x = static_cast<const Tin*>(a.x) + b * a.in_channels * a.in_steps;
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) {
    const int r = i % 64;
    const int c = i / 64;
    const int64_t step = row0 + r - a.padding;
    float v = 0.0f;
    if (c0 + c < a.in_channels && step >= 0 && step < a.in_steps) {
      v = to_float(x[(c0 + c) * a.in_steps + step]);
      if (a.input_leaky_relu && v < 0.0f) v *= a.input_slope;
    }
    tile[c][r] = v;
  }
  __syncthreads();
  T* xt = static_cast<T*>(a.transposed_input) + b * rows * channels;
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) {
    const int c = i % 64;
    const int r = i / 64;
    if (row0 + r < rows && c0 + c < channels) {
      xt[transposed_offset(row0 + r, c0 + c, rows, channels, group_major)] =
          from_float<T>(tile[c][r]);
    }
  }
}

// Leaky ReLU with `slope` on the eight elements of T in a 16-byte chunk, in place (rounded back
// to T two elements an instruction).
template <typename T>
__device__ __forceinline__ void leaky_relu_chunk(uint4* chunk, float slope) {
  union {
    uint4 vector;
    uint32_t pairs[4];
    T e[8];
  } v;
  v.vector = *chunk;
  const auto activate = [slope](T x) {
    const float f = to_float(x);
    return f < 0.0f ? f * slope : f;
  };
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    v.pairs[p] = pack_rounded<T>(activate(v.e[2 * p]), activate(v.e[2 * p + 1]));
  }
  *chunk = v.vector;
}

// Eight consecutive elements from a 16-byte aligned p, in F32.
template <typename Tin>
__device__ __forceinline__ void load_eight(const Tin* p, float (&f)[8]) {
  if constexpr (sizeof(Tin) == 4) {
    const float4 lo = reinterpret_cast<const float4*>(p)[0];
    const float4 hi = reinterpret_cast<const float4*>(p)[1];
    f[0] = lo.x, f[1] = lo.y, f[2] = lo.z, f[3] = lo.w;
    f[4] = hi.x, f[5] = hi.y, f[6] = hi.z, f[7] = hi.w;
  } else {
    union {
      uint4 vector;
      Tin e[8];
    } v;
    v.vector = *reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = to_float(v.e[e]);
  }
}

// The same for inputs whose rows are whole 16-byte vectors (steps a multiple of 8, x aligned):
// a block reads 64 steps × 64 channels as 16-byte vectors along time into a shared tile, and
// writes them as 16-byte vectors along channels. Tile element (c, s) sits at
// c·64 + ((s / 8) ⊕ (c / 8 mod 8))·8 + s mod 8, so both the row writes and the column reads of a
// warp fall in distinct banks. The blocks of the last column (blockIdx.x = step tiles) write
// the rows before and after the sequence, zeros.
template <typename T, typename Tin>
__global__ void transpose_input_vector_kernel(ImplicitGemmConv a, int64_t rows, int64_t channels,
                                              bool group_major) {
  __shared__ __align__(16) T tile[64 * 64];
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * 64;
  const int64_t b = blockIdx.z;
  T* xt = static_cast<T*>(a.transposed_input) + b * rows * channels;
  const int64_t step_tiles = (a.in_steps + 63) / 64;
  if (blockIdx.x == step_tiles) {
    const int64_t tail = a.padding + a.in_steps;
    const int64_t zero_rows = a.padding + (rows - tail);
    for (int64_t i = threadIdx.x; i < zero_rows * 8; i += blockDim.x) {
      const int64_t z = i / 8;
      const int64_t c = c0 + (i % 8) * 8;
      const int64_t row = z < a.padding ? z : tail + (z - a.padding);
      if (c < channels) {
        *reinterpret_cast<uint4*>(xt + transposed_offset(row, c, rows, channels, group_major)) =
            make_uint4(0, 0, 0, 0);
      }
    }
    return;
  }
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * 64;
  const Tin* x = static_cast<const Tin*>(a.x) + b * a.in_channels * a.in_steps;
  for (int i = threadIdx.x; i < 64 * 8; i += blockDim.x) {
    const int j = i % 8;  // vector of steps 8j .. 8j + 7
    const int c = i / 8;
    union {
      uint4 vector;
      T e[8];
    } v;
    v.vector = make_uint4(0, 0, 0, 0);
    if (c0 + c < a.in_channels && s0 + 8 * j < a.in_steps) {
      float f[8];
      load_eight(x + (c0 + c) * a.in_steps + s0 + 8 * j, f);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (a.input_leaky_relu && f[e] < 0.0f) f[e] *= a.input_slope;
        v.e[e] = from_float<T>(f[e]);
      }
    }
    *reinterpret_cast<uint4*>(tile + c * 64 + ((j ^ ((c >> 3) & 7)) << 3)) = v.vector;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 64 * 8; i += blockDim.x) {
    // Neighbouring threads write neighbouring 16 bytes: across the channels when row-major,
    // down one group's rows when group-major.
    const int chunk = group_major ? i / 64 : i % 8;  // channels 8·chunk .. 8·chunk + 7
    const int step = group_major ? i % 64 : i / 8;
    if (s0 + step >= a.in_steps || c0 + 8 * chunk >= channels) continue;
    union {
      uint4 vector;
      T e[8];
    } v;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int c = 8 * chunk + e;
      v.e[e] = tile[c * 64 + (((step >> 3) ^ ((c >> 3) & 7)) << 3) + (step & 7)];
    }
    *reinterpret_cast<uint4*>(xt + transposed_offset(a.padding + s0 + step, c0 + 8 * chunk, rows,
                                                     channels, group_major)) = v.vector;
  }
}

// Where the mma.sync kernel writes its output instead of `out`, when `rows` is set: the
// time-major input of a following convolution of the same length (transposed_offset's row-major
// layout: row_count rows of `channels` per sequence, step t at row t + padding), after a leaky
// ReLU with `slope` when leaky_relu is set.
struct TimeMajorOutput {
  void* rows = nullptr;
  int64_t padding = 0;
  int64_t row_count = 0;
  int64_t channels = 0;
  bool leaky_relu = false;
  float slope = 0.0f;
};

template <int kWarpsM, int kWarpsN, int kWarpTilesM, int kWarpTilesN>
struct MmaTiling {
  static constexpr int kWarpRows = kWarpsM;  // warps along the channels
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kTilesM = kWarpTilesM;  // m16 tiles per warp
  static constexpr int kTilesN = kWarpTilesN;  // n8 tiles per warp
  static constexpr int kWarpM = 16 * kWarpTilesM;
  static constexpr int kWarpN = 8 * kWarpTilesN;
  static constexpr int kBlockM = kWarpsM * kWarpM;
  static constexpr int kSteps = kWarpsN * kWarpN;  // kBlockSteps, or the on-chip pair's 256
  // The output tile as F32 [step][channel] rows for the time-major epilogue, 4 channels wider
  // than the tile so that a warp's accumulator writes fall in distinct banks.
  static constexpr int kRowsStride = kBlockM + 4;
  static constexpr size_t kRowsBytes = static_cast<size_t>(kSteps) * kRowsStride * sizeof(float);
};

// The output tile as [step][channel] rows in shared memory for a TimeMajorOutput, 8 channels
// wider than the tile so that the 8 rows of 16 bytes a stmatrix matrix writes fall in distinct
// banks.
template <typename Tiling>
__host__ __device__ constexpr int staged_stride() {
  return Tiling::kBlockM + 8;
}
template <typename Tiling>
constexpr size_t staged_bytes() {
  return static_cast<size_t>(Tiling::kSteps) * staged_stride<Tiling>() * 2;  // F16/BF16
}
// The output tile as F32 [channel][step] rows for the channel-major epilogue, 8 steps wider than
// the tile so that a half-warp's paired accumulator writes fall in distinct banks.
template <typename Tiling>
__host__ __device__ constexpr int channel_major_stride() {
  return Tiling::kSteps + 8;
}
template <typename Tiling>
constexpr size_t channel_major_bytes() {
  return static_cast<size_t>(Tiling::kBlockM) * channel_major_stride<Tiling>() * sizeof(float);
}

// Calls stage(m, step, v0, v1) for each pair of neighbouring steps a thread's accumulators hold
// (m the tile's channel, step the first step's place in the tile), the channel's bias added: the
// loop both epilogues start with, before they store the tile through shared memory.
template <typename T, typename Tiling, typename Stage>
__device__ __forceinline__ void for_each_accumulator_pair(
    const ImplicitGemmConv& a, const float (&acc)[Tiling::kTilesM][Tiling::kTilesN][4], int64_t co0,
    int warp_m, int warp_n, int lane, Stage&& stage) {
  const T* bias = static_cast<const T*>(a.bias);
#pragma unroll
  for (int mi = 0; mi < Tiling::kTilesM; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = warp_m * Tiling::kWarpM + mi * 16 + h * 8 + (lane >> 2);
      const float bias_value = bias && co0 + m < a.out_channels ? to_float(bias[co0 + m]) : 0.0f;
#pragma unroll
      for (int nj = 0; nj < Tiling::kTilesN; ++nj) {
        const int step = warp_n * Tiling::kWarpN + nj * 8 + 2 * (lane & 3);
        stage(m, step, acc[mi][nj][2 * h] + bias_value, acc[mi][nj][2 * h + 1] + bias_value);
      }
    }
  }
}

// Stores a warp's accumulators, rounded to T, as rows of 16-bit values in shared memory, each
// row the 8 channels m0 .. m0 + 7 of one step: value(step, v) makes the value stored for the
// tile's step from its accumulator v (the bias added), and row(m0, step) is the
// row's shared-memory address (16-byte aligned). Four 8 × 8 (channel, step) matrices go out
// transposed an instruction (stmatrix), where one 2-byte store a value left a K-3 pair's
// intermediate store at 16 % of its instructions (bench/NOTES.md, session 50).
template <typename T, typename Tiling, typename Value, typename Row>
__device__ __forceinline__ void store_accumulator_rows(
    const ImplicitGemmConv& a, const float (&acc)[Tiling::kTilesM][Tiling::kTilesN][4], int64_t co0,
    int warp_m, int warp_n, int lane, Value&& value, Row&& row) {
  static_assert(Tiling::kTilesN % 2 == 0, "an instruction stores two tiles of 8 steps");
  const T* bias = static_cast<const T*>(a.bias);
  const int fragment_step = 2 * (lane & 3);
  // This lane's row in the instruction's matrix lane / 8: matrices 0 and 1 are the tile's first
  // 8 steps, channels 0-7 and 8-15; 2 and 3 the next 8 steps.
  const int row_step = warp_n * Tiling::kWarpN + ((lane >> 4) << 3) + (lane & 7);
  const int row_half = (lane >> 3) & 1;
#pragma unroll
  for (int mi = 0; mi < Tiling::kTilesM; ++mi) {
    const int m_tile = warp_m * Tiling::kWarpM + mi * 16;
    float bias_value[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m_tile + h * 8 + (lane >> 2);
      bias_value[h] = bias && co0 + m < a.out_channels ? to_float(bias[co0 + m]) : 0.0f;
    }
#pragma unroll
    for (int nj = 0; nj < Tiling::kTilesN; nj += 2) {
      uint32_t fragments[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int h = i & 1;
        const int n = nj + (i >> 1);
        const int step = warp_n * Tiling::kWarpN + n * 8 + fragment_step;
        fragments[i] = pack_rounded<T>(value(step, acc[mi][n][2 * h] + bias_value[h]),
                                       value(step + 1, acc[mi][n][2 * h + 1] + bias_value[h]));
      }
      stmatrix_x4_trans(row(m_tile + row_half * 8, row_step + nj * 8), fragments);
    }
  }
}

// The epilogue into a following convolution's time-major input (TimeMajorOutput): the block's
// tile, bias and leaky ReLU applied, rounded to T, goes through shared memory and out as 16-byte
// vectors along the channels; steps past the sequence are written as zeros (the following
// convolution reads them as its padding), and so are channels past the output's (their weights
// and bias are zero).
template <typename T, typename Tiling>
__device__ __forceinline__ void store_time_major(
    const ImplicitGemmConv& a, const TimeMajorOutput& next,
    const float (&acc)[Tiling::kTilesM][Tiling::kTilesN][4], unsigned char* shared, int64_t t0,
    int64_t co0, int64_t b, int warp_m, int warp_n, int lane) {
  constexpr int kStride = staged_stride<Tiling>();
  T* tile = reinterpret_cast<T*>(shared);
  const uint32_t tile_address = shared_address(shared);
  store_accumulator_rows<T, Tiling>(
      a, acc, co0, warp_m, warp_n, lane,
      [&](int, float v) { return next.leaky_relu && v < 0.0f ? v * next.slope : v; },
      [&](int m0, int step) {
        return tile_address + static_cast<uint32_t>((step * kStride + m0) * sizeof(T));
      });
  __syncthreads();
  constexpr int kVectors = Tiling::kBlockM / 8;
  T* rows = static_cast<T*>(next.rows) + (b * next.row_count + next.padding + t0) * next.channels;
  for (int i = threadIdx.x; i < kBlockSteps * kVectors; i += Tiling::kThreads) {
    const int step = i / kVectors;
    const int64_t c = co0 + 8 * (i % kVectors);
    if (c >= next.channels) continue;
    uint4 vector = make_uint4(0, 0, 0, 0);
    if (t0 + step < a.out_steps) {
      vector = *reinterpret_cast<const uint4*>(tile + step * kStride + 8 * (i % kVectors));
    }
    *reinterpret_cast<uint4*>(rows + step * next.channels + c) = vector;
  }
  // The rows no block's steps cover, the first next.padding and those past the last block's,
  // zeroed by the blocks at either end of the sequence, each for its own channels.
  const auto zero_rows = [&](int64_t first_row, int64_t count) {
    T* border = static_cast<T*>(next.rows) + (b * next.row_count + first_row) * next.channels;
    for (int64_t i = threadIdx.x; i < count * kVectors; i += Tiling::kThreads) {
      const int64_t c = co0 + 8 * (i % kVectors);
      if (c < next.channels) {
        *reinterpret_cast<uint4*>(border + i / kVectors * next.channels + c) =
            make_uint4(0, 0, 0, 0);
      }
    }
  };
  const int64_t covered = static_cast<int64_t>(gridDim.x) * kBlockSteps;
  if (blockIdx.x == 0) zero_rows(0, next.padding);
  if (blockIdx.x == gridDim.x - 1) {
    zero_rows(next.padding + covered, next.row_count - next.padding - covered);
  }
}

// What the epilogue adds to and does with the values it stores into `out` (of its dtype).
template <typename Out>
__device__ __forceinline__ OutputTerms<Out> output_terms(const ImplicitGemmConv& a, Out* /*out*/) {
  OutputTerms<Out> terms;
  terms.residual = static_cast<const Out*>(a.residual);
  terms.addend = static_cast<const Out*>(a.addend);
  terms.scale = a.output_scale;
  terms.leaky_relu = a.output_leaky_relu;
  terms.slope = a.output_slope;
  return terms;
}

// The epilogue into a.out ([batch][channel][step], a.output_dtype): the block's tile, bias added,
// goes through shared memory as F32 rows, and each thread then stores (and reads the residual
// of) four neighbouring steps, so that a warp covers 128 contiguous steps of one channel.
template <typename T, typename Tiling>
__device__ __forceinline__ void store_channel_major(
    const ImplicitGemmConv& a, const float (&acc)[Tiling::kTilesM][Tiling::kTilesN][4],
    unsigned char* shared, int64_t t0, int64_t co0, int64_t b, int warp_m, int warp_n, int lane) {
  constexpr int kStride = channel_major_stride<Tiling>();
  float* tile = reinterpret_cast<float*>(shared);
  for_each_accumulator_pair<T, Tiling>(
      a, acc, co0, warp_m, warp_n, lane, [&](int m, int step, float v0, float v1) {
        *reinterpret_cast<float2*>(tile + m * kStride + step) = make_float2(v0, v1);
      });
  __syncthreads();
  constexpr int kQuads = kBlockSteps / 4;
  auto store = [&](auto* out) {
    const auto terms = output_terms(a, out);
    for (int i = threadIdx.x; i < Tiling::kBlockM * kQuads; i += Tiling::kThreads) {
      const int m = i / kQuads;
      const int64_t t = t0 + 4 * (i % kQuads);
      if (co0 + m >= a.out_channels || t >= a.out_steps) continue;
      store_output_vector<4>(out, terms, ((b * a.out_channels + co0 + m) * a.out_steps) + t,
                             a.out_steps - t < 4 ? static_cast<int>(a.out_steps - t) : 4,
                             tile + m * kStride + 4 * (i % kQuads));
    }
  };
  if (a.output_dtype == DType::F32) {
    store(static_cast<float*>(a.out));
  } else {
    store(static_cast<T*>(a.out));
  }
}

// The epilogue into time-major a.out and a.residual ([batch][step][channel], the weights' dtype
// T, a.time_major_output): the block's tile, bias added, goes through shared memory as F32 rows,
// and each thread then stores (and reads the residual of) eight neighbouring channels of one step.
template <typename T, typename Tiling>
__device__ __forceinline__ void store_rows(const ImplicitGemmConv& a,
                                           const float (&acc)[Tiling::kTilesM][Tiling::kTilesN][4],
                                           unsigned char* shared, int64_t t0, int64_t co0,
                                           int64_t b, int warp_m, int warp_n, int lane) {
  constexpr int kStride = Tiling::kRowsStride;
  float* tile = reinterpret_cast<float*>(shared);
  for_each_accumulator_pair<T, Tiling>(a, acc, co0, warp_m, warp_n, lane,
                                       [&](int m, int step, float v0, float v1) {
                                         tile[step * kStride + m] = v0;
                                         tile[(step + 1) * kStride + m] = v1;
                                       });
  __syncthreads();
  constexpr int kVectors = Tiling::kBlockM / 8;
  T* out = static_cast<T*>(a.out);
  const OutputTerms<T> terms = output_terms(a, out);
  for (int i = threadIdx.x; i < kBlockSteps * kVectors; i += Tiling::kThreads) {
    const int step = i / kVectors;
    const int64_t c = co0 + 8 * (i % kVectors);
    if (t0 + step >= a.out_steps || c >= a.out_channels) continue;
    const float* values = tile + step * kStride + 8 * (i % kVectors);
    store_output_vector<8>(out, terms, (b * a.out_steps + t0 + step) * a.out_channels + c, 8,
                           values);
  }
}

// Bytes of one pipeline stage: the window [rows][16 channels] (rounded to 128 bytes) and every
// tap's weights [kernel][block_m][16 channels].
size_t stage_bytes(int64_t kernel, int64_t halo, int block_m) {
  const size_t window = round_to_128(static_cast<int>(kBlockSteps + halo) * kRowBytes);
  return window + static_cast<size_t>(kernel) * block_m * kRowBytes;
}

template <typename T, typename Tiling, int kDepth>
__global__ void __launch_bounds__(Tiling::kThreads)
    mma_conv_kernel(ImplicitGemmConv a, TimeMajorOutput next, int halo, int stage_stride,
                    int64_t rows_total, int64_t channels) {
  static_assert(Tiling::kSteps == kBlockSteps);
  constexpr int kThreads = Tiling::kThreads;
  constexpr int kBlockM = Tiling::kBlockM;
  constexpr int kWarpTilesM = Tiling::kTilesM;
  constexpr int kWarpTilesN = Tiling::kTilesN;
  extern __shared__ __align__(128) unsigned char shared[];
  const int rows = kBlockSteps + halo;
  const int window_bytes = round_to_128(rows * kRowBytes);
  const int kernel = static_cast<int>(a.kernel);
  const int dilation = static_cast<int>(a.dilation);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kBlockSteps;
  const int64_t co0 = static_cast<int64_t>(blockIdx.y) * kBlockM;
  const int64_t b = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_m = warp % Tiling::kWarpRows;
  const int warp_n = warp / Tiling::kWarpRows;
  // The rows the window copies from: the transposed input (padded: every row the block reads
  // is in it), or x itself (a.time_major_input: rows outside the sequence read as zeros).
  const T* source_rows = static_cast<const T*>(a.time_major_input ? a.x : a.transposed_input) +
                         b * rows_total * channels;
  const int64_t window_row0 = a.time_major_input ? t0 - a.padding : t0;
  const T* arranged = static_cast<const T*>(a.arranged_weight);
  const int stages = static_cast<int>(channels / kStageChannels);
  const uint32_t shared_base = shared_address(shared);

  // A stage's copies: the window's rows and every tap's kBlockM weight rows, two 16-byte halves
  // each, zeros past the last output channel and outside the source rows. A thread copies the
  // same half of the same rows in every stage (window rows copy_row + j·kRowsPerPass, output
  // channel copy_m at taps copy_tap + j·kTapsPerPass), so which of them exist and lie inside the
  // source is worked out here once, and each stage only moves two running source pointers on
  // (by 16 channels, by one stage of weights); the row steps are multiples of 8 rows, which keep
  // a row's swizzle.
  constexpr int kRowsPerPass = kThreads / 2;
  static_assert(kRowsPerPass % kBlockM == 0 && kRowsPerPass % 8 == 0);
  constexpr int kTapsPerPass = kRowsPerPass / kBlockM;
  constexpr int kWindowPasses = (kBlockSteps + kMaxHalo + kRowsPerPass - 1) / kRowsPerPass;
  const int copy_half = static_cast<int>(threadIdx.x & 1);
  const int copy_row = static_cast<int>(threadIdx.x >> 1);
  const int copy_m = copy_row % kBlockM;
  const int copy_tap = copy_row / kBlockM;
  const bool copy_valid = co0 + copy_m < a.out_channels;
  uint32_t window_rows = 0;    // bit j: the thread's row of pass j is in the window
  uint32_t inside_source = 0;  // bit j: and in the source rows
#pragma unroll
  for (int j = 0; j < kWindowPasses; ++j) {
    const int row = copy_row + j * kRowsPerPass;
    const int64_t source_row = window_row0 + row;
    if (row < rows) window_rows |= 1u << j;
    if (row < rows && source_row >= 0 && source_row < rows_total) inside_source |= 1u << j;
  }
  const int64_t window_pass_step = static_cast<int64_t>(kRowsPerPass) * channels;
  const T* window_source = source_rows + (window_row0 + copy_row) * channels + copy_half * 8;
  const T* weight_source =
      arranged +
      ((static_cast<int64_t>(copy_tap) * a.out_channels + co0 + copy_m) * kStageChannels +
       copy_half * 8);
  const int64_t weight_pass_step =
      static_cast<int64_t>(kTapsPerPass) * a.out_channels * kStageChannels;
  const int64_t stage_weights = static_cast<int64_t>(kernel) * a.out_channels * kStageChannels;
  const uint32_t window_target = static_cast<uint32_t>(swizzled(copy_row, copy_half));
  const uint32_t weight_target = static_cast<uint32_t>(
      window_bytes + copy_tap * kBlockM * kRowBytes + swizzled(copy_m, copy_half));
  // The next stage into buffer `buffer`, as one group of copies.
  auto copy_next_stage = [&](int buffer) {
    const uint32_t stage = shared_base + buffer * stage_stride;
#pragma unroll
    for (int j = 0; j < kWindowPasses; ++j) {
      if (window_rows & (1u << j)) {
        const bool inside = inside_source & (1u << j);
        copy_async_16(stage + window_target + j * kRowsPerPass * kRowBytes,
                      inside ? window_source + j * window_pass_step : arranged, inside);
      }
    }
    window_source += kStageChannels;
    const T* source = weight_source;
    uint32_t target = stage + weight_target;
    for (int k = copy_tap; k < kernel; k += kTapsPerPass) {
      copy_async_16(target, copy_valid ? source : arranged, copy_valid);
      source += weight_pass_step;
      target += kTapsPerPass * kBlockM * kRowBytes;
    }
    weight_source += stage_weights;
    copy_async_commit();
  };

  // x read in place (a.time_major_input) has not been through the input's leaky ReLU: each
  // thread applies it to the window rows it copied, once they have landed.
  const bool activate_window = a.time_major_input && a.input_leaky_relu;
  auto activate_stage = [&](int buffer) {
    unsigned char* stage = shared + buffer * stage_stride + window_target;
#pragma unroll
    for (int j = 0; j < kWindowPasses; ++j) {
      if (!(window_rows & (1u << j))) continue;
      leaky_relu_chunk<T>(reinterpret_cast<uint4*>(stage + j * kRowsPerPass * kRowBytes),
                          a.input_slope);
    }
  };

  float acc[kWarpTilesM][kWarpTilesN][4];
#pragma unroll
  for (int mi = 0; mi < kWarpTilesM; ++mi) {
#pragma unroll
    for (int nj = 0; nj < kWarpTilesN; ++nj) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;
    }
  }

  // The ring's first kDepth − 1 stages (an empty group for each one past the last, so that every
  // iteration below waits for the same count).
#pragma unroll
  for (int i = 0; i < kDepth - 1; ++i) {
    if (i < stages) {
      copy_next_stage(i);
    } else {
      copy_async_commit();
    }
  }

  // ldmatrix lanes: A (16 rows × 16 channels as four 8 × 8 matrices) takes row lane % 16, half
  // lane / 16; B (8 steps × 16 channels, two n-tiles per x4) takes step lane % 8 of n-tile
  // (lane / 16), half (lane / 8) % 2. A warp's m-tiles and n-tile pairs lie 16 rows apart, which
  // keeps the swizzle: each is its first one's address plus a constant.
  const int a_row = warp_m * Tiling::kWarpM + (lane & 15);
  const int a_half = lane >> 4;
  const int b_step = warp_n * Tiling::kWarpN + ((lane >> 4) << 3) + (lane & 7);
  const int b_half = (lane >> 3) & 1;
  const uint32_t a_offset = static_cast<uint32_t>(window_bytes + swizzled(a_row, a_half));
  int buffer = 0;
  int ahead_buffer = kDepth - 1;
  for (int s = 0; s < stages; ++s) {
    // Stage s has landed (this thread's copies, then everyone's after the barrier), and every
    // warp is done with stage s − 1, whose buffer takes stage s + kDepth − 1.
    copy_async_wait<kDepth - 2>();
    if (activate_window) activate_stage(buffer);
    __syncthreads();
    if (s + kDepth - 1 < stages) {
      copy_next_stage(ahead_buffer);
    } else {
      copy_async_commit();
    }
    const uint32_t window = shared_base + buffer * stage_stride;
    uint32_t a_address = window + a_offset;
    int b_row = b_step;
    for (int k = 0; k < kernel; ++k) {
      uint32_t weights[kWarpTilesM][4];
#pragma unroll
      for (int mi = 0; mi < kWarpTilesM; ++mi) {
        ldmatrix_x4(weights[mi], a_address + mi * 16 * kRowBytes);
      }
      const uint32_t b_address = window + static_cast<uint32_t>(swizzled(b_row, b_half));
#pragma unroll
      for (int pair = 0; pair < kWarpTilesN / 2; ++pair) {
        uint32_t inputs[4];
        ldmatrix_x4(inputs, b_address + pair * 16 * kRowBytes);
#pragma unroll
        for (int mi = 0; mi < kWarpTilesM; ++mi) {
          mma_16x8x16<T>(acc[mi][2 * pair], weights[mi], inputs[0], inputs[1]);
          mma_16x8x16<T>(acc[mi][2 * pair + 1], weights[mi], inputs[2], inputs[3]);
        }
      }
      a_address += kBlockM * kRowBytes;
      b_row += dilation;
    }
    buffer = buffer + 1 == kDepth ? 0 : buffer + 1;
    ahead_buffer = ahead_buffer + 1 == kDepth ? 0 : ahead_buffer + 1;
  }
  // The epilogue reuses the ring: every warp done with the last stage (the groups still
  // committed are empty).
  __syncthreads();

  if (next.rows != nullptr) {
    store_time_major<T, Tiling>(a, next, acc, shared, t0, co0, b, warp_m, warp_n, lane);
    return;
  }
  if (a.time_major_output) {
    store_rows<T, Tiling>(a, acc, shared, t0, co0, b, warp_m, warp_n, lane);
    return;
  }
  store_channel_major<T, Tiling>(a, acc, shared, t0, co0, b, warp_m, warp_n, lane);
}

int device_attribute(cudaDeviceAttr attribute) {
  int device = 0;
  int value = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess) {
    return 0;
  }
  return value;
}

int multiprocessors() {
  return std::max(device_attribute(cudaDevAttrMultiProcessorCount), 1);
}

// Blocks with `bytes` of dynamic shared memory each that a multiprocessor's shared memory holds.
int blocks_by_shared_memory(size_t bytes) {
  const size_t per_block = bytes + device_attribute(cudaDevAttrReservedSharedMemoryPerBlock);
  return static_cast<int>(
      static_cast<size_t>(device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor)) /
      per_block);
}

// Blocks of kKernel (kThreads threads) that fit on a multiprocessor with `bytes` of dynamic
// shared memory each: what its registers allow (asked once per kernel: the same for every
// launch), fewer where shared memory runs out first.
template <auto kKernel, int kThreads>
int resident_blocks(size_t bytes) {
  static const int by_registers = [] {
    int blocks = 0;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, kThreads, 0) ==
                   cudaSuccess
               ? blocks
               : 1;
  }();
  return std::min(by_registers, blocks_by_shared_memory(bytes));
}

// Calls launch(depth) with the deepest ring (a std::integral_constant of 4, 3 or 2 stages) whose
// bytes(depth) fit and keep the blocks a multiprocessor holds with two (resident(depth), for the
// kernel of that depth): a short convolution's stage is little work, and more copies in flight
// took 2-5 % off the 3-tap launches (bench/NOTES.md, session 29); depth is not bought with
// blocks.
template <typename Bytes, typename Resident, typename Launch>
void launch_deepest_ring(const Bytes& bytes, const Resident& resident, const Launch& launch) {
  constexpr std::integral_constant<int, 2> two;
  constexpr std::integral_constant<int, 3> three;
  constexpr std::integral_constant<int, 4> four;
  const int blocks = resident(two);
  const auto keeps = [&](auto depth) {
    return bytes(depth) <= kMaxDynamicShared && resident(depth) >= blocks;
  };
  if (keeps(four)) {
    launch(four);
  } else if (keeps(three)) {
    launch(three);
  } else {
    launch(two);
  }
}

// The convolution over the time-major input of `rows` rows × `channels` (padded) channels,
// into `next` when it is set, else into a.out, through a ring of kDepth stages.
template <typename T, typename Tiling, int kDepth>
void launch_mma_ring(const ImplicitGemmConv& a, const TimeMajorOutput& next, int halo, int64_t rows,
                     int64_t channels, size_t stage, size_t bytes, cudaStream_t stream,
                     const char* op) {
  auto* kernel = mma_conv_kernel<T, Tiling, kDepth>;
  if (bytes > (48 << 10)) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", op);
  }
  const dim3 grid(static_cast<unsigned>((a.out_steps + kBlockSteps - 1) / kBlockSteps),
                  static_cast<unsigned>((a.out_channels + Tiling::kBlockM - 1) / Tiling::kBlockM),
                  static_cast<unsigned>(a.batch));
  kernel<<<grid, Tiling::kThreads, bytes, stream>>>(a, next, halo, static_cast<int>(stage), rows,
                                                    channels);
  check(cudaGetLastError(), "implicit GEMM convolution launch", op);
}

// The same with the deepest ring that keeps the blocks (launch_deepest_ring).
template <typename T, typename Tiling>
void launch_mma(const ImplicitGemmConv& a, const TimeMajorOutput& next, int halo, int64_t rows,
                int64_t channels, cudaStream_t stream, const char* op) {
  const size_t stage = stage_bytes(a.kernel, halo, Tiling::kBlockM);
  const size_t epilogue = next.rows != nullptr  ? staged_bytes<Tiling>()
                          : a.time_major_output ? Tiling::kRowsBytes
                                                : channel_major_bytes<Tiling>();
  const auto bytes = [&](int depth) { return std::max(depth * stage, epilogue); };
  launch_deepest_ring(
      bytes,
      [&](auto depth) {
        constexpr int kDepth = decltype(depth)::value;
        return resident_blocks<mma_conv_kernel<T, Tiling, kDepth>, Tiling::kThreads>(bytes(kDepth));
      },
      [&](auto depth) {
        constexpr int kDepth = decltype(depth)::value;
        launch_mma_ring<T, Tiling, kDepth>(a, next, halo, rows, channels, stage, bytes(kDepth),
                                           stream, op);
      });
}

using Tiles128 = MmaTiling<4, 2, 2, 8>;
using Tiles64 = MmaTiling<2, 2, 2, 8>;
using Tiles32 = MmaTiling<1, 4, 2, 4>;

// Writes the time-major input (16-byte vectors where the rows are whole vectors), row-major or
// group-major (transposed_offset).
template <typename T>
void transpose_input(const ImplicitGemmConv& a, int64_t rows, int64_t channels, bool group_major,
                     cudaStream_t stream, const char* op) {
  const dim3 transpose_grid(static_cast<unsigned>((rows + 63) / 64),
                            static_cast<unsigned>((channels + 63) / 64),
                            static_cast<unsigned>(a.batch));
  const bool vectors = a.in_steps % 8 == 0 && sixteen_byte_aligned(a.x);
  const dim3 vector_grid(static_cast<unsigned>((a.in_steps + 63) / 64 + 1),
                         static_cast<unsigned>((channels + 63) / 64),
                         static_cast<unsigned>(a.batch));
  auto transpose = [&](auto input) {
    using Tin = decltype(input);
    if (vectors) {
      transpose_input_vector_kernel<T, Tin>
          <<<vector_grid, 256, 0, stream>>>(a, rows, channels, group_major);
    } else {
      transpose_input_kernel<T, Tin>
          <<<transpose_grid, 256, 0, stream>>>(a, rows, channels, group_major);
    }
  };
  if (a.input_dtype == DType::F32) {
    transpose(float{});
  } else {
    transpose(T{});
  }
  check(cudaGetLastError(), "transpose_input_kernel launch", op);
}

// Warps a launch must give every multiprocessor before a tile that wide runs it: one block of
// 128 channels (8 warps), two of 64. At one sequence, HiFiGAN V1's stage 1 (256 channels) as
// 180 blocks of 64 channels left most multiprocessors one block of 4 warps: 675 µs a pass for
// its upsampler and 18 convolutions, against 564 µs as 360 blocks of 32 (bench/NOTES.md,
// session 42).
constexpr int64_t kWarpsToFill = 8;

template <typename Tiling>
bool fills_multiprocessors(const ImplicitGemmConv& a, int64_t step_tiles, int multiprocessors) {
  const int64_t blocks = step_tiles * ((a.out_channels + Tiling::kBlockM - 1) / Tiling::kBlockM);
  return blocks * (Tiling::kThreads / 32) >= kWarpsToFill * multiprocessors;
}

// Runs the widest channel tile that still fills every multiprocessor (wider tiles read the
// window fewer times per output); 32 channels when none does.
template <typename T>
void launch_mma_for(const ImplicitGemmConv& a, const TimeMajorOutput& next, int halo, int64_t rows,
                    int64_t channels, cudaStream_t stream, const char* op) {
  const int64_t step_tiles = (a.out_steps + kBlockSteps - 1) / kBlockSteps * a.batch;
  const int sms = multiprocessors();
  if (a.out_channels >= 128 && fills_multiprocessors<Tiles128>(a, step_tiles, sms) &&
      2 * stage_bytes(a.kernel, halo, 128) <= kMaxDynamicShared) {
    launch_mma<T, Tiles128>(a, next, halo, rows, channels, stream, op);
  } else if (a.out_channels > 32 && fills_multiprocessors<Tiles64>(a, step_tiles, sms)) {
    launch_mma<T, Tiles64>(a, next, halo, rows, channels, stream, op);
  } else {
    launch_mma<T, Tiles32>(a, next, halo, rows, channels, stream, op);
  }
}

// The pair on chip: HiFiGAN V1's resblock step over time-major rows, C → C → C channels, in one
// kernel whose intermediate never leaves the multiprocessor. A block takes every channel of
// N − halo₂ output steps of one sequence (N the tiling's steps, 128 or 256; halo₂ = d₂·(K₂ −
// 1)): it copies the input's window of N + halo₁ rows once (all C channels, each 16-channel group
// a swizzled window as mma_conv_kernel's stage has), computes the first convolution over N
// intermediate steps (those its output steps read), writes them, bias added, activated and zero
// outside the sequence, into shared memory in the same layout over the window (which the first
// convolution no longer reads), and computes the second convolution from there; only the weights
// stream through a ring of stages (the first's C / 16 stages, then the second's). The second's
// last halo₂ columns read rows past the intermediate's and are not stored. Against two launches
// this reads the input once and neither writes nor reads the intermediate through global memory,
// for ~halo₂ / N more multiplies.
struct PairOnChipLayout {
  int window_rows = 0;   // N + halo₁
  int window_group = 0;  // bytes of one group's window, rounded to 128
  int middle_rows = 0;   // N + halo₂ (the rows past N zero)
  int middle_group = 0;  // bytes of one group's intermediate, rounded to 128
  int ring_offset = 0;   // where the weight ring starts: after the window or the intermediate,
                         // whichever is larger (the intermediate starts where the window does)
  int weight_stage = 0;  // bytes of one ring slot: max(K₁, K₂) taps × C rows of 16 channels
  int out_steps = 0;     // output steps a block stores: N − halo₂
};

constexpr int kMaxPairOnChipHalo = 64;  // halo₂ at most: a block stores at least 64 steps

PairOnChipLayout pair_on_chip_layout(int block_steps, int64_t channels, int64_t k1, int64_t d1,
                                     int64_t k2, int64_t d2) {
  const int groups = static_cast<int>(channels / kStageChannels);
  PairOnChipLayout l;
  l.window_rows = block_steps + static_cast<int>((k1 - 1) * d1);
  l.window_group = round_to_128(l.window_rows * kRowBytes);
  l.middle_rows = block_steps + static_cast<int>((k2 - 1) * d2);
  l.middle_group = round_to_128(l.middle_rows * kRowBytes);
  l.ring_offset = groups * std::max(l.window_group, l.middle_group);
  l.weight_stage = static_cast<int>(std::max(k1, k2) * channels) * kRowBytes;
  l.out_steps = block_steps - static_cast<int>((k2 - 1) * d2);
  return l;
}

// Shared memory of a block with a ring of `depth` weight stages; the output tile staged as F32
// rows (store_rows) reuses it.
template <typename Tiling>
size_t pair_on_chip_bytes(const PairOnChipLayout& l, int depth) {
  return std::max(static_cast<size_t>(l.ring_offset) + static_cast<size_t>(depth) * l.weight_stage,
                  Tiling::kRowsBytes);
}

template <typename T, typename Tiling, int kDepth>
__global__ void __launch_bounds__(Tiling::kThreads)
    mma_pair_on_chip_kernel(ImplicitGemmConv first, ImplicitGemmConv second, PairOnChipLayout l) {
  constexpr int kThreads = Tiling::kThreads;
  constexpr int kChannels = Tiling::kBlockM;
  constexpr int kGroups = kChannels / kStageChannels;
  constexpr int kStages = 2 * kGroups;
  static_assert(kDepth - 1 <= kStages, "the ring's first stages are weight stages");
  extern __shared__ __align__(128) unsigned char shared[];
  const int64_t steps = first.out_steps;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * l.out_steps;
  const int64_t b = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_m = warp % Tiling::kWarpRows;
  const int warp_n = warp / Tiling::kWarpRows;
  const uint32_t shared_base = shared_address(shared);
  const T* x = static_cast<const T*>(first.x) + b * steps * kChannels;
  // Window row 0 is input step t0 − p₂ − p₁: intermediate column n is step t0 − p₂ + n.
  const int64_t window_step0 = t0 - second.padding - first.padding;
  const int64_t middle_step0 = t0 - second.padding;

  // The window, 16 bytes a copy, neighbouring threads along a row's channels (zeros outside the
  // sequence); it lands with the first weight stage's group.
  constexpr int kChunksPerRow = kChannels / 8;
  const int window_chunks = l.window_rows * kChunksPerRow;
  const auto window_chunk = [&](int i) {
    const int row = i / kChunksPerRow;
    const int chunk = i % kChunksPerRow;
    return static_cast<uint32_t>((chunk >> 1) * l.window_group + swizzled(row, chunk & 1));
  };
  for (int i = threadIdx.x; i < window_chunks; i += kThreads) {
    const int64_t step = window_step0 + i / kChunksPerRow;
    const bool inside = step >= 0 && step < steps;
    copy_async_16(shared_base + window_chunk(i),
                  inside ? x + step * kChannels + (i % kChunksPerRow) * 8 : x, inside);
  }

  // Ring stage q: the first convolution's weights for input channels 16q .. 16q + 15, then (q ≥
  // kGroups) the second's for 16(q − kGroups) ..; each a stage of the arranged weights, K × C
  // rows of 32 bytes in a row.
  const auto copy_weight_stage = [&](int q, int buffer) {
    const ImplicitGemmConv& conv = q < kGroups ? first : second;
    const int rows = static_cast<int>(conv.kernel) * kChannels;
    const T* source = static_cast<const T*>(conv.arranged_weight) +
                      static_cast<int64_t>(q % kGroups) * rows * kStageChannels;
    const uint32_t stage = shared_base + l.ring_offset + buffer * l.weight_stage;
    for (int i = threadIdx.x; i < 2 * rows; i += kThreads) {
      copy_async_16(stage + swizzled(i >> 1, i & 1), source + i * 8, true);
    }
  };
#pragma unroll
  for (int i = 0; i < kDepth - 1; ++i) {
    copy_weight_stage(i, i);
    copy_async_commit();
  }

  float acc[Tiling::kTilesM][Tiling::kTilesN][4];
  const auto clear = [&] {
#pragma unroll
    for (int mi = 0; mi < Tiling::kTilesM; ++mi) {
#pragma unroll
      for (int nj = 0; nj < Tiling::kTilesN; ++nj) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;
      }
    }
  };
  clear();

  const int a_row = warp_m * Tiling::kWarpM + (lane & 15);
  const int a_half = lane >> 4;
  const int b_step = warp_n * Tiling::kWarpN + ((lane >> 4) << 3) + (lane & 7);
  const int b_half = (lane >> 3) & 1;
  const uint32_t a_offset = static_cast<uint32_t>(swizzled(a_row, a_half));
  int buffer = 0;
  int ahead_buffer = kDepth - 1;
  for (int q = 0; q < kStages; ++q) {
    copy_async_wait<kDepth - 2>();
    // x has not been through the first's leaky ReLU: each thread applies it to the window
    // chunks it copied, once they have landed.
    if (q == 0 && first.input_leaky_relu) {
      for (int i = threadIdx.x; i < window_chunks; i += kThreads) {
        leaky_relu_chunk<T>(reinterpret_cast<uint4*>(shared + window_chunk(i)), first.input_slope);
      }
    }
    __syncthreads();
    if (q + kDepth - 1 < kStages) copy_weight_stage(q + kDepth - 1, ahead_buffer);
    copy_async_commit();
    const bool in_first = q < kGroups;
    const int kernel = static_cast<int>(in_first ? first.kernel : second.kernel);
    const int dilation = static_cast<int>(in_first ? first.dilation : second.dilation);
    const uint32_t operand =
        shared_base + (in_first ? q * l.window_group : (q - kGroups) * l.middle_group);
    uint32_t a_address = shared_base + l.ring_offset + buffer * l.weight_stage + a_offset;
    int b_row = b_step;
    for (int k = 0; k < kernel; ++k) {
      uint32_t weights[Tiling::kTilesM][4];
#pragma unroll
      for (int mi = 0; mi < Tiling::kTilesM; ++mi) {
        ldmatrix_x4(weights[mi], a_address + mi * 16 * kRowBytes);
      }
      const uint32_t b_address = operand + static_cast<uint32_t>(swizzled(b_row, b_half));
#pragma unroll
      for (int pair = 0; pair < Tiling::kTilesN / 2; ++pair) {
        uint32_t inputs[4];
        ldmatrix_x4(inputs, b_address + pair * 16 * kRowBytes);
#pragma unroll
        for (int mi = 0; mi < Tiling::kTilesM; ++mi) {
          mma_16x8x16<T>(acc[mi][2 * pair], weights[mi], inputs[0], inputs[1]);
          mma_16x8x16<T>(acc[mi][2 * pair + 1], weights[mi], inputs[2], inputs[3]);
        }
      }
      a_address += kChannels * kRowBytes;
      b_row += dilation;
    }
    if (q == kGroups - 1) {
      // The intermediate, over the window once every warp is done with it: bias added, the
      // second's leaky ReLU applied, zero outside the sequence (the second's padding), rounded
      // to T; its rows past the tile's steps, which feed only the columns not stored, zero. The
      // next stage's barrier orders these stores before the second convolution reads them.
      __syncthreads();
      for (int i = threadIdx.x; i < (l.middle_rows - Tiling::kSteps) * kChunksPerRow;
           i += kThreads) {
        const int row = Tiling::kSteps + i / kChunksPerRow;
        const int chunk = i % kChunksPerRow;
        *reinterpret_cast<uint4*>(shared + (chunk >> 1) * l.middle_group +
                                  swizzled(row, chunk & 1)) = make_uint4(0, 0, 0, 0);
      }
      store_accumulator_rows<T, Tiling>(
          first, acc, 0, warp_m, warp_n, lane,
          [&](int column, float v) {
            const int64_t step = middle_step0 + column;
            if (second.input_leaky_relu && v < 0.0f) v *= second.input_slope;
            return step < 0 || step >= steps ? 0.0f : v;
          },
          [&](int m0, int column) {
            return shared_base + static_cast<uint32_t>((m0 >> 4) * l.middle_group +
                                                       swizzled(column, (m0 >> 3) & 1));
          });
      clear();
    }
    buffer = buffer + 1 == kDepth ? 0 : buffer + 1;
    ahead_buffer = ahead_buffer + 1 == kDepth ? 0 : ahead_buffer + 1;
  }
  // The output tile reuses the window and the ring: every warp done with the last stage (the
  // groups still committed are empty).
  __syncthreads();
  constexpr int kStride = Tiling::kRowsStride;
  float* tile = reinterpret_cast<float*>(shared);
  for_each_accumulator_pair<T, Tiling>(second, acc, 0, warp_m, warp_n, lane,
                                       [&](int m, int column, float v0, float v1) {
                                         tile[column * kStride + m] = v0;
                                         tile[(column + 1) * kStride + m] = v1;
                                       });
  __syncthreads();
  T* out = static_cast<T*>(second.out);
  const OutputTerms<T> terms = output_terms(second, out);
  for (int i = threadIdx.x; i < l.out_steps * kChunksPerRow; i += kThreads) {
    const int column = i / kChunksPerRow;
    const int c = 8 * (i % kChunksPerRow);
    if (t0 + column >= steps) break;
    store_output_vector<8>(out, terms, (b * steps + t0 + column) * kChannels + c, 8,
                           tile + column * kStride + c);
  }
}

template <typename T, typename Tiling, int kDepth>
void launch_pair_on_chip_ring(const ImplicitGemmConv& first, const ImplicitGemmConv& second,
                              const PairOnChipLayout& l, cudaStream_t stream, const char* op) {
  auto* kernel = mma_pair_on_chip_kernel<T, Tiling, kDepth>;
  const size_t bytes = pair_on_chip_bytes<Tiling>(l, kDepth);
  if (bytes > (48 << 10)) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", op);
  }
  const dim3 grid(static_cast<unsigned>((first.out_steps + l.out_steps - 1) / l.out_steps), 1,
                  static_cast<unsigned>(first.batch));
  kernel<<<grid, Tiling::kThreads, bytes, stream>>>(first, second, l);
  check(cudaGetLastError(), "on-chip convolution pair launch", op);
}

PairOnChipLayout pair_on_chip_layout(int block_steps, const ImplicitGemmConv& first,
                                     const ImplicitGemmConv& second) {
  return pair_on_chip_layout(block_steps, first.out_channels, first.kernel, first.dilation,
                             second.kernel, second.dilation);
}

// With the deepest ring of weight stages that keeps the blocks (launch_deepest_ring).
template <typename T, typename Tiling>
void launch_pair_on_chip(const ImplicitGemmConv& first, const ImplicitGemmConv& second,
                         cudaStream_t stream, const char* op) {
  const PairOnChipLayout l = pair_on_chip_layout(Tiling::kSteps, first, second);
  const auto bytes = [&](int depth) { return pair_on_chip_bytes<Tiling>(l, depth); };
  launch_deepest_ring(
      bytes,
      [&](auto depth) {
        constexpr int kDepth = decltype(depth)::value;
        return resident_blocks<mma_pair_on_chip_kernel<T, Tiling, kDepth>, Tiling::kThreads>(
            bytes(kDepth));
      },
      [&](auto depth) {
        launch_pair_on_chip_ring<T, Tiling, decltype(depth)::value>(first, second, l, stream, op);
      });
}

// The time-major input first; then Hopper's wgmma kernel where it runs and takes the
// convolution (it arranges its own weights) and the weights did not come arranged, else the
// weights arranged for the mma.sync kernel (unless they came so) and that kernel.
template <typename T>
void launch_for(const ImplicitGemmConv& a, cudaStream_t stream, const char* op) {
  const int halo = static_cast<int>((a.kernel - 1) * a.dilation);
  const int64_t rows = transposed_rows(a.out_steps, halo);
  const int64_t channels = padded_channels(a.in_channels);
  if (a.allow_wgmma && !a.weight_arranged && wgmma_conv_available() &&
      wgmma_conv_fits(a, channels, multiprocessors())) {
    transpose_input<T>(a, rows, channels, true, stream, op);
    wgmma_conv1d(a, rows, channels, stream, op);
    return;
  }
  transpose_input<T>(a, rows, channels, false, stream, op);
  if (!a.weight_arranged) arrange_weights<kStageChannels, T>(a, stream, op);
  launch_mma_for<T>(a, TimeMajorOutput{}, halo, rows, channels, stream, op);
}

// The on-chip pair's tiles of 256 steps (8 warps) where their blocks give every multiprocessor
// two over the launch: each block then reads every weight once for twice the steps, and
// recomputes halo₂ intermediate steps for twice as many outputs; else tiles of 128 steps.
using WideTiles32 = MmaTiling<1, 8, 2, 4>;
using WideTiles64 = MmaTiling<2, 4, 2, 8>;
constexpr int64_t kWideBlocksPerMultiprocessor = 2;

template <typename T, typename Narrow, typename Wide>
void launch_pair_on_chip_for(const ImplicitGemmConv& first, const ImplicitGemmConv& second,
                             cudaStream_t stream, const char* op) {
  const PairOnChipLayout wide = pair_on_chip_layout(Wide::kSteps, first, second);
  const int64_t wide_blocks = (first.out_steps + wide.out_steps - 1) / wide.out_steps * first.batch;
  if (wide_blocks >= kWideBlocksPerMultiprocessor * multiprocessors() &&
      pair_on_chip_bytes<Wide>(wide, 2) <= kMaxDynamicShared) {
    launch_pair_on_chip<T, Wide>(first, second, stream, op);
  } else {
    launch_pair_on_chip<T, Narrow>(first, second, stream, op);
  }
}

// Whether the pair runs on chip (implicit_gemm_pair_on_chip's shapes, rows in and out, both
// weights arranged when the model loaded).
bool pair_on_chip(const ImplicitGemmConv& first, const ImplicitGemmConv& second) {
  return first.time_major_input && second.time_major_output && first.weight_arranged &&
         second.weight_arranged &&
         implicit_gemm_pair_on_chip(first.in_channels, first.out_channels, second.out_channels,
                                    first.kernel, first.dilation, second.kernel, second.dilation);
}

// The pair (implicit_gemm_conv1d_pair) on chip where it runs there; else the first's input
// transposed, its output into the second's time-major input (border rows included:
// store_time_major), each weight arranged unless it came arranged; the second from there.
template <typename T>
void launch_pair_for(const ImplicitGemmConv& first, const ImplicitGemmConv& second,
                     cudaStream_t stream, const char* op) {
  if (pair_on_chip(first, second)) {
    if (first.out_channels == 32) {
      launch_pair_on_chip_for<T, Tiles32, WideTiles32>(first, second, stream, op);
    } else {
      launch_pair_on_chip_for<T, Tiles64, WideTiles64>(first, second, stream, op);
    }
    return;
  }
  const int first_halo = static_cast<int>((first.kernel - 1) * first.dilation);
  const int64_t first_rows = transposed_rows(first.out_steps, first_halo);
  const int64_t first_channels = padded_channels(first.in_channels);
  const int second_halo = static_cast<int>((second.kernel - 1) * second.dilation);
  TimeMajorOutput next;
  next.rows = second.transposed_input;
  next.padding = second.padding;
  next.row_count = transposed_rows(second.out_steps, second_halo);
  next.channels = padded_channels(second.in_channels);
  next.leaky_relu = second.input_leaky_relu;
  next.slope = second.input_slope;
  if (!first.time_major_input) {
    transpose_input<T>(first, first_rows, first_channels, false, stream, op);
  }
  if (!first.weight_arranged) arrange_weights<kStageChannels, T>(first, stream, op);
  launch_mma_for<T>(first, next, first_halo, first.time_major_input ? first.in_steps : first_rows,
                    first_channels, stream, op);
  if (!second.weight_arranged) arrange_weights<kStageChannels, T>(second, stream, op);
  launch_mma_for<T>(second, TimeMajorOutput{}, second_halo, next.row_count, next.channels, stream,
                    op);
}

// arranged[((g·taps + j)·(s·Cout) + c)·16 + e], for c = r·Cout + co: the weight of phase r,
// output channel co, input channel ci = 16·g + e at window tap j (input step τ + j −
// window_padding): the transposed weight [Cin, Cout, K]'s tap k = k_r + m·s with m = d_r − (j −
// window_padding), or zero where that is no tap or ci is past the last channel; then, at
// phase_bias, bias[c mod Cout] for every c when there is a bias.
template <typename T>
__global__ void arrange_polyphase_kernel(const T* weight, const T* bias, T* arranged, T* phase_bias,
                                         int64_t in_channels, int64_t out_channels, Polyphase p,
                                         int64_t n) {
  const int64_t channels = p.stride * out_channels;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i % kStageChannels;
    const int64_t c = (i / kStageChannels) % channels;
    const int64_t j = (i / (kStageChannels * channels)) % p.taps;
    const int64_t ci = i / (kStageChannels * channels * p.taps) * kStageChannels + e;
    const int64_t r = c / out_channels;
    const int64_t co = c % out_channels;
    const int64_t m = (r + p.padding) / p.stride - (j - p.window_padding);
    const int64_t k = (r + p.padding) % p.stride + m * p.stride;
    const bool tap = ci < in_channels && m >= 0 && k < p.kernel;
    arranged[i] = tap ? weight[(ci * out_channels + co) * p.kernel + k] : from_float<T>(0.0f);
    if (bias != nullptr && i < channels) phase_bias[i] = bias[i % out_channels];
  }
}

// Elements of the phase weights in a.arranged_weight; the per-phase bias follows them.
int64_t phase_weight_elements(const ImplicitGemmConv& a, const Polyphase& p) {
  return implicit_gemm_arranged_weight_elements(p.stride * a.out_channels, a.in_channels, p.taps);
}

// The phase weights and bias of a.weight and a.bias arranged into a.arranged_weight.
template <typename T>
void launch_arrange_polyphase(const ImplicitGemmConv& a, const Polyphase& p, cudaStream_t stream,
                              const char* op) {
  const int64_t n = phase_weight_elements(a, p);
  T* arranged = static_cast<T*>(a.arranged_weight);
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  arrange_polyphase_kernel<T>
      <<<blocks, 256, 0, stream>>>(static_cast<const T*>(a.weight), static_cast<const T*>(a.bias),
                                   arranged, arranged + n, a.in_channels, a.out_channels, p, n);
  check(cudaGetLastError(), "arrange_polyphase_kernel launch", op);
}

// The phase weights and bias arranged into a.arranged_weight (unless a.weight_arranged: they are
// there already), then the stride-1 convolution of the phases from the time-major input rows into
// the output rows.
template <typename T>
void launch_conv_transpose_rows(const ImplicitGemmConv& a, const Polyphase& p, cudaStream_t stream,
                                const char* op) {
  const int64_t channels = p.stride * a.out_channels;
  if (!a.weight_arranged) launch_arrange_polyphase<T>(a, p, stream, op);
  ImplicitGemmConv conv = a;
  conv.bias = a.bias != nullptr ? static_cast<T*>(a.arranged_weight) + phase_weight_elements(a, p)
                                : nullptr;
  conv.out_channels = channels;
  conv.out_steps = a.in_steps;
  conv.kernel = p.taps;
  conv.padding = p.window_padding;
  conv.dilation = 1;
  conv.input_leaky_relu = false;
  conv.time_major_input = true;
  conv.time_major_output = true;
  launch_mma_for<T>(conv, TimeMajorOutput{}, static_cast<int>(p.taps - 1), a.in_steps,
                    a.in_channels, stream, op);
}

}  // namespace

std::optional<Polyphase> polyphase_of(int64_t stride, int64_t kernel, int64_t padding,
                                      int64_t dilation, int64_t output_padding, int64_t groups) {
  if (stride < 1 || kernel < 1 || padding < 0 || dilation != 1 || output_padding != 0 ||
      groups != 1 || kernel - 2 * padding != stride) {
    return std::nullopt;
  }
  int64_t low = 0;
  int64_t high = 0;
  for (int64_t r = 0; r < stride; ++r) {
    const int64_t first_tap = (r + padding) % stride;
    const int64_t offset = (r + padding) / stride;
    low = std::min(low, offset - (kernel - 1 - first_tap) / stride);
    high = std::max(high, offset);
  }
  return Polyphase{stride, kernel, padding, high - low + 1, -low};
}

bool implicit_gemm_conv_transpose1d_rows_supported(DType dtype, int64_t in_channels,
                                                   int64_t out_channels,
                                                   const Polyphase& polyphase) {
  return in_channels % kStageChannels == 0 && in_channels > 0 &&
         polyphase.stride * out_channels % 8 == 0 && out_channels > 0 &&
         implicit_gemm_conv1d_supported(dtype, polyphase.taps, 1, 1, 1);
}

int64_t implicit_gemm_polyphase_elements(int64_t in_channels, int64_t out_channels,
                                         const Polyphase& polyphase) {
  const int64_t channels = polyphase.stride * out_channels;
  return implicit_gemm_arranged_weight_elements(channels, in_channels, polyphase.taps) + channels;
}

bool implicit_gemm_pair_on_chip(int64_t in_channels, int64_t channels, int64_t out_channels,
                                int64_t first_kernel, int64_t first_dilation, int64_t second_kernel,
                                int64_t second_dilation) {
  if (in_channels != channels || out_channels != channels || (channels != 32 && channels != 64) ||
      first_kernel < 1 || first_dilation < 1 || second_kernel < 1 || second_dilation < 1 ||
      first_kernel > 64 || second_kernel > 64 || (first_kernel - 1) * first_dilation > kMaxHalo ||
      (second_kernel - 1) * second_dilation > kMaxPairOnChipHalo) {
    return false;
  }
  const PairOnChipLayout l = pair_on_chip_layout(kBlockSteps, channels, first_kernel,
                                                 first_dilation, second_kernel, second_dilation);
  return channels == 32 ? pair_on_chip_bytes<Tiles32>(l, 2) <= kMaxDynamicShared
                        : pair_on_chip_bytes<Tiles64>(l, 2) <= kMaxDynamicShared;
}

int64_t implicit_gemm_arranged_weight_elements(int64_t out_channels, int64_t in_channels,
                                               int64_t kernel) {
  return (in_channels + kStageChannels - 1) / kStageChannels * kernel * out_channels *
         kStageChannels;
}

int64_t implicit_gemm_transposed_input_elements(int64_t batch, int64_t in_channels,
                                                int64_t out_steps, int64_t kernel,
                                                int64_t dilation) {
  return batch * transposed_rows(out_steps, (kernel - 1) * dilation) * padded_channels(in_channels);
}

bool implicit_gemm_fills_device(int64_t batch, int64_t out_channels, int64_t out_steps) {
  return (out_steps + kBlockSteps - 1) / kBlockSteps * batch * ((out_channels + 63) / 64) >=
         multiprocessors();
}

bool implicit_gemm_conv1d_supported(DType dtype, int64_t kernel, int64_t dilation, int64_t stride,
                                    int64_t groups) {
  if ((dtype != DType::F16 && dtype != DType::BF16) || stride != 1 || groups != 1 || kernel < 1 ||
      dilation < 1 || kernel > 64 || dilation > 64) {
    return false;
  }
  const int64_t halo = (kernel - 1) * dilation;
  return halo <= kMaxHalo && 2 * stage_bytes(kernel, halo, 64) <= kMaxDynamicShared;
}

namespace {

// Throws voxd::Error naming `op` for a convolution the kernels cannot run: a batch past the grid,
// dtypes other than F16/BF16 weights with inputs and outputs of theirs or F32.
void check_runs(const ImplicitGemmConv& a, const char* op) {
  if (a.batch > 65535) {
    throw Error(std::string("cuda: ") + op + ": batch " + std::to_string(a.batch) +
                " exceeds the implicit-GEMM convolution's grid (65535)");
  }
  if (a.dtype != DType::F16 && a.dtype != DType::BF16) {
    throw Error(std::string("cuda: ") + op + ": the implicit-GEMM convolution takes F16 or BF16");
  }
  const auto around = [&](DType d) { return d == a.dtype || d == DType::F32; };
  if (!around(a.input_dtype) || !around(a.output_dtype)) {
    throw Error(std::string("cuda: ") + op + ": the implicit-GEMM convolution reads " +
                std::string(dtype_name(a.input_dtype)) + " and writes " +
                std::string(dtype_name(a.output_dtype)) + " around " +
                std::string(dtype_name(a.dtype)) + " weights; it takes those or F32");
  }
}

}  // namespace

void implicit_gemm_conv1d_pair(const ImplicitGemmConv& first, const ImplicitGemmConv& second,
                               cudaStream_t stream, const char* op) {
  if (first.batch == 0 || second.out_channels == 0 || second.out_steps == 0) return;
  check_runs(first, op);
  check_runs(second, op);
  const bool same_length = first.out_steps == second.out_steps &&
                           2 * first.padding == (first.kernel - 1) * first.dilation &&
                           2 * second.padding == (second.kernel - 1) * second.dilation;
  if (first.dtype != second.dtype || first.batch != second.batch ||
      first.out_channels != second.in_channels || !same_length) {
    throw Error(std::string("cuda: ") + op +
                ": the implicit-GEMM convolution pair needs one dtype, one batch, the first's "
                "output channels as the second's input and both keeping the length");
  }
  const bool rows_in = !first.time_major_input ||
                       (first.input_dtype == first.dtype &&
                        first.in_channels % kStageChannels == 0 && sixteen_byte_aligned(first.x));
  const bool rows_out = !second.time_major_output ||
                        (second.output_dtype == second.dtype && second.out_channels % 8 == 0);
  if (second.time_major_input || first.time_major_output || !rows_in || !rows_out) {
    throw Error(std::string("cuda: ") + op +
                ": a time-major pair reads rows of the weights' dtype (channels a multiple of 16, "
                "16-byte aligned) into the first and writes rows of that dtype (channels a "
                "multiple of 8) from the second");
  }
  if (first.dtype == DType::F16) {
    launch_pair_for<__half>(first, second, stream, op);
  } else {
    launch_pair_for<__nv_bfloat16>(first, second, stream, op);
  }
}

void implicit_gemm_conv_transpose1d_rows(const ImplicitGemmConv& a, const Polyphase& polyphase,
                                         cudaStream_t stream, const char* op) {
  if (a.batch == 0 || a.out_channels == 0 || a.in_steps == 0) return;
  check_runs(a, op);
  if (a.dtype == DType::F16) {
    launch_conv_transpose_rows<__half>(a, polyphase, stream, op);
  } else {
    launch_conv_transpose_rows<__nv_bfloat16>(a, polyphase, stream, op);
  }
}

void implicit_gemm_arrange_polyphase(const ImplicitGemmConv& a, const Polyphase& polyphase,
                                     cudaStream_t stream, const char* op) {
  if (a.out_channels == 0 || a.in_channels == 0) return;
  if (a.dtype == DType::F16) {
    launch_arrange_polyphase<__half>(a, polyphase, stream, op);
  } else if (a.dtype == DType::BF16) {
    launch_arrange_polyphase<__nv_bfloat16>(a, polyphase, stream, op);
  } else {
    throw Error(std::string("cuda: ") + op + ": the implicit-GEMM convolution takes F16 or BF16");
  }
}

void implicit_gemm_arrange_weight(const ImplicitGemmConv& a, cudaStream_t stream, const char* op) {
  if (a.out_channels == 0 || a.in_channels == 0 || a.kernel == 0) return;
  if (a.dtype == DType::F16) {
    arrange_weights<kStageChannels, __half>(a, stream, op);
  } else if (a.dtype == DType::BF16) {
    arrange_weights<kStageChannels, __nv_bfloat16>(a, stream, op);
  } else {
    throw Error(std::string("cuda: ") + op + ": the implicit-GEMM convolution takes F16 or BF16");
  }
}

void implicit_gemm_conv1d(const ImplicitGemmConv& a, cudaStream_t stream, const char* op) {
  if (a.batch == 0 || a.out_channels == 0 || a.out_steps == 0) return;
  check_runs(a, op);
  if (a.time_major_input || a.time_major_output) {
    throw Error(std::string("cuda: ") + op +
                ": only implicit_gemm_conv1d_pair reads or writes time-major rows");
  }
  if (a.dtype == DType::F16) {
    launch_for<__half>(a, stream, op);
  } else {
    launch_for<__nv_bfloat16>(a, stream, op);
  }
}

}  // namespace voxd::cuda
