#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/sample_tokens.h"

namespace voxd::cuda {
namespace {

constexpr int kBins = 256;
constexpr int kMaxThreads = 1024;
constexpr double kFixedOne = 72057594037927936.0;  // 2^56: probability 1 in fixed point

using u64 = unsigned long long;

constexpr int kWarps = kMaxThreads / 32;
constexpr int kSharedHistory = 64;  // a row's history up to this long is read from shared memory

struct Shared {
  unsigned int count[kBins];
  u64 mass[kBins];
  u64 warp_total[kWarps];
  double reduce_double[kWarps];
  float reduce_float[kWarps];
  int64_t history[kSharedHistory];
  u64 prefix;
  int64_t before_count;  // the ranks, and their mass, before the bin being searched
  u64 before_mass;
  int chosen;
};

__device__ u64 splitmix64(u64 x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// core/token_sampling.h's uniform_draw.
__device__ double uniform_draw(u64 seed, u64 step, u64 row) {
  const u64 bits = splitmix64(splitmix64(splitmix64(seed) ^ step) ^ row);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Unsigned keys in the order of the floats (NaN excluded), −0 equal to +0.
__device__ uint32_t ordered(float v) {
  if (v == 0.0f) v = 0.0f;
  const uint32_t bits = __float_as_uint(v);
  return (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
}

// The maximum and the sum over the block, the same in every thread, in a fixed order.
__device__ float block_max(float v, Shared& s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.reduce_float[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = s.reduce_float[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) r = fmaxf(r, s.reduce_float[w]);
  return r;
}

__device__ double block_sum(double v, Shared& s) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.reduce_double[threadIdx.x >> 5] = v;
  __syncthreads();
  double r = s.reduce_double[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) r += s.reduce_double[w];
  return r;
}

// The row's softmax as core/token_sampling.h's softmax computes it: the maximum, and the sum
// of exp(l − max) in double; `finite` false when the maximum is not finite (every
// probability 0).
struct Softmax {
  float max;
  double total;
  bool finite;

  __device__ float probability(float logit) const {
    if (!finite) return 0.0f;
    const auto e = static_cast<float>(exp(static_cast<double>(logit) - static_cast<double>(max)));
    return static_cast<float>(static_cast<double>(e) / total);
  }
  // At least one unit for a probability above 0, so that only a token of probability 0 has none.
  __device__ u64 fixed(float logit) const {
    const float p = probability(logit);
    const auto units = static_cast<u64>(static_cast<double>(p) * kFixedOne);
    return p > 0.0f && units == 0 ? 1 : units;
  }
};

__device__ Softmax softmax_of(const float* w, int64_t vocab, Shared& s) {
  float top = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) top = fmaxf(top, w[i]);
  Softmax out{block_max(top, s), 0.0, false};
  out.finite = isfinite(out.max);
  if (!out.finite) return out;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    sum += exp(static_cast<double>(w[i]) - static_cast<double>(out.max));
  }
  out.total = block_sum(sum, s);
  return out;
}

// Inclusive prefix sums over the warp's lanes.
template <typename T>
__device__ T warp_inclusive_sum(T v) {
  const unsigned lane = threadIdx.x & 31;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const T other = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= static_cast<unsigned>(offset)) v += other;
  }
  return v;
}

// Warp 0 walks the bins in order (descending: from the last), eight a lane, and finds the
// first at whose end the running count passes count_limit (or reaches it, when `reach`) or the
// running mass passes mass_limit, counting from s.before_count and s.before_mass. It leaves
// the bin in s.chosen (−1: none) and the totals before it in s.before_count/before_mass.
template <bool kDescending>
__device__ void find_bin(Shared& s, int64_t count_limit, bool reach, u64 mass_limit) {
  if (threadIdx.x >= 32) return;
  const unsigned lane = threadIdx.x;
  const auto bin_at = [](int j) { return kDescending ? kBins - 1 - j : j; };
  int64_t count = 0;
  u64 mass = 0;
  for (int j = 8 * lane; j < 8 * static_cast<int>(lane) + 8; ++j) {
    count += s.count[bin_at(j)];
    mass += s.mass[bin_at(j)];
  }
  const int64_t base_count = s.before_count;
  const u64 base_mass = s.before_mass;
  const auto crosses = [&](int64_t c, u64 m) {
    return (reach ? base_count + c >= count_limit : base_count + c > count_limit) ||
           base_mass + m > mass_limit;
  };
  const int64_t count_through = warp_inclusive_sum(count);
  const u64 mass_through = warp_inclusive_sum(mass);
  const unsigned crossing = __ballot_sync(0xffffffffu, crosses(count_through, mass_through));
  if (crossing == 0) {
    if (lane == 0) s.chosen = -1;
    return;
  }
  if (lane != static_cast<unsigned>(__ffs(crossing) - 1)) return;
  int64_t c = count_through - count;
  u64 m = mass_through - mass;
  for (int j = 8 * lane;; ++j) {
    const int bin = bin_at(j);
    if (crosses(c + s.count[bin], m + s.mass[bin])) {
      s.chosen = bin;
      s.before_count = base_count + c;
      s.before_mass = base_mass + m;
      return;
    }
    c += s.count[bin];
    m += s.mass[bin];
  }
}

__device__ void clear_bins(Shared& s) {
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
    s.count[b] = 0;
    s.mass[b] = 0;
  }
  __syncthreads();
}

