#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/flash_attention.h"
#include "backends/cuda/mma_sync.cuh"

namespace voxd::cuda {
namespace {

// A block is four warps; each warp owns 16 queries (one mma row tile) and every key tile.
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kQueries = 16 * kWarps;
constexpr int kKeys = 64;  // keys per tile
constexpr float kLog2e = 1.4426950408889634f;

// A tile of 64 rows of D 16-bit elements in shared memory: rows of D / 8 chunks of sixteen
// bytes, chunk c of row r stored at c ^ swizzle(r), so that the eight rows an ldmatrix phase
// reads at one chunk fall in distinct banks (rows of 64 bytes, D = 32, swizzle in pairs).
template <int D>
struct TileLayout {
  static constexpr int kChunks = D / 8;
  static constexpr int kRowBytes = D * 2;
  static constexpr int kBytes = 64 * kRowBytes;
  __device__ static int offset(int row, int chunk) {
    const int swizzle = kChunks >= 8 ? (row & 7) : ((row >> 1) & (kChunks - 1));
    return row * kRowBytes + ((chunk ^ swizzle) << 4);
  }
};

struct FlashArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  int64_t tq;
  int64_t rows;
  int64_t heads;
  float scale_log2;  // scale · log2(e): the softmax runs on exp2
  bool causal;
  SequenceValues key_lengths;
  SequenceValues key_starts;
  SequenceValues offsets;
};

// Rows first .. first + 63 of one head (row r at base + r · stride elements) into `tile`, zeros
// for the rows outside [begin, end). Aligned: sixteen-byte cp.async copies (the caller commits
// and waits); otherwise element by element.
template <typename T, int D, bool kAligned>
__device__ __forceinline__ void load_tile(unsigned char* tile, const T* base, int64_t stride,
                                          int64_t first, int64_t begin, int64_t end) {
  using L = TileLayout<D>;
  constexpr int kPerThread = 64 * L::kChunks / kThreads;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int index = static_cast<int>(threadIdx.x) + i * kThreads;
    const int row = index / L::kChunks;
    const int chunk = index % L::kChunks;
    const int64_t r = first + row;
    const bool valid = r >= begin && r < end;
    const T* src = base + (valid ? r * stride : 0) + chunk * 8;
    unsigned char* dst = tile + L::offset(row, chunk);
    if constexpr (kAligned) {
      copy_async_16(shared_address(dst), src, valid);
    } else {
      const auto* elements = reinterpret_cast<const uint16_t*>(src);
      uint16_t chunk_values[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) chunk_values[e] = valid ? elements[e] : uint16_t{0};
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(chunk_values);
    }
  }
}

