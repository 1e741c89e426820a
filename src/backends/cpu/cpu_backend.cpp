#include "backends/cpu/cpu_backend.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/host_util.h"
#include "core/allocator.h"
#include "core/error.h"

namespace voxd {
namespace {

using host::require_f32;
using host::require_shape;

// Loops shorter than this run on one thread: spawning the team costs more than it saves.
constexpr int64_t kParallelMin = 16384;
// Output time steps per block of the tap-sum convolution: about kTapBlockFloats output floats
// (1 MiB, so the block stays in cache across the taps), within [kMinTimeBlock, kMaxTimeBlock].
constexpr int64_t kTapBlockFloats = 262144;
constexpr int64_t kMinTimeBlock = 1024;
constexpr int64_t kMaxTimeBlock = 8192;
// Time steps per im2col / col2im block: large enough for efficient gemms, small enough that the
// columns of a 512-channel, 16-tap layer stay a few MiB.
constexpr int64_t kColBlock = 1024;

// Floats from host_allocator() for the duration of one kernel call.
class Scratch {
 public:
  explicit Scratch(int64_t count)
      : bytes_(static_cast<size_t>(count) * sizeof(float)),
        data_(static_cast<float*>(host_allocator().allocate(bytes_))) {}
  ~Scratch() { host_allocator().deallocate(data_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() const { return data_; }

 private:
  size_t bytes_;
  float* data_;
};

// out[c, t] = bias[c] for every time step t of a [C, T] block (on this thread, as it runs right
// before gemms).
void fill_channels(float* out, int64_t channels, int64_t t, const float* bias) {
  for (int64_t c = 0; c < channels; ++c) {
    std::fill(out + c * t, out + (c + 1) * t, bias ? bias[c] : 0.0f);
  }
}

}  // namespace

CpuBackend::CpuBackend(int threads) : threads_(threads > 0 ? threads : omp_get_num_procs()) {
  openblas_set_num_threads(threads_);
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
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
  require_f32("unary", "x", x);
  require_f32("unary", "out", out);
  require_shape("unary", "out", out, x.shape());
  const float* in = x.data<float>();
  float* o = out.data<float>();
  const int64_t n = x.numel();
  switch (op) {
    case UnaryOp::Relu:
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) o[i] = in[i] > 0.0f ? in[i] : 0.0f;
      break;
    case UnaryOp::LeakyRelu:
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) o[i] = in[i] >= 0.0f ? in[i] : alpha * in[i];
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
  }
}

void CpuBackend::binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryOp op) {
  require_f32("binary", "a", a);
  require_f32("binary", "b", b);
  require_f32("binary", "out", out);
  require_shape("binary", "out", out, a.shape());
  if (b.dim() != a.dim()) throw Error("binary: b " + b.shape_string() + " rank differs from a");
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

void CpuBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) {
  require_f32("linear", "x", x);
  require_f32("linear", "weight", weight);
  if (bias.defined()) require_f32("linear", "bias", bias);
  require_f32("linear", "out", out);
  const int64_t n = x.size(0);
  const int64_t in = x.size(1);
  const int64_t features = weight.size(0);
  require_shape("linear", "out", out, {n, features});
  if (n == 0 || features == 0) return;
  float* po = out.data<float>();
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  for (int64_t r = 0; r < n; ++r) {
    if (pb) {
      std::memcpy(po + r * features, pb, static_cast<size_t>(features) * sizeof(float));
    } else {
      std::fill(po + r * features, po + (r + 1) * features, 0.0f);
    }
  }
  if (in == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
              static_cast<int>(features), static_cast<int>(in), 1.0f, x.data<float>(),
              static_cast<int>(in), weight.data<float>(), static_cast<int>(in), 1.0f, po,
              static_cast<int>(features));
}

