#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/few_rows.h"

namespace voxd::cuda {
namespace {

void check_launch(const char* op) {
  check(cudaGetLastError(), "kernel launch", op);
}

constexpr int kLinearWarps = 8;

// One warp per output feature: its weight row streamed sixteen bytes a lane, dotted with each of
// the kRows rows of x (which stay in L1), the lanes' sums reduced by shuffles.
template <typename T, int kRows>
__global__ void few_rows_linear_kernel(const T* x, const T* weight, const T* bias, T* out,
                                       int64_t in, int64_t features) {
  using V = Vec16<T>;
  constexpr int kVec = V::kSize;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t feature = static_cast<int64_t>(blockIdx.x) * kLinearWarps + threadIdx.x / 32;
  if (feature >= features) return;
  const int64_t vectors = in / kVec;
  const V* w = reinterpret_cast<const V*>(weight + feature * in);
  float acc[kRows] = {};
#pragma unroll 4
  for (int64_t i = lane; i < vectors; i += 32) {
    const V wv = w[i];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const V xv = reinterpret_cast<const V*>(x + r * in)[i];
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[r] += to_float(xv.v[e]) * to_float(wv.v[e]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    for (int offset = 16; offset > 0; offset >>= 1) {
      acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
    }
  }
  if (lane != 0) return;
  const float b = bias == nullptr ? 0.0f : to_float(bias[feature]);
#pragma unroll
  for (int r = 0; r < kRows; ++r) out[r * features + feature] = from_float<T>(b + acc[r]);
}

constexpr int kDecodeThreads = 128;
constexpr int kDecodeUnroll = 4;  // keys a group has in flight

// The key range of split `split` of `splits` among keys [first, limit): contiguous, in order.
struct KeyRange {
  int64_t begin;
  int64_t end;
};
__device__ KeyRange split_range(int64_t first, int64_t limit, int64_t split, int64_t splits) {
  const int64_t count = limit > first ? limit - first : 0;
  const int64_t per = (count + splits - 1) / splits;
  const int64_t begin = first + split * per;
  return {begin, begin + per < limit ? begin + per : limit};
}

// The row of the cache where position j of sequence b sits, or −1 in a missing page.
__device__ int64_t page_row(const PageTable& t, int64_t b, int64_t j) {
  const int64_t page = t.entries[b * t.pages_per_sequence + j / t.page_size];
  return page < 0 || page >= t.pages ? -1 : page * t.page_size + j % t.page_size;
}

// Block (b·heads + h, split): query b of head h over its split's keys. Each group of kLanes
// threads takes every groups-th key (kDecodeUnroll at a time), each lane sixteen bytes of its key
// and value rows, with a running maximum m, sum of exponentials l and sum of values acc (the
// online softmax); then the groups are merged in shared memory. With one split the block writes
// the output; otherwise (m, l, acc) go to partials [b·heads + h, split, 2 + dim].
template <typename T, int kLanes>
__global__ void split_decode_attention_kernel(const T* q, const T* k_pages, const T* v_pages,
                                              T* out, int64_t heads, float scale, PageTable table,
                                              float* partials) {
  using V = Vec16<T>;
  constexpr int kVec = V::kSize;
  constexpr int kDim = kLanes * kVec;
  constexpr int kGroups = kDecodeThreads / kLanes;
  __shared__ float group_max[kGroups];
  __shared__ float group_sum[kGroups];
  __shared__ float group_acc[kGroups][kDim];
  const int64_t sequence = blockIdx.x / heads;
  const int64_t head = blockIdx.x % heads;
  const int64_t split = blockIdx.y;
  const int64_t splits = gridDim.y;
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const int group = static_cast<int>(threadIdx.x) / kLanes;
  const int64_t row = heads * kDim;
  const int64_t capacity = table.pages_per_sequence * table.page_size;
  const int64_t first = table.key_starts == nullptr ? 0 : table.key_starts[sequence];
  const int64_t position = table.positions[sequence];
  const int64_t limit = position < 0 ? 0 : (position + 1 < capacity ? position + 1 : capacity);
  const KeyRange range = split_range(first, limit, split, splits);
  const V query = reinterpret_cast<const V*>(q + (sequence * heads + head) * kDim)[lane];
  float m = -INFINITY;
  float l = 0.0f;
  float acc[kVec] = {};
  // Every lane of a warp runs the same passes: the shuffles need them all.
  for (int64_t base = range.begin; base < range.end; base += kGroups * kDecodeUnroll) {
    int64_t rows[kDecodeUnroll];
    V keys[kDecodeUnroll] = {};
    V values[kDecodeUnroll] = {};
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      const int64_t j = base + u * kGroups + group;
      rows[u] = j < range.end ? page_row(table, sequence, j) : -1;
      if (rows[u] >= 0) {
        const int64_t at = rows[u] * row + head * kDim;
        keys[u] = reinterpret_cast<const V*>(k_pages + at)[lane];
        values[u] = reinterpret_cast<const V*>(v_pages + at)[lane];
      }
    }
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      float dot = 0.0f;
      if (rows[u] >= 0) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) dot += to_float(query.v[e]) * to_float(keys[u].v[e]);
      }
#pragma unroll
      for (int offset = kLanes / 2; offset > 0; offset >>= 1) {
        dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      }
      if (rows[u] < 0) continue;
      const float score = scale * dot;
      const float next = fmaxf(m, score);
      const float rescale = __expf(m - next);  // 0 while m is −inf
      const float p = __expf(score - next);
      l = l * rescale + p;
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] = acc[e] * rescale + p * to_float(values[u].v[e]);
      m = next;
    }
  }
  if (lane == 0) {
    group_max[group] = m;
    group_sum[group] = l;
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) group_acc[group][lane * kVec + e] = acc[e];
  __syncthreads();
  float block_max = -INFINITY;
  for (int g = 0; g < kGroups; ++g) block_max = fmaxf(block_max, group_max[g]);
  for (int d = static_cast<int>(threadIdx.x); d < kDim; d += kDecodeThreads) {
    float sum = 0.0f;
    float value = 0.0f;
    for (int g = 0; g < kGroups; ++g) {
      if (group_sum[g] == 0.0f) continue;
      const float weight = __expf(group_max[g] - block_max);
      sum += group_sum[g] * weight;
      value += group_acc[g][d] * weight;
    }
    if (splits == 1) {
      out[(sequence * heads + head) * kDim + d] = from_float<T>(sum > 0.0f ? value / sum : NAN);
      continue;
    }
    float* partial = partials + (blockIdx.x * splits + split) * (2 + kDim);
    if (d == 0) {
      partial[0] = block_max;
      partial[1] = sum;
    }
    partial[2 + d] = value;
  }
}

