// The kernel interface each compute backend (reference, cpu, cuda) implements. Kernels write
// into outputs the caller has already allocated with the right shape on the backend's device.
// Every argument check (shapes, dtypes, devices, parameters) and every allocation lives in
// core/ops.h, which calls a kernel only for an op the backend supports() and with arguments that
// meet the kernel's contract below, so a backend only computes (it may assert its contract in
// debug builds). Kernels still throw for what only running reveals (an embedding id outside the
// table) and for limits of their own (a size past 32-bit indexing).
//
// Kernels that may need temporary memory take a KernelScratch and allocate it only through that
// (from the context's allocator), so a step's workspace plan counts it. In a planning pass
// (KernelScratch::planning()) such a kernel takes exactly the scratch it would take to run and
// returns without computing; the other kernels are not called at all.
//
// Unless a kernel says otherwise: every tensor is contiguous and on the backend's device, all
// floating operands of a call share one dtype (one the backend supports() for the op; a backend
// computing in F16/BF16 accumulates in F32), and an output must not alias an input.
//
// Adding an op: an OpKind, a kernel here with a default that throws (so that backends gain it
// one at a time, each saying so in supports()), its function in core/ops.h, the reference
// backend's plain implementation, and its cases in tests/backends/op_cases.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/kernel_scratch.h"
#include "core/tensor.h"
#include "core/token_sampling.h"

namespace voxd {

enum class UnaryOp {
  Relu,       // max(x, 0)
  LeakyRelu,  // x >= 0 ? x : alpha * x
  Tanh,
  Exp,
  Scale,     // alpha * x
  Silu,      // x · sigmoid(x) = x / (1 + exp(−x)), torch.nn.SiLU
  Gelu,      // 0.5 · x · (1 + erf(x / √2)), torch.nn.GELU() (the erf form, not tanh)
  Sin,       // sin(x)
  Cos,       // cos(x)
  ClampMax,  // x > alpha ? alpha : x, so NaN stays NaN, as torch.clamp(x, max=alpha)
};

enum class BinaryOp { Add, Mul };

// Where a backend's queue of work stands among the other queues on its device: when both have
// work waiting, the device starts a kFirst queue's before a kNormal one's (CUDA stream
// priorities; work already running is not interrupted). Host backends have one queue and ignore
// it.
enum class QueuePriority { kNormal, kFirst };

// The operations a backend may run, one per function of core/ops.h that reaches a kernel (the
// unary and binary kinds each on their own). Backend::supports answers per op and dtype.
enum class OpKind : uint8_t {
  Relu,
  LeakyRelu,
  Tanh,
  Exp,
  Scale,
  Silu,
  Gelu,
  Sin,
  Cos,
  ClampMax,
  Add,
  Mul,
  Linear,
  Conv1d,
  ConvTranspose1d,
  LayerNorm,
  RmsNorm,
  Embedding,
  Attention,
  Rope,
  WriteRows,
  ZeroBeyondLengths,
  LengthRegulate,
  Bucketize,
  PagedAttention,
  WritePages,
  Istft,
  SampleTokens,
  Lstm,
  AddRmsNorm,
  AddLayerNorm,
  Swiglu,
  QkvToPages,
  GatherRows,  // the last: OpKind values run from 0 to GatherRows
};

// The op as core/ops.h names it: "relu", "conv_transpose1d", "rms_norm".
std::string_view op_name(OpKind op);
OpKind op_kind(UnaryOp op);
OpKind op_kind(BinaryOp op);

// The rotary frequencies of head size `dim` (even): inv_freq[i] = 1 / theta^(2i / dim) for
// i < dim / 2, computed in F32 as transformers' Llama does (the exponent 2i / dim rounded to F32,
// then the power and the reciprocal each rounded to F32). Every backend's rope uses these.
std::vector<float> rope_frequencies(float theta, int64_t dim);

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
  // The weight in the order the backend's fused convolution reads it (ops::arrange_conv1d_weight,
  // made once when a model loads), or null: the backend then arranges it per call where it needs
  // to. A backend that arranges no weights ignores it.
  const Tensor* arranged_weight = nullptr;
};

