#include "backends/cpu/cpu_backend.h"

#include <cblas.h>
#include <immintrin.h>
#include <kiss_fft.h>
#include <kiss_fftr.h>
#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "backends/host_util.h"
#include "core/allocator.h"
#include "core/error.h"

namespace voxd {
namespace {

// Loops shorter than this run on one thread: spawning the team costs more than it saves.
constexpr int64_t kParallelMin = 16384;
// Multiply-adds below which a linear layer runs as one gemm instead of one per thread.
constexpr int64_t kMinGemmWork = 1 << 20;
// Register tile of the direct convolution: output channels × output steps (three AVX vectors).
constexpr int64_t kTileRows = 4;
constexpr int64_t kTileCols = 24;
// Floats in one job's input panel [cin_g, block + span] (128 KiB): the panel and the packed
// weights of one row block (at most 90 KiB for 512 channels × 11 taps) stay in the 512 KiB L2
// while the row block sweeps the panel.
constexpr int64_t kPanelFloats = 32768;
// Longest panel block, so that thin layers (8 channels) still split into many jobs. A multiple
// of kTileCols: the last tile of a block reads its full 24 columns.
constexpr int64_t kMaxPanelCols = 4080;
static_assert(kMaxPanelCols % kTileCols == 0);
// Time steps per im2col block of strided convolutions.
constexpr int64_t kColBlock = 1024;
// Floats of one conv_transpose1d job's columns (1 MiB).
constexpr int64_t kColFloats = 262144;

int64_t floor_div(int64_t a, int64_t b) {
  return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

int64_t ceil_div(int64_t a, int64_t b) {
  return -floor_div(-a, b);
}

// `count` floats of host scratch for the rest of a kernel call.
ScratchBuffer take_floats(const KernelScratch& scratch, int64_t count) {
  assert(scratch.device().is_cpu());
  return scratch.take(static_cast<size_t>(count) * sizeof(float));
}

// Repacks conv1d weights [groups·cout_g, cin_g, K] to [g][row block][ci][k][kTileRows] and the
// bias to [g][row block][kTileRows], with zero rows past cout_g, so conv_tile reads both in order.
void pack_conv_weights(const float* w, const float* bias, int64_t groups, int64_t cout_g,
                       int64_t cin_g, int64_t k_size, int64_t row_blocks, float* packed,
                       float* packed_bias) {
  const int64_t rows = groups * row_blocks * kTileRows;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t g = row / (row_blocks * kTileRows);
    const int64_t co = row % (row_blocks * kTileRows);
    const int64_t r = co % kTileRows;
    float* dst = packed + (row - r) * cin_g * k_size + r;
    const bool real = co < cout_g;
    const float* src = w + (g * cout_g + co) * cin_g * k_size;
    for (int64_t i = 0; i < cin_g * k_size; ++i) dst[i * kTileRows] = real ? src[i] : 0.0f;
    packed_bias[row] = real && bias ? bias[g * cout_g + co] : 0.0f;
  }
}

// panel[ci, j] = x[ci, start + j] for j < ldp, zero where start + j falls outside [0, t).
void fill_panel(const float* x, int64_t t, int64_t channels, int64_t start, int64_t ldp,
                float* panel) {
  const int64_t lo = std::clamp<int64_t>(-start, 0, ldp);
  const int64_t hi = std::clamp<int64_t>(t - start, lo, ldp);
  for (int64_t ci = 0; ci < channels; ++ci) {
    float* row = panel + ci * ldp;
    std::fill(row, row + lo, 0.0f);
    std::memcpy(row + lo, x + ci * t + start + lo, static_cast<size_t>(hi - lo) * sizeof(float));
    std::fill(row + hi, row + ldp, 0.0f);
  }
}

// One register tile of the direct convolution: dst[r, c] (rows ldd apart) = bias[r] +
// Σ_ci Σ_k w[ci, k, r] · panel[ci, c + k·dilation] for r < 4, c < 24. Panel rows are ldp apart
// and readable up to 24 + dilation·(taps − 1) floats. Per (ci, k): three loads, four broadcasts,
// twelve FMAs, so it runs at FMA throughput from L1/L2.
__attribute__((target("avx2,fma"))) void conv_tile(const float* w, const float* panel, int64_t ldp,
                                                   int64_t cin, int64_t taps, int64_t dilation,
                                                   const float* bias, float* dst, int64_t ldd) {
  __m256 a00 = _mm256_broadcast_ss(bias + 0);
  __m256 a10 = _mm256_broadcast_ss(bias + 1);
  __m256 a20 = _mm256_broadcast_ss(bias + 2);
  __m256 a30 = _mm256_broadcast_ss(bias + 3);
  __m256 a01 = a00, a02 = a00, a11 = a10, a12 = a10, a21 = a20, a22 = a20, a31 = a30, a32 = a30;
  for (int64_t ci = 0; ci < cin; ++ci) {
    const float* row = panel + ci * ldp;
    for (int64_t k = 0; k < taps; ++k, w += kTileRows) {
      const float* xk = row + k * dilation;
      const __m256 x0 = _mm256_loadu_ps(xk);
      const __m256 x1 = _mm256_loadu_ps(xk + 8);
      const __m256 x2 = _mm256_loadu_ps(xk + 16);
      __m256 wr = _mm256_broadcast_ss(w + 0);
      a00 = _mm256_fmadd_ps(wr, x0, a00);
      a01 = _mm256_fmadd_ps(wr, x1, a01);
      a02 = _mm256_fmadd_ps(wr, x2, a02);
      wr = _mm256_broadcast_ss(w + 1);
      a10 = _mm256_fmadd_ps(wr, x0, a10);
      a11 = _mm256_fmadd_ps(wr, x1, a11);
      a12 = _mm256_fmadd_ps(wr, x2, a12);
      wr = _mm256_broadcast_ss(w + 2);
      a20 = _mm256_fmadd_ps(wr, x0, a20);
      a21 = _mm256_fmadd_ps(wr, x1, a21);
      a22 = _mm256_fmadd_ps(wr, x2, a22);
      wr = _mm256_broadcast_ss(w + 3);
      a30 = _mm256_fmadd_ps(wr, x0, a30);
      a31 = _mm256_fmadd_ps(wr, x1, a31);
      a32 = _mm256_fmadd_ps(wr, x2, a32);
    }
  }
  _mm256_storeu_ps(dst, a00);
  _mm256_storeu_ps(dst + 8, a01);
  _mm256_storeu_ps(dst + 16, a02);
  _mm256_storeu_ps(dst + ldd, a10);
  _mm256_storeu_ps(dst + ldd + 8, a11);
  _mm256_storeu_ps(dst + ldd + 16, a12);
  _mm256_storeu_ps(dst + 2 * ldd, a20);
  _mm256_storeu_ps(dst + 2 * ldd + 8, a21);
  _mm256_storeu_ps(dst + 2 * ldd + 16, a22);
  _mm256_storeu_ps(dst + 3 * ldd, a30);
  _mm256_storeu_ps(dst + 3 * ldd + 8, a31);
  _mm256_storeu_ps(dst + 3 * ldd + 16, a32);
}

// conv_tile over 48 columns (two of its tiles side by side) in AVX-512 registers: three loads,
// four broadcasts and twelve FMAs of 16 floats per (ci, k). Panel rows must be readable up to
// 48 + dilation·(taps − 1) floats.
__attribute__((target("avx512f"))) void conv_tile_wide(const float* w, const float* panel,
                                                       int64_t ldp, int64_t cin, int64_t taps,
                                                       int64_t dilation, const float* bias,
                                                       float* dst, int64_t ldd) {
  __m512 a00 = _mm512_set1_ps(bias[0]);
  __m512 a10 = _mm512_set1_ps(bias[1]);
  __m512 a20 = _mm512_set1_ps(bias[2]);
  __m512 a30 = _mm512_set1_ps(bias[3]);
  __m512 a01 = a00, a02 = a00, a11 = a10, a12 = a10, a21 = a20, a22 = a20, a31 = a30, a32 = a30;
  for (int64_t ci = 0; ci < cin; ++ci) {
    const float* row = panel + ci * ldp;
    for (int64_t k = 0; k < taps; ++k, w += kTileRows) {
      const float* xk = row + k * dilation;
      const __m512 x0 = _mm512_loadu_ps(xk);
      const __m512 x1 = _mm512_loadu_ps(xk + 16);
      const __m512 x2 = _mm512_loadu_ps(xk + 32);
      __m512 wr = _mm512_set1_ps(w[0]);
      a00 = _mm512_fmadd_ps(wr, x0, a00);
      a01 = _mm512_fmadd_ps(wr, x1, a01);
      a02 = _mm512_fmadd_ps(wr, x2, a02);
      wr = _mm512_set1_ps(w[1]);
      a10 = _mm512_fmadd_ps(wr, x0, a10);
      a11 = _mm512_fmadd_ps(wr, x1, a11);
      a12 = _mm512_fmadd_ps(wr, x2, a12);
      wr = _mm512_set1_ps(w[2]);
      a20 = _mm512_fmadd_ps(wr, x0, a20);
      a21 = _mm512_fmadd_ps(wr, x1, a21);
      a22 = _mm512_fmadd_ps(wr, x2, a22);
      wr = _mm512_set1_ps(w[3]);
      a30 = _mm512_fmadd_ps(wr, x0, a30);
      a31 = _mm512_fmadd_ps(wr, x1, a31);
      a32 = _mm512_fmadd_ps(wr, x2, a32);
    }
  }
  _mm512_storeu_ps(dst, a00);
  _mm512_storeu_ps(dst + 16, a01);
  _mm512_storeu_ps(dst + 32, a02);
  _mm512_storeu_ps(dst + ldd, a10);
  _mm512_storeu_ps(dst + ldd + 16, a11);
  _mm512_storeu_ps(dst + ldd + 32, a12);
  _mm512_storeu_ps(dst + 2 * ldd, a20);
  _mm512_storeu_ps(dst + 2 * ldd + 16, a21);
  _mm512_storeu_ps(dst + 2 * ldd + 32, a22);
  _mm512_storeu_ps(dst + 3 * ldd, a30);
  _mm512_storeu_ps(dst + 3 * ldd + 16, a31);
  _mm512_storeu_ps(dst + 3 * ldd + 32, a32);
}

}  // namespace

CpuBackend::CpuBackend(int threads, bool allow_avx512)
    : threads_(threads > 0 ? threads : omp_get_num_procs()),
      avx512_(allow_avx512 && __builtin_cpu_supports("avx512f")) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    throw Error("cpu backend: this CPU lacks AVX2/FMA (x86-64-v3), use the reference backend");
  }
  openblas_set_num_threads(1);
}