// Block b·heads + h: the splits' partial results of that query merged; thread d, element d.
template <typename T>
__global__ void combine_decode_splits_kernel(const float* partials, T* out, int64_t splits,
                                             int64_t dim) {
  const float* first = partials + blockIdx.x * splits * (2 + dim);
  float top = -INFINITY;
  for (int64_t s = 0; s < splits; ++s) {
    const float* p = first + s * (2 + dim);
    if (p[1] > 0.0f) top = fmaxf(top, p[0]);
  }
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float sum = 0.0f;
    float value = 0.0f;
    for (int64_t s = 0; s < splits; ++s) {
      const float* p = first + s * (2 + dim);
      if (p[1] == 0.0f) continue;
      const float weight = __expf(p[0] - top);
      sum += p[1] * weight;
      value += p[2 + d] * weight;
    }
    out[blockIdx.x * dim + d] = from_float<T>(sum > 0.0f ? value / sum : NAN);
  }
}

}  // namespace

bool few_rows_linear_fits(DType dtype, int64_t rows, int64_t in, const void* x, const void* weight,
                          const void* out) {
  return (dtype == DType::F16 || dtype == DType::BF16) && rows >= 1 && rows <= kFewRowsMax &&
         in % 8 == 0 && sixteen_byte_aligned(x) && sixteen_byte_aligned(weight) &&
         sixteen_byte_aligned(out);
}

