// The reference backend: plain loops with double accumulation over F32 tensors on the host. It
// defines what every kernel in core/backend.h computes; faster backends are tested against it
// (tests/backends/op_cases.cpp), so it is written to be obviously correct, not fast, and
// independent of the libraries the fast backends use (its istft is a direct inverse DFT in
// double, not an FFT). Every op lands here first. A large conv1d computes its output rows on
// OpenMP's threads, each element the same sum as on one thread.
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
  // Every op, on F32 operands.
  bool supports(OpKind op, DType dtype) const override;

  // Any strides and any dtype in src; dst contiguous on the host.
  void copy(const Tensor& src, Tensor& dst, const KernelScratch& scratch) override;
  // Any dtype in dst (the value is converted as convert_elements does).
  void fill(Tensor& dst, float value) override;
  // Kernels as documented in core/backend.h. conv_transpose1d, attention and istft sum in
  // double scratch; the others take none.
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
  void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                      const Tensor& beta, float eps, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override;
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out,
                 const KernelScratch& scratch) override;
  void gather_rows(const Tensor& table, const Tensor& rows, Tensor& out,
                   const KernelScratch& scratch) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const AttentionParams& params, const KernelScratch& scratch) override;
  void rope(const Tensor& x, const Tensor& start_positions, float theta, Tensor& out,
            const KernelScratch& scratch) override;
  void write_rows(Tensor& cache, const Tensor& rows, const std::vector<int64_t>& offsets,
                  const KernelScratch& scratch) override;
  void paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages,
                       const Tensor& page_table, const Tensor& positions, const Tensor& key_starts,
                       float scale, Tensor& out, const KernelScratch& scratch) override;
  void write_pages(Tensor& pages, const Tensor& rows, const Tensor& page_table,
                   const Tensor& positions, const KernelScratch& scratch) override;
  void zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths,
                           const KernelScratch& scratch) override;
  void length_regulate(const Tensor& x, const std::vector<std::vector<int64_t>>& durations,
                       Tensor& out, const KernelScratch& scratch) override;
  void bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) override;
  void istft(const Tensor& real, const Tensor& imag, const Tensor& window, int64_t hop, Tensor& out,
             const KernelScratch& scratch) override;
  void sample_tokens(const Tensor& logits, const Tensor& history,
                     const std::vector<TokenDraw>& draws, Tensor& tokens,
                     const KernelScratch& scratch) override;
  void lstm(const Tensor& x_gates, const Tensor& w_hh, Tensor& h, Tensor& c,
            const std::vector<int64_t>& lengths, bool reverse, Tensor& out,
            const KernelScratch& scratch) override;
  void add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& weight, float eps,
                    Tensor& sum, Tensor& normed) override;
  void swiglu(const Tensor& gate_up, Tensor& out) override;
  void qkv_to_pages(const Tensor& qkv, Tensor& k_pages, Tensor& v_pages, const Tensor& page_table,
                    const Tensor& positions, float theta, Tensor& q_out,
                    const KernelScratch& scratch) override;
};

}  // namespace voxd