bool CpuBackend::supports(OpKind /*op*/, DType dtype) const {
  return dtype == DType::F32;
}

void CpuBackend::copy(const Tensor& src, Tensor& dst, const KernelScratch& scratch) {
  if (scratch.planning()) return;
  if (src.dtype() != dst.dtype() || src.is_contiguous() || src.dim() < 2 ||
      !src.device().is_cpu() || !dst.device().is_cpu() || !dst.is_contiguous() ||
      src.numel() != dst.numel() || dtype_size(src.dtype()) != 4) {
    host::strided_copy(src, dst);
    return;
  }
  // Same-dtype 4-byte strided copy (transposes): rows of the innermost dimension in parallel.
  const Shape& shape = src.shape();
  const Shape& strides = src.strides();
  const size_t rank = shape.size();
  const int64_t inner = shape[rank - 1];
  const int64_t inner_stride = strides[rank - 1];
  const int64_t rows = inner ? src.numel() / inner : 0;
  const auto* base = static_cast<const uint32_t*>(src.raw_data());
  auto* out = static_cast<uint32_t*>(dst.raw_data());
#pragma omp parallel for num_threads(threads_) schedule(static) if (src.numel() > kParallelMin)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rest = row;
    int64_t offset = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      offset += (rest % shape[d]) * strides[d];
      rest /= shape[d];
    }
    const uint32_t* in = base + offset;
    uint32_t* o = out + row * inner;
    for (int64_t i = 0; i < inner; ++i) o[i] = in[i * inner_stride];
  }
}