// transformers' top-P: in ascending (logit, id) order, the first ranks whose cumulative mass is
// at most `threshold`, but for ranks from keep_from on, go. The first rank that stays is found
// by radix selection over 8-bit digits of its key; the ones before it become −inf.
__device__ void top_p(float* w, int64_t vocab, const TokenDraw& d, Shared& s) {
  const Softmax sm = softmax_of(w, vocab, s);
  const auto threshold =
      static_cast<u64>(static_cast<double>(static_cast<float>(1.0 - d.top_p)) * kFixedOne);
  const int64_t keep_from = vocab > d.min_keep ? vocab - d.min_keep : 0;
  int id_bits = 1;
  while ((int64_t{1} << id_bits) < vocab) ++id_bits;
  const int key_bits = 32 + id_bits;
  const auto key = [&](int64_t i) {
    return (static_cast<u64>(ordered(w[i])) << id_bits) | static_cast<u64>(i);
  };
  if (threadIdx.x == 0) {
    s.prefix = 0;
    s.before_count = 0;
    s.before_mass = 0;
  }
  bool every_rank_goes = false;
  for (int hi = key_bits; hi > 0; hi -= 8) {
    const int lo = hi > 8 ? hi - 8 : 0;
    clear_bins(s);
    const u64 prefix = s.prefix;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const u64 k = key(i);
      if ((k >> hi) != (prefix >> hi)) continue;
      const auto bin = static_cast<int>((k >> lo) & ((u64{1} << (hi - lo)) - 1));
      atomicAdd(&s.count[bin], 1u);
      const u64 q = sm.fixed(w[i]);
      if (q != 0) atomicAdd(&s.mass[bin], q);
    }
    __syncthreads();
    find_bin<false>(s, keep_from, false, threshold);
    __syncthreads();
    if (threadIdx.x == 0 && s.chosen >= 0) s.prefix = prefix | (static_cast<u64>(s.chosen) << lo);
    __syncthreads();
    if (s.chosen < 0) {  // only on the first digit: every rank may go (min_keep 0)
      every_rank_goes = true;
      break;
    }
  }
  const u64 first_kept = s.prefix;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (every_rank_goes || key(i) < first_kept) w[i] = -INFINITY;
  }
  __syncthreads();
}