void CpuBackend::conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                        const Conv1dParams& p) {
  require_f32("conv1d", "x", x);
  require_f32("conv1d", "weight", weight);
  if (bias.defined()) require_f32("conv1d", "bias", bias);
  require_f32("conv1d", "out", out);
  const int64_t batch = x.size(0);
  const int64_t cin = x.size(1);
  const int64_t t_in = x.size(2);
  const int64_t cout = weight.size(0);
  const int64_t cin_g = weight.size(1);
  const int64_t k_size = weight.size(2);
  const int64_t t_out = out.size(2);
  const int64_t cout_g = cout / p.groups;
  require_shape("conv1d", "out", out, {batch, cout, t_out});
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  if (p.stride == 1) {
    // Sum over taps: out[:, t] += W_k · x[:, t + k·dilation − padding] is one gemm per tap on a
    // shifted view of x, with no column matrix. Blocks of output time keep the output block in
    // cache across the taps. Weights are repacked to [group][k][cout_g][cin_g] for the gemms.
    Scratch packed(weight.numel());
    const float* pw = weight.data<float>();
    for (int64_t co = 0; co < cout; ++co) {
      const int64_t g = co / cout_g;
      for (int64_t ci = 0; ci < cin_g; ++ci) {
        for (int64_t k = 0; k < k_size; ++k) {
          packed.data()[((g * k_size + k) * cout_g + co % cout_g) * cin_g + ci] =
              pw[(co * cin_g + ci) * k_size + k];
        }
      }
    }
    const int64_t block = std::clamp<int64_t>(kTapBlockFloats / std::max<int64_t>(cout_g, 1),
                                              kMinTimeBlock, kMaxTimeBlock);
    for (int64_t b = 0; b < batch; ++b) {
      float* ob = out.data<float>() + b * cout * t_out;
      fill_channels(ob, cout, t_out, pb);
      for (int64_t g = 0; g < p.groups; ++g) {
        const float* xg = x.data<float>() + (b * cin + g * cin_g) * t_in;
        float* og = ob + g * cout_g * t_out;
        for (int64_t t0 = 0; t0 < t_out; t0 += block) {
          const int64_t t1 = std::min(t_out, t0 + block);
          for (int64_t k = 0; k < k_size; ++k) {
            const int64_t shift = k * p.dilation - p.padding;
            // Output steps whose tap k lands inside x.
            const int64_t lo = std::max(t0, -shift);
            const int64_t hi = std::min(t1, t_in - shift);
            if (hi <= lo) continue;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(cout_g),
                        static_cast<int>(hi - lo), static_cast<int>(cin_g), 1.0f,
                        packed.data() + (g * k_size + k) * cout_g * cin_g, static_cast<int>(cin_g),
                        xg + lo + shift, static_cast<int>(t_in), 1.0f, og + lo,
                        static_cast<int>(t_out));
          }
        }
      }
    }
    return;
  }
  // Strided convolutions: im2col per block of output steps, then one gemm per block.
  const int64_t col_rows = cin_g * k_size;
  const int64_t block = std::min(t_out, kColBlock);
  Scratch col(col_rows * block);
  for (int64_t b = 0; b < batch; ++b) {
    float* ob = out.data<float>() + b * cout * t_out;
    fill_channels(ob, cout, t_out, pb);
    for (int64_t g = 0; g < p.groups; ++g) {
      const float* xg = x.data<float>() + (b * cin + g * cin_g) * t_in;
      const float* wg = weight.data<float>() + g * cout_g * col_rows;
      float* og = ob + g * cout_g * t_out;
      for (int64_t t0 = 0; t0 < t_out; t0 += block) {
        const int64_t len = std::min(block, t_out - t0);
        // col[ci·K + k, t − t0] = x[ci, t·stride − padding + k·dilation], zero outside x.
        for (int64_t row = 0; row < col_rows; ++row) {
          const float* xr = xg + (row / k_size) * t_in;
          float* cr = col.data() + row * len;
          const int64_t shift = (row % k_size) * p.dilation - p.padding;
          for (int64_t t = 0; t < len; ++t) {
            const int64_t pos = (t0 + t) * p.stride + shift;
            cr[t] = (pos >= 0 && pos < t_in) ? xr[pos] : 0.0f;
          }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(cout_g),
                    static_cast<int>(len), static_cast<int>(col_rows), 1.0f, wg,
                    static_cast<int>(col_rows), col.data(), static_cast<int>(len), 1.0f, og + t0,
                    static_cast<int>(t_out));
      }
    }
  }
}