void CpuBackend::fill(Tensor& dst, float value) {
  if (dst.dtype() != DType::F32 || !dst.device().is_cpu() || !dst.is_contiguous()) {
    host::fill(dst, value);
    return;
  }
  float* p = dst.data<float>();
  const int64_t n = dst.numel();
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void CpuBackend::unary(const Tensor& x, Tensor& out, UnaryOp op, float alpha) {
  assert(x.dtype() == DType::F32 && out.shape() == x.shape());
  const float* in = x.data<float>();
  float* o = out.data<float>();
  const int64_t n = x.numel();
  switch (op) {
    case UnaryOp::Relu:
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) o[i] = in[i] > 0.0f ? in[i] : 0.0f;
      break;
    case UnaryOp::LeakyRelu:
      // max(v, 0) + alpha · min(v, 0): the same values as v >= 0 ? v : alpha · v (NaN and the
      // infinities included), without the branch GCC would not vectorise ("control flow in
      // loop"); the branchy loop ran one element at a time, a quarter of a CPU server's time.
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) o[i] = std::max(in[i], 0.0f) + alpha * std::min(in[i], 0.0f);
      break;
    case UnaryOp::Tanh:
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin / 8)
      for (int64_t i = 0; i < n; ++i) o[i] = std::tanh(in[i]);
      break;
    case UnaryOp::Exp:
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin / 8)
      for (int64_t i = 0; i < n; ++i) o[i] = std::exp(in[i]);
      break;
    case UnaryOp::Scale:
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) o[i] = alpha * in[i];
      break;
    case UnaryOp::Silu:
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin / 8)
      for (int64_t i = 0; i < n; ++i) o[i] = in[i] / (1.0f + std::exp(-in[i]));
      break;
    case UnaryOp::Gelu:
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin / 8)
      for (int64_t i = 0; i < n; ++i) {
        o[i] = 0.5f * in[i] * (1.0f + std::erf(in[i] / std::numbers::sqrt2_v<float>));
      }
      break;
    case UnaryOp::Sin:
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin / 8)
      for (int64_t i = 0; i < n; ++i) o[i] = std::sin(in[i]);
      break;
    case UnaryOp::Cos:
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin / 8)
      for (int64_t i = 0; i < n; ++i) o[i] = std::cos(in[i]);
      break;
    case UnaryOp::ClampMax:
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) o[i] = in[i] > alpha ? alpha : in[i];
      break;
  }
}

void CpuBackend::binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryOp op) {
  assert(a.dtype() == DType::F32 && b.dim() == a.dim() && out.shape() == a.shape());
  const Shape& shape = a.shape();
  const size_t rank = shape.size();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  const int64_t n = a.numel();
  if (n == 0) return;
  // Rows of the innermost dimension; b either runs along the row or repeats one value.
  const int64_t inner = rank ? shape[rank - 1] : 1;
  const bool b_scalar_row = rank && b.shape()[rank - 1] == 1 && inner != 1;
  const Shape b_strides = contiguous_strides(b.shape());
  const int64_t rows = n / inner;
  const bool add = op == BinaryOp::Add;
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rest = row;
    int64_t bi = 0;
    for (size_t d = rank ? rank - 1 : 0; d-- > 0;) {
      const int64_t coord = rest % shape[d];
      rest /= shape[d];
      if (b.shape()[d] != 1) bi += coord * b_strides[d];
    }
    const float* ra = pa + row * inner;
    float* ro = po + row * inner;
    const float* rb = pb + bi;
    if (b_scalar_row) {
      const float v = rb[0];
      if (add) {
        for (int64_t i = 0; i < inner; ++i) ro[i] = ra[i] + v;
      } else {
        for (int64_t i = 0; i < inner; ++i) ro[i] = ra[i] * v;
      }
    } else if (add) {
      for (int64_t i = 0; i < inner; ++i) ro[i] = ra[i] + rb[i];
    } else {
      for (int64_t i = 0; i < inner; ++i) ro[i] = ra[i] * rb[i];
    }
  }
}

void CpuBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                        const KernelScratch& scratch) {
  const int64_t n = x.size(0);
  const int64_t in = x.size(1);
  const int64_t features = weight.size(0);
  assert(x.dtype() == DType::F32 && out.shape() == (Shape{n, features}));
  if (n == 0 || features == 0 || scratch.planning()) return;
  float* po = out.data<float>();
  const float* px = x.data<float>();
  const float* pw = weight.data<float>();
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  // Row chunks, one single-threaded gemm each; small problems stay on one chunk.
  const int64_t chunks =
      std::clamp<int64_t>(n * in * features / kMinGemmWork, 1, std::min<int64_t>(threads_, n));
#pragma omp parallel for num_threads(threads_) schedule(static) if (chunks > 1)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t r0 = n * chunk / chunks;
    const int64_t r1 = n * (chunk + 1) / chunks;
    for (int64_t r = r0; r < r1; ++r) {
      if (pb) {
        std::memcpy(po + r * features, pb, static_cast<size_t>(features) * sizeof(float));
      } else {
        std::fill(po + r * features, po + (r + 1) * features, 0.0f);
      }
    }
    if (in > 0 && r1 > r0) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(r1 - r0),
                  static_cast<int>(features), static_cast<int>(in), 1.0f, px + r0 * in,
                  static_cast<int>(in), pw, static_cast<int>(in), 1.0f, po + r0 * features,
                  static_cast<int>(features));
    }
  }
}

