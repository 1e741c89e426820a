#include "core/backend.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace voxd {

std::string_view op_name(OpKind op) {
  switch (op) {
    case OpKind::Relu:
      return "relu";
    case OpKind::LeakyRelu:
      return "leaky_relu";
    case OpKind::Tanh:
      return "tanh";
    case OpKind::Exp:
      return "exp";
    case OpKind::Scale:
      return "scale";
    case OpKind::Silu:
      return "silu";
    case OpKind::Gelu:
      return "gelu";
    case OpKind::Sin:
      return "sin";
    case OpKind::Cos:
      return "cos";
    case OpKind::ClampMax:
      return "clamp_max";
    case OpKind::Add:
      return "add";
    case OpKind::Mul:
      return "mul";
    case OpKind::Linear:
      return "linear";
    case OpKind::Conv1d:
      return "conv1d";
    case OpKind::ConvTranspose1d:
      return "conv_transpose1d";
    case OpKind::LayerNorm:
      return "layer_norm";
    case OpKind::RmsNorm:
      return "rms_norm";
    case OpKind::Embedding:
      return "embedding";
    case OpKind::Attention:
      return "attention";
    case OpKind::Rope:
      return "rope";
    case OpKind::WriteRows:
      return "write_rows";
    case OpKind::ZeroBeyondLengths:
      return "zero_beyond_lengths";
    case OpKind::LengthRegulate:
      return "length_regulate";
    case OpKind::Bucketize:
      return "bucketize";
    case OpKind::PagedAttention:
      return "paged_attention";
    case OpKind::WritePages:
      return "write_pages";
    case OpKind::Istft:
      return "istft";
    case OpKind::SampleTokens:
      return "sample_tokens";
    case OpKind::Lstm:
      return "lstm";
    case OpKind::AddRmsNorm:
      return "add_rms_norm";
    case OpKind::AddLayerNorm:
      return "add_layer_norm";
    case OpKind::Swiglu:
      return "swiglu";
    case OpKind::QkvToPages:
      return "qkv_to_pages";
    case OpKind::GatherRows:
      return "gather_rows";
  }
  return "?";
}

OpKind op_kind(UnaryOp op) {
  switch (op) {
    case UnaryOp::Relu:
      return OpKind::Relu;
    case UnaryOp::LeakyRelu:
      return OpKind::LeakyRelu;
    case UnaryOp::Tanh:
      return OpKind::Tanh;
    case UnaryOp::Exp:
      return OpKind::Exp;
    case UnaryOp::Scale:
      return OpKind::Scale;
    case UnaryOp::Silu:
      return OpKind::Silu;
    case UnaryOp::Gelu:
      return OpKind::Gelu;
    case UnaryOp::Sin:
      return OpKind::Sin;
    case UnaryOp::Cos:
      return OpKind::Cos;
    case UnaryOp::ClampMax:
      return OpKind::ClampMax;
  }
  return OpKind::Relu;
}

OpKind op_kind(BinaryOp op) {
  return op == BinaryOp::Add ? OpKind::Add : OpKind::Mul;
}

std::vector<float> rope_frequencies(float theta, int64_t dim) {
  std::vector<float> inv_freq(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv_freq[i] = 1.0f / std::pow(theta, exponent);
  }
  return inv_freq;
}

bool Backend::supports(OpKind op, DType dtype) const {
  // The ops of the first interface, listed so that an OpKind added later is unsupported here.
  switch (op) {
    case OpKind::Relu:
    case OpKind::LeakyRelu:
    case OpKind::Tanh:
    case OpKind::Exp:
    case OpKind::Scale:
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::Linear:
    case OpKind::Conv1d:
    case OpKind::ConvTranspose1d:
    case OpKind::LayerNorm:
    case OpKind::Embedding:
    case OpKind::Attention:
    case OpKind::ZeroBeyondLengths:
    case OpKind::LengthRegulate:
      return is_floating(dtype);
    case OpKind::Bucketize:
      return dtype == DType::F32;
    default:
      return false;
  }
}

void Backend::not_implemented(const char* kernel) const {
  throw Error(name() + ": " + kernel +
              " is not implemented by this backend (core/ops.h calls a kernel only where "
              "supports() says so)");
}

void Backend::fused_conv1d(const Tensor& /*x*/, const Tensor& /*weight*/, const Tensor& /*bias*/,
                           const ConvFusion& /*fusion*/, Tensor& /*out*/,
                           const Conv1dParams& /*params*/, const KernelScratch& /*scratch*/) {
  throw Error(name() + ": fused_conv1d called although fuses_conv1d() is false");
}

void Backend::conv1d_rows(const Tensor& /*x*/, const Tensor& /*weight*/, const Tensor& /*bias*/,
                          Tensor& /*out*/, const Conv1dParams& /*params*/,
                          const Tensor* /*arranged*/, bool /*relu*/,
                          const KernelScratch& /*scratch*/) {
  throw Error(name() + ": conv1d_rows called although runs_conv1d_rows() is false");
}

void Backend::arrange_conv1d_rows_weight(const Tensor& /*weight*/, const Conv1dParams& /*params*/,
                                         Tensor& /*arranged*/, const KernelScratch& /*scratch*/) {
  throw Error(name() + ": arrange_conv1d_rows_weight called although it arranges no weights");
}