// One block: kQueries queries of sequence blockIdx.z, head blockIdx.y. Shared memory: the query
// tile (later the output's staging), then two buffers each of keys and values, so that tile t +
// 1 copies while tile t multiplies.
template <typename T, int D, bool kAligned>
__global__ void __launch_bounds__(kThreads) flash_attention_kernel(const FlashArgs a) {
  using L = TileLayout<D>;
  constexpr int kSteps = D / 16;  // 16-element steps along the head
  extern __shared__ __align__(128) unsigned char shared[];
  unsigned char* q_tile = shared;
  unsigned char* k_tiles = shared + L::kBytes;
  unsigned char* v_tiles = shared + 3 * L::kBytes;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t b = blockIdx.z;
  const int64_t h = blockIdx.y;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kQueries;
  const int64_t stride = a.heads * D;
  const T* q = static_cast<const T*>(a.q) + (b * a.tq * a.heads + h) * D;
  const T* k = static_cast<const T*>(a.k) + (b * a.rows * a.heads + h) * D;
  const T* v = static_cast<const T*>(a.v) + (b * a.rows * a.heads + h) * D;
  const int64_t first = value_of(a.key_starts, b);
  const int64_t length = value_of(a.key_lengths, b);
  const int64_t offset = a.causal ? value_of(a.offsets, b) : 0;
  // The keys any of the block's queries sees: [first, end), walked from first's tile.
  const int64_t last_query = (q0 + kQueries < a.tq ? q0 + kQueries : a.tq) - 1;
  const int64_t end =
      a.causal && offset + last_query + 1 < length ? offset + last_query + 1 : length;
  const int64_t tile0 = first / kKeys * kKeys;
  const int tiles = end > first ? static_cast<int>((end - tile0 + kKeys - 1) / kKeys) : 0;

  load_tile<T, D, kAligned>(q_tile, q, stride, q0, 0, a.tq);
  if (tiles > 0) {
    load_tile<T, D, kAligned>(k_tiles, k, stride, tile0, first, length);
    load_tile<T, D, kAligned>(v_tiles, v, stride, tile0, first, length);
  }
  copy_async_commit();
  copy_async_wait_all();
  __syncthreads();

  // This warp's 16 queries as mma A fragments, 16 elements of the head each.
  uint32_t query[kSteps][4];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    ldmatrix_x4(query[s],
                shared_address(q_tile + L::offset(warp * 16 + (lane & 15), 2 * s + (lane >> 4))));
  }
  // This thread's two rows of the warp's tiles: lane / 4 and lane / 4 + 8.
  const int64_t row_query[2] = {q0 + warp * 16 + lane / 4, q0 + warp * 16 + lane / 4 + 8};
  float out[2 * kSteps][4] = {};
  float running_max[2] = {-INFINITY, -INFINITY};
  float running_sum[2] = {0.0f,
                          0.0f};  // this thread's columns only, summed over the quad at the end

  for (int t = 0; t < tiles; ++t) {
    const int64_t key0 = tile0 + static_cast<int64_t>(t) * kKeys;
    const int buffer = t & 1;
    if (t + 1 < tiles) {
      load_tile<T, D, kAligned>(k_tiles + (buffer ^ 1) * L::kBytes, k, stride, key0 + kKeys, first,
                                length);
      load_tile<T, D, kAligned>(v_tiles + (buffer ^ 1) * L::kBytes, v, stride, key0 + kKeys, first,
                                length);
    }
    copy_async_commit();
    const unsigned char* keys = k_tiles + buffer * L::kBytes;
    const unsigned char* values = v_tiles + buffer * L::kBytes;

    // Scores of the warp's 16 queries against the tile's 64 keys: eight 16 × 8 tiles.
    float score[8][4] = {};
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
#pragma unroll
      for (int pair = 0; pair < 4; ++pair) {
        uint32_t key[4];
        ldmatrix_x4(key,
                    shared_address(keys + L::offset(pair * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                    2 * s + ((lane >> 3) & 1))));
        mma_16x8x16<T>(score[2 * pair], query[s], key[0], key[1]);
        mma_16x8x16<T>(score[2 * pair + 1], query[s], key[2], key[3]);
      }
    }
    // Keys outside the window, and (causal) after a query's own position, weigh nothing.
    const bool unmasked = key0 >= first && key0 + kKeys <= length &&
                          (!a.causal || key0 + kKeys - 1 <= offset + q0 + warp * 16);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = score[n][e] * a.scale_log2;
        if (!unmasked) {
          const int64_t j = key0 + n * 8 + (lane & 3) * 2 + (e & 1);
          if (j < first || j >= length || (a.causal && j > offset + row_query[e >> 1])) {
            x = -INFINITY;
          }
        }
        score[n][e] = x;
      }
    }
    // The running softmax: each row's maximum over the quad that holds it, the earlier sums and
    // outputs rescaled to it (a row that has seen no key yet keeps 0s).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < 8; ++n)
        tile_max = fmaxf(tile_max, fmaxf(score[n][2 * r], score[n][2 * r + 1]));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float new_max = fmaxf(running_max[r], tile_max);
      const float base = new_max == -INFINITY ? 0.0f : new_max;
      const float rescale = exp2f(running_max[r] - base);
      running_max[r] = new_max;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        score[n][2 * r] = exp2f(score[n][2 * r] - base);
        score[n][2 * r + 1] = exp2f(score[n][2 * r + 1] - base);
        sum += score[n][2 * r] + score[n][2 * r + 1];
      }
      running_sum[r] = running_sum[r] * rescale + sum;
#pragma unroll
      for (int c = 0; c < 2 * kSteps; ++c) {
        out[c][2 * r] *= rescale;
        out[c][2 * r + 1] *= rescale;
      }
    }
    // out += probabilities · values, 16 keys at a time: the score tiles' accumulators are the A
    // fragments' layout, so the probabilities never leave registers.
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t probability[4] = {
          pack_rounded<T>(score[2 * j][0], score[2 * j][1]),
          pack_rounded<T>(score[2 * j][2], score[2 * j][3]),
          pack_rounded<T>(score[2 * j + 1][0], score[2 * j + 1][1]),
          pack_rounded<T>(score[2 * j + 1][2], score[2 * j + 1][3]),
      };
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        uint32_t value[4];
        ldmatrix_x4_trans(
            value, shared_address(values + L::offset(j * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                     2 * s + (lane >> 4))));
        mma_16x8x16<T>(out[2 * s], probability, value[0], value[1]);
        mma_16x8x16<T>(out[2 * s + 1], probability, value[2], value[3]);
      }
    }
    copy_async_wait_all();
    __syncthreads();
  }

  // Normalised (NaN for a row that saw no key), rounded, staged in the warp's own rows of the
  // query tile and written out sixteen bytes at a time.
  float scale_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = running_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    scale_row[r] = sum > 0.0f ? 1.0f / sum : __int_as_float(0x7fc00000);
  }
