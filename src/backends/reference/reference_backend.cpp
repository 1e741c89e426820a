#include "backends/reference/reference_backend.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include "backends/host_util.h"

namespace voxd {
namespace {

// A convolution of more multiply-adds than this runs its output rows on OpenMP's threads: the
// device op tables' large cases, which would otherwise spend minutes here.
constexpr int64_t kParallelMacs = int64_t{1} << 24;

}  // namespace

bool ReferenceBackend::supports(OpKind /*op*/, DType dtype) const {
  return dtype == DType::F32;
}

void ReferenceBackend::copy(const Tensor& src, Tensor& dst, const KernelScratch& scratch) {
  if (scratch.planning()) return;
  host::strided_copy(src, dst);
}

void ReferenceBackend::fill(Tensor& dst, float value) {
  host::fill(dst, value);
}

void ReferenceBackend::unary(const Tensor& x, Tensor& out, UnaryOp op, float alpha) {
  assert(x.dtype() == DType::F32 && out.shape() == x.shape());
  const float* in = x.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = in[i];
    double r = 0;
    switch (op) {
      case UnaryOp::Relu:
        r = v > 0 ? v : 0.0;
        break;
      case UnaryOp::LeakyRelu:
        r = v >= 0 ? v : alpha * v;
        break;
      case UnaryOp::Tanh:
        r = std::tanh(v);
        break;
      case UnaryOp::Exp:
        r = std::exp(v);
        break;
      case UnaryOp::Scale:
        r = alpha * v;
        break;
      case UnaryOp::Silu:
        r = v / (1.0 + std::exp(-v));
        break;
      case UnaryOp::Gelu:
        r = 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2));
        break;
      case UnaryOp::Sin:
        r = std::sin(v);
        break;
      case UnaryOp::Cos:
        r = std::cos(v);
        break;
      case UnaryOp::ClampMax:
        r = v > alpha ? alpha : v;
        break;
    }
    o[i] = static_cast<float>(r);
  }
}

void ReferenceBackend::binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryOp op) {
  assert(a.dtype() == DType::F32 && b.dim() == a.dim() && out.shape() == a.shape());
  const Shape& shape = a.shape();
  const Shape b_strides = contiguous_strides(b.shape());
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    // Unravel i over a's shape; dimensions where b has size 1 contribute nothing to b's index.
    int64_t rest = i;
    int64_t bi = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      const int64_t coord = rest % shape[d];
      rest /= shape[d];
      if (b.shape()[d] != 1) bi += coord * b_strides[d];
    }
    const double x = pa[i];
    const double y = pb[bi];
    po[i] = static_cast<float>(op == BinaryOp::Add ? x + y : x * y);
  }
}

void ReferenceBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              Tensor& out, const KernelScratch& scratch) {
  const int64_t n = x.size(0);
  const int64_t in = x.size(1);
  const int64_t features = weight.size(0);
  assert(x.dtype() == DType::F32 && out.shape() == (Shape{n, features}));
  if (scratch.planning()) return;
  const float* px = x.data<float>();
  const float* pw = weight.data<float>();
  float* po = out.data<float>();
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < features; ++o) {
      double acc = bias.defined() ? bias.data<float>()[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) {
        acc += static_cast<double>(px[r * in + i]) * pw[o * in + i];
      }
      po[r * features + o] = static_cast<float>(acc);
    }
  }
}