void CpuBackend::conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  Tensor& out, const ConvTranspose1dParams& p) {
  require_f32("conv_transpose1d", "x", x);
  require_f32("conv_transpose1d", "weight", weight);
  if (bias.defined()) require_f32("conv_transpose1d", "bias", bias);
  require_f32("conv_transpose1d", "out", out);
  const int64_t batch = x.size(0);
  const int64_t cin = x.size(1);
  const int64_t t_in = x.size(2);
  const int64_t cout_g = weight.size(1);
  const int64_t k_size = weight.size(2);
  const int64_t cout = cout_g * p.groups;
  const int64_t cin_g = cin / p.groups;
  const int64_t t_out = out.size(2);
  require_shape("conv_transpose1d", "out", out, {batch, cout, t_out});
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  const int64_t col_rows = cout_g * k_size;
  const int64_t block = std::min(t_in, kColBlock);
  Scratch col(col_rows * block);
  for (int64_t b = 0; b < batch; ++b) {
    float* ob = out.data<float>() + b * cout * t_out;
    fill_channels(ob, cout, t_out, pb);
    for (int64_t g = 0; g < p.groups; ++g) {
      const float* xg = x.data<float>() + (b * cin + g * cin_g) * t_in;
      // Weight rows of this group: [cin_g, cout_g·K].
      const float* wg = weight.data<float>() + g * cin_g * col_rows;
      float* og = ob + g * cout_g * t_out;
      for (int64_t t0 = 0; t0 < t_in; t0 += block) {
        const int64_t len = std::min(block, t_in - t0);
        float* c = col.data();
        // col [cout_g·K, len] = wgᵀ · x[:, t0 : t0 + len].
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(col_rows),
                    static_cast<int>(len), static_cast<int>(cin_g), 1.0f, wg,
                    static_cast<int>(col_rows), xg + t0, static_cast<int>(t_in), 0.0f, c,
                    static_cast<int>(len));
        // Overlap-add: out[co, t·stride − padding + k·dilation] += col[co·K + k, t − t0]. Runs
        // on this thread: an OpenMP team here would spin against OpenBLAS's threads between the
        // gemms, and the adds are a small fraction of the gemm's work.
        for (int64_t co = 0; co < cout_g; ++co) {
          float* orow = og + co * t_out;
          for (int64_t k = 0; k < k_size; ++k) {
            const float* cr = c + (co * k_size + k) * len;
            const int64_t shift = k * p.dilation - p.padding;
            for (int64_t t = 0; t < len; ++t) {
              const int64_t pos = (t0 + t) * p.stride + shift;
              if (pos >= 0 && pos < t_out) orow[pos] += cr[t];
            }
          }
        }
      }
    }
  }
}

void CpuBackend::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                            Tensor& out) {
  require_f32("layer_norm", "x", x);
  require_f32("layer_norm", "gamma", gamma);
  require_f32("layer_norm", "beta", beta);
  require_f32("layer_norm", "out", out);
  require_shape("layer_norm", "out", out, x.shape());
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

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  require_f32("embedding", "table", table);
  require_f32("embedding", "out", out);
  if (!ids.device().is_cpu() || !ids.is_contiguous() ||
      (ids.dtype() != DType::I32 && ids.dtype() != DType::I64)) {
    throw Error("embedding: ids " + ids.shape_string() + " must be contiguous host I32 or I64");
  }
  const int64_t n = ids.numel();
  const int64_t vocab = table.size(0);
  const int64_t c = table.size(1);
  require_shape("embedding", "out", out, {n, c});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = host::load_id(ids, i);
    if (id < 0 || id >= vocab) {
      throw Error("embedding: id " + std::to_string(id) + " at position " + std::to_string(i) +
                  " is outside the table's " + std::to_string(vocab) + " rows");
    }
    std::memcpy(out.data<float>() + i * c, table.data<float>() + id * c,
                static_cast<size_t>(c) * sizeof(float));
  }
}

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                           const AttentionParams& params) {
  require_f32("attention", "q", q);
  require_f32("attention", "k", k);
  require_f32("attention", "v", v);
  require_f32("attention", "out", out);
  require_shape("attention", "out", out, q.shape());
  const int64_t batch = q.size(0);
  const int64_t tq = q.size(1);
  const int64_t heads = q.size(2);
  const int64_t dim = q.size(3);
  const int64_t tk = k.size(1);
  const int64_t row = heads * dim;  // stride between time steps of one head
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Scratch scores(tq * tk);
  for (int64_t b = 0; b < batch; ++b) {
    // Both masks keep a prefix of the keys: query i sees keys [0, visible(i)).
    const int64_t valid = params.key_lengths.empty() ? tk : params.key_lengths[b];
    const int64_t offset = params.query_offsets.empty() ? 0 : params.query_offsets[b];
    for (int64_t h = 0; h < heads; ++h) {
      const float* qb = q.data<float>() + b * tq * row + h * dim;
      const float* kb = k.data<float>() + b * tk * row + h * dim;
      const float* vb = v.data<float>() + b * tk * row + h * dim;
      float* ob = out.data<float>() + b * tq * row + h * dim;
      float* s = scores.data();
      if (valid > 0 && dim > 0) {
        // s [tq, valid] = scale · q·kᵀ
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tq),
                    static_cast<int>(valid), static_cast<int>(dim), params.scale, qb,
                    static_cast<int>(row), kb, static_cast<int>(row), 0.0f, s,
                    static_cast<int>(valid));
      } else if (valid > 0) {
        std::fill(s, s + tq * valid, 0.0f);
      }
      // Masked softmax on this thread, between the two (multi-threaded) gemms.
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t seen = params.causal ? std::clamp(offset + i + 1, int64_t{0}, valid) : valid;
        float* si = s + i * valid;
        if (seen == 0) {
          std::fill(si, si + valid, 0.0f);
          continue;
        }
        float max_score = si[0];
        for (int64_t j = 1; j < seen; ++j) max_score = std::max(max_score, si[j]);
        float total = 0.0f;
        for (int64_t j = 0; j < seen; ++j) {
          si[j] = std::exp(si[j] - max_score);
          total += si[j];
        }
        const float inv = 1.0f / total;
        for (int64_t j = 0; j < seen; ++j) si[j] *= inv;
        std::fill(si + seen, si + valid, 0.0f);
      }
      if (valid > 0 && dim > 0) {
        // out [tq, dim] = p [tq, valid] · v [valid, dim]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(tq),
                    static_cast<int>(dim), static_cast<int>(valid), 1.0f, s,
                    static_cast<int>(valid), vb, static_cast<int>(row), 0.0f, ob,
                    static_cast<int>(row));
      }
      for (int64_t i = 0; i < tq; ++i) {
        const bool blind = valid == 0 || (params.causal && offset + i < 0);
        if (blind) std::fill(ob + i * row, ob + i * row + dim, nan);
      }
    }
  }
}