void CpuBackend::conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                        const Conv1dParams& p, const KernelScratch& scratch) {
  const int64_t batch = x.size(0);
  const int64_t cin = x.size(1);
  const int64_t t_in = x.size(2);
  const int64_t cout = weight.size(0);
  const int64_t cin_g = weight.size(1);
  const int64_t k_size = weight.size(2);
  const int64_t t_out = out.size(2);
  const int64_t cout_g = cout / p.groups;
  assert(x.dtype() == DType::F32 && out.shape() == (Shape{batch, cout, t_out}));
  if (batch == 0 || cout == 0 || t_out == 0) return;
  if (cin_g == 1 && cout_g == 1) {
    depthwise_conv1d(x, weight, bias, out, p, scratch);
    return;
  }
  if (p.stride == 1) {
    // Direct convolution: each job copies x[:, block + taps] of one group into a zero-padded
    // panel and sweeps it with 4 × 24 register tiles (see conv_tile).
    const int64_t row_blocks = (cout_g + kTileRows - 1) / kTileRows;
    const int64_t tile_weights = cin_g * k_size * kTileRows;
    const int64_t span = p.dilation * (k_size - 1);
    const int64_t block = std::min(
        std::clamp((kPanelFloats / std::max<int64_t>(cin_g, 1) - span) / kTileCols * kTileCols,
                   kTileCols, kMaxPanelCols),
        (t_out + kTileCols - 1) / kTileCols * kTileCols);
    const int64_t ldp = block + span;
    const int64_t time_blocks = (t_out + block - 1) / block;
    const int64_t slices = batch * p.groups * time_blocks;
    // Few time blocks (short inputs): split the output channels too, so every thread has work.
    const int64_t row_chunks = std::min(row_blocks, (2 * threads_ + slices - 1) / slices);
    const int64_t jobs = slices * row_chunks;
    const ScratchBuffer packed = take_floats(scratch, p.groups * row_blocks * tile_weights);
    const ScratchBuffer packed_bias = take_floats(scratch, p.groups * row_blocks * kTileRows);
    const ScratchBuffer panels = take_floats(scratch, threads_ * cin_g * ldp);
    if (scratch.planning()) return;
    const float* px = x.data<float>();
    float* po = out.data<float>();
    pack_conv_weights(weight.data<float>(), bias.defined() ? bias.data<float>() : nullptr, p.groups,
                      cout_g, cin_g, k_size, row_blocks, packed.as<float>(),
                      packed_bias.as<float>());
#pragma omp parallel for num_threads(threads_) schedule(dynamic) if (jobs > 1)
    for (int64_t job = 0; job < jobs; ++job) {
      const int64_t chunk = job % row_chunks;
      const int64_t tb = job / row_chunks % time_blocks;
      const int64_t g = job / row_chunks / time_blocks % p.groups;
      const int64_t b = job / row_chunks / time_blocks / p.groups;
      float* panel = panels.as<float>() + omp_get_thread_num() * cin_g * ldp;
      const int64_t t0 = tb * block;
      const int64_t len = std::min(block, t_out - t0);
      fill_panel(px + (b * cin + g * cin_g) * t_in, t_in, cin_g, t0 - p.padding, ldp, panel);
      const int64_t rb0 = row_blocks * chunk / row_chunks;
      const int64_t rb1 = row_blocks * (chunk + 1) / row_chunks;
      for (int64_t rb = rb0; rb < rb1; ++rb) {
        const int64_t rows = std::min(kTileRows, cout_g - rb * kTileRows);
        const float* w = packed.as<float>() + (g * row_blocks + rb) * tile_weights;
        const float* bias4 = packed_bias.as<float>() + (g * row_blocks + rb) * kTileRows;
        float* o = po + (b * cout + g * cout_g + rb * kTileRows) * t_out + t0;
        for (int64_t c0 = 0; c0 < len; c0 += kTileCols) {
          const int64_t cols = std::min(kTileCols, len - c0);
          if (rows == kTileRows && avx512_ && c0 + 2 * kTileCols <= len) {
            conv_tile_wide(w, panel + c0, ldp, cin_g, k_size, p.dilation, bias4, o + c0, t_out);
            c0 += kTileCols;
            continue;
          }
          if (rows == kTileRows && cols == kTileCols) {
            conv_tile(w, panel + c0, ldp, cin_g, k_size, p.dilation, bias4, o + c0, t_out);
            continue;
          }
          float tile[kTileRows * kTileCols];
          conv_tile(w, panel + c0, ldp, cin_g, k_size, p.dilation, bias4, tile, kTileCols);
          for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(o + r * t_out + c0, tile + r * kTileCols,
                        static_cast<size_t>(cols) * sizeof(float));
          }
        }
      }
    }
    return;
  }
  // Strided convolutions: per job, im2col of one block of output steps, then one gemm.
  const int64_t col_rows = cin_g * k_size;
  const int64_t block = std::min(t_out, kColBlock);
  const int64_t time_blocks = (t_out + block - 1) / block;
  const int64_t jobs = batch * p.groups * time_blocks;
  const ScratchBuffer cols = take_floats(scratch, threads_ * col_rows * block);
  if (scratch.planning()) return;
  const float* px = x.data<float>();
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  float* po = out.data<float>();
#pragma omp parallel for num_threads(threads_) schedule(dynamic) if (jobs > 1)
  for (int64_t job = 0; job < jobs; ++job) {
    const int64_t tb = job % time_blocks;
    const int64_t g = job / time_blocks % p.groups;
    const int64_t b = job / time_blocks / p.groups;
    float* col = cols.as<float>() + omp_get_thread_num() * col_rows * block;
    const float* xg = px + (b * cin + g * cin_g) * t_in;
    const float* wg = weight.data<float>() + g * cout_g * col_rows;
    float* og = po + (b * cout + g * cout_g) * t_out;
    const int64_t t0 = tb * block;
    const int64_t len = std::min(block, t_out - t0);
    // col[ci·K + k, t − t0] = x[ci, t·stride − padding + k·dilation], zero outside x.
    for (int64_t row = 0; row < col_rows; ++row) {
      const float* xr = xg + (row / k_size) * t_in;
      float* cr = col + row * len;
      const int64_t shift = (row % k_size) * p.dilation - p.padding;
      for (int64_t t = 0; t < len; ++t) {
        const int64_t pos = (t0 + t) * p.stride + shift;
        cr[t] = (pos >= 0 && pos < t_in) ? xr[pos] : 0.0f;
      }
    }
    for (int64_t co = 0; co < cout_g; ++co) {
      std::fill(og + co * t_out + t0, og + co * t_out + t0 + len, pb ? pb[g * cout_g + co] : 0.0f);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(cout_g),
                static_cast<int>(len), static_cast<int>(col_rows), 1.0f, wg,
                static_cast<int>(col_rows), col, static_cast<int>(len), 1.0f, og + t0,
                static_cast<int>(t_out));
  }
}

void CpuBackend::depthwise_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  Tensor& out, const Conv1dParams& p,
                                  const KernelScratch& scratch) const {
  if (scratch.planning()) return;
  const int64_t rows = out.size(0) * out.size(1);
  const int64_t channels = out.size(1);
  const int64_t t_in = x.size(2);
  const int64_t t_out = out.size(2);
  const int64_t k_size = weight.size(2);
  const float* px = x.data<float>();
  const float* pw = weight.data<float>();
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  float* po = out.data<float>();
#pragma omp parallel for num_threads(threads_) schedule(static) if (rows * t_out > kParallelMin)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t c = row % channels;
    const float* xr = px + row * t_in;
    const float* w = pw + c * k_size;
    float* o = po + row * t_out;
    std::fill(o, o + t_out, pb ? pb[c] : 0.0f);
    for (int64_t k = 0; k < k_size; ++k) {
      // Output t reads x[t·stride + shift], inside x for t in [lo, hi).
      const int64_t shift = k * p.dilation - p.padding;
      const int64_t lo = std::clamp<int64_t>(ceil_div(-shift, p.stride), 0, t_out);
      const int64_t hi = std::clamp<int64_t>(ceil_div(t_in - shift, p.stride), lo, t_out);
      const float wk = w[k];
      if (p.stride == 1) {
        const float* xs = xr + shift;
        for (int64_t t = lo; t < hi; ++t) o[t] += wk * xs[t];
      } else {
        for (int64_t t = lo; t < hi; ++t) o[t] += wk * xr[t * p.stride + shift];
      }
    }
  }
}