void ReferenceBackend::conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              Tensor& out, const Conv1dParams& p, const KernelScratch& scratch) {
  const int64_t batch = x.size(0);
  const int64_t cin = x.size(1);
  const int64_t t_in = x.size(2);
  const int64_t cout = weight.size(0);
  const int64_t cin_g = weight.size(1);
  const int64_t k_size = weight.size(2);
  const int64_t t_out = out.size(2);
  const int64_t cout_g = cout / p.groups;
  assert(x.dtype() == DType::F32 && out.shape() == (Shape{batch, cout, t_out}));
  if (scratch.planning()) return;
  const float* px = x.data<float>();
  const float* pw = weight.data<float>();
  float* po = out.data<float>();
  // Each output element is one sum, the same whichever thread computes it.
  const int64_t macs = batch * cout * t_out * cin_g * k_size;
#pragma omp parallel for collapse(2) schedule(static) if (macs > kParallelMacs)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t co = 0; co < cout; ++co) {
      const int64_t group = co / cout_g;
      for (int64_t t = 0; t < t_out; ++t) {
        // The taps whose input position t·stride − padding + k·dilation is inside the sequence.
        const int64_t start = t * p.stride - p.padding;
        int64_t k_begin = 0;
        while (k_begin < k_size && start + k_begin * p.dilation < 0) ++k_begin;
        int64_t k_end = k_size;
        while (k_end > k_begin && start + (k_end - 1) * p.dilation >= t_in) --k_end;
        double acc = bias.defined() ? bias.data<float>()[co] : 0.0;
        for (int64_t ci = 0; ci < cin_g; ++ci) {
          const int64_t w_row = (co * cin_g + ci) * k_size;
          const int64_t x_row = (b * cin + group * cin_g + ci) * t_in + start;
          for (int64_t k = k_begin; k < k_end; ++k) {
            acc += static_cast<double>(pw[w_row + k]) * px[x_row + k * p.dilation];
          }
        }
        po[(b * cout + co) * t_out + t] = static_cast<float>(acc);
      }
    }
  }
}

void ReferenceBackend::conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
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
  // Scatter form: input sample t of channel ci adds w[ci, co, k] · x to output t·stride −
  // padding + k·dilation of every output channel co in ci's group, summed in doubles.
  const ScratchBuffer sums = scratch.take(static_cast<size_t>(out.numel()) * sizeof(double));
  if (scratch.planning()) return;
  double* acc = sums.as<double>();
  std::fill(acc, acc + out.numel(), 0.0);
  const float* px = x.data<float>();
  const float* pw = weight.data<float>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t ci = 0; ci < cin; ++ci) {
      const int64_t group = ci / cin_g;
      for (int64_t t = 0; t < t_in; ++t) {
        const double xv = px[(b * cin + ci) * t_in + t];
        for (int64_t c = 0; c < cout_g; ++c) {
          const int64_t co = group * cout_g + c;
          for (int64_t k = 0; k < k_size; ++k) {
            const int64_t pos = t * p.stride - p.padding + k * p.dilation;
            if (pos < 0 || pos >= t_out) continue;
            acc[(b * cout + co) * t_out + pos] += xv * pw[(ci * cout_g + c) * k_size + k];
          }
        }
      }
    }
  }
  float* po = out.data<float>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t co = 0; co < cout; ++co) {
      const double bv = bias.defined() ? bias.data<float>()[co] : 0.0;
      for (int64_t t = 0; t < t_out; ++t) {
        const int64_t i = (b * cout + co) * t_out + t;
        po[i] = static_cast<float>(acc[i] + bv);
      }
    }
  }
}

void ReferenceBackend::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  float eps, Tensor& out) {
  assert(x.dtype() == DType::F32 && out.shape() == x.shape());
  const int64_t rows = x.size(0);
  const int64_t c = x.size(1);
  const float* pg = gamma.data<float>();
  const float* pb = beta.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.data<float>() + r * c;
    float* o = out.data<float>() + r * c;
    double mean = 0;
    for (int64_t i = 0; i < c; ++i) mean += in[i];
    mean /= static_cast<double>(c);
    double var = 0;
    for (int64_t i = 0; i < c; ++i) var += (in[i] - mean) * (in[i] - mean);
    var /= static_cast<double>(c);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < c; ++i) o[i] = static_cast<float>((in[i] - mean) * inv * pg[i] + pb[i]);
  }
}

void ReferenceBackend::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                                      const Tensor& beta, float eps, Tensor& out) {
  assert(residual.shape() == x.shape() && out.shape() == x.shape());
  binary(x, residual, out, BinaryOp::Add);
  layer_norm(out, gamma, beta, eps, out);
}

void ReferenceBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  assert(x.dtype() == DType::F32 && out.shape() == x.shape());
  const int64_t rows = x.size(0);
  const int64_t c = x.size(1);
  const float* pw = weight.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.data<float>() + r * c;
    float* o = out.data<float>() + r * c;
    double squares = 0;
    for (int64_t i = 0; i < c; ++i) squares += static_cast<double>(in[i]) * in[i];
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(c) + eps);
    for (int64_t i = 0; i < c; ++i) {
      // The normalised value in x's dtype (F32 here), then the weight.
      const auto normalised = static_cast<float>(in[i] * inv);
      o[i] = static_cast<float>(static_cast<double>(pw[i]) * normalised);
    }
  }
}

void ReferenceBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out,
                                 const KernelScratch& scratch) {
  assert(table.dtype() == DType::F32 && out.shape() == (Shape{ids.numel(), table.size(1)}));
  if (scratch.planning()) return;
  const int64_t n = ids.numel();
  const int64_t vocab = table.size(0);
  const int64_t c = table.size(1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = host::load_id(ids, i);
    if (id < 0 || id >= vocab) host::throw_bad_id(id, i, vocab);
    for (int64_t j = 0; j < c; ++j) out.data<float>()[i * c + j] = table.data<float>()[id * c + j];
  }
}

void ReferenceBackend::gather_rows(const Tensor& table, const Tensor& rows, Tensor& out,
                                   const KernelScratch& scratch) {
  assert(table.dtype() == DType::F32 && out.shape() == (Shape{rows.numel(), table.size(1)}));
  if (scratch.planning()) return;
  const int64_t vocab = table.size(0);
  const int64_t c = table.size(1);
  for (int64_t i = 0; i < rows.numel(); ++i) {
    const int64_t row = rows.data<int64_t>()[i];
    const bool inside = row >= 0 && row < vocab;
    for (int64_t j = 0; j < c; ++j) {
      out.data<float>()[i * c + j] = inside ? table.data<float>()[row * c + j] : 0.0f;
    }
  }
}

void ReferenceBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                                 const AttentionParams& params, const KernelScratch& scratch) {
  assert(q.dtype() == DType::F32 && out.shape() == q.shape());
  const int64_t batch = q.size(0);
  const int64_t tq = q.size(1);
  const int64_t heads = q.size(2);
  const int64_t dim = q.size(3);
  const int64_t tk = k.size(1);
  const float* pq = q.data<float>();
  const float* pk = k.data<float>();
  const float* pv = v.data<float>();
  float* po = out.data<float>();
  // Scores of one query against every key, then its softmax weights (0 for unseen keys).
  const ScratchBuffer score_buffer = scratch.take(static_cast<size_t>(tk) * sizeof(double));
  if (scratch.planning()) return;
  double* scores = score_buffer.as<double>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t valid = params.key_lengths.empty() ? tk : params.key_lengths[b];
    const int64_t first = params.key_starts.empty() ? 0 : params.key_starts[b];
    const int64_t offset = params.query_offsets.empty() ? 0 : params.query_offsets[b];
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < tq; ++i) {
        const float* qi = pq + ((b * tq + i) * heads + h) * dim;
        bool any = false;
        double max_score = -std::numeric_limits<double>::infinity();
        const auto sees = [&](int64_t j) {
          return j >= first && j < valid && (!params.causal || j <= offset + i);
        };
        for (int64_t j = 0; j < tk; ++j) {
          if (!sees(j)) continue;
          const float* kj = pk + ((b * tk + j) * heads + h) * dim;
          double dot = 0;
          for (int64_t d = 0; d < dim; ++d) dot += static_cast<double>(qi[d]) * kj[d];
          const double s = params.scale * dot;
          scores[j] = s;
          max_score = any ? std::max(max_score, s) : s;
          any = true;
        }
        float* oi = po + ((b * tq + i) * heads + h) * dim;
        if (!any) {
          for (int64_t d = 0; d < dim; ++d) oi[d] = std::numeric_limits<float>::quiet_NaN();
          continue;
        }
        double total = 0;
        for (int64_t j = 0; j < tk; ++j) {
          scores[j] = sees(j) ? std::exp(scores[j] - max_score) : 0.0;
          total += scores[j];
        }
        for (int64_t d = 0; d < dim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < tk; ++j) {
            acc += scores[j] * pv[((b * tk + j) * heads + h) * dim + d];
          }
          oi[d] = static_cast<float>(acc / total);
        }
      }
    }
  }
}

