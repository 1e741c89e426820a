// The CUDA backend: every Backend kernel on one GPU, for F32, F16 and BF16 tensors (all floating
// operands of a call share one dtype; math accumulates in F32). Work is queued on the backend's
// own stream and runs asynchronously; synchronize() waits for it, and copies to the host wait
// by themselves. Linear layers are cuBLAS gemms (cuBLASLt with the bias added in the epilogue);
// F16/BF16 conv1d with stride 1 over long sequences runs as an implicit GEMM on tensor cores
// (implicit_gemm_conv.h), the other convolutions as cuBLAS gemms over im2col / col2im columns,
// pointwise ones as one gemm. The environment variable VOXD_CUDA_CONV, read when a backend is made,
// selects "cudnn" (cudnn_convolutions.h) or "im2col" for every convolution instead, to compare.
// Attention of a few queries (a decode step) is one kernel over rows of keys; of many queries in
// F16/BF16 with heads of 32, 64 or 128, the flash kernel (flash_attention.h); otherwise two
// batched gemms around a masked softmax. The other ops are the plain kernels in kernels.cu.
//
// Precision policy for F16 and BF16 (what this backend controls: the inside of one op).
//   - Weights and activations are stored in the tensor's dtype; every op reads its half inputs,
//     computes in F32 and rounds its output once: gemms and convolutions (linear, conv1d,
//     conv_transpose1d) accumulate in F32 (CUBLAS_COMPUTE_32F; cuDNN's F32 compute type) onto the
//     bias, so x·Wᵀ + b is rounded once; layer norm statistics, attention scores and the softmax
//     are F32, the attention probabilities are rounded to the dtype once before they weight v
//     (in F32 accumulation); bucketize takes F32 only (models convert the prediction).
//   - Not covered here: the rounding *between* ops, i.e. the dtype the model keeps its residual
//     stream, layer-norm outputs and small predictor heads in. With every activation in BF16
//     (8-bit mantissa) those roundings add up to ~1e-2 relative error over HiFiGAN v1 and to
//     pitch/energy predictions whose BF16 spacing (0.0625 at 9) exceeds the fixtures' 2e-3 margin
//     to a bucket boundary. An autocast-style policy (gemm weights and inputs in BF16, outputs,
//     residual stream, norms, softmax and predictor heads in F32) needs ops::linear/conv1d/
//     conv_transpose1d to accept an F32 x with half weights and the models to keep activations
//     in F32; that is core/ops and models work, not this backend's.
//
// Scratch memory (cuDNN's and cuBLAS's workspaces, im2col columns, attention scores and
// probabilities, uploaded lengths, ids and rows, cuFFT's work areas) comes from the call's
// KernelScratch, i.e. the context's allocator, for the duration of one call, so a workspace plan
// counts it; cuBLAS is handed its workspace with cublasSetWorkspace before every gemm and never
// allocates its own. Small host arrays (lengths, ids, frame rows) and host tensors reach the device
// through a ring of pinned host memory with cudaMemcpyAsync, without waiting for the stream; copies
// to the host wait. One thread at a time may use a CudaBackend.
//
// capture() records work as a CUDA graph (stream capture on the backend's stream, thread-local
// mode, so a cudaMalloc or synchronisation inside fails instead of corrupting the recording).
// Uploads of host data and copies to the host refuse to run while recording: the graph would
// read the staging ring after later uploads reused it, and a copy to the host waits.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace voxd {
namespace cuda {
struct SequenceValues;
struct RopeFrequencies;
struct PageTable;
}  // namespace cuda

class CudaBackend final : public Backend {
 public:
  // cuBLAS workspace each linear, conv1d and conv_transpose1d call takes from its scratch:
  // NVIDIA's recommended size for Hopper.
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
  // Marks a backend made for planning only.
  struct PlanOnly {};
  // How conv1d and conv_transpose1d run; see VOXD_CUDA_CONV in the file comment.
  enum class ConvolutionPath { kAuto, kWgmma, kCudnn, kIm2col };