void CpuBackend::conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  Tensor& out, const ConvTranspose1dParams& p,
                                  const KernelScratch& scratch) {
  const int64_t batch = x.size(0);
  const int64_t cin = x.size(1);
  const int64_t t_in = x.size(2);
  const int64_t cout_g = weight.size(1);
  const int64_t k_size = weight.size(2);
  const int64_t cout = cout_g * p.groups;
  const int64_t cin_g = cin / p.groups;
  const int64_t t_out = out.size(2);
  assert(x.dtype() == DType::F32 && out.shape() == (Shape{batch, cout, t_out}));
  if (batch == 0 || cout == 0 || t_out == 0) return;
  // Jobs own blocks of output steps, so they write disjoint memory: each computes the columns
  // col [cout_g·K, n] = wᵀ · x[:, lo : lo + n] for the inputs that reach its block (a few
  // inputs at the block edges are computed by both neighbours) and overlap-adds them into it.
  const int64_t col_rows = cout_g * k_size;
  const int64_t span = p.dilation * (k_size - 1);
  const int64_t inputs = std::max<int64_t>(kColFloats / std::max<int64_t>(col_rows, 1), 8);
  const int64_t block = std::max<int64_t>(inputs * p.stride - span, p.stride);
  const int64_t max_inputs = (block + span) / p.stride + 2;
  const int64_t time_blocks = (t_out + block - 1) / block;
  const int64_t jobs = batch * p.groups * time_blocks;
  const ScratchBuffer cols = take_floats(scratch, threads_ * col_rows * max_inputs);
  if (scratch.planning()) return;
  const float* px = x.data<float>();
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  float* po = out.data<float>();
#pragma omp parallel for num_threads(threads_) schedule(dynamic) if (jobs > 1)
  for (int64_t job = 0; job < jobs; ++job) {
    const int64_t tb = job % time_blocks;
    const int64_t g = job / time_blocks % p.groups;
    const int64_t b = job / time_blocks / p.groups;
    float* col = cols.as<float>() + omp_get_thread_num() * col_rows * max_inputs;
    const int64_t o0 = tb * block;
    const int64_t o1 = std::min(t_out, o0 + block);
    float* og = po + (b * cout + g * cout_g) * t_out;
    for (int64_t co = 0; co < cout_g; ++co) {
      std::fill(og + co * t_out + o0, og + co * t_out + o1, pb ? pb[g * cout_g + co] : 0.0f);
    }
    // Input t reaches outputs t·stride − padding + [0, span].
    const int64_t lo = std::max<int64_t>(0, ceil_div(o0 + p.padding - span, p.stride));
    const int64_t hi = std::min(t_in, floor_div(o1 - 1 + p.padding, p.stride) + 1);
    if (hi <= lo || cin_g == 0) continue;
    const int64_t n = hi - lo;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(col_rows),
                static_cast<int>(n), static_cast<int>(cin_g), 1.0f,
                weight.data<float>() + g * cin_g * col_rows, static_cast<int>(col_rows),
                px + (b * cin + g * cin_g) * t_in + lo, static_cast<int>(t_in), 0.0f, col,
                static_cast<int>(n));
    // out[co, (lo + i)·stride + shift] += col[co·K + k, i] for the positions inside the block.
    for (int64_t co = 0; co < cout_g; ++co) {
      float* orow = og + co * t_out;
      for (int64_t k = 0; k < k_size; ++k) {
        const float* cr = col + (co * k_size + k) * n;
        const int64_t shift = k * p.dilation - p.padding + lo * p.stride;
        const int64_t i0 = std::max<int64_t>(0, ceil_div(o0 - shift, p.stride));
        const int64_t i1 = std::min(n, ceil_div(o1 - shift, p.stride));
        for (int64_t i = i0; i < i1; ++i) orow[i * p.stride + shift] += cr[i];
      }
    }
  }
}

void CpuBackend::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                            Tensor& out) {
  assert(x.dtype() == DType::F32 && out.shape() == x.shape());
  const int64_t rows = x.size(0);
  const int64_t c = x.size(1);
  const float* pg = gamma.data<float>();
  const float* pbeta = beta.data<float>();
  const float* px = x.data<float>();
  float* po = out.data<float>();
#pragma omp parallel for num_threads(threads_) schedule(static) if (rows * c > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = px + r * c;
    float* o = po + r * c;
    double sum = 0;
    for (int64_t i = 0; i < c; ++i) sum += in[i];
    const auto mean = static_cast<float>(sum / static_cast<double>(c));
    double sq = 0;
    for (int64_t i = 0; i < c; ++i) {
      const float d = in[i] - mean;
      sq += static_cast<double>(d) * d;
    }
    const auto inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(c) + eps));
    for (int64_t i = 0; i < c; ++i) o[i] = (in[i] - mean) * inv * pg[i] + pbeta[i];
  }
}

void CpuBackend::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                                const Tensor& beta, float eps, Tensor& out) {
  assert(residual.shape() == x.shape() && out.shape() == x.shape());
  binary(x, residual, out, BinaryOp::Add);
  layer_norm(out, gamma, beta, eps, out);
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  assert(x.dtype() == DType::F32 && out.shape() == x.shape());
  const int64_t rows = x.size(0);
  const int64_t c = x.size(1);
  const float* pw = weight.data<float>();
  const float* px = x.data<float>();
  float* po = out.data<float>();
#pragma omp parallel for num_threads(threads_) schedule(static) if (rows * c > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = px + r * c;
    float* o = po + r * c;
    double squares = 0;
    for (int64_t i = 0; i < c; ++i) squares += static_cast<double>(in[i]) * in[i];
    const auto inv = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(c) + eps));
    for (int64_t i = 0; i < c; ++i) o[i] = pw[i] * (in[i] * inv);
  }
}

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out,
                           const KernelScratch& scratch) {
  assert(table.dtype() == DType::F32 && out.shape() == (Shape{ids.numel(), table.size(1)}));
  if (scratch.planning()) return;
  const int64_t n = ids.numel();
  const int64_t vocab = table.size(0);
  const int64_t c = table.size(1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = host::load_id(ids, i);
    if (id < 0 || id >= vocab) host::throw_bad_id(id, i, vocab);
    std::memcpy(out.data<float>() + i * c, table.data<float>() + id * c,
                static_cast<size_t>(c) * sizeof(float));
  }
}

