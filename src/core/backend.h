// The kernel interface each compute backend (reference, cpu, cuda) implements. Kernels write
// into outputs the caller has already allocated with the right shape on the backend's device;
// shape checks and allocation live in core/ops.h, so a backend only computes.
//
// Kernels that may need temporary memory take a KernelScratch and allocate it only through that
// (from the context's allocator), so a step's workspace plan counts it. In a planning pass
// (KernelScratch::planning()) such a kernel takes exactly the scratch it would take to run and
// returns without computing; the other kernels are not called at all.
//
// Unless a kernel says otherwise: every tensor is contiguous, floating tensors are F32 on the
// reference and cpu backends (a backend may accept F16/BF16 and accumulate in F32), and an
// output must not alias an input.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/kernel_scratch.h"
#include "core/tensor.h"

namespace voxd {

enum class UnaryOp {
  Relu,       // max(x, 0)
  LeakyRelu,  // x >= 0 ? x : alpha * x
  Tanh,
  Exp,
  Scale,  // alpha * x
};

enum class BinaryOp { Add, Mul };

struct Conv1dParams {
  int64_t stride = 1;
  int64_t padding = 0;  // zeros on both sides
  int64_t dilation = 1;
  int64_t groups = 1;
};

// Work fused into a conv1d (ops::conv1d with a ConvFusion): the input goes through leaky_relu
// first, and a residual is added to the output (HiFiGAN's resblock steps). With mixed
// precision, x may have another floating dtype than the weights: the (activated) input is then
// rounded to the weights' dtype, the products accumulate in F32, and the output has
// output_dtype (x's dtype unless set).
struct ConvFusion {
  std::optional<float> input_leaky_relu;  // the slope, when the input goes through leaky_relu
  const Tensor* residual = nullptr;       // [B, Cout, Tout] in the output's dtype, or null
  std::optional<DType> output_dtype = std::nullopt;  // the output's dtype, when not x's
};

struct ConvTranspose1dParams {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
};

struct AttentionParams {
  // Multiplies q·k before the softmax (1/sqrt(d) in most models; ming024 divides by
  // temperature = sqrt(d_k), i.e. scale = 1/sqrt(d_k)).
  float scale = 1.0f;
  // Keys at positions >= key_lengths[b] are masked out (-inf before the softmax). Empty means
  // every key is valid. Size must be the batch size otherwise.
  std::vector<int64_t> key_lengths;
  // Causal masking for decoders: query i of batch b sits at absolute position
  // query_offsets[b] + i (0 when empty) and sees keys at positions <= its own.
  bool causal = false;
  std::vector<int64_t> query_offsets;
};

// Device work recorded once by Backend::capture and launched again as a whole: the same kernels
// on the same memory, so it reads whatever its inputs' memory holds at the time of replay().
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  // Queues the recorded work on the backend's stream, in order with the backend's other work.
  virtual void replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // Waits until all queued work on the device is done (no-op on host backends).
  virtual void synchronize() {}
  // Whether capture() can record work on this backend.
  virtual bool can_capture() const { return false; }
  // Records the device work `work` queues on this backend, without running it, for replay; null
  // when the backend cannot record (the default). The result must go before the backend. The
  // work must only queue kernels and
  // device-to-device copies on memory that outlives the result: no copy to or from the host, no
  // synchronisation, no device allocation from the system. Throws voxd::Error naming the op
  // that could not be recorded, leaving the backend usable.
  virtual std::unique_ptr<CapturedWork> capture(const std::function<void()>& /*work*/) {
    return nullptr;
  }

  // dst (contiguous, any dtype, on this device) = src (any strides, any dtype, on this device or
  // on the host), converting element types. Also moves host data to the device and back when dst
  // is a host tensor.
  virtual void copy(const Tensor& src, Tensor& dst, const KernelScratch& scratch) = 0;
  // Every element of dst = value.
  virtual void fill(Tensor& dst, float value) = 0;

