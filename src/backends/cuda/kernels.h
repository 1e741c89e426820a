// Launchers for the CUDA backend's kernels. Pointers are device memory, element counts and
// indices are int64 (kernels use grid-stride loops, so any size works), floating data is F32,
// F16 or BF16 as `dtype` says and is computed in F32. Each launcher queues work on `stream` and
// throws voxd::Error (naming `op`) when the launch fails. Internal to the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backend.h"
#include "core/dtype.h"

namespace voxd::cuda {

constexpr int kMaxDims = 8;

// Element i of a row-major walk over `sizes` sits at Σ index[d] · strides[d] (in elements).
struct Layout {
  int rank = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

// dst [batch][cols][rows] = src [batch][rows][cols] transposed, both contiguous, elements of
// `element_bytes` (2, 4 or 8): 32 × 32 tiles through shared memory, so that reads and writes are
// both along rows. What copy_strided does for a transposed view, without its per-element index
// arithmetic and scattered reads.
void transpose_matrices(const void* src, void* dst, int element_bytes, int64_t batch, int64_t rows,
                        int64_t cols, cudaStream_t stream, const char* op);
// dst[i] (contiguous, dst_dtype) = src at element i of `src_layout`, converted as
// convert_elements does (any of the five dtypes).
void copy_strided(const void* src, DType src_dtype, const Layout& src_layout, void* dst,
                  DType dst_dtype, int64_t n, cudaStream_t stream, const char* op);
// Each of n elements of `element_bytes` (2, 4 or 8) = the bit pattern `bits`.
void fill_pattern(void* dst, int element_bytes, uint64_t bits, int64_t n, cudaStream_t stream,
                  const char* op);
void unary(const void* x, void* out, DType dtype, int64_t n, UnaryOp kind, float alpha,
           cudaStream_t stream, const char* op);
// out[i] = a[i] op b at element i of `b_layout` (a's sizes, stride 0 where b broadcasts).
// out may be a.
void binary(const void* a, const void* b, const Layout& b_layout, void* out, DType dtype, int64_t n,
            BinaryOp kind, cudaStream_t stream, const char* op);
// cols [batch, cin_g·k, tc] = x [batch, channels, t_in] channels [c0, c0 + cin_g), taps of output
// steps [t0, t0 + tc) of a conv1d (zero outside the input).
void im2col(const void* x, DType dtype, int64_t batch, int64_t channels, int64_t t_in, int64_t c0,
            int64_t cin_g, int64_t k, int64_t stride, int64_t padding, int64_t dilation, int64_t t0,
            int64_t tc, void* cols, cudaStream_t stream, const char* op);
// cols [rows, k·cin] = the taps of output rows [r0, r0 + rows) of the flattened [batch, t_out]
// of a conv1d with stride 1 over time-major x [batch, t_in, cin] (zero outside the input),
// column tap·cin + c: each tap a whole input row, so that the weight with its taps first
// ([cout, k, cin], a transpose of each output channel's [cin, k] of torch's) multiplies them as
// [cout, k·cin].
void im2col_rows(const void* x, DType dtype, int64_t t_in, int64_t cin, int64_t k, int64_t padding,
                 int64_t dilation, int64_t t_out, int64_t r0, int64_t rows, void* cols,
                 cudaStream_t stream, const char* op);
// out [batch, out_channels, t_out] channels [c0, c0 + cout_g) += the taps in cols (F32
// [batch, cout_g·k, tc], gemm output for input steps [t0, t0 + tc)) of a conv_transpose1d.
void col2im_add(const float* cols, int64_t batch, int64_t cout_g, int64_t k, int64_t t0, int64_t tc,
                int64_t stride, int64_t padding, int64_t dilation, void* out, DType dtype,
                int64_t out_channels, int64_t c0, int64_t t_out, cudaStream_t stream,
                const char* op);
// Each row of x [rows, c]: (x − mean) / sqrt(var + eps) · gamma + beta. With `residual` (x's
// shape and dtype), x + residual rounded to the dtype is normalised instead. out may be x or
// residual.
void layer_norm(const void* x, const void* gamma, const void* beta, void* out, DType dtype,
                int64_t rows, int64_t c, float eps, cudaStream_t stream, const char* op,
                const void* residual = nullptr);
// Each row of x [rows, c]: weight · (x · rsqrt(mean(x²) + eps) rounded to the dtype), rounded
// again (transformers' LlamaRMSNorm). out may be x.
void rms_norm(const void* x, const void* weight, void* out, DType dtype, int64_t rows, int64_t c,
              float eps, cudaStream_t stream, const char* op);
// rms_norm after a residual add (Backend::add_rms_norm): sum [rows, c] (x's dtype) = x + delta
// (delta rounded to x's dtype), normed (normed_dtype) = rms_norm of the sum as rms_norm computes
// it in x's dtype, then converted. sum may be x.
void add_rms_norm(const void* x, DType x_dtype, const void* delta, DType delta_dtype,
                  const void* weight, void* sum, void* normed, DType normed_dtype, int64_t rows,
                  int64_t c, float eps, cudaStream_t stream, const char* op);
// out [rows, width] = silu(gate_up[:, :width]) (rounded) · gate_up[:, width:].
void swiglu(const void* gate_up, void* out, DType dtype, int64_t rows, int64_t width,
            cudaStream_t stream, const char* op);
// A few values per sequence (positions, lengths) passed by value with a launch, so that a decode
// step uploads nothing for them (and its launches can be captured), or, for more sequences than
// fit, an array in device memory.
struct SequenceValues {
  static constexpr int64_t kInline = 128;
  const int64_t* device = nullptr;  // the values when set; else `values`
  int64_t values[kInline];
};
#ifdef __CUDACC__
// Sequence b's value, from wherever `v` holds it.
__device__ __forceinline__ int64_t value_of(const SequenceValues& v, int64_t b) {
  return v.device != nullptr ? v.device[b] : v.values[b];
}
#endif
// The table of rope's angle frequencies the same way: by value up to kInline, else in device
// memory.
struct RopeFrequencies {
  static constexpr int64_t kInline = 128;
  const float* device = nullptr;
  float values[kInline];
};
// Rotary embedding of x [batch, steps, heads, dim] (rotate_half layout) into out (may be x): step
// t of batch b at position start_positions[b] + t, angles position · inv_freq[j] in F32
// (inv_freq: dim / 2 values).
void rope(const void* x, void* out, DType dtype, const SequenceValues& start_positions,
          const RopeFrequencies& inv_freq, int64_t batch, int64_t steps, int64_t heads, int64_t dim,
          cudaStream_t stream, const char* op);
// cache [batch, tmax, inner] rows offsets[b] + t = rows [batch, steps, inner], elements of
// element_bytes (2 or 4).
void write_rows(void* cache, const void* rows, int element_bytes, const SequenceValues& offsets,
                int64_t batch, int64_t steps, int64_t tmax, int64_t inner, cudaStream_t stream,
                const char* op);
// conv1d with one input channel per output channel: out [batch, channels, t_out] = bias[c] +
// Σ_tap weight[c, tap] · x[b, c, t·stride − padding + tap·dilation] (zero outside x), F32 sums.
void depthwise_conv1d(const void* x, const void* weight, const void* bias, void* out, DType dtype,
                      int64_t batch, int64_t channels, int64_t t_in, int64_t t_out, int64_t k,
                      int64_t stride, int64_t padding, int64_t dilation, cudaStream_t stream,
                      const char* op);
// conv1d over time-major rows into a few output channels (HiFiGAN's conv_post, 32 → 1): out
// [batch, t_out, cout] = bias[co] + Σ_tap Σ_ci weight[co, ci, tap] · x[b, t − padding +
// tap·dilation, ci] (zero outside x), stride 1, F32 sums. conv1d_rows_few_outputs_fits says
// whether the kernel takes the shape (cout ≤ 4, its window and weights in 48 KiB of shared
// memory, a batch within its grid).
bool conv1d_rows_few_outputs_fits(int64_t batch, int64_t cin, int64_t cout, int64_t k,
                                  int64_t dilation);
void conv1d_rows_few_outputs(const void* x, const void* weight, const void* bias, void* out,
                             DType dtype, int64_t batch, int64_t t_in, int64_t cin, int64_t t_out,
                             int64_t cout, int64_t k, int64_t padding, int64_t dilation,
                             cudaStream_t stream, const char* op);
// istft's steps around cuFFT's inverse real transform. pack_spectrum: complex spectrum
// [items · frames, bins] (float2) = the bins of items [item0, item0 + items) of real and imag
// [*, bins, frames], imaginary parts of the DC and Nyquist bins zeroed. overlap_add: out
// [items, length] = sample n_fft/2 + i of the overlap-added frames signal [items · frames,
// n_fft] (unscaled inverse FFTs) · window / n_fft, divided by Σ window² of the frames there.
void pack_spectrum(const float* real, const float* imag, void* spectrum, int64_t item0,
                   int64_t items, int64_t bins, int64_t frames, int64_t n_fft, cudaStream_t stream,
                   const char* op);
void overlap_add(const float* signal, const float* window, float* out, int64_t items,
                 int64_t frames, int64_t n_fft, int64_t hop, int64_t length, cudaStream_t stream,
                 const char* op);
// out [n, c] row r = src row rows[r] (src [src_rows, c]), or zeros when rows[r] is outside
// [0, src_rows).
void gather_rows(const void* src, int64_t src_rows, const int64_t* rows, void* out, DType dtype,
                 int64_t n, int64_t c, cudaStream_t stream, const char* op);
// x [batch, t, c]: rows t >= lengths[b] set to zero.
void zero_beyond_lengths(void* x, DType dtype, const int64_t* lengths, int64_t batch, int64_t t,
                         int64_t c, cudaStream_t stream, const char* op);
// out[i] = index of the first of n ascending boundaries >= x[i] (NaN -> n).
void bucketize(const float* x, int64_t count, const float* boundaries, int64_t n, int64_t* out,
               cudaStream_t stream, const char* op);

// The softmax step of attention over scores [rows, tk] (F32) of several sequences: rows
// [s·rows_per_sequence, (s + 1)·rows_per_sequence) are sequence s's, rows_per_head queries of
// each of its heads, query i of a head being first_query + offsets[s] + i in its sequence. probs
// [rows, tk] in `dtype` (may be `scores` for F32) = softmax over the keys in [key_starts[s],
// key_lengths[s]) (device arrays) that the query may see (with `causal`, those up to its own
// position), zeros for every other key up to tk, and NaN for every key when the query sees none.
void masked_softmax(const float* scores, void* probs, DType dtype, int64_t rows,
                    int64_t rows_per_sequence, int64_t rows_per_head, int64_t tk,
                    const int64_t* key_lengths, const int64_t* key_starts, const int64_t* offsets,
                    bool causal, int64_t first_query, cudaStream_t stream, const char* op);

// The one-query-per-block attention kernel behind decode_attention and paged_attention: its
// threads, and the shared memory it takes for `keys` keys of `dim` elements (their scores).
constexpr int kAttentionOverRowsThreads = 128;
constexpr size_t kAttentionOverRowsMaxSharedBytes = 96 * 1024;
constexpr size_t attention_over_rows_shared_bytes(int64_t dim, int64_t keys) {
  return static_cast<size_t>(dim + kAttentionOverRowsThreads + 32 + keys) * sizeof(float);
}
constexpr int64_t kDecodeAttentionMaxQueries = 4;
// Whether decode_attention takes this shape: the sequences' values by value, few queries, and
// the scores of `keys` keys in shared memory.
bool decode_attention_fits(int64_t batch, int64_t tq, int64_t keys, int64_t dim);
// Attention for q [batch, tq, heads, dim] over k, v [batch, rows, heads, dim] (contiguous, dtype)
// into out (q's shape): the same contract as masked_softmax + the gemms (keys below
// key_lengths[b] and from key_starts[b], with `causal` query i of sequence b at offsets[b] + i;
// NaN when a query sees no key), at most `keys` keys visible to any query, one launch for every
// sequence, head and query.
void decode_attention(const void* q, const void* k, const void* v, void* out, DType dtype,
                      int64_t batch, int64_t tq, int64_t rows, int64_t heads, int64_t dim,
                      int64_t keys, float scale, const SequenceValues& key_lengths,
                      const SequenceValues& key_starts, const SequenceValues& offsets, bool causal,
                      cudaStream_t stream, const char* op);
// A paged KV cache's table in device memory (Backend::paged_attention's contract): entries
// [batch, pages_per_sequence], positions [batch] and key starts [batch] (null: 0), over `pages`
// pages of page_size rows.
struct PageTable {
  const int64_t* entries;
  const int64_t* positions;
  const int64_t* key_starts;
  int64_t pages_per_sequence;
  int64_t page_size;
  int64_t pages;
};
// Whether paged_attention's kernel holds the scores of a table of `capacity` positions.
bool paged_attention_fits(int64_t capacity, int64_t dim);
// Backend::paged_attention: q [batch, tq, heads, dim] over k_pages, v_pages [pages, page_size,
// heads, dim] into out, one launch.
void paged_attention(const void* q, const void* k_pages, const void* v_pages, void* out,
                     DType dtype, int64_t batch, int64_t tq, int64_t heads, int64_t dim,
                     const PageTable& table, float scale, cudaStream_t stream, const char* op);
// Backend::qkv_to_pages: qkv [batch, steps, 3, heads, dim] -> q_out [batch, steps, heads, dim]
// rotated (rope's angles from table.positions and inv_freq), the rotated keys and the values
// into k_pages and v_pages [pages, page_size, heads, dim] through the table.
void qkv_to_pages(const void* qkv, void* k_pages, void* v_pages, void* q_out, DType dtype,
                  int64_t batch, int64_t steps, int64_t heads, int64_t dim,
                  const RopeFrequencies& inv_freq, const PageTable& table, cudaStream_t stream,
                  const char* op);
// Backend::write_pages: rows [batch, steps, inner] (elements of element_bytes, 2 or 4) into
// pages [pages, page_size, inner].
void write_pages(void* pages, const void* rows, int element_bytes, int64_t batch, int64_t steps,
                 int64_t inner, const PageTable& table, cudaStream_t stream, const char* op);
}  // namespace voxd::cuda