void ReferenceBackend::rope(const Tensor& x, const Tensor& start_positions, float theta,
                            Tensor& out, const KernelScratch& scratch) {
  if (scratch.planning()) return;
  const int64_t batch = x.size(0);
  const int64_t t = x.size(1);
  const int64_t heads = x.size(2);
  const int64_t dim = x.size(3);
  const int64_t half = dim / 2;
  const std::vector<float> inv_freq = rope_frequencies(theta, dim);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < t; ++i) {
      const int64_t position = start_positions.data<int64_t>()[b] + i;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t at = ((b * t + i) * heads + h) * dim;
        host::rotate_half(x.data<float>() + at, out.data<float>() + at, half, position, inv_freq);
      }
    }
  }
}

void ReferenceBackend::write_rows(Tensor& cache, const Tensor& rows,
                                  const std::vector<int64_t>& offsets,
                                  const KernelScratch& scratch) {
  if (scratch.planning()) return;
  const size_t row = host::row_bytes(cache);
  const int64_t tmax = cache.size(1);
  const int64_t t = rows.size(1);
  auto* dst = static_cast<char*>(cache.raw_data());
  const auto* src = static_cast<const char*>(rows.raw_data());
  for (int64_t b = 0; b < cache.size(0); ++b) {
    for (int64_t i = 0; i < t; ++i) {
      const int64_t at = b * tmax + offsets[static_cast<size_t>(b)] + i;
      std::memcpy(dst + static_cast<size_t>(at) * row, src + static_cast<size_t>(b * t + i) * row,
                  row);
    }
  }
}

void ReferenceBackend::paged_attention(const Tensor& q, const Tensor& k_pages,
                                       const Tensor& v_pages, const Tensor& page_table,
                                       const Tensor& positions, const Tensor& key_starts,
                                       float scale, Tensor& out, const KernelScratch& scratch) {
  assert(q.dtype() == DType::F32 && out.shape() == q.shape());
  const int64_t batch = q.size(0);
  const int64_t tq = q.size(1);
  const int64_t heads = q.size(2);
  const int64_t dim = q.size(3);
  const int64_t page_size = k_pages.size(1);
  const int64_t capacity = page_table.size(1) * page_size;
  const ScratchBuffer score_buffer = scratch.take(static_cast<size_t>(capacity) * sizeof(double));
  if (scratch.planning()) return;
  double* scores = score_buffer.as<double>();
  const auto key = [&](const Tensor& pages, int64_t row, int64_t h) {
    return pages.data<float>() + (row * heads + h) * dim;
  };
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t first = key_starts.defined() ? key_starts.data<int64_t>()[b] : 0;
    for (int64_t i = 0; i < tq; ++i) {
      // Keys from the sequence's key start through the query's own position, those in a page;
      // `rows` their page rows (-1: not seen).
      const int64_t last = std::min(positions.data<int64_t>()[b] + i, capacity - 1);
      std::vector<int64_t> rows;
      for (int64_t p = 0; p <= last; ++p) {
        rows.push_back(p < first ? -1
                                 : host::page_row(page_table, b, p, page_size, k_pages.size(0)));
      }
      for (int64_t h = 0; h < heads; ++h) {
        const float* qi = q.data<float>() + ((b * tq + i) * heads + h) * dim;
        float* oi = out.data<float>() + ((b * tq + i) * heads + h) * dim;
        double max_score = -std::numeric_limits<double>::infinity();
        for (size_t j = 0; j < rows.size(); ++j) {
          if (rows[j] < 0) continue;
          double dot = 0;
          for (int64_t d = 0; d < dim; ++d)
            dot += static_cast<double>(qi[d]) * key(k_pages, rows[j], h)[d];
          scores[j] = scale * dot;
          max_score = std::max(max_score, scores[j]);
        }
        if (max_score == -std::numeric_limits<double>::infinity()) {
          for (int64_t d = 0; d < dim; ++d) oi[d] = std::numeric_limits<float>::quiet_NaN();
          continue;
        }
        double total = 0;
        for (size_t j = 0; j < rows.size(); ++j) {
          scores[j] = rows[j] < 0 ? 0.0 : std::exp(scores[j] - max_score);
          total += scores[j];
        }
        for (int64_t d = 0; d < dim; ++d) {
          double acc = 0;
          for (size_t j = 0; j < rows.size(); ++j) {
            if (rows[j] >= 0) acc += scores[j] * key(v_pages, rows[j], h)[d];
          }
          oi[d] = static_cast<float>(acc / total);
        }
      }
    }
  }
}