void CpuBackend::zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths) {
  require_f32("zero_beyond_lengths", "x", x);
  const int64_t t = x.size(1);
  const int64_t c = x.size(2);
  for (int64_t b = 0; b < x.size(0); ++b) {
    const int64_t from = std::min(lengths[static_cast<size_t>(b)], t);
    float* start = x.data<float>() + (b * t + from) * c;
    std::fill(start, start + (t - from) * c, 0.0f);
  }
}

void CpuBackend::length_regulate(const Tensor& x,
                                 const std::vector<std::vector<int64_t>>& durations, Tensor& out) {
  require_f32("length_regulate", "x", x);
  require_f32("length_regulate", "out", out);
  const int64_t batch = x.size(0);
  const int64_t t = x.size(1);
  const int64_t c = x.size(2);
  const int64_t frames = out.size(1);
  require_shape("length_regulate", "out", out, {batch, frames, c});
  const auto row_bytes = static_cast<size_t>(c) * sizeof(float);
  for (int64_t b = 0; b < batch; ++b) {
    const auto& dur = durations[static_cast<size_t>(b)];
    if (static_cast<int64_t>(dur.size()) != t) {
      throw Error("length_regulate: " + std::to_string(dur.size()) + " durations for " +
                  std::to_string(t) + " rows");
    }
    float* ob = out.data<float>() + b * frames * c;
    int64_t frame = 0;
    for (int64_t row = 0; row < t; ++row) {
      const int64_t d = dur[static_cast<size_t>(row)];
      if (frame + d > frames) {
        throw Error("length_regulate: durations of batch " + std::to_string(b) +
                    " exceed the output's " + std::to_string(frames) + " frames");
      }
      const float* src = x.data<float>() + (b * t + row) * c;
      for (int64_t r = 0; r < d; ++r, ++frame) std::memcpy(ob + frame * c, src, row_bytes);
    }
    std::fill(ob + frame * c, ob + frames * c, 0.0f);
  }
}

void CpuBackend::bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) {
  require_f32("bucketize", "x", x);
  require_f32("bucketize", "boundaries", boundaries);
  if (out.dtype() != DType::I64 || !out.is_contiguous() || out.shape() != x.shape()) {
    throw Error("bucketize: out must be a contiguous I64 tensor shaped like x " + x.shape_string());
  }
  const float* px = x.data<float>();
  const float* pb = boundaries.data<float>();
  const int64_t nb = boundaries.numel();
  int64_t* po = out.data<int64_t>();
  const int64_t n = x.numel();
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) po[i] = host::bucket_index(px[i], pb, nb);
}

}  // namespace voxd