// Two convolutions that keep the sequence's length, one after the other, each reading its input
// through leaky_relu, the second adding a residual (HiFiGAN V1's resblock step): out =
// conv1d(leaky_relu(h), second) + second_bias + residual, h = conv1d(leaky_relu(x), first) +
// first_bias in the weights' dtype. x, the residual and the output may be F32 around F16/BF16
// weights, as with ConvFusion. Borrows every tensor.
struct Conv1dPair {
  const Tensor* first_weight = nullptr;              // [C, Cin, K1]
  const Tensor* first_bias = nullptr;                // [C] or undefined
  Conv1dParams first;                                // stride 1, groups 1
  const Tensor* second_weight = nullptr;             // [Cout, C, K2], first_weight's dtype
  const Tensor* second_bias = nullptr;               // [Cout] or undefined
  Conv1dParams second;                               // stride 1, groups 1
  float slope = 0.0f;                                // of both leaky_relus
  const Tensor* residual = nullptr;                  // [B, Cout, T] in the output's dtype, or null
  std::optional<DType> output_dtype = std::nullopt;  // the output's dtype, when not x's
  // After the residual, in this order: + addend (as the residual: a running sum, such as
  // HiFiGAN's resblocks' within a stage), × output_scale, then leaky ReLU with output_slope
  // when it is set: out = leaky_relu(output_scale · (conv2(...) + residual + addend)).
  const Tensor* addend = nullptr;
  float output_scale = 1.0f;
  std::optional<float> output_slope = std::nullopt;
  // Each weight in the order the backend's fused pair reads it (ops::arrange_conv1d_weight, made
  // once when a model loads), or null: the backend then arranges it per call, in its scratch.
  // A backend that arranges no weights ignores them.
  const Tensor* first_arranged = nullptr;
  const Tensor* second_arranged = nullptr;
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
  // Keys at positions < key_starts[b] are masked out too, so batch b sees a window of keys
  // [key_starts[b], key_lengths[b]) (banded attention). Empty means 0 for every batch.
  std::vector<int64_t> key_starts;
  // key_lengths as I64 [B] (contiguous) on a device backend's device, read where the kernels run
  // (a recorded step reads them when it replays): only without key_lengths, causal, key_starts
  // and query_offsets. ops::attention reads a host tensor into key_lengths, so a backend sees
  // this defined only on its device.
  Tensor key_length_tensor;
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
  // Seconds the calling threads have spent blocked on queued device work so far (synchronize(),
  // copies to the host, staging space still being read); 0 on host backends, which queue
  // nothing. A step's share of it against its duration says whether the device or the host set
  // its pace.
  virtual double device_wait_seconds() const { return 0; }
  // Host time by op, to find where a step's host time goes (launches, a library's first calls
  // at a new shape, copies that wait) on a backend that queues work: while on, each op's call is
  // timed from its start to its return (an op called inside another counts in that one). Host
  // backends, whose calls are their compute, count nothing (the default).
  struct OpHostTime {
    std::string op;
    int64_t calls = 0;
    double seconds = 0;
    double longest_seconds = 0;  // its longest call
  };
  virtual void profile_host_time(bool /*on*/) {}
  // The ops timed since profiling began or the last call, most seconds first; starts over.
  virtual std::vector<OpHostTime> take_host_profile() { return {}; }
  // Whether capture() can record work on this backend.
  virtual bool can_capture() const { return false; }
  // Whether an op's first run at a new size costs this backend's host more than later runs (a
  // library loading a kernel the first time it runs it), so that running larger shapes once
  // while idle spares the clients that meet them first.
  virtual bool first_runs_cost_more() const { return false; }
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

  // Whether this backend runs `op` on operands of `dtype` (the dtype of the op's floating
  // operands; the weights' for a conv1d with a ConvFusion). core/ops.h refuses any other call
  // with a voxd::Error naming the op, the backend and the dtype. The default, for backends
  // written before supports() existed: the ops the interface had then (relu, leaky_relu, tanh,
  // exp, scale, add, mul, linear, conv1d, conv_transpose1d, layer_norm, embedding, attention,
  // zero_beyond_lengths, length_regulate) for every floating dtype, bucketize for F32, no other.
  virtual bool supports(OpKind op, DType dtype) const;

