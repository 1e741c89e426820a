// The fast host backend. Results match the reference backend to float rounding.
//
// Threads: one level of parallelism. OpenBLAS runs single-threaded and every heavy kernel splits
// its work into independent jobs over an OpenMP team: conv1d over (batch, group, time block,
// output-channel chunk), conv_transpose1d over blocks of output steps, linear over row chunks,
// attention over (batch, head); elementwise loops, copies and layer_norm split their rows. On 2
// cores, multi-threaded OpenBLAS calls between OpenMP loops spent a third of the time in thread
// hand-offs (spin, sched_yield).
//
// conv1d with stride 1 (every HiFi-GAN and FastSpeech2 convolution) is a direct AVX2/FMA kernel:
// a job copies its input window x[:, t0 − padding, + block + dilation·(K − 1)] into a zero-padded
// panel that stays in L2 (128 KiB) and sweeps it with register tiles of 4 output channels × 24
// steps that accumulate every tap of every input channel in registers. It runs at 27-31 GFLOP/s
// per core for 32..512 channels and ~20 for 8 channels on the 2-core Zen 1 bench machine, whose
// FMA peak is 38 per core (bench/NOTES.md); OpenBLAS runs these shapes at 16-31. Where the CPU
// has AVX-512, pairs of full tiles run as one tile of 48 steps in 512-bit registers. Strided conv1d
// is im2col + sgemm per job. conv_transpose1d: a job owns a block of output steps, computes wᵀ·x
// (sgemm) for the inputs that reach it and overlap-adds only into its block, so jobs never write
// the same memory.
//
// Depthwise conv1d (one input channel per output channel: ConvNeXt's groups == channels) runs
// its own loop per (batch, channel) row, tap by tap over the row (vectorised by the compiler).
// rope, rms_norm and write_rows are plain loops over rows, sample_tokens the host definition
// (core/token_sampling.h) row by row in parallel; istft runs KISS FFT's inverse real
// transform per frame (its state in the call's scratch) and overlap-adds per output sample.
//
// The kernels need AVX2 and FMA (x86-64-v3, the Release build's target); the constructor throws
// voxd::Error on an older CPU.
//
// Scratch memory (panels, packed weights, columns, attention scores; one slice per thread) comes
// from the call's KernelScratch (the context's allocator) for the duration of one kernel call,
// never kept in the backend: that keeps the backend stateless, so several threads may call one
// CpuBackend at once, and a workspace plan counts it (it depends on threads()). Panels and
// columns cover blocks of output steps, so scratch stays a few MiB even for 200k-sample vocoder
// signals. OpenBLAS's own buffers are not counted.
#pragma once

#include <string>

#include "core/backend.h"

namespace voxd {

class CpuBackend final : public Backend {
 public:
  // threads: OpenMP threads for the kernels (0 = all cores). Sets OpenBLAS, whose thread count is
  // process-wide, to one thread. allow_avx512 false keeps the convolution on its AVX2 tiles where
  // the CPU has AVX-512 too (the tests run both).
  explicit CpuBackend(int threads = 0, bool allow_avx512 = true);

  // Returns "cpu".
  std::string name() const override { return "cpu"; }
  // Always the host.
  Device device() const override { return Device::cpu(); }
  // Threads this backend runs its kernels on.
  int threads() const { return threads_; }
  // Whether conv1d runs its 512-bit tiles (the CPU has AVX-512 and the constructor allowed it).
  bool uses_avx512() const { return avx512_; }

  // Any strides and any dtype in src; dst contiguous on the host.
  void copy(const Tensor& src, Tensor& dst, const KernelScratch& scratch) override;
  // Any dtype in dst (the value is converted as convert_elements does).
  void fill(Tensor& dst, float value) override;
  // Every op, on F32 operands.
  bool supports(OpKind op, DType dtype) const override;
  // Kernels as documented in core/backend.h.
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
  // Parallel over (sequence, head): each query's scores in F32 against its keys' page rows.
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

 private:
  // conv1d with one input channel per output channel (cin/groups == cout/groups == 1).
  void depthwise_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                        const Conv1dParams& params, const KernelScratch& scratch) const;

  int threads_;
  bool avx512_;
};

}  // namespace voxd