  // out = op(x, alpha). out may be x itself (in place).
  virtual void unary(const Tensor& x, Tensor& out, UnaryOp op, float alpha) = 0;
  // out = a op b, with b broadcast to a's shape: b has a's rank and each of its sizes equals
  // a's or is 1. out may be a itself (in place).
  virtual void binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryOp op) = 0;

  // x [N, in], weight [out, in], bias [out] or undefined -> out [N, out] = x·weightᵀ + bias.
  virtual void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                      const KernelScratch& scratch) = 0;
  // x [B, Cin, T], weight [Cout, Cin/groups, K], bias [Cout] or undefined -> out [B, Cout, Tout],
  // Tout = (T + 2·padding − dilation·(K−1) − 1) / stride + 1, as torch.nn.functional.conv1d.
  virtual void conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                      const Conv1dParams& params, const KernelScratch& scratch) = 0;
  // Whether fused_conv1d() runs a conv1d of x and weight (contiguous; their dtypes may differ)
  // with `params` into an output of `out_dtype` as one kernel; when not (the default),
  // ops::conv1d runs the fused steps one by one.
  virtual bool fuses_conv1d(const Tensor& /*x*/, const Tensor& /*weight*/, DType /*out_dtype*/,
                            const Conv1dParams& /*params*/) const {
    return false;
  }
  // out = conv1d(leaky_relu(x) or x, weight) + bias + residual, as `fusion` says (ConvFusion
  // for mixed dtypes; bias has the weights' dtype, residual out's); only called when
  // fuses_conv1d() is true. residual is contiguous, out does not alias x or residual.
  virtual void fused_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const ConvFusion& fusion, Tensor& out, const Conv1dParams& params,
                            const KernelScratch& scratch);
  // x [B, Cin, T], weight [Cin, Cout/groups, K], bias [Cout] or undefined -> out [B, Cout, Tout],
  // Tout = (T−1)·stride − 2·padding + dilation·(K−1) + output_padding + 1, as
  // torch.nn.functional.conv_transpose1d.
  virtual void conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                Tensor& out, const ConvTranspose1dParams& params,
                                const KernelScratch& scratch) = 0;
  // Normalises each row of x [N, C] over C: (x − mean) / sqrt(var + eps) · gamma + beta, with the
  // biased variance, as torch.nn.LayerNorm. out may be x itself.
  virtual void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& out) = 0;
  // ids [N] (I32 or I64, host or device), table [V, C] -> out [N, C]. An id outside [0, V)
  // throws voxd::Error naming the id.
  virtual void embedding(const Tensor& ids, const Tensor& table, Tensor& out,
                         const KernelScratch& scratch) = 0;
  // Scaled dot-product attention per head. q [B, Tq, H, D], k and v [B, Tk, H, D] ->
  // out [B, Tq, H, D] = softmax(scale · q·kᵀ + mask) · v. A query that sees no key gets NaN,
  // as PyTorch's masked_fill(-inf) + softmax does.
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         const AttentionParams& params, const KernelScratch& scratch) = 0;
  // x [B, T, C]: rows t >= lengths[b] set to zero, in place (lengths.size() == B).
  virtual void zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths,
                                   const KernelScratch& scratch) = 0;
  // x [B, T, C], durations[b][t] >= 0 frames for each input row -> out [B, Tout, C]: row t of
  // batch b repeated durations[b][t] times, in order; rows past the batch's total are zero.
  virtual void length_regulate(const Tensor& x, const std::vector<std::vector<int64_t>>& durations,
                               Tensor& out, const KernelScratch& scratch) = 0;
  // x (F32, any shape), boundaries [n] ascending -> out (I64, x's shape) = index of the first
  // boundary >= x, as torch.bucketize(x, boundaries, right=False).
  virtual void bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) = 0;
};

}  // namespace voxd
