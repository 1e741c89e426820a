// The operations models are written in, and the one place their arguments are checked. Each
// function checks its inputs' shapes, dtypes, devices and parameters (throwing voxd::Error with
// the op name and what it got), refuses an op the backend does not support for the dtype
// (Backend::supports: the error names the op, the backend and the dtype), allocates its output
// from the context's allocator on the backend's device, and runs the backend's kernel (in a
// planning context: only allocates, see Context). Strided inputs are made contiguous first where
// a kernel needs it. Models call only these, never a backend directly, so the same model code
// runs on every backend.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/allocator.h"
#include "core/backend.h"
#include "core/kernel_scratch.h"
#include "core/tensor.h"

namespace voxd {

// What one forward pass runs on: a backend and the allocator its activations and kernel scratch
// come from. A planning context runs the same model code without computing: every op checks its
// inputs and allocates its output and its kernel's scratch as in a run, but no kernel runs, no
// element is read, and a copy to the host yields zeros. Over a planning WorkspaceArena that
// measures the memory a step needs before it runs.
class Context {
 public:
  Context(Backend& backend, Allocator& allocator) : backend_(&backend), allocator_(&allocator) {}
  // A planning context; tensors from `allocator` may then have fake addresses.
  static Context for_planning(Backend& backend, Allocator& allocator) {
    Context ctx(backend, allocator);
    ctx.planning_ = true;
    return ctx;
  }
  Backend& backend() const { return *backend_; }
  Allocator& allocator() const { return *allocator_; }
  Device device() const { return backend_->device(); }
  bool planning() const { return planning_; }
  // What kernels that need temporary memory receive: the allocator and the mode.
  KernelScratch scratch() const { return KernelScratch(*allocator_, planning_); }