// transformers' top-K: logits below the k-th largest go; the k-th largest found by radix
// selection over the logits' 32-bit keys.
__device__ void top_k(float* w, int64_t vocab, const TokenDraw& d, Shared& s) {
  const int64_t k = min(max(d.top_k, d.min_keep), vocab);
  if (k == 0) return;
  if (threadIdx.x == 0) {
    s.prefix = 0;
    s.before_count = 0;
    s.before_mass = 0;
  }
  for (int hi = 32; hi > 0; hi -= 8) {
    const int lo = hi - 8;
    clear_bins(s);
    const u64 prefix = s.prefix;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const u64 o = ordered(w[i]);
      if ((o >> hi) == (prefix >> hi)) atomicAdd(&s.count[(o >> lo) & 0xff], 1u);
    }
    __syncthreads();
    // The bins hold at least k logits, so one is found; no mass counts.
    find_bin<true>(s, k, true, ~u64{0});
    __syncthreads();
    if (threadIdx.x == 0) s.prefix = prefix | (static_cast<u64>(s.chosen) << lo);
    __syncthreads();
  }
  const u64 kth = s.prefix;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (ordered(w[i]) < kth) w[i] = -INFINITY;
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kMaxThreads) sample_tokens_kernel(SampleTokens a) {
  extern __shared__ float shared_row[];
  __shared__ Shared s;
  const int64_t r = blockIdx.x;
  const int64_t vocab = a.vocab;
  const TokenDraw d = a.draws[r];
  float* w = a.rows_scratch != nullptr ? a.rows_scratch + r * vocab : shared_row;
  const float* in = a.logits + r * vocab;
  bool nan = false;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = in[i];
    nan = nan || isnan(v);
    w[i] = v / d.temperature;
  }
  if (__syncthreads_or(nan)) {
    if (threadIdx.x == 0) a.tokens[r] = -1;
    return;
  }
  // The repetition penalty, once per distinct id of the row's history (read from shared memory
  // when short).
  const bool penalised = d.repetition_penalty != 1.0f && a.window > 0;
  const int64_t* h = a.history + r * a.window;
  if (penalised && a.window <= kSharedHistory) {
    for (int64_t j = threadIdx.x; j < a.window; j += blockDim.x) s.history[j] = h[j];
    h = s.history;
  }
  __syncthreads();
  // Thread j takes entry j when it is its id's first: each id is penalised by one thread.
  for (int64_t j = threadIdx.x; penalised && j < a.window; j += blockDim.x) {
    const int64_t id = h[j];
    if (id < 0 || id >= vocab) continue;
    int count = 0;
    bool earlier = false;
    for (int64_t k = 0; k < a.window; ++k) {
      if (h[k] != id) continue;
      earlier = earlier || k < j;
      ++count;
    }
    if (earlier) continue;
    const float alpha = powf(d.repetition_penalty, static_cast<float>(count));
    w[id] = w[id] < 0.0f ? w[id] * alpha : w[id] / alpha;
  }
  // An infinite logit penalised by an infinite or vanishing factor is NaN: no token.
  bool penalised_nan = false;
  for (int64_t j = threadIdx.x; penalised && j < a.window; j += blockDim.x) {
    const int64_t id = h[j];
    penalised_nan = penalised_nan || (id >= 0 && id < vocab && isnan(w[id]));
  }
  if (__syncthreads_or(penalised_nan)) {
    if (threadIdx.x == 0) a.tokens[r] = -1;
    return;
  }
  if (d.top_p > 0.0) top_p(w, vocab, d, s);
  if (d.top_k > 0) top_k(w, vocab, d, s);
  if (threadIdx.x == 0 && d.banned >= 0 && d.banned < vocab) w[d.banned] = -INFINITY;
  __syncthreads();
  // The draw: each thread sums the fixed-point mass of a contiguous run of ids; the thread
  // whose run holds u · the total finds the id in it.
  const Softmax sm = softmax_of(w, vocab, s);
  if (!sm.finite) {
    if (threadIdx.x == 0) a.tokens[r] = -1;
    return;
  }
  const int64_t per_thread = (vocab + blockDim.x - 1) / blockDim.x;
  const int64_t begin = min(static_cast<int64_t>(threadIdx.x) * per_thread, vocab);
  const int64_t end = min(begin + per_thread, vocab);
  u64 mine = 0;
  for (int64_t i = begin; i < end; ++i) mine += sm.fixed(w[i]);
  // The mass before this thread's run: its warp's lanes before it, and the warps before.
  const u64 through_lane = warp_inclusive_sum(mine);
  const unsigned warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 31) s.warp_total[warp] = through_lane;
  __syncthreads();
  u64 before = through_lane - mine;
  u64 total = 0;
  for (unsigned other = 0; other < blockDim.x / 32; ++other) {
    if (other < warp) before += s.warp_total[other];
    total += s.warp_total[other];
  }
  if (total == 0) {
    if (threadIdx.x == 0) a.tokens[r] = -1;
    return;
  }
  auto target = static_cast<u64>(uniform_draw(d.seed, d.step, d.row) * static_cast<double>(total));
  if (target >= total) target = total - 1;
  u64 running = before;
  if (running > target || running + mine <= target) return;
  for (int64_t i = begin; i < end; ++i) {
    running += sm.fixed(w[i]);
    if (running > target) {
      a.tokens[r] = i;
      return;
    }
  }
}

}  // namespace

void sample_tokens(const SampleTokens& a, cudaStream_t stream, const char* op) {
  if (a.rows == 0) return;
  const int threads = a.vocab > 4096 ? kMaxThreads : 256;
  const size_t shared =
      a.rows_scratch != nullptr ? 0 : static_cast<size_t>(a.vocab) * sizeof(float);
  if (shared + sizeof(Shared) > 48 * 1024) {  // the default limit counts static memory too
    check(cudaFuncSetAttribute(sample_tokens_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kSharedRowTokens * sizeof(float))),
          "cudaFuncSetAttribute", op);
  }
  sample_tokens_kernel<<<static_cast<unsigned>(a.rows), threads, shared, stream>>>(a);
  check(cudaGetLastError(), "kernel launch", op);
}

}  // namespace voxd::cuda