void CpuBackend::gather_rows(const Tensor& table, const Tensor& rows, Tensor& out,
                             const KernelScratch& scratch) {
  assert(table.dtype() == DType::F32 && out.shape() == (Shape{rows.numel(), table.size(1)}));
  if (scratch.planning()) return;
  const int64_t vocab = table.size(0);
  const int64_t c = table.size(1);
  const auto row_bytes = static_cast<size_t>(c) * sizeof(float);
  for (int64_t i = 0; i < rows.numel(); ++i) {
    const int64_t row = rows.data<int64_t>()[i];
    float* dst = out.data<float>() + i * c;
    if (row >= 0 && row < vocab) {
      std::memcpy(dst, table.data<float>() + row * c, row_bytes);
    } else {
      std::fill(dst, dst + c, 0.0f);
    }
  }
}

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                           const AttentionParams& params, const KernelScratch& scratch) {
  assert(q.dtype() == DType::F32 && out.shape() == q.shape());
  const int64_t batch = q.size(0);
  const int64_t tq = q.size(1);
  const int64_t heads = q.size(2);
  const int64_t dim = q.size(3);
  const int64_t tk = k.size(1);
  const int64_t row = heads * dim;  // stride between time steps of one head
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const ScratchBuffer scores = take_floats(scratch, threads_ * tq * tk);
  if (scratch.planning()) return;
  const int64_t jobs = batch * heads;
#pragma omp parallel for num_threads(threads_) schedule(dynamic) if (jobs > 1)
  for (int64_t job = 0; job < jobs; ++job) {
    const int64_t b = job / heads;
    const int64_t h = job % heads;
    // The masks keep a window of the keys: query i sees keys [first, first + seen(i)).
    const int64_t valid = params.key_lengths.empty() ? tk : params.key_lengths[b];
    const int64_t first = params.key_starts.empty() ? 0 : std::min(params.key_starts[b], valid);
    const int64_t window = valid - first;
    const int64_t offset = params.query_offsets.empty() ? 0 : params.query_offsets[b];
    const float* qb = q.data<float>() + b * tq * row + h * dim;
    const float* kb = k.data<float>() + (b * tk + first) * row + h * dim;
    const float* vb = v.data<float>() + (b * tk + first) * row + h * dim;
    float* ob = out.data<float>() + b * tq * row + h * dim;
    float* s = scores.as<float>() + omp_get_thread_num() * tq * tk;
    const auto seen = [&](int64_t i) {
      return params.causal ? std::clamp(offset + i + 1 - first, int64_t{0}, window) : window;
    };
    if (window > 0 && dim > 0) {
      // s [tq, window] = scale · q·kᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tq),
                  static_cast<int>(window), static_cast<int>(dim), params.scale, qb,
                  static_cast<int>(row), kb, static_cast<int>(row), 0.0f, s,
                  static_cast<int>(window));
    } else if (window > 0) {
      std::fill(s, s + tq * window, 0.0f);
    }
    // Masked softmax between the two gemms.
    for (int64_t i = 0; i < tq; ++i) {
      const int64_t visible = seen(i);
      float* si = s + i * window;
      if (visible == 0) {
        std::fill(si, si + window, 0.0f);
        continue;
      }
      float max_score = si[0];
      for (int64_t j = 1; j < visible; ++j) max_score = std::max(max_score, si[j]);
      float total = 0.0f;
      for (int64_t j = 0; j < visible; ++j) {
        si[j] = std::exp(si[j] - max_score);
        total += si[j];
      }
      const float inv = 1.0f / total;
      for (int64_t j = 0; j < visible; ++j) si[j] *= inv;
      std::fill(si + visible, si + window, 0.0f);
    }
    if (window > 0 && dim > 0) {
      // out [tq, dim] = p [tq, window] · v [window, dim]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(tq),
                  static_cast<int>(dim), static_cast<int>(window), 1.0f, s,
                  static_cast<int>(window), vb, static_cast<int>(row), 0.0f, ob,
                  static_cast<int>(row));
    }
    for (int64_t i = 0; i < tq; ++i) {
      if (seen(i) == 0) std::fill(ob + i * row, ob + i * row + dim, nan);
    }
  }
}

void CpuBackend::rope(const Tensor& x, const Tensor& start_positions, float theta, Tensor& out,
                      const KernelScratch& scratch) {
  const int64_t t = x.size(1);
  const int64_t heads = x.size(2);
  const int64_t dim = x.size(3);
  const int64_t half = dim / 2;
  const int64_t rows = x.size(0) * t;  // (batch, step) pairs: one position each
  // Per thread: cos and sin of one position's angles.
  const ScratchBuffer tables = take_floats(scratch, threads_ * dim);
  if (scratch.planning()) return;
  const std::vector<float> inv_freq = rope_frequencies(theta, dim);
  const float* px = x.data<float>();
  float* po = out.data<float>();
  const int64_t* starts = start_positions.data<int64_t>();
#pragma omp parallel for num_threads(threads_) schedule(static) if (x.numel() > kParallelMin)
  for (int64_t row = 0; row < rows; ++row) {
    float* cosines = tables.as<float>() + omp_get_thread_num() * dim;
    float* sines = cosines + half;
    const auto position = static_cast<float>(starts[row / t] + row % t);
    for (int64_t j = 0; j < half; ++j) {
      const double angle = position * inv_freq[static_cast<size_t>(j)];  // formed in F32
      cosines[j] = static_cast<float>(std::cos(angle));
      sines[j] = static_cast<float>(std::sin(angle));
    }
    for (int64_t h = 0; h < heads; ++h) {
      const float* in = px + (row * heads + h) * dim;
      float* o = po + (row * heads + h) * dim;
      for (int64_t j = 0; j < half; ++j) {
        const float x1 = in[j];
        const float x2 = in[j + half];
        o[j] = x1 * cosines[j] - x2 * sines[j];
        o[j + half] = x2 * cosines[j] + x1 * sines[j];
      }
    }
  }
}

void CpuBackend::write_rows(Tensor& cache, const Tensor& rows, const std::vector<int64_t>& offsets,
                            const KernelScratch& scratch) {
  if (scratch.planning()) return;
  const size_t row = host::row_bytes(cache);
  const int64_t tmax = cache.size(1);
  const int64_t t = rows.size(1);
  auto* dst = static_cast<char*>(cache.raw_data());
  const auto* src = static_cast<const char*>(rows.raw_data());
  for (int64_t b = 0; b < cache.size(0); ++b) {
    // The rows of one batch item are contiguous in both tensors.
    const int64_t at = b * tmax + offsets[static_cast<size_t>(b)];
    std::memcpy(dst + static_cast<size_t>(at) * row, src + static_cast<size_t>(b * t) * row,
                static_cast<size_t>(t) * row);
  }
}

