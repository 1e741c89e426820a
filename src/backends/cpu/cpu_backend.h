// The fast host backend: OpenBLAS sgemm for linear, convolutions and attention; OpenMP loops for
// elementwise ops, copies and layer_norm. Results match the reference backend to float rounding.
//
// conv1d with stride 1 (every HiFi-GAN convolution) is a sum over kernel taps of gemms on shifted
// views of x: measured on 2 cores for HiFi-GAN shapes (channels 32..512, K 3..11, dilation 1..5,
// T up to 200k) it ran at plain-gemm speed, 1.4x (512 channels) to 20x (32 channels) faster than
// im2col + gemm, which only strided convolutions use. conv_transpose1d is gemm + col2im.
//
// Threads: gemms use OpenBLAS's threads; loops between gemms (im2col, col2im, softmax) run on the
// calling thread, because an OpenMP team there would spin against the OpenBLAS threads.
//
// Scratch memory (im2col / col2im columns, attention scores) is allocated from host_allocator()
// for the duration of one kernel call and freed before it returns, never kept in the backend:
// that keeps the backend stateless, so several threads may call one CpuBackend at once. Columns
// are built for blocks of output time steps, so scratch stays a few MiB even for 200k-sample
// vocoder signals.
#pragma once

#include <string>

#include "core/backend.h"

namespace voxd {

class CpuBackend final : public Backend {
 public:
  // threads: worker threads for OpenMP loops and OpenBLAS (0 = all cores). OpenBLAS's thread
  // count is process-wide, so the last CpuBackend constructed sets it for all of them.
  explicit CpuBackend(int threads = 0);

  // Returns "cpu".
  std::string name() const override { return "cpu"; }
  // Always the host.
  Device device() const override { return Device::cpu(); }
  // Threads this backend runs its loops and gemms on.
  int threads() const { return threads_; }

  // Any strides and any dtype in src; dst contiguous on the host.
  void copy(const Tensor& src, Tensor& dst) override;
  // Any dtype in dst (the value is converted as convert_elements does).
  void fill(Tensor& dst, float value) override;
  // Kernels as documented in core/backend.h; floating tensors must be F32.
  void unary(const Tensor& x, Tensor& out, UnaryOp op, float alpha) override;
  void binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryOp op) override;
  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) override;
  void conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
              const Conv1dParams& params) override;
  void conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                        const ConvTranspose1dParams& params) override;
  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                  Tensor& out) override;
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const AttentionParams& params) override;
  void zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths) override;
  void length_regulate(const Tensor& x, const std::vector<std::vector<int64_t>>& durations,
                       Tensor& out) override;
  void bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) override;

 private:
  int threads_;
};

}  // namespace voxd