  // Opens device `index` with a stream of `priority` (kNormal: the device's least, as
  // cudaStreamCreate's; kFirst: its greatest); throws voxd::InputError when there is no such CUDA
  // device ("no CUDA device: cudaGetDeviceCount returned ...").
  explicit CudaBackend(int index = 0, QueuePriority priority = QueuePriority::kNormal);
  // A backend for device `index` that opens nothing, so it works on machines without a GPU: its
  // kernels take part in planning passes (KernelScratch::planning()) and throw voxd::Error
  // when asked to run.
  CudaBackend(int index, PlanOnly);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // "cuda:<index>".
  std::string name() const override;
  Device device() const override { return Device::cuda(index_); }
  // Every op on F32, F16 and BF16 operands, except bucketize, istft and sample_tokens: F32 only.
  bool supports(OpKind op, DType dtype) const override;
  // Waits for the stream; throws voxd::Error for a failure in queued work.
  void synchronize() override;
  double device_wait_seconds() const override;
  void profile_host_time(bool on) override;
  std::vector<OpHostTime> take_host_profile() override;
  // True unless PlanOnly.
  bool can_capture() const override { return !plan_only(); }
  // cuBLAS and cuBLASLt load each kernel the first time it runs (~3 ms on an H200).
  bool first_runs_cost_more() const override { return true; }
  // Records `work` as a CUDA graph; see Backend::capture. The result replays on this backend's
  // stream and must go before the backend. Throws voxd::Error (naming the op that could not be
  // recorded) on a PlanOnly backend or when the work is not capturable; the stream then records
  // nothing any more and the backend stays usable.
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& work) override;
  // True for a PlanOnly backend.
  bool plan_only() const { return handles_ == nullptr; }
  // The stream's CUDA priority (lower numbers go first); 0 on a PlanOnly backend.
  int stream_priority() const;

  // Any strides and dtype in src, on this device or the host; dst contiguous, on this device or
  // the host. A copy to the host returns when the data is there; a copy from the host returns
  // once the data is staged.
  void copy(const Tensor& src, Tensor& dst, const KernelScratch& scratch) override;
  void fill(Tensor& dst, float value) override;
  // Kernels as documented in core/backend.h. Embedding ids may be on the host or this device.
  void unary(const Tensor& x, Tensor& out, UnaryOp op, float alpha) override;
  void binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryOp op) override;
  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
              const KernelScratch& scratch) override;
  void conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
              const Conv1dParams& params, const KernelScratch& scratch) override;
  // True for F16/BF16 convolutions with stride 1 over long sequences or enough of them to fill
  // the device, or of any length with the weight arranged (the implicit GEMM), x and out of the
  // weights' dtype or F32.
  bool fuses_conv1d(const Tensor& x, const Tensor& weight, DType out_dtype,
                    const Conv1dParams& params, bool weight_arranged) const override;
  void fused_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const ConvFusion& fusion, Tensor& out, const Conv1dParams& params,
                    const KernelScratch& scratch) override;
  // A transposed convolution whose output is stride times its input, F16/BF16, as one stride-1
  // convolution of its phases on the mma.sync kernel (implicit_gemm_conv.h, Polyphase).
  bool runs_conv_transpose1d_rows(const Tensor& x, const Tensor& weight,
                                  const ConvTranspose1dParams& params) const override;
  void conv_transpose1d_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                             const ConvTranspose1dParams& params, const Tensor* arranged,
                             const KernelScratch& scratch) override;
  // The phase weights and the bias once per phase (implicit_gemm_polyphase_elements) where
  // conv_transpose1d_rows runs the weight and params on the implicit GEMM, else 0.
  int64_t arranged_conv_transpose1d_elements(const Tensor& weight,
                                             const ConvTranspose1dParams& params) const override;
  void arrange_conv_transpose1d_weight(const Tensor& weight, const Tensor& bias,
                                       const ConvTranspose1dParams& params, Tensor& arranged,
                                       const KernelScratch& scratch) override;
  // True where the implicit GEMM runs both convolutions (F16/BF16, stride 1, the intermediate in
  // the weights' dtype), at any length, and the path is the default (mma.sync).
  bool fuses_conv1d_pair(const Tensor& x, const Conv1dPair& pair, DType out_dtype) const override;
  bool fuses_conv1d_pair_rows(const Tensor& x, const Conv1dPair& pair,
                              DType out_dtype) const override;
  // The mma.sync kernel's order (implicit_gemm_conv.h) for F16 and BF16 weights on the default
  // path, which runs the fused pairs.
  int64_t arranged_conv1d_weight_elements(const Tensor& weight) const override;
  void arrange_conv1d_weight(const Tensor& weight, Tensor& arranged,
                             const KernelScratch& scratch) override;
  void fused_conv1d_pair_rows(const Tensor& x, const Conv1dPair& pair, Tensor& out,
                              const KernelScratch& scratch) override;
  void fused_conv1d_pair(const Tensor& x, const Conv1dPair& pair, Tensor& out,
                         const KernelScratch& scratch) override;
  // True for stride 1 without groups: time-major columns (im2col_rows: each output row's taps
  // as whole input rows, the taps first) and one gemm adding the bias, a chunk of rows at a
  // time; a few output channels through their own kernel.
  bool runs_conv1d_rows(const Tensor& x, const Tensor& weight,
                        const Conv1dParams& params) const override;
  void conv1d_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                   const Conv1dParams& params, const Tensor* arranged, bool relu,
                   const KernelScratch& scratch) override;
  // The weight with its taps first ([Cout, K, Cin], as the columns are) where the columns' gemm
  // runs it and K > 1.
  int64_t arranged_conv1d_rows_elements(const Tensor& weight,
                                        const Conv1dParams& params) const override;
  void arrange_conv1d_rows_weight(const Tensor& weight, const Conv1dParams& params,
                                  Tensor& arranged, const KernelScratch& scratch) override;
  // That order is the weight's dimensions permuted ([Cout, K, Cin]).
  std::vector<int64_t> arranged_conv1d_rows_order(const Tensor& weight,
                                                  const Conv1dParams& params) const override;
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
  // The gemms read only the keys below the longest length any query sees (a decode step over a
  // KV cache of Tmax rows costs its filled rows, not Tmax).
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const AttentionParams& params, const KernelScratch& scratch) override;
  void rope(const Tensor& x, const Tensor& start_positions, float theta, Tensor& out,
            const KernelScratch& scratch) override;
  void write_rows(Tensor& cache, const Tensor& rows, const std::vector<int64_t>& offsets,
                  const KernelScratch& scratch) override;
  // One launch for every sequence, head and query; the page table and positions are read where
  // they are when on this device (so the launch can be captured), uploaded when on the host.
  void paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages,
                       const Tensor& page_table, const Tensor& positions, const Tensor& key_starts,
                       float scale, Tensor& out, const KernelScratch& scratch) override;
  void write_pages(Tensor& pages, const Tensor& rows, const Tensor& page_table,
                   const Tensor& positions, const KernelScratch& scratch) override;
  void zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths,
                           const KernelScratch& scratch) override;
  void zero_beyond_device_lengths(Tensor& x, const Tensor& lengths,
                                  const KernelScratch& scratch) override;
  void length_regulate(const Tensor& x, const std::vector<std::vector<int64_t>>& durations,
                       Tensor& out, const KernelScratch& scratch) override;
  void bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) override;
  // cuFFT's inverse real transform over chunks of whole batch items (as many as fit 4096
  // frames, at least one), between a kernel that packs the bins and one that overlap-adds and
  // normalises. cuFFT plans are cached by shape (32 at most; the first call of a shape makes its
  // plan, so it must not be recorded by capture()); their work areas come from the call's
  // scratch (cufftSetAutoAllocation(0), cufftSetWorkArea), so a planning pass counts them:
  // exactly on a backend with a device (the plan reports its size), on a PlanOnly backend as one
  // complex value per transformed point (cuFFT sizes work areas only with a device; the GPU test
  // checks that this is at least what cuFFT asks for).
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
  struct Handles;  // stream, cuBLAS handle and staging ring (CUDA types stay out of this header)
  class HostProfile;

  // An op's call while host time is profiled: counted to it when the scope ends.
  class [[nodiscard]] OpScope {
   public:
    OpScope(HostProfile* profile, const char* op);
    ~OpScope();
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

   private:
    HostProfile* profile_;  // null: not profiled
    const char* op_;
    bool outermost_;  // not inside another op's call: counted
    std::chrono::steady_clock::time_point start_;
  };

  // Makes this backend's device current for `op`; throws for a PlanOnly backend.
  void make_current(const char* op) const;
  // make_current(op) for an op's call, which the result times while host time is profiled.
  OpScope open(const char* op) const;
  // `bytes` of `scratch` (on this device: ops.h checks the context's allocator).
  ScratchBuffer take(const KernelScratch& scratch, size_t bytes) const;
  // The pair (Conv1dPair) through the mma.sync kernel, over channel-major x [B, C, T] into out
  // [B, Cout, T], or with `rows` over time-major x [B, T, C] into out [B, T, Cout].
  void run_conv1d_pair(const Tensor& x, const Conv1dPair& pair, Tensor& out, bool rows,
                       const KernelScratch& scratch);
  // Queues the copy of `bytes` host bytes to device memory `dst`; `data` may go once it returns.
  void upload(void* dst, const void* data, size_t bytes, const char* op) const;
  // Per-sequence `values` for a kernel launch: by value when they fit in it, else uploaded into
  // `buffer` (sequence_values_bytes(values.size()) of scratch).
  cuda::SequenceValues sequence_values(const std::vector<int64_t>& values,
                                       const ScratchBuffer& buffer, const char* op) const;
  static size_t sequence_values_bytes(size_t count);
  // Rope's frequencies the same way (rope_frequency_bytes(frequencies.size()) of scratch).
  cuda::RopeFrequencies rope_frequency_table(const std::vector<float>& frequencies,
                                             const ScratchBuffer& buffer, const char* op) const;
  static size_t rope_frequency_bytes(size_t count);
  // A paged op's table, positions and key starts (when defined) in device memory: where they are,
  // or uploaded into `buffer` (page_table_bytes of scratch) from the host.
  cuda::PageTable page_table_on_device(const Tensor& page_table, const Tensor& positions,
                                       const Tensor& key_starts, int64_t page_size, int64_t pages,
                                       const ScratchBuffer& buffer, const char* op) const;
  static size_t page_table_bytes(const Tensor& page_table, const Tensor& positions,
                                 const Tensor& key_starts);
  // Throws, naming `op` and `what`, while the stream is recording a graph.
  void refuse_while_capturing(const char* op, const char* what) const;
  // out = bias + the convolution (transposed or not) of x with weight, through cuDNN; shapes
  // are checked by the caller.
  void cudnn_convolution(bool transposed, const Tensor& x, const Tensor& weight, const Tensor& bias,
                         Tensor& out, int64_t stride, int64_t padding, int64_t dilation,
                         int64_t groups, const KernelScratch& scratch, const char* op);
  // Row-major out [rows, features] = x [rows, in] · weight [features, in]ᵀ + bias (undefined:
  // none), summed in F32 and rounded once, through ReLU where `relu` (in the gemm's epilogue
  // where cuBLASLt has one, else after it), with `workspace` for cuBLAS; in > 0.
  void linear_rows(DType dtype, int64_t rows, int64_t in, int64_t features, const void* x,
                   const void* weight, const Tensor& bias, void* out,
                   const ScratchBuffer& workspace, bool relu, const char* op);
  // Makes `workspace` cuBLAS's workspace for the gemms that follow.
  void use_gemm_workspace(const ScratchBuffer& workspace, const char* op) const;
  // Whether convolutions may take voxd's own kernels (VOXD_CUDA_CONV auto or wgmma).
  bool own_convolutions() const {
    return convolution_path_ == ConvolutionPath::kAuto ||
           convolution_path_ == ConvolutionPath::kWgmma;
  }

  int index_;
  std::unique_ptr<Handles> handles_;
  // How convolutions run (VOXD_CUDA_CONV, read when the backend is made).
  ConvolutionPath convolution_path_ = ConvolutionPath::kAuto;
};

}  // namespace voxd