void CpuBackend::paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages,
                                 const Tensor& page_table, const Tensor& positions,
                                 const Tensor& key_starts, float scale, Tensor& out,
                                 const KernelScratch& scratch) {
  assert(q.dtype() == DType::F32 && out.shape() == q.shape());
  const int64_t batch = q.size(0);
  const int64_t tq = q.size(1);
  const int64_t heads = q.size(2);
  const int64_t dim = q.size(3);
  const int64_t page_size = k_pages.size(1);
  const int64_t pages = k_pages.size(0);
  const int64_t capacity = page_table.size(1) * page_size;
  // Per thread: the page rows of one query's keys (-1: missing), then their weights.
  const ScratchBuffer buffer = take_floats(scratch, threads_ * capacity * 3);
  if (scratch.planning()) return;
  const int64_t row = heads * dim;  // elements of one page row
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t jobs = batch * heads;
#pragma omp parallel for num_threads(threads_) schedule(dynamic) if (jobs > 1)
  for (int64_t job = 0; job < jobs; ++job) {
    const int64_t b = job / heads;
    const int64_t h = job % heads;
    float* weights = buffer.as<float>() + omp_get_thread_num() * capacity * 3;
    auto* rows = reinterpret_cast<int64_t*>(weights + capacity);
    const int64_t first = key_starts.defined() ? key_starts.data<int64_t>()[b] : 0;
    for (int64_t i = 0; i < tq; ++i) {
      const int64_t seen = std::min(positions.data<int64_t>()[b] + i + 1, capacity);
      const float* qi = q.data<float>() + (b * tq + i) * row + h * dim;
      float* oi = out.data<float>() + (b * tq + i) * row + h * dim;
      float max_score = -std::numeric_limits<float>::infinity();
      for (int64_t p = first; p < seen; ++p) {
        rows[p] = host::page_row(page_table, b, p, page_size, pages);
        if (rows[p] < 0) continue;
        const float* kp = k_pages.data<float>() + rows[p] * row + h * dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < dim; ++d) dot += qi[d] * kp[d];
        weights[p] = scale * dot;
        max_score = std::max(max_score, weights[p]);
      }
      if (max_score == -std::numeric_limits<float>::infinity()) {
        std::fill(oi, oi + dim, nan);
        continue;
      }
      float total = 0.0f;
      for (int64_t p = first; p < seen; ++p) {
        weights[p] = rows[p] < 0 ? 0.0f : std::exp(weights[p] - max_score);
        total += weights[p];
      }
      std::fill(oi, oi + dim, 0.0f);
      const float inv = 1.0f / total;
      for (int64_t p = first; p < seen; ++p) {
        if (rows[p] < 0) continue;
        const float w = weights[p] * inv;
        const float* vp = v_pages.data<float>() + rows[p] * row + h * dim;
        for (int64_t d = 0; d < dim; ++d) oi[d] += w * vp[d];
      }
    }
  }
}

void CpuBackend::write_pages(Tensor& pages, const Tensor& rows, const Tensor& page_table,
                             const Tensor& positions, const KernelScratch& scratch) {
  if (scratch.planning()) return;
  host::write_pages(pages, rows, page_table, positions);
}

void CpuBackend::zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths,
                                     const KernelScratch& scratch) {
  if (scratch.planning()) return;
  const int64_t t = x.size(1);
  const int64_t c = x.size(2);
  for (int64_t b = 0; b < x.size(0); ++b) {
    const int64_t from = std::min(lengths[static_cast<size_t>(b)], t);
    float* start = x.data<float>() + (b * t + from) * c;
    std::fill(start, start + (t - from) * c, 0.0f);
  }
}

void CpuBackend::length_regulate(const Tensor& x,
                                 const std::vector<std::vector<int64_t>>& durations, Tensor& out,
                                 const KernelScratch& scratch) {
  if (scratch.planning()) return;
  const int64_t batch = x.size(0);
  const int64_t t = x.size(1);
  const int64_t c = x.size(2);
  const int64_t frames = out.size(1);
  const auto row_bytes = static_cast<size_t>(c) * sizeof(float);
  for (int64_t b = 0; b < batch; ++b) {
    const auto& dur = durations[static_cast<size_t>(b)];
    float* ob = out.data<float>() + b * frames * c;
    int64_t frame = 0;
    for (int64_t row = 0; row < t; ++row) {
      const int64_t d = dur[static_cast<size_t>(row)];
      assert(frame + d <= frames);
      const float* src = x.data<float>() + (b * t + row) * c;
      for (int64_t r = 0; r < d; ++r, ++frame) std::memcpy(ob + frame * c, src, row_bytes);
    }
    std::fill(ob + frame * c, ob + frames * c, 0.0f);
  }
}

void CpuBackend::bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) {
  const float* px = x.data<float>();
  const float* pb = boundaries.data<float>();
  const int64_t nb = boundaries.numel();
  int64_t* po = out.data<int64_t>();
  const int64_t n = x.numel();
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) po[i] = host::bucket_index(px[i], pb, nb);
}

namespace {

// One thread's inverse real FFT of n points with KISS FFT, in memory from the kernel's scratch:
// kiss_fftri for even n, a complex inverse of the Hermitian spectrum for odd n (kiss_fftr needs
// an even size). Both give the unscaled inverse with the imaginary parts of the DC bin (and the
// Nyquist bin) ignored.
class InverseRealFft {
 public:
  // Bytes of KISS FFT state for n points, and of the whole per-thread workspace.
  static size_t state_bytes(int64_t n) {
    size_t bytes = 0;
    if (n % 2 == 0) {
      kiss_fftr_alloc(static_cast<int>(n), 1, nullptr, &bytes);
    } else {
      kiss_fft_alloc(static_cast<int>(n), 1, nullptr, &bytes);
    }
    return (bytes + 63) / 64 * 64;
  }
  static size_t workspace_bytes(int64_t n) {
    return state_bytes(n) + static_cast<size_t>(2 * n) * sizeof(kiss_fft_cpx);
  }

  // Sets up the transform in `memory` (workspace_bytes(n) of them).
  InverseRealFft(int64_t n, void* memory)
      : n_(n),
        spectrum_(reinterpret_cast<kiss_fft_cpx*>(static_cast<char*>(memory) + state_bytes(n))),
        signal_(spectrum_ + n) {
    size_t bytes = state_bytes(n);
    if (n % 2 == 0) {
      real_ = kiss_fftr_alloc(static_cast<int>(n), 1, memory, &bytes);
    } else {
      complex_ = kiss_fft_alloc(static_cast<int>(n), 1, memory, &bytes);
    }
  }

  // spectrum()[k] for k <= n/2 must hold bin k; run() writes n samples to `out`, times `scale`.
  kiss_fft_cpx* spectrum() const { return spectrum_; }
  void run(float* out, float scale) const {
    if (real_ != nullptr) {
      kiss_fftri(real_, spectrum_, out);
      for (int64_t m = 0; m < n_; ++m) out[m] *= scale;
      return;
    }
    spectrum_[0].i = 0.0f;
    for (int64_t k = 1; k <= n_ / 2; ++k) {
      spectrum_[n_ - k].r = spectrum_[k].r;
      spectrum_[n_ - k].i = -spectrum_[k].i;
    }
    kiss_fft(complex_, spectrum_, signal_);
    for (int64_t m = 0; m < n_; ++m) out[m] = signal_[m].r * scale;
  }

