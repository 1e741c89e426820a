#include "backends/reference/reference_backend.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/host_util.h"
#include "core/error.h"

namespace voxd {

using host::require_f32;
using host::require_shape;

void ReferenceBackend::copy(const Tensor& src, Tensor& dst, const KernelScratch& scratch) {
  if (scratch.planning()) return;
  host::strided_copy(src, dst);
}

void ReferenceBackend::fill(Tensor& dst, float value) {
  host::fill(dst, value);
}

void ReferenceBackend::unary(const Tensor& x, Tensor& out, UnaryOp op, float alpha) {
  require_f32("unary", "x", x);
  require_f32("unary", "out", out);
  require_shape("unary", "out", out, x.shape());
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
    }
    o[i] = static_cast<float>(r);
  }
}

void ReferenceBackend::binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryOp op) {
  require_f32("binary", "a", a);
  require_f32("binary", "b", b);
  require_f32("binary", "out", out);
  require_shape("binary", "out", out, a.shape());
  if (b.dim() != a.dim()) throw Error("binary: b " + b.shape_string() + " rank differs from a");
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
  require_f32("linear", "x", x);
  require_f32("linear", "weight", weight);
  if (bias.defined()) require_f32("linear", "bias", bias);
  require_f32("linear", "out", out);
  const int64_t n = x.size(0);
  const int64_t in = x.size(1);
  const int64_t features = weight.size(0);
  require_shape("linear", "out", out, {n, features});
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
  if (scratch.planning()) return;
  const float* px = x.data<float>();
  const float* pw = weight.data<float>();
  float* po = out.data<float>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t co = 0; co < cout; ++co) {
      const int64_t group = co / cout_g;
      for (int64_t t = 0; t < t_out; ++t) {
        double acc = bias.defined() ? bias.data<float>()[co] : 0.0;
        for (int64_t ci = 0; ci < cin_g; ++ci) {
          const int64_t channel = group * cin_g + ci;
          for (int64_t k = 0; k < k_size; ++k) {
            const int64_t pos = t * p.stride - p.padding + k * p.dilation;
            if (pos < 0 || pos >= t_in) continue;
            acc += static_cast<double>(pw[(co * cin_g + ci) * k_size + k]) *
                   px[(b * cin + channel) * t_in + pos];
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
  require_f32("layer_norm", "x", x);
  require_f32("layer_norm", "gamma", gamma);
  require_f32("layer_norm", "beta", beta);
  require_f32("layer_norm", "out", out);
  require_shape("layer_norm", "out", out, x.shape());
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

void ReferenceBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out,
                                 const KernelScratch& scratch) {
  host::check_embedding(ids, table, out);
  if (scratch.planning()) return;
  const int64_t n = ids.numel();
  const int64_t vocab = table.size(0);
  const int64_t c = table.size(1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = host::load_id(ids, i);
    if (id < 0 || id >= vocab) {
      throw Error("embedding: id " + std::to_string(id) + " at position " + std::to_string(i) +
                  " is outside the table's " + std::to_string(vocab) + " rows");
    }
    for (int64_t j = 0; j < c; ++j) out.data<float>()[i * c + j] = table.data<float>()[id * c + j];
  }
}

void ReferenceBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                                 const AttentionParams& params, const KernelScratch& scratch) {
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
    const int64_t offset = params.query_offsets.empty() ? 0 : params.query_offsets[b];
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < tq; ++i) {
        const float* qi = pq + ((b * tq + i) * heads + h) * dim;
        bool any = false;
        double max_score = -std::numeric_limits<double>::infinity();
        const auto sees = [&](int64_t j) {
          return j < valid && (!params.causal || j <= offset + i);
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

void ReferenceBackend::zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths,
                                           const KernelScratch& scratch) {
  require_f32("zero_beyond_lengths", "x", x);
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
  host::check_length_regulate(x, durations, out);
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
        if (frame >= frames) host::throw_durations_exceed(b, frames);
        for (int64_t j = 0; j < c; ++j) {
          out.data<float>()[(b * frames + frame) * c + j] = x.data<float>()[(b * t + row) * c + j];
        }
      }
    }
  }
}

void ReferenceBackend::bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) {
  host::check_bucketize(x, boundaries, out);
  for (int64_t i = 0; i < x.numel(); ++i) {
    out.data<int64_t>()[i] =
        host::bucket_index(x.data<float>()[i], boundaries.data<float>(), boundaries.numel());
  }
}

}  // namespace voxd