void Backend::conv_transpose1d_rows(const Tensor& /*x*/, const Tensor& /*weight*/,
                                    const Tensor& /*bias*/, Tensor& /*out*/,
                                    const ConvTranspose1dParams& /*params*/,
                                    const Tensor* /*arranged*/, const KernelScratch& /*scratch*/) {
  throw Error(name() +
              ": conv_transpose1d_rows called although runs_conv_transpose1d_rows() is false");
}

void Backend::arrange_conv_transpose1d_weight(const Tensor& /*weight*/, const Tensor& /*bias*/,
                                              const ConvTranspose1dParams& /*params*/,
                                              Tensor& /*arranged*/,
                                              const KernelScratch& /*scratch*/) {
  throw Error(name() + ": arrange_conv_transpose1d_weight called although it arranges no weights");
}

void Backend::fused_conv1d_pair(const Tensor& /*x*/, const Conv1dPair& /*pair*/, Tensor& /*out*/,
                                const KernelScratch& /*scratch*/) {
  throw Error(name() + ": fused_conv1d_pair called although fuses_conv1d_pair() is false");
}

void Backend::arrange_conv1d_weight(const Tensor& /*weight*/, Tensor& /*arranged*/,
                                    const KernelScratch& /*scratch*/) {
  throw Error(name() + ": arrange_conv1d_weight called although it arranges no weights");
}

void Backend::fused_conv1d_pair_rows(const Tensor& /*x*/, const Conv1dPair& /*pair*/,
                                     Tensor& /*out*/, const KernelScratch& /*scratch*/) {
  throw Error(name() +
              ": fused_conv1d_pair_rows called although fuses_conv1d_pair_rows() is false");
}

void Backend::rms_norm(const Tensor& /*x*/, const Tensor& /*weight*/, float /*eps*/,
                       Tensor& /*out*/) {
  not_implemented("rms_norm");
}

void Backend::rope(const Tensor& /*x*/, const Tensor& /*start_positions*/, float /*theta*/,
                   Tensor& /*out*/, const KernelScratch& /*scratch*/) {
  not_implemented("rope");
}

void Backend::zero_beyond_device_lengths(Tensor& /*x*/, const Tensor& /*lengths*/,
                                         const KernelScratch& /*scratch*/) {
  not_implemented("zero_beyond_lengths with lengths on the device");
}

void Backend::gather_rows(const Tensor& /*table*/, const Tensor& /*rows*/, Tensor& /*out*/,
                          const KernelScratch& /*scratch*/) {
  not_implemented("gather_rows");
}

void Backend::write_rows(Tensor& /*cache*/, const Tensor& /*rows*/,
                         const std::vector<int64_t>& /*offsets*/,
                         const KernelScratch& /*scratch*/) {
  not_implemented("write_rows");
}

void Backend::paged_attention(const Tensor& /*q*/, const Tensor& /*k_pages*/,
                              const Tensor& /*v_pages*/, const Tensor& /*page_table*/,
                              const Tensor& /*positions*/, const Tensor& /*key_starts*/,
                              float /*scale*/, Tensor& /*out*/, const KernelScratch& /*scratch*/) {
  not_implemented("paged_attention");
}

void Backend::write_pages(Tensor& /*pages*/, const Tensor& /*rows*/, const Tensor& /*page_table*/,
                          const Tensor& /*positions*/, const KernelScratch& /*scratch*/) {
  not_implemented("write_pages");
}

void Backend::istft(const Tensor& /*real*/, const Tensor& /*imag*/, const Tensor& /*window*/,
                    int64_t /*hop*/, Tensor& /*out*/, const KernelScratch& /*scratch*/) {
  not_implemented("istft");
}

void Backend::sample_tokens(const Tensor& /*logits*/, const Tensor& /*history*/,
                            const std::vector<TokenDraw>& /*draws*/, Tensor& /*tokens*/,
                            const KernelScratch& /*scratch*/) {
  not_implemented("sample_tokens");
}

void Backend::lstm(const Tensor& /*x_gates*/, const Tensor& /*w_hh*/, Tensor& /*h*/, Tensor& /*c*/,
                   const std::vector<int64_t>& /*lengths*/, bool /*reverse*/, Tensor& /*out*/,
                   const KernelScratch& /*scratch*/) {
  not_implemented("lstm");
}

void Backend::add_layer_norm(const Tensor& /*x*/, const Tensor& /*residual*/,
                             const Tensor& /*gamma*/, const Tensor& /*beta*/, float /*eps*/,
                             Tensor& /*out*/) {
  not_implemented("add_layer_norm");
}

void Backend::add_rms_norm(const Tensor& /*x*/, const Tensor& /*delta*/, const Tensor& /*weight*/,
                           float /*eps*/, Tensor& /*sum*/, Tensor& /*normed*/) {
  not_implemented("add_rms_norm");
}

void Backend::swiglu(const Tensor& /*gate_up*/, Tensor& /*out*/) {
  not_implemented("swiglu");
}

void Backend::qkv_to_pages(const Tensor& /*qkv*/, Tensor& /*k_pages*/, Tensor& /*v_pages*/,
                           const Tensor& /*page_table*/, const Tensor& /*positions*/,
                           float /*theta*/, Tensor& /*q_out*/, const KernelScratch& /*scratch*/) {
  not_implemented("qkv_to_pages");
}

}  // namespace voxd