 private:
  int64_t n_;
  kiss_fftr_cfg real_ = nullptr;
  kiss_fft_cfg complex_ = nullptr;
  kiss_fft_cpx* spectrum_;
  kiss_fft_cpx* signal_;
};

}  // namespace

void CpuBackend::istft(const Tensor& real, const Tensor& imag, const Tensor& window, int64_t hop,
                       Tensor& out, const KernelScratch& scratch) {
  const int64_t batch = real.size(0);
  const int64_t bins = real.size(1);
  const int64_t frames = real.size(2);
  const int64_t n_fft = window.size(0);
  const int64_t length = out.size(1);
  // Per thread a transform; per batch item every windowed frame [frames, n_fft].
  const size_t per_thread = InverseRealFft::workspace_bytes(n_fft);
  const ScratchBuffer transforms = scratch.take(static_cast<size_t>(threads_) * per_thread);
  const ScratchBuffer windowed = take_floats(scratch, frames * n_fft);
  if (scratch.planning()) return;
  const float* w = window.data<float>();
  const float scale = 1.0f / static_cast<float>(n_fft);
  float* po = out.data<float>();
  float* pf = windowed.as<float>();
  for (int64_t b = 0; b < batch; ++b) {
    const float* re = real.data<float>() + b * bins * frames;
    const float* im = imag.data<float>() + b * bins * frames;
#pragma omp parallel num_threads(threads_) if (frames * n_fft > kParallelMin)
    {
      const InverseRealFft fft(n_fft, transforms.as<char>() + omp_get_thread_num() * per_thread);
#pragma omp for schedule(static)
      for (int64_t f = 0; f < frames; ++f) {
        kiss_fft_cpx* spectrum = fft.spectrum();
        for (int64_t k = 0; k < bins; ++k) spectrum[k] = {re[k * frames + f], im[k * frames + f]};
        float* frame = pf + f * n_fft;
        fft.run(frame, scale);
        for (int64_t m = 0; m < n_fft; ++m) frame[m] *= w[m];
      }
    }
    // Output i is sample n = n_fft/2 + i of the overlap-added signal: the frames f with
    // f·hop <= n < f·hop + n_fft, divided by their Σ window².
    float* o = po + b * length;
#pragma omp parallel for num_threads(threads_) schedule(static) if (length > kParallelMin / 8)
    for (int64_t i = 0; i < length; ++i) {
      const int64_t n = n_fft / 2 + i;
      const int64_t first = n < n_fft ? 0 : (n - n_fft) / hop + 1;
      const int64_t last = std::min(frames - 1, n / hop);
      float sum = 0.0f;
      float envelope = 0.0f;
      for (int64_t f = first; f <= last; ++f) {
        const int64_t m = n - f * hop;
        sum += pf[f * n_fft + m];
        envelope += w[m] * w[m];
      }
      o[i] = sum / envelope;
    }
  }
}

void CpuBackend::sample_tokens(const Tensor& logits, const Tensor& history,
                               const std::vector<TokenDraw>& draws, Tensor& tokens,
                               const KernelScratch& scratch) {
  if (scratch.planning()) return;
  // Rows are independent (top-P's sort and two softmaxes each): in parallel.
  const int64_t rows = logits.size(0);
#pragma omp parallel for num_threads(threads_) schedule(dynamic) if (rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    tokens.data<int64_t>()[r] = host::sample_row(logits, history, draws[static_cast<size_t>(r)], r);
  }
}

void CpuBackend::lstm(const Tensor& x_gates, const Tensor& w_hh, Tensor& h, Tensor& c,
                      const std::vector<int64_t>& lengths, bool reverse, Tensor& out,
                      const KernelScratch& scratch) {
  const int64_t batch = x_gates.size(0);
  const int64_t steps = x_gates.size(1);
  const int64_t hidden = w_hh.size(1);
  // Every batch item's recurrent gates h·W_hhᵀ for one step, as one gemm.
  const ScratchBuffer recurrent = take_floats(scratch, batch * 4 * hidden);
  if (scratch.planning()) return;
  const float* gates_in = x_gates.data<float>();
  float* ph = h.data<float>();
  float* pc = c.data<float>();
  float* po = out.data<float>();
  float* pr = recurrent.as<float>();
  std::fill(po, po + out.numel(), 0.0f);
  const auto length_of = [&](int64_t b) {
    return lengths.empty() ? steps : lengths[static_cast<size_t>(b)];
  };
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b) longest = std::max(longest, length_of(b));
  const auto sigmoid = [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
  for (int64_t step = 0; step < longest; ++step) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(batch),
                static_cast<int>(4 * hidden), static_cast<int>(hidden), 1.0f, ph,
                static_cast<int>(hidden), w_hh.data<float>(), static_cast<int>(hidden), 0.0f, pr,
                static_cast<int>(4 * hidden));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t length = length_of(b);
      if (step >= length) continue;
      const int64_t t = reverse ? length - 1 - step : step;
      const float* xg = gates_in + (b * steps + t) * 4 * hidden;
      const float* rg = pr + b * 4 * hidden;
      for (int64_t j = 0; j < hidden; ++j) {
        const float in = sigmoid(xg[j] + rg[j]);
        const float forget = sigmoid(xg[hidden + j] + rg[hidden + j]);
        const float cell = std::tanh(xg[2 * hidden + j] + rg[2 * hidden + j]);
        const float outg = sigmoid(xg[3 * hidden + j] + rg[3 * hidden + j]);
        const float next_c = forget * pc[b * hidden + j] + in * cell;
        pc[b * hidden + j] = next_c;
        ph[b * hidden + j] = outg * std::tanh(next_c);
        po[(b * steps + t) * hidden + j] = ph[b * hidden + j];
      }
    }
  }
}

void CpuBackend::add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& weight, float eps,
                              Tensor& sum, Tensor& normed) {
  assert(x.dtype() == DType::F32 && delta.dtype() == DType::F32 && normed.dtype() == DType::F32);
  host::add(x, delta, sum);
  rms_norm(sum, weight, eps, normed);
}

void CpuBackend::swiglu(const Tensor& gate_up, Tensor& out) {
  assert(gate_up.dtype() == DType::F32);
  host::swiglu(gate_up, out);
}

void CpuBackend::qkv_to_pages(const Tensor& qkv, Tensor& k_pages, Tensor& v_pages,
                              const Tensor& page_table, const Tensor& positions, float theta,
                              Tensor& q_out, const KernelScratch& scratch) {
  assert(qkv.dtype() == DType::F32);
  if (scratch.planning()) return;
  host::qkv_to_pages(qkv, k_pages, v_pages, page_table, positions, theta, q_out);
}

}  // namespace voxd