  // out = op(x, alpha) elementwise, computed in F32 (at least). out may be x itself (in place).
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
  // with `params` into an output of `out_dtype` as one kernel, the weight arranged once already
  // (ConvFusion::arranged_weight) where `weight_arranged`; when not (the default), ops::conv1d
  // runs the fused steps one by one.
  virtual bool fuses_conv1d(const Tensor& /*x*/, const Tensor& /*weight*/, DType /*out_dtype*/,
                            const Conv1dParams& /*params*/, bool /*weight_arranged*/) const {
    return false;
  }
  // out = conv1d(leaky_relu(x) or x, weight) + bias + residual, as `fusion` says (ConvFusion
  // for mixed dtypes; bias has the weights' dtype, residual out's); only called when
  // fuses_conv1d() is true. residual is contiguous, out does not alias x or residual.
  virtual void fused_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const ConvFusion& fusion, Tensor& out, const Conv1dParams& params,
                            const KernelScratch& scratch);
  // Whether fused_conv1d_pair() runs `pair` over x (contiguous) into an output of `out_dtype`
  // without writing the first convolution's output as a tensor; when not (the default),
  // ops::conv1d_pair runs the two as conv1d()s with ConvFusion.
  virtual bool fuses_conv1d_pair(const Tensor& /*x*/, const Conv1dPair& /*pair*/,
                                 DType /*out_dtype*/) const {
    return false;
  }
  // out = the pair's output (Conv1dPair); only called when fuses_conv1d_pair() is true. The
  // weights, biases and residual are contiguous; out does not alias x or the residual.
  virtual void fused_conv1d_pair(const Tensor& x, const Conv1dPair& pair, Tensor& out,
                                 const KernelScratch& scratch);
  // Elements of `weight` [Cout, Cin, K] in the order this backend's fused pairs and fused
  // convolutions read it (Conv1dPair::first_arranged, ConvFusion::arranged_weight), or 0 (the
  // default) where they read it as it is.
  virtual int64_t arranged_conv1d_weight_elements(const Tensor& /*weight*/) const { return 0; }
  // arranged [arranged_conv1d_weight_elements(weight)] = weight in that order; only called when
  // that is above 0.
  virtual void arrange_conv1d_weight(const Tensor& weight, Tensor& arranged,
                                     const KernelScratch& scratch);
  // Whether fused_conv1d_pair_rows() runs `pair` over time-major x [B, T, C] (contiguous) into
  // [B, T, Cout] rows of `out_dtype`, reading and writing the rows in place; decided by shapes
  // and dtypes alone. When not (the default), ops::conv1d_pair_rows transposes around
  // conv1d_pair.
  virtual bool fuses_conv1d_pair_rows(const Tensor& /*x*/, const Conv1dPair& /*pair*/,
                                      DType /*out_dtype*/) const {
    return false;
  }
  // out [B, T, Cout] = the pair's output over rows x [B, T, C], the residual [B, T, Cout] rows
  // too; only called when fuses_conv1d_pair_rows() is true. Otherwise as fused_conv1d_pair.
  virtual void fused_conv1d_pair_rows(const Tensor& x, const Conv1dPair& pair, Tensor& out,
                                      const KernelScratch& scratch);
  // Whether conv1d_rows() runs a conv1d over time-major rows of x with weight and `params`; when
  // not (the default), ops::conv1d_rows transposes x and the output around conv1d().
  virtual bool runs_conv1d_rows(const Tensor& /*x*/, const Tensor& /*weight*/,
                                const Conv1dParams& /*params*/) const {
    return false;
  }
  // x [B, T, Cin] (time-major), weight [Cout, Cin, K], bias [Cout] or undefined -> out
  // [B, Tout, Cout]: conv1d's values with time and channels swapped on both sides. Only called
  // when runs_conv1d_rows() is true. `arranged`: the weight in this backend's order
  // (arrange_conv1d_rows_weight), or null: the backend arranges it itself where it needs to.
  // With `arranged`, only weight's shape is read: it may be a view with any strides
  // (ops::conv1d_rows_weight_view). `relu`: out goes through ReLU as well (the values ops::relu_
  // would leave).
  virtual void conv1d_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                           const Conv1dParams& params, const Tensor* arranged, bool relu,
                           const KernelScratch& scratch);
  // Elements of `weight` [Cout, Cin, K] in the order conv1d_rows() reads it with `params`, or 0
  // (the default) where it reads it as it is.
  virtual int64_t arranged_conv1d_rows_elements(const Tensor& /*weight*/,
                                                const Conv1dParams& /*params*/) const {
    return 0;
  }
  // arranged [arranged_conv1d_rows_elements(weight, params)] = weight in that order; only called
  // when that is above 0.
  virtual void arrange_conv1d_rows_weight(const Tensor& weight, const Conv1dParams& params,
                                          Tensor& arranged, const KernelScratch& scratch);
  // Where that order is `weight` [Cout, Cin, K] with its dimensions permuted (arranged =
  // contiguous(weight.permute(order))): the order, so that a model can hold the weight only as a
  // view of its arrangement (ops::conv1d_rows_weight_view); empty (the default) otherwise.
  virtual std::vector<int64_t> arranged_conv1d_rows_order(const Tensor& /*weight*/,
                                                          const Conv1dParams& /*params*/) const {
    return {};
  }
  // x [B, Cin, T], weight [Cin, Cout/groups, K], bias [Cout] or undefined -> out [B, Cout, Tout],
  // Tout = (T−1)·stride − 2·padding + dilation·(K−1) + output_padding + 1, as
  // torch.nn.functional.conv_transpose1d.
  virtual void conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                Tensor& out, const ConvTranspose1dParams& params,
                                const KernelScratch& scratch) = 0;
  // Whether conv_transpose1d_rows() runs a conv_transpose1d over time-major rows of x with weight
  // and `params`; when not (the default), ops::conv_transpose1d_rows transposes x and the output
  // around conv_transpose1d().
  virtual bool runs_conv_transpose1d_rows(const Tensor& /*x*/, const Tensor& /*weight*/,
                                          const ConvTranspose1dParams& /*params*/) const {
    return false;
  }
  // x [B, T, Cin] (time-major), weight [Cin, Cout/groups, K], bias [Cout] or undefined -> out
  // [B, Tout, Cout]: conv_transpose1d's values with time and channels swapped on both sides. Only
  // called when runs_conv_transpose1d_rows() is true. `arranged`: the weight and bias in this
  // backend's order (arrange_conv_transpose1d_weight), or null: the backend arranges them itself.
  virtual void conv_transpose1d_rows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     Tensor& out, const ConvTranspose1dParams& params,
                                     const Tensor* arranged, const KernelScratch& scratch);
  // Elements of a transposed convolution's weight [Cin, Cout/groups, K] and bias in the order
  // conv_transpose1d_rows() reads them for `params`, or 0 (the default) where it reads them as
  // they are.
  virtual int64_t arranged_conv_transpose1d_elements(
      const Tensor& /*weight*/, const ConvTranspose1dParams& /*params*/) const {
    return 0;
  }
  // arranged [arranged_conv_transpose1d_elements(weight, params)] = weight and bias (or none,
  // undefined) in that order; only called when that is above 0.
  virtual void arrange_conv_transpose1d_weight(const Tensor& weight, const Tensor& bias,
                                               const ConvTranspose1dParams& params,
                                               Tensor& arranged, const KernelScratch& scratch);
  // Normalises each row of x [N, C] over C: (x − mean) / sqrt(var + eps) · gamma + beta, with the
  // biased variance, as torch.nn.LayerNorm. out may be x itself.
  virtual void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& out) = 0;
  // layer_norm of x + residual (both [N, C], x's dtype), the sum rounded to the dtype first: the
  // numbers of binary(Add) and then layer_norm, in one pass (a transformer block's residual add
  // and the norm after it). out may be x or residual.
  virtual void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                              const Tensor& beta, float eps, Tensor& out);
  // Each row of x [N, C]: x · rsqrt(mean(x²) + eps) computed in F32 and rounded to x's dtype,
  // then multiplied by weight [C] (x's dtype) and rounded once more, as transformers'
  // LlamaRMSNorm does in half precision. out may be x itself.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out);
  // ids [N] (I32 or I64, contiguous, on the host or this device), table [V, C] -> out [N, C]. An
  // id outside [0, V) throws voxd::Error naming the id.
  virtual void embedding(const Tensor& ids, const Tensor& table, Tensor& out,
                         const KernelScratch& scratch) = 0;
  // Scaled dot-product attention per head. q [B, Tq, H, D], k and v [B, Tk, H, D] ->
  // out [B, Tq, H, D] = softmax(scale · q·kᵀ + mask) · v. A query that sees no key gets NaN,
  // as PyTorch's masked_fill(-inf) + softmax does. k and v may be a KV cache of Tk = Tmax rows
  // of which batch b holds key_lengths[b]: the rows past a length weigh exactly zero, so they
  // must hold finite values (a cache made with ops::zeros does, whatever was written since).
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         const AttentionParams& params, const KernelScratch& scratch) = 0;
  // Rotary position embedding as transformers' Llama applies it (rotate_half, dimension i pairs
  // with i + D/2, not interleaved): x [B, T, H, D] with row t of batch b at position
  // start_positions[b] + t (any integer) -> out = x·cos + rotate_half(x)·sin, with angles
  // position · rope_frequencies(theta, D) formed in F32 and cos/sin taken of those.
  // start_positions: I64 [B], contiguous, on the host or (a device backend) its device, so that
  // a recorded step reads them where they are when it replays. out may be x itself.
  virtual void rope(const Tensor& x, const Tensor& start_positions, float theta, Tensor& out,
                    const KernelScratch& scratch);
  // cache [B, Tmax, ...] and rows [B, T, ...] (the same trailing sizes): cache[b, offsets[b] + t]
  // = rows[b, t] in place, with 0 <= offsets[b] and offsets[b] + T <= Tmax; the other rows of
  // the cache are left as they are.
  virtual void write_rows(Tensor& cache, const Tensor& rows, const std::vector<int64_t>& offsets,
                          const KernelScratch& scratch);
  // A KV cache in pages: k_pages and v_pages [N, S, H, D] hold N pages of S positions each;
  // sequence b's position p lives in page page_table[b, p / S] (page_table [B, P], I64) at slot
  // p % S. An entry outside [0, N), or p / S >= P, is a missing page: its positions are neither
  // read nor written (so padded rows of a batch cost nothing). page_table and positions [B]
  // (I64) are contiguous, on the host or on this device.
  //
  // Causal attention of q [B, T, H, D] over the cache: query t of sequence b sits at position
  // positions[b] + t and sees the keys at positions key_starts[b] (0 when key_starts is
  // undefined) through its own that are not in a missing page: out [B, T, H, D] =
  // softmax(scale · q·kᵀ) · v over those, NaN when it sees none. key_starts [B] (I64, >= 0) is
  // contiguous, on the host or on this device: a window of keys per sequence (Sambert's banded
  // attention).
  virtual void paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages,
                               const Tensor& page_table, const Tensor& positions,
                               const Tensor& key_starts, float scale, Tensor& out,
                               const KernelScratch& scratch);
  // Writes rows [B, T, ...] (pages' trailing sizes) into pages [N, S, ...] in place: row t of
  // sequence b at position positions[b] + t, dropped where that position's page is missing.
  // Sequences hold distinct pages.
  virtual void write_pages(Tensor& pages, const Tensor& rows, const Tensor& page_table,
                           const Tensor& positions, const KernelScratch& scratch);
  // x [B, T, C]: rows t >= lengths[b] set to zero, in place (lengths.size() == B).
  virtual void zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths,
                                   const KernelScratch& scratch) = 0;
  // The same with lengths I64 [B] (contiguous) on this backend's device, read where the kernel
  // runs: for device backends (ops::zero_beyond_lengths hands host lengths to the one above);
  // the default throws.
  virtual void zero_beyond_device_lengths(Tensor& x, const Tensor& lengths,
                                          const KernelScratch& scratch);
  // table [V, C], rows [N] (I64, contiguous, on the host or this device) -> out [N, C]: row
  // rows[i] of the table, or zeros where rows[i] is outside [0, V). Nothing is checked or read
  // back, so a recorded step can run it (an embedding's ids are checked on the host).
  virtual void gather_rows(const Tensor& table, const Tensor& rows, Tensor& out,
                           const KernelScratch& scratch);
  // x [B, T, C], durations[b][t] >= 0 frames for each input row -> out [B, Tout, C]: row t of
  // batch b repeated durations[b][t] times, in order; rows past the batch's total are zero.
  virtual void length_regulate(const Tensor& x, const std::vector<std::vector<int64_t>>& durations,
                               Tensor& out, const KernelScratch& scratch) = 0;
  // x (F32, any shape), boundaries [n] ascending -> out (I64, x's shape) = index of the first
  // boundary >= x, as torch.bucketize(x, boundaries, right=False).
  virtual void bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) = 0;
  // torch.istft(spec, n_fft, hop, window=window, center=True, normalized=False, onesided=True)
  // with spec = real + i·imag, all F32: real and imag [B, n_fft/2 + 1, frames] (frames >= 1),
  // window [n_fft] on the host (read there), out [B, n_fft + hop·(frames − 1) − 2·(n_fft/2)].
  // Each frame is the inverse real DFT of its bins (the imaginary parts of the DC bin and, for
  // even n_fft, of the Nyquist bin ignored), scaled by 1/n_fft, times the window; frames
  // overlap-add hop apart, the first n_fft/2 and last n_fft/2 samples are dropped, and each kept
  // sample is divided by Σ window² over the frames that reach it (ops::istft has checked that
  // this envelope is at least 1e-11 everywhere kept, as torch does).
  virtual void istft(const Tensor& real, const Tensor& imag, const Tensor& window, int64_t hop,
                     Tensor& out, const KernelScratch& scratch);
  // One token per row of logits [R, V] (F32, V < 2^24): tokens [R] (I64) = sample_token
  // (core/token_sampling.h) of row r with draws[r] (R of them, on the host) over row r of history
  // [R, W] (I64, on the host or this device; W may be 0), or −1 where the row draws nothing.
  // Equal to the host's up to rounding: exp, pow and the softmax's sum may differ from the host's
  // by an ulp, so a draw or a top-P cut within that of a boundary may fall on its other side.
  virtual void sample_tokens(const Tensor& logits, const Tensor& history,
                             const std::vector<TokenDraw>& draws, Tensor& tokens,
                             const KernelScratch& scratch);
  // ops::lstm's layer: x_gates [B, T, 4H] and w_hh [4H, H] in one floating dtype, h and c F32
  // [B, H] updated in place, lengths (B of them, each in [0, T]) or empty for T; out [B, T, H] in
  // x_gates' dtype, zeros past each length. The gates' sums are F32 (or wider), c and h stay F32
  // between steps; each step's h is rounded to out's dtype on its way out only.
  virtual void lstm(const Tensor& x_gates, const Tensor& w_hh, Tensor& h, Tensor& c,
                    const std::vector<int64_t>& lengths, bool reverse, Tensor& out,
                    const KernelScratch& scratch);

  // Fused steps of a Llama-style decoder layer (ChatTTS's GPT), each the same numbers as the ops
  // it replaces run one after another, in one pass over memory.
  //
  // A residual add and the next RMSNorm: sum [N, C] = x + delta (delta converted to x's dtype
  // first, the sum rounded to x's dtype), normed [N, C] (out's dtype) = rms_norm(sum, weight, eps)
  // as rms_norm computes it in x's dtype, then converted to normed's dtype. x and weight share a
  // dtype; delta and normed may have another floating dtype (a stream in F32, a compute dtype in
  // BF16). sum may be x itself.
  virtual void add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& weight, float eps,
                            Tensor& sum, Tensor& normed);
  // The SiLU-gated unit of a Llama MLP over gate_up [N, 2·I] (the gate's columns, then the up
  // projection's): out [N, I] = silu(gate) · up, silu rounded to the dtype, then the product.
  virtual void swiglu(const Tensor& gate_up, Tensor& out);
  // A paged layer's attention inputs from one q/k/v projection: qkv [B, T, 3, H, D] holds the
  // queries, keys and values of T steps of B sequences. q_out [B, T, H, D] = rope(queries) and
  // rope(keys) and the values are written into k_pages and v_pages [N, S, H, D] as write_pages
  // writes them (positions[b] + t through page_table; rows in a missing page dropped), with
  // rope's angles (position · rope_frequencies(theta, D), F32). page_table and positions as
  // paged_attention takes them.
  virtual void qkv_to_pages(const Tensor& qkv, Tensor& k_pages, Tensor& v_pages,
                            const Tensor& page_table, const Tensor& positions, float theta,
                            Tensor& q_out, const KernelScratch& scratch);

 protected:
  // Throws the voxd::Error of a kernel this backend does not implement (called by the defaults).
  [[noreturn]] void not_implemented(const char* kernel) const;
};

}  // namespace voxd