void ReferenceBackend::write_pages(Tensor& pages, const Tensor& rows, const Tensor& page_table,
                                   const Tensor& positions, const KernelScratch& scratch) {
  if (scratch.planning()) return;
  host::write_pages(pages, rows, page_table, positions);
}

void ReferenceBackend::zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths,
                                           const KernelScratch& scratch) {
  if (scratch.planning()) return;
  const int64_t t = x.size(1);
  const int64_t c = x.size(2);
  for (int64_t b = 0; b < x.size(0); ++b) {
    for (int64_t row = lengths[static_cast<size_t>(b)]; row < t; ++row) {
      for (int64_t j = 0; j < c; ++j) x.data<float>()[(b * t + row) * c + j] = 0.0f;
    }
  }
}

void ReferenceBackend::length_regulate(const Tensor& x,
                                       const std::vector<std::vector<int64_t>>& durations,
                                       Tensor& out, const KernelScratch& scratch) {
  if (scratch.planning()) return;
  const int64_t batch = x.size(0);
  const int64_t t = x.size(1);
  const int64_t c = x.size(2);
  const int64_t frames = out.size(1);
  for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = 0.0f;
  for (int64_t b = 0; b < batch; ++b) {
    const auto& dur = durations[static_cast<size_t>(b)];
    int64_t frame = 0;
    for (int64_t row = 0; row < t; ++row) {
      for (int64_t r = 0; r < dur[static_cast<size_t>(row)]; ++r, ++frame) {
        assert(frame < frames);
        for (int64_t j = 0; j < c; ++j) {
          out.data<float>()[(b * frames + frame) * c + j] = x.data<float>()[(b * t + row) * c + j];
        }
      }
    }
  }
}

void ReferenceBackend::bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) {
  for (int64_t i = 0; i < x.numel(); ++i) {
    out.data<int64_t>()[i] =
        host::bucket_index(x.data<float>()[i], boundaries.data<float>(), boundaries.numel());
  }
}

void ReferenceBackend::istft(const Tensor& real, const Tensor& imag, const Tensor& window,
                             int64_t hop, Tensor& out, const KernelScratch& scratch) {
  const int64_t batch = real.size(0);
  const int64_t bins = real.size(1);
  const int64_t frames = real.size(2);
  const int64_t n_fft = window.size(0);
  const int64_t total = n_fft + hop * (frames - 1);  // before trimming n_fft/2 from each end
  const int64_t length = out.size(1);
  // cos and sin of 2π·j/n_fft, one frame, the overlap-added samples and the envelope.
  const ScratchBuffer buffer =
      scratch.take(static_cast<size_t>(3 * n_fft + 2 * total) * sizeof(double));
  if (scratch.planning()) return;
  double* cosines = buffer.as<double>();
  double* sines = cosines + n_fft;
  double* frame = sines + n_fft;
  double* sum = frame + n_fft;
  double* envelope = sum + total;
  for (int64_t j = 0; j < n_fft; ++j) {
    const double angle =
        2.0 * std::numbers::pi * static_cast<double>(j) / static_cast<double>(n_fft);
    cosines[j] = std::cos(angle);
    sines[j] = std::sin(angle);
  }
  const float* w = window.data<float>();
  // Bins 1..paired have a conjugate twin above n_fft/2; for even n_fft the last bin (Nyquist)
  // has none, and it and the DC bin count with their real parts only, as an inverse real FFT.
  const int64_t paired = (n_fft - 1) / 2;
  for (int64_t b = 0; b < batch; ++b) {
    std::fill(sum, sum + total, 0.0);
    std::fill(envelope, envelope + total, 0.0);
    for (int64_t f = 0; f < frames; ++f) {
      const auto bin = [&](const Tensor& t, int64_t k) {
        return static_cast<double>(t.data<float>()[(b * bins + k) * frames + f]);
      };
      for (int64_t m = 0; m < n_fft; ++m) {
        double v = bin(real, 0);
        if (n_fft % 2 == 0) v += (m % 2 == 0 ? 1.0 : -1.0) * bin(real, n_fft / 2);
        for (int64_t k = 1; k <= paired; ++k) {
          const int64_t j = k * m % n_fft;
          v += 2.0 * (bin(real, k) * cosines[j] - bin(imag, k) * sines[j]);
        }
        frame[m] = v / static_cast<double>(n_fft);
      }
      for (int64_t m = 0; m < n_fft; ++m) {
        sum[f * hop + m] += frame[m] * w[m];
        envelope[f * hop + m] += static_cast<double>(w[m]) * w[m];
      }
    }
    for (int64_t i = 0; i < length; ++i) {
      const int64_t n = n_fft / 2 + i;
      out.data<float>()[b * length + i] = static_cast<float>(sum[n] / envelope[n]);
    }
  }
}