void few_rows_linear(const void* x, const void* weight, const void* bias, void* out, DType dtype,
                     int64_t rows, int64_t in, int64_t features, cudaStream_t stream,
                     const char* op) {
  if (rows == 0 || features == 0) return;
  const auto blocks = static_cast<unsigned>((features + kLinearWarps - 1) / kLinearWarps);
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    const auto launch = [&](auto rows_constant) {
      few_rows_linear_kernel<T, decltype(rows_constant)::value>
          <<<blocks, kLinearWarps * 32, 0, stream>>>(
              static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias),
              static_cast<T*>(out), in, features);
    };
    switch (rows) {
      case 1:
        launch(std::integral_constant<int, 1>{});
        break;
      case 2:
        launch(std::integral_constant<int, 2>{});
        break;
      case 3:
        launch(std::integral_constant<int, 3>{});
        break;
      case 4:
        launch(std::integral_constant<int, 4>{});
        break;
      case 5:
        launch(std::integral_constant<int, 5>{});
        break;
      case 6:
        launch(std::integral_constant<int, 6>{});
        break;
      case 7:
        launch(std::integral_constant<int, 7>{});
        break;
      default:
        launch(std::integral_constant<int, 8>{});
        break;
    }
  });
  check_launch(op);
}

int64_t split_decode_splits(int64_t batch, int64_t heads) {
  const int64_t blocks = std::max<int64_t>(batch * heads, 1);
  return std::clamp<int64_t>((kSplitDecodeTargetBlocks + blocks - 1) / blocks, 1,
                             kSplitDecodeMaxSplits);
}

bool split_decode_attention_fits(DType dtype, int64_t dim) {
  return sixteen_byte_lanes(dim, dtype_size(dtype)) != 0;
}

size_t split_decode_scratch_bytes(int64_t batch, int64_t heads, int64_t dim, int64_t splits) {
  return splits <= 1 ? 0 : static_cast<size_t>(batch * heads * splits * (2 + dim)) * sizeof(float);
}

void split_decode_attention(const void* q, const void* k_pages, const void* v_pages, void* out,
                            DType dtype, int64_t batch, int64_t heads, int64_t dim,
                            const PageTable& table, float scale, int64_t splits, float* partials,
                            cudaStream_t stream, const char* op) {
  if (batch * heads * dim == 0) return;
  const dim3 grid(static_cast<unsigned>(batch * heads), static_cast<unsigned>(splits));
  dispatch_float(dtype, op, [&](auto t) {
    using T = decltype(t);
    const auto launch = [&](auto lanes_constant) {
      split_decode_attention_kernel<T, decltype(lanes_constant)::value>
          <<<grid, kDecodeThreads, 0, stream>>>(
              static_cast<const T*>(q), static_cast<const T*>(k_pages),
              static_cast<const T*>(v_pages), static_cast<T*>(out), heads, scale, table, partials);
    };
    if (!dispatch_lanes(sixteen_byte_lanes(dim, sizeof(T)), launch)) {
      throw Error(std::string("cuda: ") + op + ": heads of " + std::to_string(dim) +
                  " elements are not split_decode_attention's");
    }
    check_launch(op);
    if (splits > 1) {
      combine_decode_splits_kernel<T>
          <<<static_cast<unsigned>(batch * heads),
             static_cast<unsigned>(std::min<int64_t>(dim, 256)), 0, stream>>>(
              partials, static_cast<T*>(out), splits, dim);
      check_launch(op);
    }
  });
}

}  // namespace voxd::cuda
