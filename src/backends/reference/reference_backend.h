// The reference backend: plain loops with double accumulation over F32 tensors on the host. It
// defines what every kernel in core/backend.h computes; faster backends are tested against it,
// so it is written to be obviously correct, not fast.
#pragma once

#include <string>

#include "core/backend.h"

namespace voxd {

class ReferenceBackend final : public Backend {
 public:
  // Returns "reference".
  std::string name() const override { return "reference"; }
  // Always the host.
  Device device() const override { return Device::cpu(); }

  // Any strides and any dtype in src; dst contiguous on the host.
  void copy(const Tensor& src, Tensor& dst, const KernelScratch& scratch) override;
  // Any dtype in dst (the value is converted as convert_elements does).
  void fill(Tensor& dst, float value) override;
  // Kernels as documented in core/backend.h; floating tensors must be F32. conv_transpose1d and
  // attention sum in double scratch; the others take none.
  void unary(const Tensor& x, Tensor& out, UnaryOp op, float alpha) override;
  void binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryOp op) override;
  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
              const KernelScratch& scratch) override;
  void conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
              const Conv1dParams& params, const KernelScratch& scratch) override;
  void conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                        const ConvTranspose1dParams& params, const KernelScratch& scratch) override;
  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                  Tensor& out) override;
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out,
                 const KernelScratch& scratch) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const AttentionParams& params, const KernelScratch& scratch) override;
  void zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths,
                           const KernelScratch& scratch) override;
  void length_regulate(const Tensor& x, const std::vector<std::vector<int64_t>>& durations,
                       Tensor& out, const KernelScratch& scratch) override;
  void bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) override;
};

}  // namespace voxd