void ReferenceBackend::sample_tokens(const Tensor& logits, const Tensor& history,
                                     const std::vector<TokenDraw>& draws, Tensor& tokens,
                                     const KernelScratch& scratch) {
  if (scratch.planning()) return;
  for (int64_t r = 0; r < logits.size(0); ++r) {
    tokens.data<int64_t>()[r] = host::sample_row(logits, history, draws[static_cast<size_t>(r)], r);
  }
}

void ReferenceBackend::lstm(const Tensor& x_gates, const Tensor& w_hh, Tensor& h, Tensor& c,
                            const std::vector<int64_t>& lengths, bool reverse, Tensor& out,
                            const KernelScratch& scratch) {
  if (scratch.planning()) return;
  const int64_t batch = x_gates.size(0);
  const int64_t steps = x_gates.size(1);
  const int64_t hidden = w_hh.size(1);
  const float* gates_in = x_gates.data<float>();
  const float* weights = w_hh.data<float>();
  float* ph = h.data<float>();
  float* pc = c.data<float>();
  float* po = out.data<float>();
  std::fill(po, po + out.numel(), 0.0f);
  const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  std::vector<double> gates(static_cast<size_t>(4 * hidden));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = lengths.empty() ? steps : lengths[static_cast<size_t>(b)];
    float* hb = ph + b * hidden;
    float* cb = pc + b * hidden;
    for (int64_t step = 0; step < length; ++step) {
      const int64_t t = reverse ? length - 1 - step : step;
      const float* xg = gates_in + (b * steps + t) * 4 * hidden;
      for (int64_t g = 0; g < 4 * hidden; ++g) {
        double sum = xg[g];
        for (int64_t k = 0; k < hidden; ++k) {
          sum += static_cast<double>(weights[g * hidden + k]) * hb[k];
        }
        gates[static_cast<size_t>(g)] = sum;
      }
      for (int64_t j = 0; j < hidden; ++j) {
        const double in = sigmoid(gates[static_cast<size_t>(j)]);
        const double forget = sigmoid(gates[static_cast<size_t>(hidden + j)]);
        const double cell = std::tanh(gates[static_cast<size_t>(2 * hidden + j)]);
        const double outg = sigmoid(gates[static_cast<size_t>(3 * hidden + j)]);
        const double next_c = forget * cb[j] + in * cell;
        cb[j] = static_cast<float>(next_c);
        hb[j] = static_cast<float>(outg * std::tanh(next_c));
        po[(b * steps + t) * hidden + j] = hb[j];
      }
    }
  }
}

void ReferenceBackend::add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& weight,
                                    float eps, Tensor& sum, Tensor& normed) {
  assert(x.dtype() == DType::F32 && delta.dtype() == DType::F32 && normed.dtype() == DType::F32);
  host::add(x, delta, sum);
  rms_norm(sum, weight, eps, normed);
}

void ReferenceBackend::swiglu(const Tensor& gate_up, Tensor& out) {
  assert(gate_up.dtype() == DType::F32);
  host::swiglu(gate_up, out);
}

void ReferenceBackend::qkv_to_pages(const Tensor& qkv, Tensor& k_pages, Tensor& v_pages,
                                    const Tensor& page_table, const Tensor& positions, float theta,
                                    Tensor& q_out, const KernelScratch& scratch) {
  assert(qkv.dtype() == DType::F32);
  if (scratch.planning()) return;
  host::qkv_to_pages(qkv, k_pages, v_pages, page_table, positions, theta, q_out);
}

}  // namespace voxd