#pragma unroll
  for (int c = 0; c < 2 * kSteps; ++c) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + lane / 4 + 8 * r;
      *reinterpret_cast<uint32_t*>(q_tile + L::offset(row, c) + (lane & 3) * 4) =
          pack_rounded<T>(out[c][2 * r] * scale_row[r], out[c][2 * r + 1] * scale_row[r]);
    }
  }
  __syncwarp();
  T* result = static_cast<T*>(a.out) + (b * a.tq * a.heads + h) * D;
  constexpr int kPerLane = 16 * L::kChunks / 32;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int index = lane + 32 * i;
    const int row = index / L::kChunks;
    const int chunk = index % L::kChunks;
    const int64_t query_index = q0 + warp * 16 + row;
    if (query_index >= a.tq) continue;
    const uint4 chunk_value =
        *reinterpret_cast<const uint4*>(q_tile + L::offset(warp * 16 + row, chunk));
    T* dst = result + query_index * stride + chunk * 8;
    if constexpr (kAligned) {
      *reinterpret_cast<uint4*>(dst) = chunk_value;
    } else {
      const auto* elements = reinterpret_cast<const uint16_t*>(&chunk_value);
      auto* target = reinterpret_cast<uint16_t*>(dst);
#pragma unroll
      for (int e = 0; e < 8; ++e) target[e] = elements[e];
    }
  }
}

template <typename T, int D>
void launch(const FlashArgs& args, int64_t batch, cudaStream_t stream, const char* op) {
  const bool aligned = sixteen_byte_aligned(args.q) && sixteen_byte_aligned(args.k) &&
                       sixteen_byte_aligned(args.v) && sixteen_byte_aligned(args.out);
  const auto kernel =
      aligned ? flash_attention_kernel<T, D, true> : flash_attention_kernel<T, D, false>;
  const int shared = 5 * TileLayout<D>::kBytes;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared),
        "cudaFuncSetAttribute", op);
  const dim3 grid(static_cast<unsigned>((args.tq + kQueries - 1) / kQueries),
                  static_cast<unsigned>(args.heads), static_cast<unsigned>(batch));
  kernel<<<grid, kThreads, shared, stream>>>(args);
  check(cudaGetLastError(), "kernel launch", op);
}

}  // namespace

bool flash_attention_fits(DType dtype, int64_t batch, int64_t heads, int64_t dim) {
  return (dtype == DType::F16 || dtype == DType::BF16) && (dim == 32 || dim == 64 || dim == 128) &&
         batch <= 65535 && heads <= 65535;
}

void flash_attention(const void* q, const void* k, const void* v, void* out, DType dtype,
                     int64_t batch, int64_t tq, int64_t rows, int64_t heads, int64_t dim,
                     float scale, const SequenceValues& key_lengths,
                     const SequenceValues& key_starts, const SequenceValues& offsets, bool causal,
                     cudaStream_t stream, const char* op) {
  if (batch == 0 || tq == 0 || heads == 0) return;
  const FlashArgs args{q,      k,           v,          out,    tq, rows, heads, scale * kLog2e,
                       causal, key_lengths, key_starts, offsets};
  const auto with_dim = [&](auto type) {
    using T = decltype(type);
    switch (dim) {
      case 32:
        launch<T, 32>(args, batch, stream, op);
        return;
      case 64:
        launch<T, 64>(args, batch, stream, op);
        return;
      case 128:
        launch<T, 128>(args, batch, stream, op);
        return;
      default:
        throw Error(std::string("cuda: ") + op +
                    ": flash attention takes heads of 32, 64 or 128, not " + std::to_string(dim));
    }
  };
  if (dtype == DType::F16) {
    with_dim(__half{});
  } else if (dtype == DType::BF16) {
    with_dim(__nv_bfloat16{});
  } else {
    throw Error(std::string("cuda: ") + op + ": flash attention takes F16 or BF16, not " +
                std::string(dtype_name(dtype)));
  }
}

}  // namespace voxd::cuda