 private:
  Backend* backend_;
  Allocator* allocator_;
  bool planning_ = false;
};

namespace ops {

// A new tensor on the context's device; elements uninitialised.
Tensor empty(Context& ctx, const Shape& shape, DType dtype = DType::F32);
Tensor zeros(Context& ctx, const Shape& shape, DType dtype = DType::F32);
// Contiguous copy on the context's device in `dtype` (from the host or the device).
Tensor to_device(Context& ctx, const Tensor& x, DType dtype = DType::F32);
// Contiguous copy on the host in `dtype` (zeros in a planning context).
Tensor to_host(Context& ctx, const Tensor& x, DType dtype = DType::F32);
// x itself when already contiguous, else a contiguous copy.
Tensor contiguous(Context& ctx, const Tensor& x);

Tensor relu(Context& ctx, const Tensor& x);
Tensor leaky_relu(Context& ctx, const Tensor& x, float slope);
Tensor tanh(Context& ctx, const Tensor& x);
Tensor exp(Context& ctx, const Tensor& x);
Tensor scale(Context& ctx, const Tensor& x, float factor);
Tensor silu(Context& ctx, const Tensor& x);
// The erf form, as torch.nn.GELU() (approximate='none').
Tensor gelu(Context& ctx, const Tensor& x);
Tensor sin(Context& ctx, const Tensor& x);
Tensor cos(Context& ctx, const Tensor& x);
// min(x, max) elementwise, NaN kept, as torch.clamp(x, max=max).
Tensor clamp_max(Context& ctx, const Tensor& x, float max);
// In-place variants: x (contiguous) is overwritten and returned.
Tensor& relu_(Context& ctx, Tensor& x);
Tensor& leaky_relu_(Context& ctx, Tensor& x, float slope);

// a + b, a · b with b broadcast to a's shape (see Backend::binary); b may also have fewer
// dimensions than a, which counts as leading sizes of 1 (b [C] against a [B, T, C]).
Tensor add(Context& ctx, const Tensor& a, const Tensor& b);
Tensor mul(Context& ctx, const Tensor& a, const Tensor& b);
// a += b in place (a contiguous); returns a.
Tensor& add_(Context& ctx, Tensor& a, const Tensor& b);
// x = leaky_relu(factor · (x + addend)) in place, step by step, each step only where it changes
// something (addend set, factor not 1, slope set); x contiguous; returns x.
Tensor& add_scale_leaky_relu_(Context& ctx, Tensor& x, const Tensor* addend, float factor,
                              std::optional<float> slope);

// x [..., in] -> [..., out].
Tensor linear(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor conv1d(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv1dParams& params);
// conv1d(leaky_relu(x, slope) or x) + bias + residual, as `fusion` says (ConvFusion: x may be of
// another dtype than weight and bias, the output of output_dtype, the weight arranged once by
// arrange_conv1d_weight), in one kernel where the backend fuses it (Backend::fuses_conv1d),
// else step by step: leaky_relu in x's dtype, a conversion to the weights' dtype, conv1d, a
// conversion to the output dtype, + residual. Throws voxd::Error for an arranged weight that is
// not this backend's for `weight`.
Tensor conv1d(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv1dParams& params, const ConvFusion& fusion);
// conv1d over time-major rows: x [B, T, Cin], weight [Cout, Cin, K] (torch's layout), bias
// [Cout] or undefined -> [B, Tout, Cout], the values of transpose(conv1d(transpose(x))) without
// the transposes where the backend runs it so (Backend::runs_conv1d_rows), and as a linear layer
// when it is pointwise. `arranged`: arrange_conv1d_rows_weight's for the same weight and params,
// or null (the backend arranges the weight per call where it needs to). RowsActivation::Relu:
// the output through ReLU as relu_ would leave it, fused into the convolution where the backend
// runs it over rows (no pass of its own over the output).
enum class RowsActivation { None, Relu };
Tensor conv1d_rows(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Conv1dParams& params, const Tensor* arranged = nullptr,
                   RowsActivation activation = RowsActivation::None);
// A weight [Cout, Cin, K] (on ctx's device) in the order the backend's conv1d_rows reads it with
// `params`: made once when a model loads, so that no step rearranges it (on CUDA the taps first,
// so that the columns it multiplies are whole input rows). Undefined where the backend reads it
// as it is (Backend::arranged_conv1d_rows_elements).
Tensor arrange_conv1d_rows_weight(Context& ctx, const Tensor& weight, const Conv1dParams& params);
// `weight` [Cout, Cin, K] as a view of `arranged` (arrange_conv1d_rows_weight's for it) where the
// backend's order is a permutation of its dimensions (Backend::arranged_conv1d_rows_order; on
// CUDA the taps first), so that a model holds one copy of it; else `weight` itself. conv1d_rows
// takes the view beside `arranged` without copying it; any other op reads its values through the
// strides.
Tensor conv1d_rows_weight_view(Context& ctx, const Tensor& arranged, const Tensor& weight,
                               const Conv1dParams& params);
// The two convolutions of `pair` over x (Conv1dPair), in one go where the backend fuses them
// (Backend::fuses_conv1d_pair: the first's output never becomes a tensor, the terms after the
// residual applied in its epilogue), else as two conv1d()s with ConvFusion and
// add_scale_leaky_relu_. Both must keep the sequence's length (stride 1, 2·padding =
// dilation·(K − 1)).
Tensor conv1d_pair(Context& ctx, const Tensor& x, const Conv1dPair& pair);
// conv1d_pair over time-major rows: x [B, T, C] -> [B, T, Cout], the residual (when given)
// [B, T, Cout] too. The numbers of transposing x and the residual, conv1d_pair and transposing
// back, which is what it runs where the backend does not read and write the rows itself.
Tensor conv1d_pair_rows(Context& ctx, const Tensor& x, const Conv1dPair& pair);
// Whether conv1d_pair_rows runs `pair` over rows shaped and typed as x [B, T, C] without
// transposing anything (Backend::fuses_conv1d_pair_rows).
bool fuses_conv1d_pair_rows(Context& ctx, const Tensor& x, const Conv1dPair& pair);
// A weight [Cout, Cin, K] (on ctx's device) in the order the backend's fused pairs and fused
// convolutions read it, for Conv1dPair::first_arranged and second_arranged and
// ConvFusion::arranged_weight: made once when a model loads, so that no step rearranges its
// weights (on CUDA a kernel for each convolution, and without it short convolutions go through
// im2col and cuBLAS). Undefined where the backend reads weights as they are
// (Backend::arranged_conv1d_weight_elements).
Tensor arrange_conv1d_weight(Context& ctx, const Tensor& weight);
Tensor conv_transpose1d(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose1dParams& params);
// conv_transpose1d over time-major rows: x [B, T, Cin] -> [B, Tout, Cout], the values of
// transpose(conv_transpose1d(transpose(x))) without the transposes where the backend runs it so
// (Backend::runs_conv_transpose1d_rows). `arranged`: arrange_conv_transpose1d_weight's for the
// same weight, bias and params, or null (the backend arranges them per call where it needs to).
Tensor conv_transpose1d_rows(Context& ctx, const Tensor& x, const Tensor& weight,
                             const Tensor& bias, const ConvTranspose1dParams& params,
                             const Tensor* arranged = nullptr);
// A transposed convolution's weight [Cin, Cout/groups, K] and bias [Cout] (or undefined), on
// ctx's device, in the order the backend's conv_transpose1d_rows reads them for `params`: made
// once when a model loads, so that no step rearranges them (on CUDA a kernel for each
// upsampler, ~60 µs in a HiFiGAN V1 pass). Undefined where the backend reads them as they are
// (Backend::arranged_conv_transpose1d_elements).
Tensor arrange_conv_transpose1d_weight(Context& ctx, const Tensor& weight, const Tensor& bias,
                                       const ConvTranspose1dParams& params);
// Over the last dimension of x [..., C].
Tensor layer_norm(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  float eps);
// layer_norm(add(x, residual), gamma, beta, eps) with residual of x's shape and dtype: one
// kernel where the backend fuses the two (Backend::add_layer_norm), else the two ops.
Tensor add_layer_norm(Context& ctx, const Tensor& x, const Tensor& residual, const Tensor& gamma,
                      const Tensor& beta, float eps);
// Over the last dimension of x [..., C], as transformers' LlamaRMSNorm: weight [C] (x's dtype) ·
// (x · rsqrt(mean(x²) + eps) in F32, rounded to x's dtype).
Tensor rms_norm(Context& ctx, const Tensor& x, const Tensor& weight, float eps);
// ids [B, T] -> [B, T, C] (ids of any rank work: ids.shape + [C]). ids may be on the host.
Tensor embedding(Context& ctx, const Tensor& ids, const Tensor& table);
// Rows of table [V, C] by index: rows (I64 of any shape, contiguous, on the host or the context's
// device) -> rows.shape + [C], zeros for an index outside [0, V). Unlike embedding, nothing is
// checked or read back, so a recorded step (Backend::capture) can run it: for indices made on
// the device (bucketize's) or with −1 for padding on purpose (length_regulation_rows).
Tensor gather_rows(Context& ctx, const Tensor& table, const Tensor& rows);
// See Backend::attention; each key length must lie in [0, Tk]. Over a KV cache (k and v
// [B, Tmax, H, D] filled by write_rows): key_lengths[b] = the rows batch b holds, and for a
// decode step (Tq = 1) the query sits at key_lengths[b] − 1 (causal with query_offsets, or the
// lengths alone, give the same).
Tensor attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionParams& params);
// Rotary position embedding of x [B, T, H, D] (D even) as transformers' Llama: row t of batch b
// at position start_positions[b] + t (empty: 0 for every batch; negative allowed, e.g. for left
// padding). A decode step passes T = 1 and each batch's own position. theta > 0 (Llama: 10000).
Tensor rope(Context& ctx, const Tensor& x, const std::vector<int64_t>& start_positions,
            float theta);
// The same with start_positions I64 [B] (contiguous) on the host or the context's device, where
// a recorded step (Backend::capture) reads them when it replays.
Tensor rope(Context& ctx, const Tensor& x, const Tensor& start_positions, float theta);
// Writes rows [B, T, ...] into cache [B, Tmax, ...] (contiguous, the same dtype and trailing
// sizes) at cache[b, offsets[b] + t], in place, so a decode step appends one row per batch item;
// every offsets[b] in [0, Tmax − T]. Returns cache.
Tensor& write_rows(Context& ctx, Tensor& cache, const Tensor& rows,
                   const std::vector<int64_t>& offsets);
// Causal attention over a paged KV cache (see Backend::paged_attention): q [B, T, H, D], the
// pages [N, S, H, D] (contiguous, q's dtype), page_table [B, P] and positions [B] (I64,
// contiguous, on the host or the context's device; on the host each page entry must be -1 or in
// [0, N) and each position >= 0). A decode step passes T = 1 and each sequence's length so far;
// a prefill from the start passes its prompt with positions 0. key_starts (I64 [B], on the
// host or the context's device; each >= 0 on the host), when given, hides each sequence's keys
// before it: a window [key_starts[b], positions[b] + t] of keys (Sambert's banded attention).
Tensor paged_attention(Context& ctx, const Tensor& q, const Tensor& k_pages, const Tensor& v_pages,
                       const Tensor& page_table, const Tensor& positions, float scale,
                       const Tensor& key_starts = Tensor{});
// Writes rows [B, T, ...] into pages [N, S, ...] (contiguous, the same dtype and trailing sizes)
// in place at positions positions[b] + t, through page_table as paged_attention reads it (rows
// in a missing page dropped). Returns pages.
Tensor& write_pages(Context& ctx, Tensor& pages, const Tensor& rows, const Tensor& page_table,
                    const Tensor& positions);
// x [B, T, C] (contiguous): rows past each length zeroed in place; returns x.
Tensor& zero_beyond_lengths(Context& ctx, Tensor& x, const std::vector<int64_t>& lengths);
// The same with lengths I64 [B] (contiguous) on the host or the context's device, where a
// recorded step reads them when it replays; lengths on the device are not checked.
Tensor& zero_beyond_lengths(Context& ctx, Tensor& x, const Tensor& lengths);
// Output has max(sum of durations over each batch, min_frames) rows. durations[b] may be shorter
// than T (a batch's padded rows); missing durations count as 0.
Tensor length_regulate(Context& ctx, const Tensor& x,
                       const std::vector<std::vector<int64_t>>& durations, int64_t min_frames = 0);
// length_regulate as a frame map for gather_rows over x viewed as [B · rows, C]: entry
// b · frames + f is the row that frame f of sequence b copies (b · rows + t), −1 past the
// sequence's total; frames beyond `frames` are dropped.
std::vector<int64_t> length_regulation_rows(const std::vector<std::vector<int64_t>>& durations,
                                            int64_t rows, int64_t frames);
Tensor bucketize(Context& ctx, const Tensor& x, const Tensor& boundaries);
// torch.istft(real + i·imag, n_fft, hop, window=window, center=True, normalized=False,
// onesided=True) -> [B, n_fft + hop·(frames − 1) − 2·(n_fft/2)] F32 (frames − 1 hops for even
// n_fft). real and imag F32 [B, n_fft/2 + 1, frames] on the context's device; window [n_fft] F32
// on the host (e.g. the periodic Hann window torch.hann_window(n_fft) makes). Throws, as torch
// does, when Σ window² over the frames reaching a kept sample is below 1e-11 anywhere (checked
// on the host; not in a planning pass, which reads no element).
Tensor istft(Context& ctx, const Tensor& real, const Tensor& imag, const Tensor& window,
             int64_t hop);
// A GPT's next tokens, one per row of logits [R, V] (F32, on the context's device): tokens [R]
// I64 on the device, each row drawn by draws[r] over history row r (see Backend::sample_tokens;
// history [R, W] I64 on the host or the device, −1 for no token), −1 where a row draws nothing.
// Refuses draws whose settings are out of range (temperature and penalty positive and finite,
// top_p in [0, 1], top_k and min_keep not negative), naming the row and the field.
Tensor sample_tokens(Context& ctx, const Tensor& logits, const Tensor& history,
                     const std::vector<TokenDraw>& draws);
// One LSTM layer (torch.nn.LSTM's cell, gates in the order i, f, g, o) over x_gates [B, T, 4H],
// the input's part of the gates (x·W_ihᵀ + b_ih + b_hh, made by linear), with the recurrent
// weights w_hh [4H, H] in x_gates' dtype. h and c (F32 [B, H], contiguous, on the device) are
// the state, updated in place: zeros start a sequence, and a step-by-step caller (an
// autoregressive predictor) passes T = 1 and keeps them. Batch b runs steps [0, lengths[b])
// (every step when lengths is empty) forward, or from lengths[b] − 1 down to 0 when `reverse`
// (a bidirectional LSTM's backward half over packed sequences). Returns out [B, T, H] in
// x_gates' dtype: each step's h, zeros at the steps past a length.
Tensor lstm(Context& ctx, const Tensor& x_gates, const Tensor& w_hh, Tensor& h, Tensor& c,
            const std::vector<int64_t>& lengths, bool reverse);
// Swaps two dimensions and returns a contiguous result.
Tensor transpose(Context& ctx, const Tensor& x, int64_t d0, int64_t d1);

// Fused steps of a Llama-style decoder layer (see Backend::add_rms_norm, swiglu, qkv_to_pages):
// each gives the numbers of the ops it replaces, in one kernel.
//
// The residual stream after a sublayer and the next sublayer's input.
struct ResidualNorm {
  Tensor sum;     // x + delta, x's dtype and shape
  Tensor normed;  // rms_norm(sum, weight, eps), the requested dtype
};
// x [..., C] + delta (x's shape; x's dtype or another floating one, converted to x's first), then
// rms_norm of the sum with weight [C] (x's dtype) converted to normed_dtype: the same numbers as
// add(x, to_device(delta, x.dtype())), rms_norm, to_device(normed_dtype).
ResidualNorm add_rms_norm(Context& ctx, const Tensor& x, const Tensor& delta, const Tensor& weight,
                          float eps, DType normed_dtype);
// gate_up [..., 2·I] -> [..., I] = mul(silu(gate_up[..., :I]), gate_up[..., I:]) (a Llama MLP's
// gate and up projections made by one linear).
Tensor swiglu(Context& ctx, const Tensor& gate_up);
// A paged attention layer's inputs from one projection qkv [B, T, 3, H, D] (queries, keys,
// values): rope of the keys and the values written into k_pages and v_pages [N, S, H, D] as
// write_pages writes them, and rope of the queries returned [B, T, H, D]; rope's positions are
// positions[b] + t, theta as ops::rope takes it; page_table and positions as paged_attention
// takes them.
Tensor qkv_to_pages(Context& ctx, const Tensor& qkv, Tensor& k_pages, Tensor& v_pages,
                    const Tensor& page_table, const Tensor& positions, float theta);

}  // namespace ops
}  // namespace voxd
